//! The Raft node: type config, log entries, storage and network.
//!
//! Every agent message the coordinator accepts becomes a [`Command`] in the
//! Raft log. The [`state_machine`] adapts openraft's storage traits to
//! `gpumon_core::transition`: each committed command goes through
//! [`Replicated::apply`](gpumon_core::transition::Replicated::apply), the
//! one transition replay runs too, so every replica holds the same state.
//! [`snapshot_file`] reads and writes the versioned snapshot file.

// openraft's storage traits fix `StorageError` (over 200 bytes) as the error
// type; our helpers return it too so `?` works without conversions.
#![allow(clippy::result_large_err)]

pub mod applied;
pub mod copy_times;
pub mod digest;
pub mod election;
pub mod log_store;
mod log_writer;
pub mod network;
mod reachability;
pub mod snapshot_file;
pub mod snapshot_schedule;
pub mod standing;
pub mod state_machine;
pub mod timing;

use std::io::Cursor;

pub use gpumon_core::transition::{Command, CommandResult, CommandV1};

openraft::declare_raft_types!(
    /// gpumon's Raft types: commands in, results out, u64 node ids,
    /// nodes addressed by their API `host:port`.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// The Raft handle of a gpumon coordinator.
pub type Raft = openraft::Raft<TypeConfig>;

#[cfg(test)]
mod tests;
