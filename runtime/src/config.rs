//! The TOML file layer of configuration.
//!
//! Configuration merges in three layers, later wins: this file, then
//! environment variables (`GPUMON_*`), then command-line flags. The binary
//! does the merge; the agent and coordinator crates validate the result into
//! their runtime configs. Every field is optional here; the defaults are the
//! documented consts of the crate that uses them. Unknown keys are an error,
//! so a typo never silently falls back to a default.
//!
//! ```toml
//! [agent]
//! coordinators = ["http://10.0.0.1:7070"]
//! source = "nvml"
//! sample_interval_ms = 500
//! window_ms = 2000
//!
//! [coordinator]
//! id = 1
//! listen = "0.0.0.0:7070"
//! data_dir = "/var/lib/gpumon"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use gpumon_core::actions::PlannerConfig;
use gpumon_core::cluster::Limits;
use gpumon_core::engine::memory_level::{LevelsError, MemoryLevelParams};
use gpumon_core::engine::EngineConfig;
use gpumon_core::notify::NotifyFile;
use thiserror::Error;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[agent]`.
    #[serde(default)]
    pub agent: AgentFile,
    /// `[coordinator]`.
    #[serde(default)]
    pub coordinator: CoordinatorFile,
    /// `[engine]`: the detection engine's tunables; every replica (and a
    /// replay meant to match them) must use the same values.
    #[serde(default)]
    pub engine: EngineConfig,
    /// `[limits]`: how much the cluster view and the engine track; every
    /// replica must use the same values.
    #[serde(default)]
    pub limits: LimitsFile,
    /// `[actions]`: the leader's release planner.
    #[serde(default)]
    pub actions: PlannerConfig,
    /// `[notify]`: webhook, Slack and Alertmanager receivers.
    #[serde(default)]
    pub notify: NotifyFile,
    /// `[remote_write]`: the leader's Prometheus remote-write of the
    /// per-GPU series.
    #[serde(default)]
    pub remote_write: RemoteWriteFile,
}

/// `[agent]`: see `gpumon agent --help` for each field's meaning and default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// Coordinator base URLs.
    pub coordinators: Option<Vec<String>>,
    /// `nvml`, `sim[:SCENARIO]` or `none`.
    pub source: Option<String>,
    /// Agent identity; defaults to the node name.
    pub agent_id: Option<String>,
    /// Node name; defaults to the host name.
    pub node_name: Option<String>,
    /// Hook endpoint: `unix:PATH` or a loopback `HOST:PORT`.
    pub hook_listen: Option<String>,
    /// Node-level Prometheus `/metrics`: `IP:PORT`, or `none`.
    pub metrics_listen: Option<String>,
    /// Sampling period, ms.
    pub sample_interval_ms: Option<u64>,
    /// Window length, ms.
    pub window_ms: Option<u64>,
    /// Unacknowledged batches kept; past it the oldest not yet sent is dropped.
    pub max_buffered_batches: Option<usize>,
    /// Largest batch pushed, bytes.
    pub max_batch_bytes: Option<usize>,
    /// Simulator: nodes in the simulated job.
    pub sim_nodes: Option<u32>,
    /// Simulator: which of those nodes this agent is.
    pub sim_node_index: Option<u32>,
    /// Simulator: GPUs per node.
    pub sim_gpus: Option<u32>,
    /// Simulator: random seed.
    pub sim_seed: Option<u64>,
    /// Simulator: job id of the simulated job.
    pub sim_job: Option<String>,
    /// `--agent-token-file`: this agent's token.
    pub agent_token_file: Option<PathBuf>,
    /// `--insecure`.
    pub insecure: Option<bool>,
    /// `--tls-ca-file`: CA certificates https coordinators are verified with.
    pub tls_ca_file: Option<PathBuf>,
    /// `--tls-cert-file`: client certificate for mutual TLS.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-key-file`: its private key.
    pub tls_key_file: Option<PathBuf>,
}

/// `[limits]`: see `gpumon coordinator --help` (`--max-agents` ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Agents tracked.
    pub max_agents: Option<usize>,
    /// GPUs tracked (the cluster view and the engine).
    pub max_gpus: Option<usize>,
    /// Ranks tracked at once, live and ended (and per job in the engine).
    pub max_ranks: Option<usize>,
    /// Jobs the engine tracks, live and ended.
    pub max_jobs: Option<usize>,
}

/// `[coordinator]`: see `gpumon coordinator --help`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorFile {
    /// Raft node id.
    pub id: Option<u64>,
    /// API and Raft listen address.
    pub listen: Option<String>,
    /// Address peers and agents should use to reach this node, when `listen` is a wildcard.
    pub advertise: Option<String>,
    /// Where the Raft log, vote and snapshots live.
    pub data_dir: Option<PathBuf>,
    /// Largest push accepted, bytes.
    pub max_push_bytes: Option<usize>,
    /// `--max-pushes-in-flight`.
    pub max_pushes_in_flight: Option<usize>,
    /// `--max-connections`.
    pub max_connections: Option<usize>,
    /// `--max-connections-per-source`.
    pub max_connections_per_source: Option<usize>,
    /// `--expire-after-s`.
    pub expire_after_s: Option<u64>,
    /// `--min-free-bytes`.
    pub min_free_bytes: Option<u64>,
    /// Windows kept per memory series.
    pub history_windows: Option<usize>,
    /// Log entries between snapshots.
    pub snapshot_every_entries: Option<u64>,
    /// `--peers`, as `"1=host:port,2=host:port"`.
    pub peers: Option<String>,
    /// `--join`.
    pub join: Option<bool>,
    /// `--snapshot-chunk-bytes`.
    pub snapshot_chunk_bytes: Option<u64>,
    /// `--admin-token` (prefer `admin_token_file`).
    pub admin_token: Option<String>,
    /// `--cluster-secret-file`.
    pub cluster_secret_file: Option<PathBuf>,
    /// `--agent-token-file`: the accepted agent tokens, one per line.
    pub agent_token_file: Option<PathBuf>,
    /// `--admin-token-file`.
    pub admin_token_file: Option<PathBuf>,
    /// Reads without a token (`--closed-reads` sets it false).
    pub open_reads: Option<bool>,
    /// `--insecure`.
    pub insecure: Option<bool>,
    /// `--tls-cert-file`: serve TLS with this certificate chain.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-key-file`: its private key.
    pub tls_key_file: Option<PathBuf>,
    /// `--tls-client-ca-file`: require client certificates from this CA.
    pub tls_client_ca_file: Option<PathBuf>,
    /// `--tls-ca-file`: CA certificates peers are verified with.
    pub tls_ca_file: Option<PathBuf>,
    /// `--metrics-rank-series`: `auto`, `all` or `alerting`.
    pub metrics_rank_series: Option<String>,
}

/// `[remote_write]`: see `gpumon coordinator --help` (`--remote-write-*`)
/// and docs/operations.md. Off while `url` is unset.
///
/// ```toml
/// [remote_write]
/// url = "https://prometheus.internal/api/v1/write"
/// bearer_token_file = "/etc/gpumon/remote-write-token"
/// interval_s = 15
/// labels = { cluster = "a" }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteFile {
    /// The receiver's write endpoint.
    pub url: Option<String>,
    /// Owner-only file holding the bearer token sent to the receiver.
    pub bearer_token_file: Option<PathBuf>,
    /// CA certificates (PEM) an https receiver is verified with.
    pub ca_file: Option<PathBuf>,
    /// Seconds between sends.
    pub interval_s: Option<f64>,
    /// Seconds allowed for one request.
    pub timeout_s: Option<f64>,
    /// Most samples in one request.
    pub max_samples_per_request: Option<usize>,
    /// Most samples waiting to be sent; past it the oldest are dropped.
    pub max_queued_samples: Option<usize>,
    /// Labels added to every series (e.g. `cluster = "a"`).
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

/// The `[limits]` table and `--max-*` flags (`flags` over `file`), into the
/// cluster view's bounds and the engine's: one number each, so the engine's
/// own `max_gpus`, `max_jobs` and `max_ranks_per_job` keys may only repeat
/// them. The coordinator and `gpumon replay` both resolve them here.
pub fn resolve_limits(
    flags: &LimitsFile,
    file: &LimitsFile,
    limits: &mut Limits,
    engine: &mut EngineConfig,
) -> Result<(), LimitError> {
    let defaults = EngineConfig::default();
    let pick = |flag: Option<usize>, key: Option<usize>, name: &'static str, fallback: usize| {
        let v = flag.or(key).unwrap_or(fallback);
        if v == 0 {
            return Err(LimitError::Zero { flag: name });
        }
        Ok(v)
    };
    limits.max_agents = pick(
        flags.max_agents,
        file.max_agents,
        "max-agents",
        limits.max_agents,
    )?;
    limits.max_gpus = pick(flags.max_gpus, file.max_gpus, "max-gpus", limits.max_gpus)?;
    limits.max_ranks = pick(
        flags.max_ranks,
        file.max_ranks,
        "max-ranks",
        limits.max_ranks,
    )?;
    let max_jobs = pick(flags.max_jobs, file.max_jobs, "max-jobs", engine.max_jobs)?;
    for (engine_key, set, default, limit, flag) in [
        (
            "max_gpus",
            engine.max_gpus,
            defaults.max_gpus,
            limits.max_gpus,
            "max_gpus",
        ),
        (
            "max_ranks_per_job",
            engine.max_ranks_per_job,
            defaults.max_ranks_per_job,
            limits.max_ranks,
            "max_ranks",
        ),
        (
            "max_jobs",
            engine.max_jobs,
            defaults.max_jobs,
            max_jobs,
            "max_jobs",
        ),
    ] {
        if set != default && set != limit {
            return Err(LimitError::Disagrees {
                engine_key,
                set,
                limit,
                flag,
            });
        }
    }
    engine.max_gpus = limits.max_gpus;
    engine.max_ranks_per_job = limits.max_ranks;
    engine.max_jobs = max_jobs;
    Ok(())
}

/// Why the `[limits]` and the engine's bounds do not resolve.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LimitError {
    /// A limit of 0.
    #[error("--{flag} must be at least 1")]
    Zero {
        /// The flag, e.g. `max-gpus`.
        flag: &'static str,
    },
    /// An engine key set to another number than its limit.
    #[error(
        "[engine] {engine_key} = {set} disagrees with the limit {limit}; set it once, as [limits] {flag}"
    )]
    Disagrees {
        /// The engine's key.
        engine_key: &'static str,
        /// Its value.
        set: usize,
        /// The limit.
        limit: usize,
        /// The `[limits]` key.
        flag: &'static str,
    },
}

/// Why a config file's text is not gpumon's TOML.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParseError {
    /// Not TOML of this schema; toml's explanation, with line and column.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// The GPU memory levels do not hold together.
    #[error("[engine.memory_levels]: {0}")]
    MemoryLevels(LevelsError),
    /// The host memory levels do not hold together.
    #[error("[engine.host_memory_levels]: {0}")]
    HostMemoryLevels(LevelsError),
}

/// Why the file could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid gpumon TOML.
    #[error("invalid config file {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with its text.
        reason: ParseError,
    },
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|reason| ConfigError::Parse {
            path: path.to_owned(),
            reason,
        })
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut file: Self = toml::from_str(text)?;
        host_level_defaults(text, &mut file.engine.host_memory_levels);
        file.engine
            .memory_levels
            .check()
            .map_err(ParseError::MemoryLevels)?;
        file.engine
            .host_memory_levels
            .check()
            .map_err(ParseError::HostMemoryLevels)?;
        Ok(file)
    }
}

/// The keys a `[engine.host_memory_levels]` table leaves out take the
/// host's defaults, not a GPU's (which serde's per-type default would give).
fn host_level_defaults(text: &str, levels: &mut MemoryLevelParams) {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return;
    };
    let given = table
        .get("engine")
        .and_then(|e| e.get("host_memory_levels"))
        .and_then(|t| t.as_table());
    let Some(given) = given else {
        return;
    };
    let d = MemoryLevelParams::host_default();
    for (key, field, default) in [
        ("warning_pct", &mut levels.warning_pct, d.warning_pct),
        ("critical_pct", &mut levels.critical_pct, d.critical_pct),
        (
            "clear_margin_pct",
            &mut levels.clear_margin_pct,
            d.clear_margin_pct,
        ),
    ] {
        if !given.contains_key(key) {
            *field = default;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_levels_are_read_and_impossible_ones_refused() {
        let c = FileConfig::parse("[engine.memory_levels]\nwarning_pct = 70.0\n").unwrap();
        assert_eq!(c.engine.memory_levels.warning_pct, 70.0);
        assert_eq!(c.engine.memory_levels.critical_pct, 95.0);
        let err = FileConfig::parse("[engine.memory_levels]\nwarning_pct = 97.0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[engine.memory_levels]") && err.contains("97"),
            "{err}"
        );
    }

    #[test]
    fn host_memory_levels_are_read_and_impossible_ones_refused() {
        let c = FileConfig::parse("").unwrap();
        let host = &c.engine.host_memory_levels;
        assert_eq!((host.warning_pct, host.critical_pct), (75.0, 90.0));
        let c = FileConfig::parse(
            "[engine.host_memory_levels]\nwarning_pct = 1.0\nclear_margin_pct = 0.5\n",
        )
        .unwrap();
        assert_eq!(c.engine.host_memory_levels.warning_pct, 1.0);
        assert_eq!(c.engine.host_memory_levels.critical_pct, 90.0);
        assert_eq!(
            c.engine.memory_levels.warning_pct, 80.0,
            "the GPU's levels are apart"
        );
        let err = FileConfig::parse("[engine.host_memory_levels]\ncritical_pct = 120.0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[engine.host_memory_levels]") && err.contains("120"),
            "{err}"
        );
        let err = FileConfig::parse("[engine.host_memory_levels]\nwarn = 1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("warn"), "unknown keys are refused: {err}");
    }

    #[test]
    fn parses_the_documented_example() {
        let c = FileConfig::parse(
            "[agent]\ncoordinators = [\"http://a:1\"]\nsample_interval_ms = 250\n[coordinator]\nid = 2\n",
        )
        .unwrap();
        assert_eq!(c.agent.coordinators, Some(vec!["http://a:1".to_owned()]));
        assert_eq!(c.agent.sample_interval_ms, Some(250));
        assert_eq!(c.coordinator.id, Some(2));
        assert_eq!(c.agent.window_ms, None);
    }

    #[test]
    fn the_shipped_example_config_is_valid() {
        let c = FileConfig::parse(include_str!("../../deploy/gpumon.example.toml")).unwrap();
        assert_eq!(c.agent.source.as_deref(), Some("nvml"));
        assert_eq!(
            c.coordinator.data_dir,
            Some(PathBuf::from("/var/lib/gpumon"))
        );
    }

    #[test]
    fn engine_and_actions_tables_override_only_what_they_name() {
        let c = FileConfig::parse(
            "[engine]\nwindow_s = 1.0\n[engine.forecast]\nmin_points = 4\n[actions]\nhorizon_s = 60.0\n",
        )
        .unwrap();
        assert_eq!(c.engine.window_s, 1.0);
        assert_eq!(c.engine.forecast.min_points, 4);
        let defaults = EngineConfig::default();
        assert_eq!(c.engine.warmup_s, defaults.warmup_s);
        assert_eq!(c.engine.forecast.horizon_s, defaults.forecast.horizon_s);
        assert_eq!(c.actions.horizon_s, 60.0);
        assert_eq!(c.actions.ttl_s, PlannerConfig::default().ttl_s);
        let err = FileConfig::parse("[engine.forecast]\nmin_pts = 4\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("min_pts"), "{err}");
    }

    #[test]
    fn the_remote_write_table_takes_its_keys_and_labels() {
        let c = FileConfig::parse(
            "[remote_write]\nurl = \"http://p:9090/api/v1/write\"\ninterval_s = 5\nlabels = { cluster = \"a\" }\n",
        )
        .unwrap();
        let rw = c.remote_write;
        assert_eq!(rw.url.as_deref(), Some("http://p:9090/api/v1/write"));
        assert_eq!(rw.interval_s, Some(5.0));
        assert_eq!(rw.labels.unwrap()["cluster"], "a");
        assert_eq!(rw.max_samples_per_request, None);
        assert!(FileConfig::default().remote_write.url.is_none());
        let err = FileConfig::parse("[remote_write]\nurls = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("urls"), "{err}");
    }

    #[test]
    fn refuses_unknown_keys_naming_them() {
        let err = FileConfig::parse("[agent]\nsample_interval = 250\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sample_interval"), "{err}");
    }

    #[test]
    fn names_the_file_it_cannot_read() {
        let err = FileConfig::load(Path::new("/nonexistent/gpumon.toml")).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/gpumon.toml"),
            "{err}"
        );
    }
}
