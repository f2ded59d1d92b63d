//! Regimes: the stretch of a series since its last persistent level shift.
//!
//! Evaluation passes, checkpoints and longer sequences move memory to a new
//! level and keep it there; fitting one trend across such a step would read
//! it as growth. A window whose peak leaves the current level by more than
//! `max(shift_floor, shift_noise_factor * noise)` becomes a *candidate*. The
//! candidate is judged on the next `confirm_points` windows:
//!
//! - back at the old level: it was a spike; its height is kept as a spike
//!   margin for the OOM forecast, and it stays out of the trend;
//! - staying at the candidate's level: a persistent shift; a new regime
//!   starts at the candidate;
//! - moving on past it (a steep leak): it is growth, and every point joins
//!   the regime.
//!
//! `noise` is the median absolute step between consecutive peaks, so a leak
//! that climbs by a similar amount every window never looks like a shift.
//! Memory: at most `max_points` points, `confirm_points` pending and
//! [`MAX_SPIKES`] spikes per series.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::envelope::EnvelopePoint;
use super::robust_stats::{median_in_place, Scratch};
use crate::not_state::NotState;

/// Spikes remembered per series for the margin.
pub const MAX_SPIKES: usize = 8;

/// Tuning of regime detection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegimeParams {
    /// Points kept per regime (the trend window).
    pub max_points: usize,
    /// Smallest level change that can be a shift, as a fraction of capacity.
    pub shift_floor_frac: f64,
    /// A shift must also exceed this many times the series' step noise.
    pub shift_noise_factor: f64,
    /// Windows that must confirm a candidate shift.
    pub confirm_points: usize,
    /// How long a spike keeps counting towards the margin, seconds.
    pub spike_memory_s: f64,
    /// A shift the same way as one less than this long ago is growth (a
    /// staircase), not a new regime, seconds.
    pub staircase_s: f64,
}

impl Default for RegimeParams {
    fn default() -> Self {
        Self {
            max_points: 30,
            shift_floor_frac: 0.02,
            shift_noise_factor: 6.0,
            confirm_points: 3,
            spike_memory_s: 900.0,
            staircase_s: 600.0,
        }
    }
}

/// What became of a pushed point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// It joined the current regime.
    Accepted,
    /// It is a candidate shift (or confirms one); judged later.
    Pending,
    /// The pending candidate fell back: a spike, kept out of the trend.
    Spike,
    /// A persistent shift: a new regime started.
    NewRegime,
}

/// One series' current regime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegimeSeries {
    points: VecDeque<EnvelopePoint>,
    pending: Vec<EnvelopePoint>,
    spikes: VecDeque<(f64, f64)>,
    regime_start: Option<f64>,
    regimes: u32,
    last_shift: Option<(f64, bool)>,
    #[serde(skip)]
    scratch: NotState<Scratch>,
}

impl Default for RegimeSeries {
    fn default() -> Self {
        Self::new()
    }
}

impl RegimeSeries {
    /// An empty series.
    pub fn new() -> Self {
        Self {
            points: VecDeque::new(),
            pending: Vec::new(),
            spikes: VecDeque::new(),
            regime_start: None,
            regimes: 0,
            last_shift: None,
            scratch: NotState::default(),
        }
    }

    /// Places a closed envelope window; `capacity` scales the shift floor.
    pub fn push(&mut self, p: EnvelopePoint, capacity: f64, params: &RegimeParams) -> Placed {
        if self.regime_start.is_none() {
            self.regime_start = Some(p.t);
            self.regimes = 1;
        }
        if self.points.len() < 3 {
            self.accept(p, params);
            return Placed::Accepted;
        }
        let level = self.recent_level();
        let noise = self.step_noise();
        let shift = (params.shift_floor_frac * capacity).max(params.shift_noise_factor * noise);
        let tolerance = shift / 2.0;
        let Some(candidate) = self.pending.first().copied() else {
            if (p.peak - level).abs() > shift {
                self.pending.push(p);
                return Placed::Pending;
            }
            self.accept(p, params);
            return Placed::Accepted;
        };
        if (p.peak - level).abs() <= tolerance {
            for spike in std::mem::take(&mut self.pending) {
                self.remember_spike(spike.t, spike.peak - level);
            }
            self.accept(p, params);
            return Placed::Spike;
        }
        if (p.peak - candidate.peak).abs() <= tolerance {
            self.pending.push(p);
            if self.pending.len() > params.confirm_points {
                let up = candidate.peak > level;
                let staircase = self.last_shift.is_some_and(|(t, was_up)| {
                    was_up == up && candidate.t - t <= params.staircase_s
                });
                self.last_shift = Some((candidate.t, up));
                if staircase {
                    // A second step the same way soon after the first is growth
                    // seen through the allocator's segments, not a new level.
                    for q in std::mem::take(&mut self.pending) {
                        self.accept(q, params);
                    }
                    return Placed::Accepted;
                }
                self.points.clear();
                self.regime_start = Some(candidate.t);
                self.regimes += 1;
                for q in std::mem::take(&mut self.pending) {
                    self.accept(q, params);
                }
                return Placed::NewRegime;
            }
            return Placed::Pending;
        }
        for q in std::mem::take(&mut self.pending) {
            self.accept(q, params);
        }
        self.accept(p, params);
        Placed::Accepted
    }

    fn accept(&mut self, p: EnvelopePoint, params: &RegimeParams) {
        if self.points.len() == params.max_points.max(3) {
            self.points.pop_front();
        }
        self.points.push_back(p);
        let horizon = p.t - params.spike_memory_s;
        while self.spikes.front().is_some_and(|s| s.0 < horizon) {
            self.spikes.pop_front();
        }
    }

    fn remember_spike(&mut self, t: f64, height: f64) {
        if height <= 0.0 {
            return;
        }
        if self.spikes.len() == MAX_SPIKES {
            self.spikes.pop_front();
        }
        self.spikes.push_back((t, height));
    }

    fn recent_level(&mut self) -> f64 {
        self.scratch.0.clear();
        self.scratch
            .0
            .extend(self.points.iter().rev().take(3).map(|p| p.peak));
        median_in_place(&mut self.scratch.0).unwrap_or(0.0)
    }

    fn step_noise(&mut self) -> f64 {
        self.scratch.0.clear();
        let peaks = self.points.iter().map(|p| p.peak);
        self.scratch
            .0
            .extend(peaks.clone().zip(peaks.skip(1)).map(|(a, b)| (b - a).abs()));
        median_in_place(&mut self.scratch.0).unwrap_or(0.0)
    }

    /// The current regime's points, oldest first.
    pub fn points(&self) -> impl ExactSizeIterator<Item = &EnvelopePoint> + Clone {
        self.points.iter()
    }

    /// Number of points in the current regime.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True before the first point.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Highest spike above the level still remembered.
    pub fn spike_margin(&self) -> f64 {
        self.spikes.iter().map(|s| s.1).fold(0.0, f64::max)
    }

    /// When the current regime started, seconds.
    pub fn regime_start(&self) -> Option<f64> {
        self.regime_start
    }

    /// Regimes seen so far (1 after the first point).
    pub fn regimes(&self) -> u32 {
        self.regimes
    }

    /// True while a candidate shift awaits judgement.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(t: f64, v: f64) -> EnvelopePoint {
        EnvelopePoint {
            t,
            peak: v,
            trough: v,
            last: v,
            samples: 10,
        }
    }

    fn feed(values: &[f64]) -> (RegimeSeries, Vec<Placed>) {
        let mut s = RegimeSeries::new();
        let params = RegimeParams::default();
        let placed = values
            .iter()
            .enumerate()
            .map(|(i, &v)| s.push(pt(i as f64 * 10.0, v), 100.0, &params))
            .collect();
        (s, placed)
    }

    #[test]
    fn a_single_spike_is_not_a_new_regime() {
        let (s, placed) = feed(&[50.0, 50.0, 50.0, 50.0, 60.0, 50.0, 50.0]);
        assert_eq!(placed[4], Placed::Pending);
        assert_eq!(placed[5], Placed::Spike);
        assert_eq!(s.regimes(), 1);
        assert_eq!(s.len(), 6, "the spike stays out of the trend window");
        assert_eq!(s.spike_margin(), 10.0);
    }

    #[test]
    fn a_persistent_shift_starts_a_new_regime() {
        let (s, placed) = feed(&[50.0, 50.0, 50.0, 50.0, 60.0, 60.0, 60.0, 60.0, 60.0]);
        assert_eq!(placed[7], Placed::NewRegime);
        assert_eq!(s.regimes(), 2);
        assert_eq!(s.regime_start(), Some(40.0));
        assert!(s.points().all(|p| p.peak == 60.0));
    }

    #[test]
    fn a_steep_steady_climb_stays_one_regime() {
        let climb: Vec<f64> = (0..20).map(|i| 20.0 + 3.0 * i as f64).collect();
        let (s, placed) = feed(&climb);
        assert!(placed.iter().all(|p| *p == Placed::Accepted), "{placed:?}");
        assert_eq!(s.regimes(), 1);
    }

    #[test]
    fn a_climb_after_a_flat_stretch_is_growth_not_a_shift() {
        let mut v = vec![50.0; 6];
        v.extend((1..10).map(|i| 50.0 + 3.0 * i as f64));
        let (s, _) = feed(&v);
        assert_eq!(s.regimes(), 1);
        assert_eq!(s.len(), 15);
    }

    #[test]
    fn a_staircase_of_same_way_steps_is_growth() {
        let mut v = vec![50.0; 5];
        for step in 1..4 {
            v.extend([50.0 + 5.0 * step as f64; 6]);
        }
        let (s, _) = feed(&v);
        assert_eq!(
            s.regimes(),
            2,
            "the first step starts a regime, later ones extend it"
        );
        assert!(s.points().next().unwrap().peak == 55.0);
        assert!(s.points().last().unwrap().peak == 65.0);
    }

    #[test]
    fn the_window_is_bounded() {
        let (s, _) = feed(&[1.0; 100]);
        assert_eq!(s.len(), RegimeParams::default().max_points);
    }
}
