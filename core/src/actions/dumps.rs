//! Evidence of a hang: the leader asks every stalled rank of a hung job to
//! save its flight recorder and its threads' stacks (`dump_evidence`),
//! once per episode, and only ranks whose hooks reported the stall (their
//! hooks run it from their own thread; their agents know the kind).

use std::collections::BTreeSet;

use gpumon_proto::ActionKind;

use super::book::{ActionBook, ActionOrigin, ActionRequest, IssueRules};
use crate::engine::hang::verdict::FRESH_S;
use crate::engine::hang::HangWatch;

/// The dumps to issue now, at data time `t`.
pub fn plan_dumps(
    hangs: &HangWatch,
    book: &ActionBook,
    t: f64,
    rules: &IssueRules,
) -> Vec<ActionRequest> {
    let mut out = Vec::new();
    for (job, episode) in hangs.episodes() {
        // One pass over the book per episode, not one per rank.
        let dumped: BTreeSet<u32> = book
            .entries()
            .filter(|e| {
                e.kind == ActionKind::DumpEvidence && e.job == job && e.planned_t >= episode.since_t
            })
            .map(|e| e.rank)
            .collect();
        for rank in hangs.reporting_since(job, episode.since_t - FRESH_S) {
            if dumped.contains(&rank)
                || !book.may_plan(ActionKind::DumpEvidence, job, rank, t, rules)
            {
                continue;
            }
            out.push(ActionRequest {
                kind: ActionKind::DumpEvidence,
                job: job.to_owned(),
                rank,
                reason: format!(
                    "{job} is hung (rank {} is the one its peers wait for): save the flight recorder and every thread's stack",
                    episode.rank
                ),
                origin: ActionOrigin::Planner,
            });
        }
    }
    out
}
