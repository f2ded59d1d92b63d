//! Early warning: a job that leaks from its first steps can run out of
//! memory before the regular forecast has its windows (warm-up plus
//! `forecast.min_points` windows: about 100 s at the defaults).
//!
//! A job's memory rises fast while it starts: the model loads, the caching
//! allocator fills over the first steps. That ramp ends, and then memory
//! stays flat. A leak is growth that goes on *after* the ramp ended, at a
//! steady rate. So for the first `watch_s` seconds of a GPU's activity this
//! watch keeps its used memory (per-second peaks) and, once per second,
//! fits the last `fit_s` seconds (at least `min_points` points). It warns
//! when:
//!
//! - the fit is a real upward trend (Mann–Kendall p at most `p_max`, slope
//!   interval above zero, at least `min_points` points);
//! - the ramp is over: some `ramp_s` stretch before the fit window rose at
//!   least `ramp_ratio` times faster than memory grows now (a long steady
//!   warm-up that has not bent yet is not judged: it looks like a leak until
//!   it ends);
//! - the growth is steady: the two halves of the fit window grow at rates
//!   within `steady_ratio` of each other (a ramp settling down decelerates);
//! - the peak line plus its margin reaches the usable capacity within
//!   `horizon_s`: only OOMs too close for the regular forecast.
//!
//! It must hold at `confirm` evaluations in a row. Once the regular forecast
//! has its windows it takes over; the watch stops at `watch_s`.
//!
//! Memory: at most [`MAX_POINTS`] points per GPU, dropped once the watch ends.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::forecast::{project, ForecastParams, OomForecast, Room};
use super::trend::{fit_rising_with_s, mann_kendall_s, pairs_sign, slope, TrendScratch};
use crate::not_state::NotState;

/// Points kept per GPU while it is watched.
pub const MAX_POINTS: usize = 256;

/// Tuning of the early warning.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EarlyParams {
    /// Seconds of a GPU's activity during which it is watched; 0 turns the
    /// early warning off.
    pub watch_s: f64,
    /// Seconds of recent memory fitted.
    pub fit_s: f64,
    /// Points the fit needs.
    pub min_points: usize,
    /// Largest Mann–Kendall p-value of the growth.
    pub p_max: f64,
    /// Length of the stretches the start-up ramp is measured over, seconds.
    pub ramp_s: f64,
    /// The ramp must have risen this many times faster than memory grows now.
    pub ramp_ratio: f64,
    /// The fit window's halves must grow within this factor of each other.
    pub steady_ratio: f64,
    /// Warn only when the OOM is predicted within this many seconds.
    pub horizon_s: f64,
    /// Evaluations in a row that must agree.
    pub confirm: u32,
}

impl Default for EarlyParams {
    fn default() -> Self {
        Self {
            watch_s: 180.0,
            fit_s: 20.0,
            min_points: 12,
            p_max: 0.001,
            ramp_s: 4.0,
            ramp_ratio: 3.0,
            steady_ratio: 2.0,
            horizon_s: 300.0,
            confirm: 3,
        }
    }
}

/// One GPU's early watch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlyWatch {
    /// (second, peak used bytes) since the GPU became active.
    points: VecDeque<(f64, f64)>,
    streak: u32,
    /// The latest evaluation's verdict.
    holds: bool,
    #[serde(skip)]
    sliding: NotState<SlidingS>,
}

/// Mann–Kendall's `S` of the window tested last, with that window: each
/// second the window drops a point or so at its start and gains one at its
/// end, and `S` follows in O(n) instead of O(n²) (most of the watch's cost,
/// as most seconds end at the test). Not state (held as a [`NotState`]: a
/// restored watch computes `S` whole once, to the same value).
#[derive(Debug, Clone, Default)]
struct SlidingS(Option<(Vec<(f64, f64)>, i64)>);

impl SlidingS {
    /// `S` of `window`, from the last window's when `window` is that one
    /// less some leading points plus some trailing ones.
    fn of(&mut self, window: &[(f64, f64)]) -> i64 {
        let s = self
            .0
            .as_ref()
            .and_then(|(last, s)| slide(last, *s, window))
            .unwrap_or_else(|| mann_kendall_s(window));
        let (last, kept) = self.0.get_or_insert_with(Default::default);
        last.clear();
        last.extend_from_slice(window);
        *kept = s;
        s
    }
}

/// `S` of `new` from `s`, that of `old`, when `new` is `old` less its
/// leading points before `new`'s first and plus points after its last
/// (the kept ones equal to the bit); `None` otherwise.
fn slide(old: &[(f64, f64)], s: i64, new: &[(f64, f64)]) -> Option<i64> {
    let first = new.first()?;
    let dropped = old
        .iter()
        .position(|p| p.0.to_bits() == first.0.to_bits())?;
    let kept = &old[dropped..];
    let same = |a: &(f64, f64), b: &(f64, f64)| {
        a.0.to_bits() == b.0.to_bits() && a.1.to_bits() == b.1.to_bits()
    };
    if kept.len() > new.len() || !kept.iter().zip(new).all(|(a, b)| same(a, b)) {
        return None;
    }
    let mut s = s;
    for (i, &(_, y)) in old[..dropped].iter().enumerate() {
        s -= pairs_sign(y, &old[i + 1..]);
    }
    for j in kept.len()..new.len() {
        s -= pairs_sign(new[j].1, &new[..j]);
    }
    Some(s)
}

impl EarlyWatch {
    /// Adds a sample's peak; returns a forecast once the warning is
    /// confirmed, at the first second that confirms it and every second
    /// after while it holds.
    /// `(t, active_since)`: the sample's time and when the series became
    /// active, seconds.
    pub fn add(
        &mut self,
        (t, active_since): (f64, f64),
        used_high: f64,
        room: Room,
        p: &EarlyParams,
        forecast: &ForecastParams,
        scratch: &mut TrendScratch,
    ) -> Option<OomForecast> {
        if p.watch_s <= 0.0 || t - active_since > p.watch_s {
            self.points = VecDeque::new();
            self.sliding = NotState::default();
            self.holds = false;
            return None;
        }
        let second = t.floor();
        match self.points.back_mut() {
            Some(last) if last.0 == second => {
                last.1 = last.1.max(used_high);
                return None;
            }
            Some(last) if last.0 > second => return None,
            _ => {}
        }
        let verdict = self.evaluate(room, p, forecast, scratch);
        if self.points.len() == MAX_POINTS {
            self.points.pop_front();
        }
        self.points.push_back((second, used_high));
        self.holds = verdict.is_some();
        self.streak = if self.holds { self.streak + 1 } else { 0 };
        verdict.filter(|_| self.streak >= p.confirm.max(1))
    }

    /// Whether the latest evaluation warned.
    pub fn holds(&self) -> bool {
        self.holds
    }

    /// Forgets everything (the GPU went idle).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Judges the closed seconds (every point but one still filling).
    fn evaluate(
        &mut self,
        room: Room,
        p: &EarlyParams,
        fp: &ForecastParams,
        scratch: &mut TrendScratch,
    ) -> Option<OomForecast> {
        let newest = self.points.back()?.0;
        let points = self.points.make_contiguous();
        // The last `fit_s` seconds, or the last `min_points` points when
        // samples come sparser than one a second.
        let split = points
            .partition_point(|&(t, _)| t < newest - p.fit_s)
            .min(points.len().saturating_sub(p.min_points));
        let (before, window) = points.split_at(split);
        if window.len() < p.min_points || before.is_empty() {
            return None;
        }
        // Most seconds show no significant rise: Mann–Kendall alone rules
        // them out without the pair slopes.
        let sliding = &mut self.sliding;
        let trend = fit_rising_with_s(window, |w| sliding.of(w), 1.96, p.p_max, scratch)?;
        let real = trend.p_up <= p.p_max && trend.slope > 0.0 && trend.slope_low > 0.0;
        if !real {
            return None;
        }
        let half = window.len() / 2;
        let first = slope(&window[..half], scratch)?;
        let second = slope(&window[half..], scratch)?;
        let steady =
            first > 0.0 && second > 0.0 && first.max(second) <= p.steady_ratio * first.min(second);
        if !steady || fastest_rise(before, p.ramp_s) < p.ramp_ratio * trend.slope {
            return None;
        }
        let oom = project(&trend, trend.max_residual.max(0.0), room, fp);
        (oom.predicted_oom_t - trend.t_ref <= p.horizon_s).then_some(oom)
    }
}

/// The fastest rise over any `span_s` stretch, bytes per second.
fn fastest_rise(points: &[(f64, f64)], span_s: f64) -> f64 {
    let mut best = 0.0_f64;
    let mut j = 0;
    for (i, &(t, v)) in points.iter().enumerate() {
        while j < i && t - points[j].0 > span_s {
            j += 1;
        }
        let (t0, v0) = points[j];
        if t > t0 {
            best = best.max((v - v0) / (t - t0).max(span_s));
        }
    }
    best
}

#[cfg(test)]
mod tests;
