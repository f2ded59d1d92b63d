//! Straggler: one rank whose compute is persistently slower than its peers'.
//!
//! Synchronous data-parallel ranks finish every step together (the slowest
//! one holds the collective), so step duration cannot name the slow rank.
//! The sections the hook times inside each rank (`data`, `forward`,
//! `backward`, ...) can. Per step, once every rank reported it (or enough
//! did before newer steps arrived), each rank's *deviation* is its total of
//! sections over the ranks' median total, minus one. Comparing within each
//! step makes a step slow on every rank (job-wide) irrelevant.
//!
//! Per-step deviations are noisy (a few percent, independent from step to
//! step), so a slowdown of a few percent shows only in many steps. Each rank
//! runs a one-sided CUSUM (Page 1954), the quickest detector of a persistent
//! shift for a given false-alarm rate: `S = max(0, S + min(d, clip) - k)`
//! with `k` half the smallest slowdown of interest, `clip` bounding what one
//! outlier step can add, and an alarm at `S >= h`. `h` and `clip` scale with
//! the job's noise `sigma` (scaled MAD of recent deviations of all ranks), so
//! clean jobs alarm fast and noisy ones do not alarm on noise. A mirrored
//! CUSUM clears the alert once the rank is back with its peers. The alert
//! names the section with the largest median excess over its peers in the
//! last `window_steps` steps, and its slowdown.
//!
//! Memory: `max_pending_steps` open steps, `window_steps` scores per rank,
//! [`NOISE_SAMPLES`] deviations per job, at most [`MAX_SECTIONS`] section names.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::latch::{Edge, Latch};
use super::stats::{median_of, scaled_mad, Scratch};

/// Section names tracked per job; more are ignored.
pub const MAX_SECTIONS: usize = 8;

/// Tuning of the straggler detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerParams {
    /// Smallest slowdown of interest, as a fraction (0.06 = 6 % slower);
    /// the CUSUM's reference value is half of it.
    pub min_slowdown: f64,
    /// Alarm threshold in units of the job's noise.
    pub h_sigma: f64,
    /// Largest contribution of one step, in units of the job's noise.
    pub clip_sigma: f64,
    /// Smallest noise assumed, as a fraction.
    pub min_sigma: f64,
    /// Scored steps per rank kept to explain an alert.
    pub window_steps: usize,
    /// Scored steps a rank needs before it can be flagged.
    pub min_steps: usize,
    /// First steps of a job not scored (compilation, warm-up).
    pub warmup_steps: u64,
    /// Ranks a step needs to be scored.
    pub min_ranks: usize,
    /// Steps kept open waiting for late ranks.
    pub max_pending_steps: usize,
}

impl Default for StragglerParams {
    fn default() -> Self {
        Self {
            min_slowdown: 0.05,
            h_sigma: 10.0,
            clip_sigma: 2.0,
            min_sigma: 0.005,
            window_steps: 12,
            min_steps: 8,
            warmup_steps: 3,
            min_ranks: 3,
            max_pending_steps: 8,
        }
    }
}

/// Deviations kept per job to estimate its noise.
pub const NOISE_SAMPLES: usize = 1024;
/// Deviations needed before the noise estimate is trusted.
const MIN_NOISE_SAMPLES: usize = 64;

/// Why a rank is (or no longer is) a straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerEvent {
    /// The rank.
    pub rank: u32,
    /// Trace time of the step that decided, seconds.
    pub t: f64,
    /// Raised or cleared.
    pub edge: Edge,
    /// Slowest section by median excess.
    pub section: String,
    /// The section's median time over its peers'.
    pub section_slowdown: f64,
    /// The rank's median total of sections over its peers'.
    pub slowdown: f64,
    /// Median share of the step the rank makes the others wait.
    pub excess_frac: f64,
    /// Median step duration of the job, ms.
    pub step_ms: f64,
}

/// Missing sections are NaN, so equality compares bit patterns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Row {
    rank: u32,
    t: f64,
    duration_ms: f64,
    sections: [f64; MAX_SECTIONS],
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Score {
    excess: f64,
    ratio: f64,
    step_ms: f64,
    section_excess: [f64; MAX_SECTIONS],
    section_ratio: [f64; MAX_SECTIONS],
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl PartialEq for Row {
    fn eq(&self, o: &Self) -> bool {
        self.rank == o.rank
            && same_bits(&[self.t, self.duration_ms], &[o.t, o.duration_ms])
            && same_bits(&self.sections, &o.sections)
    }
}

impl PartialEq for Score {
    fn eq(&self, o: &Self) -> bool {
        same_bits(
            &[self.excess, self.ratio, self.step_ms],
            &[o.excess, o.ratio, o.step_ms],
        ) && same_bits(&self.section_excess, &o.section_excess)
            && same_bits(&self.section_ratio, &o.section_ratio)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct RankScores {
    scores: VecDeque<Score>,
    scored: u64,
    /// Steps since the CUSUM last stood at zero: the evidence of this episode.
    run: usize,
    /// CUSUM towards "slower than its peers".
    up: f64,
    /// CUSUM towards "back with its peers", while flagged.
    down: f64,
    latch: Latch,
}

/// Per-job straggler state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StragglerTracker {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<Row>>,
    ranks: BTreeMap<u32, RankScores>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
    #[serde(skip)]
    scratch: Scratch,
}

impl StragglerTracker {
    /// Adds one rank's finished step; returns the alerts it raised or cleared.
    #[allow(clippy::too_many_arguments)]
    pub fn add_step<'s>(
        &mut self,
        world_size: u32,
        rank: u32,
        step: u64,
        t: f64,
        duration_ms: f64,
        sections: impl IntoIterator<Item = (&'s str, f64)>,
        p: &StragglerParams,
    ) -> Vec<StragglerEvent> {
        let mut row = Row {
            rank,
            t,
            duration_ms,
            sections: [f64::NAN; MAX_SECTIONS],
        };
        for (name, ms) in sections {
            if let Some(i) = self.section_index(name) {
                row.sections[i] = ms;
            }
        }
        if self
            .pending
            .first_key_value()
            .is_some_and(|(&oldest, _)| step < oldest)
            && self.pending.len() >= p.max_pending_steps
        {
            return Vec::new();
        }
        let rows = self.pending.entry(step).or_default();
        match rows.iter_mut().find(|r| r.rank == rank) {
            Some(existing) => *existing = row,
            None => rows.push(row),
        }
        let mut events = Vec::new();
        if rows.len() >= world_size as usize {
            if let Some(rows) = self.pending.remove(&step) {
                self.score(rows, p, &mut events);
            }
        }
        while self.pending.len() > p.max_pending_steps {
            if let Some((_, rows)) = self.pending.pop_first() {
                self.score(rows, p, &mut events);
            }
        }
        events
    }

    /// Whether `rank` is currently flagged.
    pub fn is_straggling(&self, rank: u32) -> bool {
        self.ranks.get(&rank).is_some_and(|r| r.latch.is_on())
    }

    /// How many times longer than its peers' the rank's sections take, the
    /// median over its recent scored steps; `None` before it was scored.
    pub fn slowdown(&self, rank: u32) -> Option<f64> {
        let ratios = self.ranks.get(&rank)?.scores.iter().map(|s| s.ratio);
        median_of(ratios.filter(|r| r.is_finite()), &mut Vec::new())
    }

    /// Forgets a rank that ended.
    pub fn remove_rank(&mut self, rank: u32) {
        self.ranks.remove(&rank);
    }

    /// Steps that could not be scored (too few ranks reported them).
    pub fn dropped_steps(&self) -> u64 {
        self.dropped_steps
    }

    fn section_index(&mut self, name: &str) -> Option<usize> {
        if let Some(i) = self.sections.iter().position(|s| s == name) {
            return Some(i);
        }
        if self.sections.len() == MAX_SECTIONS {
            return None;
        }
        self.sections.push(name.to_owned());
        Some(self.sections.len() - 1)
    }

    fn score(&mut self, rows: Vec<Row>, p: &StragglerParams, events: &mut Vec<StragglerEvent>) {
        if rows.len() < p.min_ranks.max(2) {
            self.dropped_steps += 1;
            return;
        }
        self.scored_steps += 1;
        if self.scored_steps <= p.warmup_steps {
            return;
        }
        let scratch = &mut self.scratch.0;
        let step_ms = median_of(rows.iter().map(|r| r.duration_ms), scratch).unwrap_or(0.0);
        let totals: Vec<f64> = rows
            .iter()
            .map(|r| r.sections.iter().filter(|v| !v.is_nan()).sum())
            .collect();
        let median_total = median_of(totals.iter().copied(), scratch).unwrap_or(0.0);
        if step_ms <= 0.0 || median_total <= 0.0 {
            return;
        }
        let mut section_median = [f64::NAN; MAX_SECTIONS];
        for (i, m) in section_median.iter_mut().enumerate() {
            let present = rows.iter().map(|r| r.sections[i]).filter(|v| !v.is_nan());
            if let Some(med) = median_of(present, scratch) {
                *m = med;
            }
        }
        for (row, total) in rows.iter().zip(&totals) {
            let mut score = Score {
                excess: (total - median_total) / step_ms,
                ratio: total / median_total,
                step_ms,
                section_excess: [f64::NAN; MAX_SECTIONS],
                section_ratio: [f64::NAN; MAX_SECTIONS],
            };
            for (i, (&x, &m)) in row.sections.iter().zip(&section_median).enumerate() {
                if !x.is_nan() && !m.is_nan() {
                    score.section_excess[i] = (x - m) / step_ms;
                    if m > 0.0 {
                        score.section_ratio[i] = x / m;
                    }
                }
            }
            if self.noise.len() == NOISE_SAMPLES {
                self.noise.pop_front();
            }
            self.noise.push_back(score.ratio - 1.0);
            let entry = self.ranks.entry(row.rank).or_default();
            if entry.scores.len() == p.window_steps.max(1) {
                entry.scores.pop_front();
            }
            entry.scores.push_back(score);
            entry.scored += 1;
        }
        if self.noise.len() < MIN_NOISE_SAMPLES {
            return;
        }
        if self.sigma.is_none() || self.scored_steps % 16 == 0 {
            let center = median_of(self.noise.iter().copied(), &mut self.scratch.0).unwrap_or(0.0);
            let mad = scaled_mad(self.noise.iter().copied(), center, &mut self.scratch.0);
            self.sigma = mad.map(|m| m.max(p.min_sigma));
        }
        let sigma = self.sigma.unwrap_or(p.min_sigma);
        let k = p.min_slowdown / 2.0;
        let clip = (p.clip_sigma * sigma).max(2.0 * k);
        let h = (p.h_sigma * sigma).max(4.0 * k);
        for row in &rows {
            let Some(entry) = self.ranks.get_mut(&row.rank) else {
                continue;
            };
            let Some(d) = entry.scores.back().map(|s| s.ratio - 1.0) else {
                continue;
            };
            let d = d.clamp(-clip, clip);
            entry.up = (entry.up + d - k).max(0.0);
            entry.run = if entry.up > 0.0 { entry.run + 1 } else { 0 };
            let was_on = entry.latch.is_on();
            entry.down = if was_on {
                (entry.down + k - d).max(0.0)
            } else {
                0.0
            };
            let raise = !was_on && entry.up >= h && entry.scores.len() >= p.min_steps;
            let clear = was_on && entry.down >= h;
            let edge = entry
                .latch
                .update(if was_on { !clear } else { raise }, 1, 1);
            if edge == Edge::Steady {
                continue;
            }
            if edge == Edge::Cleared {
                entry.up = 0.0;
            }
            entry.down = 0.0;
            let scratch = &mut self.scratch.0;
            // Explain with the steps that made the case, not the ones before.
            let recent = entry
                .scores
                .len()
                .min(entry.run.max(p.min_steps / 2).max(1));
            let evidence = || entry.scores.iter().skip(entry.scores.len() - recent);
            let excess = median_of(evidence().map(|s| s.excess), scratch).unwrap_or(0.0);
            let ratio = median_of(evidence().map(|s| s.ratio), scratch).unwrap_or(1.0);
            let mut worst = (usize::MAX, f64::NEG_INFINITY);
            for i in 0..self.sections.len() {
                let e = median_of(
                    evidence()
                        .map(|s| s.section_excess[i])
                        .filter(|v| !v.is_nan()),
                    scratch,
                );
                if let Some(e) = e {
                    if e > worst.1 {
                        worst = (i, e);
                    }
                }
            }
            let (section, section_slowdown) = match worst.0 {
                usize::MAX => ("sections".to_owned(), ratio),
                i => {
                    let r = median_of(
                        evidence()
                            .map(|s| s.section_ratio[i])
                            .filter(|v| !v.is_nan()),
                        scratch,
                    );
                    (self.sections[i].clone(), r.unwrap_or(ratio))
                }
            };
            let step_ms = median_of(evidence().map(|s| s.step_ms), scratch).unwrap_or(step_ms);
            events.push(StragglerEvent {
                rank: row.rank,
                t: row.t,
                edge,
                section,
                section_slowdown,
                slowdown: ratio,
                excess_frac: excess,
                step_ms,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `steps` steps of `world` ranks; `slow(rank, step)` scales the
    /// forward section, `wide(step)` scales every rank.
    fn run(
        world: u32,
        steps: u64,
        slow: impl Fn(u32, u64) -> f64,
        wide: impl Fn(u64) -> f64,
    ) -> Vec<StragglerEvent> {
        let mut tr = StragglerTracker::default();
        let p = StragglerParams::default();
        let mut out = Vec::new();
        for step in 0..steps {
            for rank in 0..world {
                let jitter = 1.0 + 0.01 * (((rank as u64 * 7 + step * 13) % 5) as f64 - 2.0);
                let fwd = 300.0 * jitter * slow(rank, step) * wide(step);
                let bwd = 600.0 * jitter * wide(step);
                let data = 20.0;
                let t = step as f64 + 0.001 * rank as f64;
                let secs = [("data", data), ("forward", fwd), ("backward", bwd)];
                out.extend(tr.add_step(world, rank, step, t, 1000.0 * wide(step), secs, &p));
            }
        }
        out
    }

    #[test]
    fn names_the_slow_rank_and_section_soon_after_it_slows() {
        let events = run(
            8,
            60,
            |r, s| if r == 5 && s >= 20 { 1.3 } else { 1.0 },
            |_| 1.0,
        );
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(
            (e.rank, e.edge, e.section.as_str()),
            (5, Edge::Raised, "forward")
        );
        assert!((e.section_slowdown - 1.3).abs() < 0.03, "{e:?}");
        assert!(e.t >= 20.0 && e.t <= 32.0, "raised at step {}", e.t);
    }

    #[test]
    fn a_six_percent_straggler_is_found() {
        let events = run(
            16,
            80,
            |r, s| if r == 3 && s >= 10 { 1.06 * 1.06 } else { 1.0 },
            |_| 1.0,
        );
        assert!(
            events.iter().any(|e| e.rank == 3 && e.edge == Edge::Raised),
            "{events:?}"
        );
        assert!(events.iter().all(|e| e.rank == 3));
    }

    #[test]
    fn a_job_wide_slowdown_is_no_straggler() {
        let events = run(
            8,
            80,
            |_, _| 1.0,
            |s| if (30..50).contains(&s) { 1.6 } else { 1.0 },
        );
        assert!(events.is_empty(), "{events:?}");
    }

    #[test]
    fn isolated_slow_steps_are_ignored() {
        let events = run(
            8,
            80,
            |r, s| if r == 2 && s % 10 == 0 { 3.0 } else { 1.0 },
            |_| 1.0,
        );
        assert!(events.is_empty(), "{events:?}");
    }

    #[test]
    fn clears_when_the_rank_recovers() {
        let events = run(
            4,
            80,
            |r, s| {
                if r == 1 && (10..40).contains(&s) {
                    1.5
                } else {
                    1.0
                }
            },
            |_| 1.0,
        );
        let edges: Vec<_> = events.iter().map(|e| (e.rank, e.edge)).collect();
        assert_eq!(edges, vec![(1, Edge::Raised), (1, Edge::Cleared)]);
    }

    #[test]
    fn steps_missing_ranks_are_scored_when_newer_steps_arrive() {
        let mut tr = StragglerTracker::default();
        let p = StragglerParams::default();
        for step in 0..40 {
            for rank in 0..4u32 {
                if rank == 3 && step % 2 == 0 {
                    continue;
                }
                tr.add_step(4, rank, step, step as f64, 1000.0, [("forward", 500.0)], &p);
            }
        }
        assert!(tr.pending.len() <= p.max_pending_steps);
        assert_eq!(tr.dropped_steps(), 0);
    }
}
