//! OOM forecast for one GPU's memory: when will the peak line, plus the
//! margin its spikes need, reach the usable capacity?
//!
//! Method: the Theil–Sen trend of the current regime's window *peaks* (see
//! [`super::trend`]). A forecast exists only when the trend is real:
//! at least `min_points` windows, a Mann–Kendall p-value at most `p_max`, a
//! slope interval above zero, and a rise over the window of at least
//! `min_rise_frac` of capacity (a flat staircase with one extra segment is
//! not growth). The margin is the larger of the highest residual above the
//! line and the highest recent spike. The predicted time uses the slope; its
//! interval uses the slope's interval bounds. Confidence is
//! `(1 - p) * (0.5 + 0.5 * slope_low / slope_high)`: certain trends with tight
//! intervals score near 1.
//!
//! Risk from the time left: critical within `critical_s`, high within
//! `high_s`, warning within `horizon_s`, low within four horizons. Alerts are
//! raised at warning; the risk level moves with [`super::latch::Latch`]
//! hysteresis in the caller.

use gpumon_proto::api;
pub use gpumon_proto::api::Risk;
use serde::{Deserialize, Serialize};

use super::trend::Trend;

/// A predicted OOM, as a GPU track keeps it (and snapshots encode it); the
/// API's `gpumon_proto::api::OomForecast` is converted from it where read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OomForecast {
    /// When it was computed (newest window), seconds.
    pub t: f64,
    /// Predicted OOM time, seconds.
    pub predicted_oom_t: f64,
    /// Earliest OOM time within the slope's interval.
    pub earliest_oom_t: f64,
    /// Latest OOM time within the slope's interval.
    pub latest_oom_t: f64,
    /// 0 to 1: how sure the growth is real, and how tight its interval is
    /// (see the engine's `forecast` module).
    pub confidence: f64,
    /// Growth of the peaks, bytes per second.
    pub slope_bytes_per_s: f64,
    /// The peak line now, bytes.
    pub level_bytes: f64,
    /// Headroom kept for spikes, bytes.
    pub margin_bytes: f64,
    /// Usable capacity, bytes.
    pub usable_bytes: f64,
    /// Risk level of this forecast alone (before hysteresis).
    pub risk: Risk,
}

impl From<OomForecast> for api::OomForecast {
    fn from(f: OomForecast) -> Self {
        Self {
            t: f.t,
            predicted_oom_t: f.predicted_oom_t,
            earliest_oom_t: f.earliest_oom_t,
            latest_oom_t: f.latest_oom_t,
            confidence: f.confidence,
            slope_bytes_per_s: f.slope_bytes_per_s,
            level_bytes: f.level_bytes,
            margin_bytes: f.margin_bytes,
            usable_bytes: f.usable_bytes,
            risk: f.risk,
        }
    }
}

/// Tuning of the OOM forecast.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForecastParams {
    /// Windows a regime needs before it is forecast.
    pub min_points: usize,
    /// Largest Mann–Kendall p-value of a real upward trend.
    pub p_max: f64,
    /// Smallest rise over the trend window, fraction of capacity.
    pub min_rise_frac: f64,
    /// Part of the capacity a process can really use.
    pub usable_frac: f64,
    /// Alert when the OOM is predicted within this many seconds.
    pub horizon_s: f64,
    /// High severity within this many seconds.
    pub high_s: f64,
    /// Critical severity within this many seconds.
    pub critical_s: f64,
}

impl Default for ForecastParams {
    fn default() -> Self {
        Self {
            min_points: 6,
            p_max: 0.01,
            min_rise_frac: 0.015,
            usable_frac: 0.995,
            horizon_s: 1800.0,
            high_s: 600.0,
            critical_s: 120.0,
        }
    }
}

/// What a forecast measures a series against: the limit it meets first
/// (see the engine's `limits` module).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Room {
    /// The limit, bytes: growth is judged against its size, and
    /// `usable_frac` of it can be used.
    pub limit: f64,
    /// What the series counts that the limit does not, bytes: the series
    /// meets the limit at `limit * usable_frac + shift`.
    pub shift: f64,
}

impl Room {
    /// A series measured against the capacity it counts in: a GPU's used
    /// memory against the GPU's.
    pub fn of(capacity: f64) -> Self {
        Self {
            limit: capacity,
            shift: 0.0,
        }
    }

    /// The level the series can reach, bytes.
    pub fn usable(&self, params: &ForecastParams) -> f64 {
        self.limit * params.usable_frac + self.shift
    }
}

/// The forecast for a fitted peak trend, or `None` when the trend is not real
/// growth.
pub fn forecast(
    trend: &Trend,
    spike_margin: f64,
    room: Room,
    params: &ForecastParams,
) -> Option<OomForecast> {
    let real = trend.n >= params.min_points
        && trend.p_up <= params.p_max
        && trend.slope > 0.0
        && trend.slope_low > 0.0
        && trend.slope * trend.span_s >= params.min_rise_frac * room.limit;
    real.then(|| project(trend, trend.max_residual.max(spike_margin), room, params))
}

/// Where a growing trend, kept `margin` bytes below the usable room,
/// runs out of memory, and how close that is.
pub fn project(trend: &Trend, margin: f64, room: Room, params: &ForecastParams) -> OomForecast {
    let usable = room.usable(params);
    let room = (usable - margin - trend.level).max(0.0);
    let at = |slope: f64| trend.t_ref + room / slope.max(f64::MIN_POSITIVE);
    let predicted = at(trend.slope);
    let left = predicted - trend.t_ref;
    let risk = if left <= params.critical_s {
        Risk::Critical
    } else if left <= params.high_s {
        Risk::High
    } else if left <= params.horizon_s {
        Risk::Warning
    } else if left <= 4.0 * params.horizon_s {
        Risk::Low
    } else {
        Risk::None
    };
    let tightness = (trend.slope_low / trend.slope_high.max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
    OomForecast {
        t: trend.t_ref,
        predicted_oom_t: predicted,
        earliest_oom_t: at(trend.slope_high.max(trend.slope)),
        latest_oom_t: at(trend.slope_low),
        confidence: ((1.0 - trend.p_up) * (0.5 + 0.5 * tightness)).clamp(0.0, 1.0),
        slope_bytes_per_s: trend.slope,
        level_bytes: trend.level,
        margin_bytes: margin,
        usable_bytes: usable,
        risk,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::trend::{fit, TrendScratch};

    const GIB: f64 = (1u64 << 30) as f64;

    fn trend_of(values: impl Fn(f64) -> f64, n: usize) -> Trend {
        let pts: Vec<(f64, f64)> = (0..n)
            .map(|i| (i as f64 * 10.0, values(i as f64 * 10.0)))
            .collect();
        fit(&pts, 1.96, &mut TrendScratch::default()).unwrap()
    }

    #[test]
    fn a_steady_leak_is_forecast_where_the_line_meets_capacity() {
        // 40 GiB card, 20 GiB now, +40 MiB/s.
        let rate = 40.0 * 1024.0 * 1024.0;
        let tr = trend_of(|t| 20.0 * GIB - 200.0 * rate + rate * t, 21);
        let f = forecast(&tr, 0.0, Room::of(40.0 * GIB), &ForecastParams::default()).unwrap();
        let expected = 200.0 + (40.0 * GIB * 0.995 - 20.0 * GIB) / rate;
        assert!((f.predicted_oom_t - expected).abs() < 1.0, "{f:?}");
        assert_eq!(f.risk, Risk::High, "about 510 s left");
        assert!(f.confidence > 0.9);
        assert!(f.earliest_oom_t <= f.predicted_oom_t && f.predicted_oom_t <= f.latest_oom_t);
    }

    #[test]
    fn spikes_bring_the_forecast_forward() {
        let rate = 40.0 * 1024.0 * 1024.0;
        let tr = trend_of(|t| 20.0 * GIB + rate * t, 21);
        let p = ForecastParams::default();
        let calm = forecast(&tr, 0.0, Room::of(40.0 * GIB), &p).unwrap();
        let spiky = forecast(&tr, 4.0 * GIB, Room::of(40.0 * GIB), &p).unwrap();
        assert!((calm.predicted_oom_t - spiky.predicted_oom_t - 4.0 * GIB / rate).abs() < 1.0);
    }

    #[test]
    fn flat_or_tiny_growth_is_not_forecast() {
        let p = ForecastParams::default();
        let flat = trend_of(|_| 30.0 * GIB, 20);
        assert!(forecast(&flat, 0.0, Room::of(40.0 * GIB), &p).is_none());
        // 2 MiB over three minutes: significant but immaterial.
        let creep = trend_of(|t| 30.0 * GIB + 11_000.0 * t, 20);
        assert!(forecast(&creep, 0.0, Room::of(40.0 * GIB), &p).is_none());
    }

    #[test]
    fn too_little_evidence_is_not_forecast() {
        let tr = trend_of(|t| 30.0 * GIB + 1e8 * t, 4);
        assert!(forecast(&tr, 0.0, Room::of(40.0 * GIB), &ForecastParams::default()).is_none());
    }

    #[test]
    fn risk_rises_as_the_oom_nears() {
        let p = ForecastParams::default();
        let fast = trend_of(|t| 35.0 * GIB + 50e6 * t, 12);
        assert_eq!(
            forecast(&fast, 0.0, Room::of(40.0 * GIB), &p).unwrap().risk,
            Risk::Critical
        );
        let slow = trend_of(|t| 10.0 * GIB + 15e6 * t, 12);
        assert_eq!(
            forecast(&slow, 0.0, Room::of(80.0 * GIB), &p).unwrap().risk,
            Risk::Low
        );
    }

    #[test]
    fn the_api_forecast_and_marker_say_what_the_tracks_hold() {
        let f = OomForecast {
            t: 1.0,
            predicted_oom_t: 2.0,
            earliest_oom_t: 1.5,
            latest_oom_t: 3.0,
            confidence: 0.5,
            slope_bytes_per_s: 4.0,
            level_bytes: 5.0,
            margin_bytes: 6.0,
            usable_bytes: 7.0,
            risk: Risk::High,
        };
        assert_eq!(
            serde_json::to_value(api::OomForecast::from(f)).unwrap(),
            serde_json::to_value(f).unwrap()
        );
        let m = crate::engine::tracks::Marker {
            t: 1.0,
            rank: 2,
            name: "eval".into(),
        };
        assert_eq!(
            serde_json::to_value(api::Marker::from(&m)).unwrap(),
            serde_json::to_value(&m).unwrap()
        );
    }
}
