//! The detection engine's settings for `gpumon demo`: tuned for people who
//! watch it live, so that the simulated job's planted problems alert within
//! about half a minute instead of the minutes a production cluster waits
//! for evidence.
//!
//! What changes from [`EngineConfig::default`], and why it stays honest:
//! - 2 s envelope windows (10 s in production): the simulated step is 1 s,
//!   so each window still holds at least one whole step (its trough and
//!   peak), and the agents push every second;
//! - 6 s of warm-up (30 s): the simulated job loads in an instant;
//! - leak: 8 windows of evidence (9); eight strictly rising troughs are
//!   what a Mann–Kendall p-value of 0.001 needs, so the significance is
//!   unchanged, only the wait for a ninth window goes;
//! - imbalance: a level is the median of 4 window peaks (5) and alerts after
//!   3 evaluations in a row (4);
//! - stragglers are judged per step, not per window: production settings.
//!
//! The tests at the bottom play every scenario of the simulator through this
//! configuration, offline and in simulated time, and check that exactly the
//! planted alerts fire, and when.

use gpumon_core::engine::EngineConfig;

/// Envelope window of the demo's engine, seconds.
pub const WINDOW_S: f64 = 2.0;
/// Warm-up of the demo's engine, seconds.
pub const WARMUP_S: f64 = 6.0;

/// Seconds within which the planted problems alert (the banner says so; the
/// tests below and `tests/demo.rs` keep it true).
pub const PROMISED_ALERT_S: u32 = 45;

/// The engine configuration every demo replica runs with.
pub fn demo_config() -> EngineConfig {
    let mut c = EngineConfig {
        window_s: WINDOW_S,
        warmup_s: WARMUP_S,
        ..EngineConfig::default()
    };
    c.leak.min_points = 8;
    c.imbalance.level_points = 4;
    c.imbalance.raise_after = 3;
    c
}

#[cfg(test)]
mod tests;
