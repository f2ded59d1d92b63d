//! Robust fits of a regime's envelope points, shared by the GPU, allocator
//! and leak judgements.

use super::envelope::EnvelopePoint;
use super::regime::RegimeSeries;
use super::trend::{fit_rising, slope_surely_not_positive, Trend};
use super::{EngineConfig, Scratch};

/// Fits one coordinate of a regime's points; `None` when it is flat or short.
pub(super) fn fit_series(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> Option<Trend> {
    fit_series_rising(regime, value, f64::INFINITY, cfg, scratch)
}

/// [`fit_series`] for a caller that uses the trend only when its slope is
/// positive: `None`, without the selection among the pair slopes, when more
/// than half of them are at most zero (the slope then is too).
pub(super) fn fit_series_sloping_up(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> Option<Trend> {
    if !series_points(regime, value, scratch) || slope_surely_not_positive(&scratch.points) {
        return None;
    }
    fit_rising(
        &scratch.points,
        cfg.z_interval,
        f64::INFINITY,
        &mut scratch.trend,
    )
}

/// [`fit_series`] for a caller that uses the trend only when it rises with
/// a one-sided p-value at most `p_max` ([`fit_rising`]: `None` without the
/// pair slopes when it does not).
pub(super) fn fit_series_rising(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    p_max: f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> Option<Trend> {
    if !series_points(regime, value, scratch) {
        return None;
    }
    fit_rising(&scratch.points, cfg.z_interval, p_max, &mut scratch.trend)
}

/// One coordinate of a regime's points into `scratch.points`; `false` when
/// there are too few or they are all equal (nothing to fit).
fn series_points(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    scratch: &mut Scratch,
) -> bool {
    if regime.len() < 3 {
        return false;
    }
    scratch.points.clear();
    scratch
        .points
        .extend(regime.points().map(|p| (p.t, value(p))));
    let first = scratch.points[0].1;
    !scratch.points.iter().all(|p| p.1 == first)
}
