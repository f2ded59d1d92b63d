//! Utilization, SM clock and power of one simulated GPU.
//!
//! These are what explain a straggler (`docs/stragglers.md`, "What the
//! detector compares": a lower SM clock or power draw means throttling): a
//! healthy H100 under training load runs at its 1980 MHz boost
//! clock, 85 to 99 % busy, drawing 550 to 700 W; a throttled one (thermal or
//! power brake) drops to about 1410 MHz and draws less; a GPU whose process
//! died idles. Noise is a hash of the GPU and the sample time, so the same
//! time always reads the same.

use super::rng::unit;

/// Hash stream of utilization noise.
const STREAM_UTIL: u64 = 5;
/// Hash stream of clock noise.
const STREAM_CLOCK: u64 = 6;
/// Hash stream of power noise.
const STREAM_POWER: u64 = 7;

/// What a GPU is doing, as far as its gauges show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activity {
    /// Training at full clock.
    Training,
    /// Training, throttled: the job's straggler.
    Throttled,
    /// No process: the rank died.
    Idle,
}

/// One reading of a GPU's gauges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gauges {
    /// Utilization, percent.
    pub(crate) util_pct: f32,
    /// SM clock, MHz.
    pub(crate) sm_clock_mhz: f32,
    /// Board power, watts.
    pub(crate) power_w: f32,
}

/// The gauges of the GPU keyed `gpu_key` at time `t_ms`, `step_fraction` of
/// the way through a training step (compute phases draw more power than data
/// loading).
pub(crate) fn read(gpu_key: u64, t_ms: u64, step_fraction: f64, activity: Activity) -> Gauges {
    let u = |stream: u64| unit(&[gpu_key, stream, t_ms]);
    // Data loading (the first tenth of a step) leaves the SMs less busy.
    let load = if step_fraction < 0.1 { 0.4 } else { 1.0 };
    let (util, clock, power) = match activity {
        Activity::Training => (
            85.0 + 14.0 * u(STREAM_UTIL),
            if u(STREAM_CLOCK) < 0.1 {
                1965.0
            } else {
                1980.0
            },
            550.0 + 100.0 * load + 50.0 * u(STREAM_POWER),
        ),
        Activity::Throttled => (
            72.0 + 10.0 * u(STREAM_UTIL),
            1395.0 + 30.0 * u(STREAM_CLOCK),
            420.0 + 30.0 * load + 30.0 * u(STREAM_POWER),
        ),
        Activity::Idle => (0.0, 345.0, 70.0 + 5.0 * u(STREAM_POWER)),
    };
    Gauges {
        util_pct: util as f32,
        sm_clock_mhz: clock as f32,
        power_w: power as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_gauges_stay_in_their_ranges() {
        for t in 0..500 {
            let g = read(9, t * 37, (t % 10) as f64 / 10.0, Activity::Training);
            assert!((85.0..=99.0).contains(&g.util_pct), "{g:?}");
            assert!((1965.0..=1980.0).contains(&g.sm_clock_mhz), "{g:?}");
            assert!((550.0..=700.0).contains(&g.power_w), "{g:?}");
        }
    }

    #[test]
    fn a_throttled_gpu_clocks_lower_and_draws_less() {
        for t in 0..500 {
            let f = (t % 10) as f64 / 10.0;
            let ok = read(9, t, f, Activity::Training);
            let slow = read(9, t, f, Activity::Throttled);
            assert!(slow.sm_clock_mhz <= 1425.0);
            assert!(slow.sm_clock_mhz < ok.sm_clock_mhz - 500.0);
            assert!(slow.power_w < ok.power_w);
            assert!(slow.util_pct < ok.util_pct);
        }
    }

    #[test]
    fn same_time_same_reading() {
        let a = read(3, 1234, 0.5, Activity::Training);
        assert_eq!(a, read(3, 1234, 0.5, Activity::Training));
        assert_eq!(read(3, 1, 0.5, Activity::Idle).util_pct, 0.0);
    }
}
