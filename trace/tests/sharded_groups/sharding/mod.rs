//! Sharding jobs over several Raft groups: the routing half, as a design
//! and a simulation. No coordinator runs more than one group yet;
//! `docs/sharding.md` is the design, and this test (`main.rs` beside) runs
//! several [`Replicated`](gpumon_core::transition::Replicated) groups in one
//! process to show that a job's view and alerts do not change when its
//! agents' pushes are split this way.
//!
//! Why: one group applies every window on every replica, so its ingest is
//! what one leader and its log can carry (about 16,000 windows/s on the
//! project's 2-core test box, 32,000 GPUs at 2 s windows; BENCHMARKS.md).
//! Everything the engine decides is about one job (its ranks, its GPUs) or
//! one node (its host RAM, its idle GPUs), so jobs can live in different
//! groups without any decision needing two of them.
//!
//! What is here, all pure:
//!
//! - [`bucket_of`]: the stable name-to-group hash (FNV-1a 64, then jump
//!   consistent hash), the same on every platform and in every build;
//! - [`GroupMap`]: the routing table a small meta group would replicate:
//!   the number of groups and the jobs pinned to a group (being moved);
//!   a job's group is its pin or its hash's, a node's **home group** its
//!   name's hash;
//! - [`PushSplitter`]: one agent's push cut into one push per group, by
//!   the job of each window's ranks, with the node's own data (idle GPUs,
//!   host RAM) in its home group and every part keeping the agent's seq,
//!   so each group's de-duplication and seq bounds hold as they do now.

mod hash;
mod map;
mod split;

pub use map::{GroupId, GroupMap};
pub use split::PushSplitter;
