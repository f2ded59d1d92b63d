//! The coordinator's runtime configuration, validated.

use std::path::PathBuf;

use gpumon_core::actions::PlannerConfig;
use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_net::ServerTls;

pub use crate::api::RankSeries;

pub use crate::config_error::ConfigError;
use crate::credentials::Credentials;
use crate::notify::NotifyConfig;
use crate::peers::{check_addr, Peers};
use crate::raft::network::{MAX_ENTRY_BYTES, MAX_RAFT_RPC_BYTES};
use crate::remote_write::RemoteWriteConfig;

/// Default time after which quiet agents, GPUs and ended jobs are forgotten.
pub const DEFAULT_EXPIRE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Default API and Raft listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
/// Default largest push accepted, bytes (4 MiB: a 2 s window of 8 GPUs with
/// dozens of processes is a few KiB).
pub const DEFAULT_MAX_PUSH_BYTES: usize = 4 << 20;
/// Default log entries between snapshots.
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 10_000;
/// Default size of one snapshot chunk sent to a lagging peer, bytes.
pub const DEFAULT_SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// How a replica with an empty log joins a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formation {
    /// Form a single-replica cluster of this node (the default without `--peers`).
    Single,
    /// Form a cluster of these voters; every listed replica does the same, and
    /// a replica that already has a log ignores it.
    Peers(Peers),
    /// Wait, uninitialized, to be added by `gpumon cluster add`.
    Join,
}

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
    /// Pushes between decoding and commit at once; more are answered 429
    /// with `Retry-After`.
    pub max_pushes_in_flight: usize,
    /// Connections the listener holds at once, in all and per source.
    pub connections: gpumon_net::ConnectionLimits,
    /// Log entries between snapshots.
    pub snapshot_every_entries: u64,
    /// Bounds on the cluster view.
    pub limits: Limits,
    /// Agents, GPUs and ended jobs quiet for this long (data time) are
    /// forgotten; zero: never.
    pub expire_after: std::time::Duration,
    /// Free space kept on the data directory's file system: writes are
    /// refused with 507 below it; zero: never refused.
    pub min_free_bytes: u64,
    /// How a fresh replica forms or joins its cluster.
    pub formation: Formation,
    /// Bytes per snapshot chunk sent to a peer.
    pub snapshot_chunk_bytes: u64,
    /// Who may call what; see [`Credentials`].
    pub credentials: Credentials,
    /// The detection engine's tunables; the same on every replica.
    pub engine: EngineConfig,
    /// The release planner the leader runs.
    pub planner: PlannerConfig,
    /// Where the leader sends notifications about alerts.
    pub notify: NotifyConfig,
    /// TLS on the listener; peers are then reached over https. None: plain HTTP.
    pub tls: Option<ServerTls>,
    /// CA certificates trusted when reaching peers over https [default:
    /// the client CA of `tls`, else the public roots].
    pub peer_ca_file: Option<PathBuf>,
    /// Which live ranks get per-rank series on `/metrics`.
    pub metrics_rank_series: RankSeries,
    /// Where the leader writes the per-GPU series; None: nowhere.
    pub remote_write: Option<RemoteWriteConfig>,
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
            max_pushes_in_flight: crate::service::DEFAULT_MAX_PUSHES_IN_FLIGHT,
            connections: gpumon_net::ConnectionLimits::default(),
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            limits: Limits::default(),
            expire_after: DEFAULT_EXPIRE_AFTER,
            min_free_bytes: crate::service::DEFAULT_MIN_FREE_BYTES,
            formation: Formation::Single,
            snapshot_chunk_bytes: DEFAULT_SNAPSHOT_CHUNK_BYTES,
            credentials: Credentials::default(),
            engine: EngineConfig::default(),
            planner: PlannerConfig::default(),
            notify: NotifyConfig::default(),
            tls: None,
            peer_ca_file: None,
            metrics_rank_series: RankSeries::default(),
            remote_write: None,
        }
    }

    /// The address peers and agents reach this replica at, before binding:
    /// `--advertise`, else this replica's `--peers` entry, else `--listen`.
    pub fn advertised(&self) -> Option<&str> {
        if let Some(a) = &self.advertise {
            return Some(a);
        }
        match &self.formation {
            Formation::Peers(peers) => peers.get(&self.id).map(String::as_str),
            _ => None,
        }
    }

    /// The engine forgets a silent job no later than the view forgets its
    /// node: otherwise the engine would keep analysing jobs on nodes the
    /// cluster view no longer lists.
    fn check_forgetting(&self) -> Result<(), ConfigError> {
        let silent_s = self.engine.silent_s;
        if !(silent_s.is_finite() && silent_s >= 0.0) {
            return Err(ConfigError::SilentS { silent_s });
        }
        let expire_s = self.expire_after.as_secs_f64();
        if expire_s > 0.0 && (silent_s == 0.0 || silent_s > expire_s) {
            return Err(ConfigError::SilentOutlastsExpiry { silent_s, expire_s });
        }
        Ok(())
    }

    /// Checks the values; the error says which one and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        let bytes = self.max_push_bytes;
        if bytes < 1024 {
            return Err(ConfigError::PushBytesLow { bytes });
        }
        if bytes > MAX_ENTRY_BYTES {
            return Err(ConfigError::PushBytesHigh { bytes });
        }
        self.planner.validate()?;
        self.notify.validate()?;
        if let Some(rw) = &self.remote_write {
            rw.validate()?;
        }
        let e = &self.engine;
        if !(e.window_s.is_finite()
            && e.window_s > 0.0
            && e.warmup_s.is_finite()
            && e.warmup_s >= 0.0)
        {
            return Err(ConfigError::Window {
                window_s: e.window_s,
                warmup_s: e.warmup_s,
            });
        }
        self.check_forgetting()?;
        if self.max_pushes_in_flight == 0 {
            return Err(ConfigError::PushesInFlight);
        }
        self.connections.check()?;
        if self.snapshot_every_entries == 0 {
            return Err(ConfigError::SnapshotEvery);
        }
        if self.limits.history_windows == 0 {
            return Err(ConfigError::HistoryWindows);
        }
        if self.snapshot_chunk_bytes < 1024 {
            return Err(ConfigError::ChunkLow);
        }
        if self.snapshot_chunk_bytes > (MAX_RAFT_RPC_BYTES / 2) as u64 {
            return Err(ConfigError::ChunkHigh {
                bytes: self.snapshot_chunk_bytes,
            });
        }
        if self.peer_ca_file.is_some() && self.tls.is_none() {
            return Err(ConfigError::PeerCaWithoutTls);
        }
        if let Some(a) = &self.advertise {
            check_addr(a).map_err(ConfigError::Advertise)?;
        }
        self.credentials.validate(&self.listen)?;
        if let Formation::Peers(peers) = &self.formation {
            let Some(own) = peers.get(&self.id) else {
                return Err(ConfigError::NotInPeers {
                    id: self.id,
                    ids: peers.keys().copied().collect(),
                });
            };
            let port = |a: &str| a.rsplit_once(':').map(|(_, p)| p.to_owned());
            let listen_port = port(&self.listen);
            if listen_port.as_deref() != Some("0") && listen_port != port(own) {
                return Err(ConfigError::ListenPort {
                    listen: self.listen.clone(),
                    id: self.id,
                    own: own.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_cannot_reach_the_followers_are_refused_naming_both() {
        let mut c = CoordinatorConfig::new(1, std::env::temp_dir());
        assert_eq!(c.validate(), Ok(()));
        c.max_push_bytes = MAX_ENTRY_BYTES + 1;
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("max_push_bytes 16777217")
                && err.contains("Raft RPC body (67108864 bytes)"),
            "{err}"
        );
        c.max_push_bytes = MAX_ENTRY_BYTES;
        assert_eq!(c.validate(), Ok(()));
        c.snapshot_chunk_bytes = MAX_RAFT_RPC_BYTES as u64;
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("snapshot_chunk_bytes 67108864") && err.contains("67108864 bytes at most"),
            "{err}"
        );
    }

    #[test]
    fn the_engine_may_not_keep_a_job_longer_than_the_view_keeps_its_node() {
        let mut c = CoordinatorConfig::new(1, std::env::temp_dir());
        assert!(c.engine.silent_s <= c.expire_after.as_secs_f64());
        c.expire_after = std::time::Duration::from_secs(120);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("silent_s (300 s)") && err.contains("expire_after_s (120 s)"),
            "{err}"
        );
        c.engine.silent_s = 120.0;
        assert_eq!(c.validate(), Ok(()));
        c.engine.silent_s = 0.0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("silent_s (0 s, never)"));
        // Expiry off: the view never forgets, so the engine may do either.
        c.expire_after = std::time::Duration::ZERO;
        assert_eq!(c.validate(), Ok(()));
        c.engine.silent_s = f64::NAN;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("[engine] silent_s (NaN)"));
    }
}
