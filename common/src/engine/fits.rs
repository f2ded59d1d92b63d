//! Robust fits of a regime's envelope points, shared by the GPU, allocator
//! and leak judgements.

use super::envelope::EnvelopePoint;
use super::regime::RegimeSeries;
use super::trend::{fit, upward_p, Trend};
use super::{EngineConfig, Scratch};

/// Fits one coordinate of a regime's points; `None` when it is flat or short.
pub(super) fn fit_series(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> Option<Trend> {
    if regime.len() < 3 {
        return None;
    }
    scratch.points.clear();
    scratch
        .points
        .extend(regime.points().map(|p| (p.t, value(p))));
    let first = scratch.points[0].1;
    if scratch.points.iter().all(|p| p.1 == first) {
        return None;
    }
    fit(&scratch.points, cfg.z_interval, &mut scratch.trend)
}

/// [`fit_series`] for a caller that uses the trend only when it rises with
/// a one-sided p-value at most `p_max`: `None` without the pair slopes
/// when Mann–Kendall alone (the fit's own `p_up`) says it does not.
pub(super) fn fit_series_rising(
    regime: &RegimeSeries,
    value: impl Fn(&EnvelopePoint) -> f64,
    p_max: f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> Option<Trend> {
    if regime.len() < 3 {
        return None;
    }
    scratch.points.clear();
    scratch
        .points
        .extend(regime.points().map(|p| (p.t, value(p))));
    if upward_p(&scratch.points, &mut scratch.trend)? > p_max {
        return None;
    }
    fit_series(regime, value, cfg, scratch)
}
