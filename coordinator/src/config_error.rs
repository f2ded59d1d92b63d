//! Why a coordinator's configuration is refused at start-up: the setting
//! and its value, or the part (planner, notifier, remote write, connection
//! limits, credentials) whose own error says it. The text is the usage
//! error `gpumon coordinator` prints.

use gpumon_core::actions::PlannerConfigError;
use gpumon_net::LimitsError;
use thiserror::Error;

use crate::credentials::CredentialsError;
use crate::notify::NotifyConfigError;
use crate::peers::AddrError;
use crate::raft::network::{MAX_ENTRY_BYTES, MAX_RAFT_RPC_BYTES};
use crate::remote_write::RemoteWriteConfigError;

/// A refused coordinator configuration.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// `--id 0`.
    #[error("--id must be a positive integer (Raft node ids start at 1)")]
    ZeroId,
    /// `max_push_bytes` below 1 KiB.
    #[error("max_push_bytes {bytes} is below the 1024-byte minimum")]
    PushBytesLow {
        /// The value given.
        bytes: usize,
    },
    /// `max_push_bytes` above the largest log entry.
    #[error(
        "max_push_bytes {bytes} is above {MAX_ENTRY_BYTES} bytes, the largest log entry: a push is one entry, and an entry must fit a Raft RPC body ({MAX_RAFT_RPC_BYTES} bytes) to reach the followers"
    )]
    PushBytesHigh {
        /// The value given.
        bytes: usize,
    },
    /// The `[actions]` table.
    #[error(transparent)]
    Planner(#[from] PlannerConfigError),
    /// The notifier's settings.
    #[error(transparent)]
    Notify(#[from] NotifyConfigError),
    /// The remote-write settings.
    #[error(transparent)]
    RemoteWrite(#[from] RemoteWriteConfigError),
    /// The engine's window or warm-up.
    #[error(
        "[engine] window_s ({window_s}) must be positive and warmup_s ({warmup_s}) zero or more"
    )]
    Window {
        /// `window_s`.
        window_s: f64,
        /// `warmup_s`.
        warmup_s: f64,
    },
    /// `silent_s` negative or not a number.
    #[error(
        "[engine] silent_s ({silent_s}) must be zero (never forget) or a positive number of seconds"
    )]
    SilentS {
        /// `silent_s`.
        silent_s: f64,
    },
    /// The engine would keep a job longer than the view keeps its node.
    #[error(
        "[engine] silent_s ({silent_s} s{}) outlasts expire_after_s ({expire_s} s): the engine would keep analysing jobs on nodes the cluster view has forgotten; set silent_s at most expire_after_s",
        never(.silent_s)
    )]
    SilentOutlastsExpiry {
        /// `silent_s` (0: never).
        silent_s: f64,
        /// `expire_after_s`.
        expire_s: f64,
    },
    /// `max_pushes_in_flight = 0`.
    #[error("max_pushes_in_flight must be at least 1")]
    PushesInFlight,
    /// The connection limits.
    #[error(transparent)]
    Connections(#[from] LimitsError),
    /// `snapshot_every_entries = 0`.
    #[error("snapshot_every_entries must be at least 1")]
    SnapshotEvery,
    /// `history_windows = 0`.
    #[error("history_windows must be at least 1")]
    HistoryWindows,
    /// `snapshot_chunk_bytes` below 1 KiB.
    #[error("snapshot_chunk_bytes must be at least 1024")]
    ChunkLow,
    /// A snapshot chunk that would not fit a Raft RPC.
    #[error(
        "snapshot_chunk_bytes {bytes} is above {} bytes: a chunk travels in one Raft RPC, whose body may be {MAX_RAFT_RPC_BYTES} bytes at most",
        MAX_RAFT_RPC_BYTES / 2
    )]
    ChunkHigh {
        /// The value given.
        bytes: u64,
    },
    /// A peer CA without TLS of its own.
    #[error(
        "a peer CA file (--tls-ca-file) needs TLS on this replica (--tls-cert-file, --tls-key-file): a cluster speaks one scheme"
    )]
    PeerCaWithoutTls,
    /// `--advertise` is not `host:port`.
    #[error("--advertise: {0}")]
    Advertise(AddrError),
    /// The credentials for the listen address.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// The replica's id is not among `--peers`.
    #[error(
        "--id {id} is not in --peers (ids {}); a replica that joins an existing cluster starts with --join instead",
        list(.ids)
    )]
    NotInPeers {
        /// The replica's id.
        id: u64,
        /// The ids listed.
        ids: Vec<u64>,
    },
    /// `--listen` and the replica's own `--peers` entry name other ports.
    #[error(
        "--listen {listen} and this replica's --peers entry {id}={own} name different ports; peers could never reach it"
    )]
    ListenPort {
        /// `--listen`.
        listen: String,
        /// The replica's id.
        id: u64,
        /// Its `--peers` address.
        own: String,
    },
}

/// `", never"` after a `silent_s` of 0.
fn never(silent_s: &f64) -> &'static str {
    if *silent_s == 0.0 {
        ", never"
    } else {
        ""
    }
}

/// Ids as `1, 2, 3`.
fn list(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    ids.join(", ")
}
