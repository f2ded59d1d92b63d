//! The coordinator's runtime configuration, validated.

use std::path::PathBuf;

use gpumon_common::view::Limits;

/// Default API and Raft listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
/// Default largest push accepted, bytes (4 MiB: a 2 s window of 8 GPUs with
/// dozens of processes is a few KiB).
pub const DEFAULT_MAX_PUSH_BYTES: usize = 4 << 20;
/// Default log entries between snapshots.
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 2_000;
/// Most windows accepted in one push.
pub const MAX_WINDOWS_PER_PUSH: usize = 4_096;
/// Largest Raft RPC body accepted, bytes (snapshots travel in smaller chunks).
pub const MAX_RAFT_RPC_BYTES: usize = 64 << 20;

/// Everything a coordinator needs to run.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Raft node id (non-zero).
    pub id: u64,
    /// `host:port` to listen on for the API and Raft RPC; port 0 picks one.
    pub listen: String,
    /// `host:port` that peers and agents use to reach this node; defaults to
    /// the bound address.
    pub advertise: Option<String>,
    /// Directory of the Raft log (`raft-log.redb`) and snapshots.
    pub data_dir: PathBuf,
    /// Largest push accepted, bytes.
    pub max_push_bytes: usize,
    /// Log entries between snapshots.
    pub snapshot_every_entries: u64,
    /// Bounds on the cluster view.
    pub limits: Limits,
}

impl CoordinatorConfig {
    /// A config with every default, for `id` and `data_dir`.
    pub fn new(id: u64, data_dir: PathBuf) -> Self {
        Self {
            id,
            listen: DEFAULT_LISTEN.to_owned(),
            advertise: None,
            data_dir,
            max_push_bytes: DEFAULT_MAX_PUSH_BYTES,
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            limits: Limits::default(),
        }
    }

    /// Checks the values; the error says which one and why.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("--id must be a positive integer (Raft node ids start at 1)".into());
        }
        if self.max_push_bytes < 1024 {
            return Err(format!(
                "max_push_bytes {} is below the 1024-byte minimum",
                self.max_push_bytes
            ));
        }
        if self.snapshot_every_entries == 0 {
            return Err("snapshot_every_entries must be at least 1".into());
        }
        if self.limits.history_windows == 0 {
            return Err("history_windows must be at least 1".into());
        }
        Ok(())
    }
}
