//! The straggler tracker as snapshot formats 2 to 6 laid it out: rows
//! without their peer group and no stage tracker. Upgraded, every row is in
//! group 0 (the whole job, as it was then) and the stage tracker starts
//! empty. Postcard is field-order sensitive: the order here is the old one.

use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;

use super::{RankScores, Row, StragglerTracker, MAX_SECTIONS};
use crate::shared::Shared;

/// A row before its peer group.
#[derive(Debug, Clone, Deserialize)]
struct RowV6 {
    rank: u32,
    t: f64,
    duration_ms: f64,
    sections: [f64; MAX_SECTIONS],
}

/// [`StragglerTracker`] up to format 6.
#[derive(Debug, Clone, Deserialize)]
pub struct StragglerTrackerV6 {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<RowV6>>,
    ranks: BTreeMap<u32, RankScores>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
}

impl StragglerTrackerV6 {
    /// The current layout: every open row in group 0, no stage history.
    pub fn upgrade(self) -> StragglerTracker {
        let row = |r: RowV6| Row {
            rank: r.rank,
            group: 0,
            t: r.t,
            duration_ms: r.duration_ms,
            sections: r.sections,
        };
        StragglerTracker {
            sections: self.sections,
            pending: self
                .pending
                .into_iter()
                .map(|(step, rows)| (step, rows.into_iter().map(row).collect()))
                .collect(),
            ranks: self
                .ranks
                .into_iter()
                .map(|(rank, scores)| (rank, Shared::new(scores)))
                .collect(),
            scored_steps: self.scored_steps,
            dropped_steps: self.dropped_steps,
            noise: self.noise,
            sigma: self.sigma,
            ..StragglerTracker::default()
        }
    }
}
