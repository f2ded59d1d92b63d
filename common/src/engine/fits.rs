//! Robust fits of a regime's envelope points, shared by the GPU, allocator
//! and leak judgements.

use super::envelope::EnvelopePoint;
use super::regime::RegimeSeries;
use super::trend::{fit_rising, Trend};
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
    fit_rising(&scratch.points, cfg.z_interval, p_max, &mut scratch.trend)
}
