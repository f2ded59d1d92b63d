//! The straggler tracker as older snapshot formats laid it out. Formats 2
//! to 6: rows without their peer group and no stage tracker (upgraded,
//! every row is in group 0, the whole job, as it was then, and the stage
//! tracker starts empty). Formats 7 and 8: before collective waits (rows
//! and scores without them, no process groups or link trackers; upgraded,
//! the waits are absent and fill in from the next steps). Formats 9 and
//! 10: before collectives listed one by one (upgraded, no arrivals are
//! known yet). Postcard is field-order sensitive: the order here is the
//! old one.

use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;

use super::super::latch::Latch;
use super::links::LinkTracker;
use super::stages::StageTracker;
use super::{RankScores, Row, Score, StragglerTracker, MAX_SECTIONS, MAX_WAIT_GROUPS};
use crate::shared::Shared;

/// A row before its peer group.
#[derive(Debug, Clone, Deserialize)]
struct RowV6 {
    rank: u32,
    t: f64,
    duration_ms: f64,
    sections: [f64; MAX_SECTIONS],
}

/// A row before its collective waits.
#[derive(Debug, Clone, Deserialize)]
struct RowV8 {
    rank: u32,
    group: u32,
    t: f64,
    duration_ms: f64,
    sections: [f64; MAX_SECTIONS],
}

impl RowV8 {
    fn upgrade(self) -> Row {
        Row {
            rank: self.rank,
            group: self.group,
            t: self.t,
            duration_ms: self.duration_ms,
            sections: self.sections,
            waits: [f64::NAN; MAX_WAIT_GROUPS],
        }
    }
}

/// A score before the process groups' waits.
#[derive(Debug, Clone, Copy, Deserialize)]
struct ScoreV8 {
    excess: f64,
    ratio: f64,
    wait_deficit_ms: f64,
    step_ms: f64,
    section_ms: [f64; MAX_SECTIONS],
    section_median_ms: [f64; MAX_SECTIONS],
}

/// [`RankScores`] of [`ScoreV8`]s.
#[derive(Debug, Clone, Deserialize)]
struct RankScoresV8 {
    scores: VecDeque<ScoreV8>,
    scored: u64,
    run: usize,
    up: f64,
    down: f64,
    latch: Latch,
}

impl RankScoresV8 {
    fn upgrade(self) -> Shared<RankScores> {
        let score = |s: ScoreV8| Score {
            excess: s.excess,
            ratio: s.ratio,
            wait_deficit_ms: s.wait_deficit_ms,
            step_ms: s.step_ms,
            section_ms: s.section_ms,
            section_median_ms: s.section_median_ms,
            group_deficit_ms: [f64::NAN; MAX_WAIT_GROUPS],
        };
        Shared::new(RankScores {
            scores: self.scores.into_iter().map(score).collect(),
            scored: self.scored,
            run: self.run,
            up: self.up,
            down: self.down,
            latch: self.latch,
        })
    }
}

fn upgrade_ranks(ranks: BTreeMap<u32, RankScoresV8>) -> BTreeMap<u32, Shared<RankScores>> {
    ranks
        .into_iter()
        .map(|(rank, s)| (rank, s.upgrade()))
        .collect()
}

/// [`StragglerTracker`] up to format 6.
#[derive(Debug, Clone, Deserialize)]
pub struct StragglerTrackerV6 {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<RowV6>>,
    ranks: BTreeMap<u32, RankScoresV8>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
}

impl StragglerTrackerV6 {
    /// The current layout: every open row in group 0, no stage history.
    pub fn upgrade(self) -> StragglerTracker {
        let row = |r: RowV6| {
            RowV8 {
                rank: r.rank,
                group: 0,
                t: r.t,
                duration_ms: r.duration_ms,
                sections: r.sections,
            }
            .upgrade()
        };
        StragglerTracker {
            sections: self.sections,
            pending: self
                .pending
                .into_iter()
                .map(|(step, rows)| (step, rows.into_iter().map(row).collect()))
                .collect(),
            ranks: upgrade_ranks(self.ranks),
            scored_steps: self.scored_steps,
            dropped_steps: self.dropped_steps,
            noise: self.noise,
            sigma: self.sigma,
            ..StragglerTracker::default()
        }
    }
}

/// [`StragglerTracker`] in formats 7 and 8.
#[derive(Debug, Clone, Deserialize)]
pub struct StragglerTrackerV8 {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<RowV8>>,
    ranks: BTreeMap<u32, RankScoresV8>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
    stages: StageTracker,
}

impl StragglerTrackerV8 {
    /// The current layout: no collective waits yet.
    pub fn upgrade(self) -> StragglerTracker {
        StragglerTracker {
            sections: self.sections,
            pending: self
                .pending
                .into_iter()
                .map(|(step, rows)| (step, rows.into_iter().map(RowV8::upgrade).collect()))
                .collect(),
            ranks: upgrade_ranks(self.ranks),
            scored_steps: self.scored_steps,
            dropped_steps: self.dropped_steps,
            noise: self.noise,
            sigma: self.sigma,
            stages: self.stages,
            ..StragglerTracker::default()
        }
    }
}

/// [`StragglerTracker`] in formats 9 and 10: before collectives listed one
/// by one.
#[derive(Debug, Clone, Deserialize)]
pub struct StragglerTrackerV10 {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<Row>>,
    ranks: BTreeMap<u32, Shared<RankScores>>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
    stages: StageTracker,
    wait_groups: Vec<String>,
    links: Vec<LinkTracker>,
}

impl StragglerTrackerV10 {
    /// The current layout: no collective listed one by one yet.
    pub fn upgrade(self) -> StragglerTracker {
        StragglerTracker {
            sections: self.sections,
            pending: self.pending,
            ranks: self.ranks,
            scored_steps: self.scored_steps,
            dropped_steps: self.dropped_steps,
            noise: self.noise,
            sigma: self.sigma,
            stages: self.stages,
            wait_groups: self.wait_groups,
            links: self.links,
            ..StragglerTracker::default()
        }
    }
}
