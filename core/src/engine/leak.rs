//! Leak: memory that is never given back. Both the troughs and the peaks of
//! the envelope rise, together and for a sustained stretch.
//!
//! A workload that merely allocates more at its peak (longer sequences) lifts
//! the peaks but not the troughs; a leak lifts the floor. Judged on the
//! caching allocator's `allocated` bytes when the in-process hook reports
//! them (so that a fragmenting cache, whose `reserved` grows while
//! `allocated` does not, is not called a leak), else on NVML's used memory.
//!
//! Conditions, on the current regime's windows: at least `min_points`; the
//! troughs' Mann–Kendall p-value at most `p_max` with a slope interval above
//! zero; the troughs rising at least `trough_share` as fast as the peaks; and
//! a rise over the window of at least `min_rise_frac` of capacity. The rate
//! reported is the troughs' Theil–Sen slope. To raise, the newest third of
//! the troughs must still rise (`still_rising`) and, where the hook reports
//! `peak_allocated`, the running peak must make new highs
//! (`makes_new_highs`): a workload that steps up to a level it held before
//! levels off and makes none.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::regime::RegimeSeries;
use super::trend::{fit, Trend};
use super::{EngineConfig, Scratch};

/// Tuning of the leak detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeakParams {
    /// Windows of evidence needed.
    pub min_points: usize,
    /// Largest Mann–Kendall p-value of the troughs' trend.
    pub p_max: f64,
    /// Troughs must rise at least this share of the peaks' rate.
    pub trough_share: f64,
    /// Smallest rise over the window, fraction of capacity.
    pub min_rise_frac: f64,
    /// The newest third of the troughs must rise at least this share of
    /// the whole window's rate (a leak goes on; a step up levels off).
    pub sustained_share: f64,
    /// Consecutive positive evaluations before alerting.
    pub raise_after: u32,
    /// Consecutive negative evaluations before clearing.
    pub clear_after: u32,
}

impl Default for LeakParams {
    fn default() -> Self {
        Self {
            min_points: 9,
            p_max: 0.001,
            trough_share: 0.5,
            min_rise_frac: 0.01,
            sustained_share: 0.33,
            raise_after: 2,
            clear_after: 6,
        }
    }
}

/// The leak rate in bytes per second, or `None` when the series does not leak.
pub fn leak_rate(peaks: &Trend, troughs: &Trend, capacity: f64, p: &LeakParams) -> Option<f64> {
    let leaking = troughs.n >= p.min_points
        && troughs.p_up <= p.p_max
        && troughs.slope > 0.0
        && troughs.slope_low > 0.0
        && peaks.slope > 0.0
        && troughs.slope >= p.trough_share * peaks.slope
        && troughs.slope * troughs.span_s >= p.min_rise_frac * capacity;
    leaking.then_some(troughs.slope)
}

/// Whether the newest third of a regime's troughs still rise at a good part
/// of `rate` (bytes/s): a leak goes on, a workload that moved up to a new
/// level (a phase with longer sequences) levels off.
pub(super) fn still_rising(
    regime: &RegimeSeries,
    rate: f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> bool {
    let n = regime.len();
    let recent = (n / 3).max(4).min(n);
    scratch.points.clear();
    scratch
        .points
        .extend(regime.points().skip(n - recent).map(|p| (p.t, p.trough)));
    fit(&scratch.points, cfg.z_interval, &mut scratch.trend)
        .is_some_and(|t| t.slope >= cfg.leak.sustained_share * rate)
}

/// Whether the allocator's running peak of live tensors rose over the last
/// `span` windows by at least half of what a leak of `rate` bytes/s adds: a
/// leak makes new highs, a workload returning to a level it held before
/// does not. Unknown (no `peak_allocated`, or too little since its last
/// reset) counts as yes.
pub(super) fn makes_new_highs(history: &VecDeque<(f64, u64)>, rate: f64, span: usize) -> bool {
    let n = history.len();
    if n < span.max(3) {
        return true;
    }
    let (t0, p0) = history[n - span.max(3)];
    let (t1, p1) = history[n - 1];
    p1 as f64 - p0 as f64 >= 0.5 * rate * (t1 - t0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::trend::{fit, TrendScratch};

    const GIB: f64 = (1u64 << 30) as f64;

    fn trends(peak: impl Fn(f64) -> f64, trough: impl Fn(f64) -> f64, n: usize) -> (Trend, Trend) {
        let t = |i: usize| i as f64 * 10.0;
        let peaks: Vec<_> = (0..n).map(|i| (t(i), peak(t(i)))).collect();
        let troughs: Vec<_> = (0..n).map(|i| (t(i), trough(t(i)))).collect();
        let mut s = TrendScratch::default();
        (
            fit(&peaks, 1.96, &mut s).unwrap(),
            fit(&troughs, 1.96, &mut s).unwrap(),
        )
    }

    #[test]
    fn rising_floor_and_ceiling_is_a_leak_with_its_rate() {
        let rate = 20e6;
        let (p, t) = trends(|t| 30.0 * GIB + rate * t, |t| 25.0 * GIB + rate * t, 15);
        let r = leak_rate(&p, &t, 80.0 * GIB, &LeakParams::default()).unwrap();
        assert!((r - rate).abs() < 1.0);
    }

    #[test]
    fn rising_peaks_over_a_flat_floor_is_not_a_leak() {
        let (p, t) = trends(|t| 30.0 * GIB + 20e6 * t, |_| 25.0 * GIB, 15);
        assert!(leak_rate(&p, &t, 80.0 * GIB, &LeakParams::default()).is_none());
    }

    #[test]
    fn a_short_or_tiny_rise_is_not_a_leak() {
        let params = LeakParams::default();
        let (p, t) = trends(|t| 30.0 * GIB + 20e6 * t, |t| 25.0 * GIB + 20e6 * t, 5);
        assert!(leak_rate(&p, &t, 80.0 * GIB, &params).is_none());
        let (p, t) = trends(|t| 30.0 * GIB + 1e5 * t, |t| 25.0 * GIB + 1e5 * t, 20);
        assert!(leak_rate(&p, &t, 80.0 * GIB, &params).is_none());
    }

    fn history(peak_at: impl Fn(f64) -> f64) -> std::collections::VecDeque<(f64, u64)> {
        (0..12)
            .map(|i| f64::from(i) * 10.0)
            .map(|t| (t, peak_at(t) as u64))
            .collect()
    }

    #[test]
    fn a_leak_makes_new_highs_and_a_return_to_an_old_level_does_not() {
        let rate = 0.03 * GIB;
        assert!(makes_new_highs(
            &history(|t| 20.0 * GIB + rate * t),
            rate,
            9
        ));
        assert!(!makes_new_highs(&history(|_| 22.7 * GIB), rate, 9));
    }

    #[test]
    fn too_little_history_does_not_block_a_leak() {
        let short: std::collections::VecDeque<(f64, u64)> = [(0.0, 1), (10.0, 1)].into();
        assert!(makes_new_highs(&short, GIB, 9));
    }
}
