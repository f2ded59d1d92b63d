//! Actions on training processes: the replicated book of what was issued
//! and how it ended, and the planner that decides when to release cache.
//!
//! An action goes `planned → delivered → done | failed`, or `expired` when
//! it is not carried out in time or its rank goes away. Every transition is
//! applied through the Raft log by the same deterministic code on every
//! replica ([`ActionBook`]); time comes from the data. The planner
//! ([`plan_releases`]) is pure too: the leader runs it over its applied state
//! and proposes what it returns ([`plan_dumps`] likewise asks the stalled
//! ranks of a hung job for evidence), and the book's own rules (one outstanding
//! action per rank, a minimum interval between planned ones) make a second
//! proposal by a new leader harmless.

mod book;
mod dumps;
mod entry;
mod planner;

pub use book::{
    ActionBook, ActionEntry, ActionOrigin, ActionRequest, ActionState, IssueOutcome, IssueRules,
    RankPlace, MAX_ACTIONS_KEPT,
};
pub use dumps::plan_dumps;
pub use planner::{plan_releases, PlannerConfig, PlannerConfigError};
