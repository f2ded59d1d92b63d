//! The one state transition: `apply(state, command) -> effects`.
//!
//! Everything the cluster knows changes here and only here. A coordinator
//! replica calls [`Replicated::apply`] for each committed entry of its Raft
//! log (the openraft adapter in the coordinator only adapts: log ids,
//! membership, snapshots); `gpumon replay` turns a trace into the commands a
//! live cluster would have committed ([`TraceCommands`]) and applies them
//! through the same function. So a replay decides what production would
//! have decided on the same data, validation and bounds included.
//!
//! The transition is pure: it reads no clock, no random source and no
//! environment, and every map it keeps is ordered, so replicas that apply
//! the same commands hold byte-identical state (the coordinator compares
//! their digests). Side effects (notifications, action delivery) happen on
//! the leader and come back in as commands.

mod apply;
mod command;
mod from_trace;
mod node_alerts;
mod state;

pub use apply::{AppliedBatch, Effects};
pub use command::{Command, CommandResult, CommandV1, MAX_PUSHES_PER_BATCH};
pub use from_trace::{settings_command, TraceCommands};
pub use state::{
    Replicated, ReplicatedV10, ReplicatedV11, ReplicatedV4, ReplicatedV5, ReplicatedV6,
    ReplicatedV7, ReplicatedV8, ReplicatedV9,
};

#[cfg(test)]
mod tests;
