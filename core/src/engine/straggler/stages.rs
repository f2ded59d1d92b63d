//! Stage imbalance: one pipeline stage does more work per step than the
//! others, and every other stage waits for it.
//!
//! In a pipeline-parallel job the ranks fall into peer groups (the
//! data-parallel replicas of one stage; see `classes`), and the
//! stages run in lockstep through their point-to-point sends: a stage with
//! more layers, the loss, or a larger embedding makes every other stage
//! idle in its receives. That is not a straggler (no rank is slower than
//! its peers; the split of the model is uneven) and it is the commonest
//! reason a pipeline job is slow, so it is a finding of its own.
//!
//! Per scored step with two or more groups, a stage's work is the *least*
//! busy time of its ranks (a straggler among its replicas does not make the
//! stage heavy), its wait the median of its ranks' waits. The heaviest
//! stage's work less the median of the other stages' is the step's gap.
//! The finding holds while, over the last [`WINDOW`] steps, one stage was
//! the heaviest in at least three in four, with a median gap of at least
//! `stage_min_frac` of the step and at least `min_loss_ms`; it is raised
//! once it has held for `min_duration_s`, and cleared after `min_steps`
//! steps in a row without it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::super::latch::{Edge, Latch};
use super::super::robust_stats::median_of;
use super::StragglerParams;

/// Steps a stage's weight is judged over.
pub const WINDOW: usize = 32;
/// Ranks of the heavy stage an event lists; a larger stage is named by these.
pub const MAX_NAMED_RANKS: usize = 16;

/// One stage of one step: its peer group's key, work and wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageStep {
    /// The group's key (its lowest rank).
    pub key: u32,
    /// The least busy time of its ranks, ms.
    pub work_ms: f64,
    /// The median wait of its ranks, ms.
    pub wait_ms: f64,
}

/// The heaviest stage of one step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Sample {
    heavy: u32,
    gap_ms: f64,
    work_ms: f64,
    others_ms: f64,
    /// The other stages' median wait less the heavy one's, ms.
    wait_ms: f64,
    step_ms: f64,
}

/// A stage that became (or stopped being) the one the others wait for.
#[derive(Debug, Clone, PartialEq)]
pub struct StageEvent {
    /// Trace time of the step that decided, seconds.
    pub t: f64,
    /// Raised or cleared.
    pub edge: Edge,
    /// The stage's peer group key (its lowest rank).
    pub stage: u32,
    /// Its ranks, at most [`MAX_NAMED_RANKS`].
    pub ranks: Vec<u32>,
    /// Its work per step, ms (median over the window).
    pub work_ms: f64,
    /// The other stages' work per step, ms.
    pub others_ms: f64,
    /// How much longer the other stages wait than it per step, ms.
    pub wait_ms: f64,
    /// The job's median step, ms.
    pub step_ms: f64,
}

/// Per-job stage state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTracker {
    samples: VecDeque<Sample>,
    /// Steps in a row the finding held.
    held: usize,
    /// Steps in a row it did not, while raised.
    missed: usize,
    /// The stage flagged, while the latch is on.
    flagged: Option<u32>,
    latch: Latch,
}

impl StageTracker {
    /// Adds one scored step's stages (two or more; `ranks_of` lists a
    /// stage's ranks for an event); returns an event on an edge.
    pub fn observe(
        &mut self,
        t: f64,
        step_ms: f64,
        stages: &[StageStep],
        ranks_of: impl Fn(u32) -> Vec<u32>,
        p: &StragglerParams,
        scratch: &mut Vec<f64>,
    ) -> Option<StageEvent> {
        let heavy = stages
            .iter()
            .max_by(|a, b| a.work_ms.total_cmp(&b.work_ms).then(b.key.cmp(&a.key)))?;
        let others = stages.iter().filter(|s| s.key != heavy.key);
        let others_ms = median_of(others.clone().map(|s| s.work_ms), scratch)?;
        let others_wait = median_of(others.map(|s| s.wait_ms), scratch)?;
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            heavy: heavy.key,
            gap_ms: heavy.work_ms - others_ms,
            work_ms: heavy.work_ms,
            others_ms,
            wait_ms: others_wait - heavy.wait_ms,
            step_ms,
        });
        let verdict = self.verdict(p, scratch);
        let holds = verdict.is_some_and(|(stage, _)| self.flagged.is_none_or(|f| f == stage));
        self.held = if holds { self.held + 1 } else { 0 };
        self.missed = if holds { 0 } else { self.missed + 1 };
        let was_on = self.latch.is_on();
        let lasted_s = self.held as f64 * step_ms / 1000.0;
        let on = if was_on {
            self.missed < p.min_steps.max(1)
        } else {
            holds && lasted_s >= p.min_duration_s
        };
        let edge = self.latch.update(on, 1, 1);
        let (stage, at) = match edge {
            Edge::Steady => return None,
            Edge::Raised => {
                let (stage, at) = verdict?;
                self.flagged = Some(stage);
                (stage, at)
            }
            Edge::Cleared => {
                let stage = self.flagged.take()?;
                (stage, self.summary(stage, scratch))
            }
        };
        Some(StageEvent {
            t,
            edge,
            stage,
            ranks: ranks_of(stage).into_iter().take(MAX_NAMED_RANKS).collect(),
            work_ms: at.work_ms,
            others_ms: at.others_ms,
            wait_ms: at.wait_ms,
            step_ms: at.step_ms,
        })
    }

    /// Whether a stage is flagged now.
    pub fn flagged(&self) -> Option<u32> {
        self.flagged
    }

    /// The stage the window finds heavy, with its medians, if it does.
    fn verdict(&self, p: &StragglerParams, scratch: &mut Vec<f64>) -> Option<(u32, Sample)> {
        if self.samples.len() < p.min_steps.max(1) {
            return None;
        }
        let last = self.samples.back()?.heavy;
        let times = self.samples.iter().filter(|s| s.heavy == last).count();
        if times * 4 < self.samples.len() * 3 {
            return None;
        }
        let at = self.summary(last, scratch);
        let frac = if at.step_ms > 0.0 {
            at.gap_ms / at.step_ms
        } else {
            0.0
        };
        (frac >= p.stage_min_frac && at.gap_ms >= p.min_loss_ms).then_some((last, at))
    }

    /// Medians over the window's steps in which `stage` was the heaviest.
    fn summary(&self, stage: u32, scratch: &mut Vec<f64>) -> Sample {
        let mine = || self.samples.iter().filter(|s| s.heavy == stage);
        let mut med = |f: fn(&Sample) -> f64| median_of(mine().map(f), scratch).unwrap_or(0.0);
        Sample {
            heavy: stage,
            gap_ms: med(|s| s.gap_ms),
            work_ms: med(|s| s.work_ms),
            others_ms: med(|s| s.others_ms),
            wait_ms: med(|s| s.wait_ms),
            step_ms: med(|s| s.step_ms),
        }
    }
}
