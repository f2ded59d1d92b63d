//! Slow links: a process group whose collectives take longer for every
//! member while the members' own work is unchanged.
//!
//! In a group's collective the last member to arrive still waits for the
//! transfer itself, so the least wait of any member in a step (the group's
//! *floor*) is what the link costs; a straggler raises the others' waits,
//! not the floor (it arrives last and waits least), and a job-wide slowdown
//! of compute leaves it alone. A floor that rises while the members' busy
//! time (their sections less the waits) does not is a slow or congested
//! link between them, or a collective made larger.
//!
//! Per group (point-to-point waits excepted: they follow the other stage's
//! compute) the tracker keeps the median floor and busy time of the first
//! [`BASELINE_STEPS`] scored steps as the baseline, then the last
//! [`WINDOW`] steps. The finding holds while the window's median floor is
//! above the baseline's by at least `stage_min_frac` of the step and
//! `min_loss_ms`, and the members' median busy time grew by less than half
//! as much; it is raised once it has held for `min_duration_s` and cleared
//! after `min_steps` steps in a row without it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::super::latch::{Edge, Latch};
use super::super::robust_stats::median_of;
use super::stages::MAX_NAMED_RANKS;
use super::StragglerParams;

/// Scored steps that make a group's baseline.
pub const BASELINE_STEPS: usize = 16;
/// Steps a group's floor is judged over.
pub const WINDOW: usize = 32;

/// One group's floor and busy time in one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkStep {
    /// The least wait of any member, ms.
    pub floor_ms: f64,
    /// The members' median busy time, ms.
    pub busy_ms: f64,
    /// The job's median step, ms.
    pub step_ms: f64,
}

/// A group that became (or stopped being) a slow link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkEvent {
    /// Trace time of the step that decided, seconds.
    pub t: f64,
    /// Raised or cleared.
    pub edge: Edge,
    /// The process group's name.
    pub group: String,
    /// Its members in the deciding step, sorted, at most [`MAX_NAMED_RANKS`].
    pub ranks: Vec<u32>,
    /// Its floor per step now and in the baseline, ms.
    pub floor_ms: f64,
    /// The baseline floor, ms.
    pub baseline_floor_ms: f64,
    /// The members' busy time per step now, ms.
    pub busy_ms: f64,
    /// The baseline busy time, ms.
    pub baseline_busy_ms: f64,
    /// The job's median step, ms.
    pub step_ms: f64,
}

/// One group's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkTracker {
    /// The first scored steps, until the baseline is taken.
    early: Vec<LinkStep>,
    /// The baseline (median floor, median busy), once taken.
    baseline: Option<(f64, f64)>,
    recent: VecDeque<LinkStep>,
    held: usize,
    missed: usize,
    latch: Latch,
}

impl LinkTracker {
    /// Adds one scored step of the group named `group` (its members
    /// `ranks`); returns an event on an edge.
    pub fn observe(
        &mut self,
        t: f64,
        group: &str,
        ranks: impl FnOnce() -> Vec<u32>,
        step: LinkStep,
        p: &StragglerParams,
        scratch: &mut Vec<f64>,
    ) -> Option<LinkEvent> {
        let Some((base_floor, base_busy)) = self.baseline else {
            self.early.push(step);
            if self.early.len() >= BASELINE_STEPS {
                let floor = median_of(self.early.iter().map(|s| s.floor_ms), scratch)?;
                let busy = median_of(self.early.iter().map(|s| s.busy_ms), scratch)?;
                self.baseline = Some((floor, busy));
                self.early = Vec::new();
            }
            return None;
        };
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(step);
        let now = self.medians(scratch);
        let rise = now.floor_ms - base_floor;
        let holds = self.recent.len() >= p.min_steps.max(1)
            && rise >= p.stage_min_frac * now.step_ms
            && rise >= p.min_loss_ms
            && now.busy_ms - base_busy < rise / 2.0;
        self.held = if holds { self.held + 1 } else { 0 };
        self.missed = if holds { 0 } else { self.missed + 1 };
        let was_on = self.latch.is_on();
        let on = if was_on {
            self.missed < p.min_steps.max(1)
        } else {
            holds && self.held as f64 * now.step_ms / 1000.0 >= p.min_duration_s
        };
        let edge = self.latch.update(on, 1, 1);
        if edge == Edge::Steady {
            return None;
        }
        let mut ranks = ranks();
        ranks.sort_unstable();
        ranks.truncate(MAX_NAMED_RANKS);
        Some(LinkEvent {
            t,
            edge,
            group: group.to_owned(),
            ranks,
            floor_ms: now.floor_ms,
            baseline_floor_ms: base_floor,
            busy_ms: now.busy_ms,
            baseline_busy_ms: base_busy,
            step_ms: now.step_ms,
        })
    }

    /// Whether the group is flagged now.
    pub fn is_flagged(&self) -> bool {
        self.latch.is_on()
    }

    /// Medians over the window.
    fn medians(&self, scratch: &mut Vec<f64>) -> LinkStep {
        let mut med =
            |f: fn(&LinkStep) -> f64| median_of(self.recent.iter().map(f), scratch).unwrap_or(0.0);
        LinkStep {
            floor_ms: med(|s| s.floor_ms),
            busy_ms: med(|s| s.busy_ms),
            step_ms: med(|s| s.step_ms),
        }
    }
}
