//! The agent's runtime configuration, validated.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use gpumon_runtime::loopback::is_loopback_url;
use gpumon_runtime::secrets::Secret;

pub use crate::config_error::{ConfigError, MetricsListenError, SourceError};
use crate::hook_endpoint::HookAddr;
use crate::source::sim::Scenario;

/// Default sampling period, ms.
pub const DEFAULT_SAMPLE_INTERVAL_MS: u64 = 500;
/// Default window length, ms.
pub const DEFAULT_WINDOW_MS: u64 = 2_000;
/// Default unacknowledged batches kept (at 2 s windows: 34 minutes of outage).
pub const DEFAULT_MAX_BUFFERED_BATCHES: usize = 1_024;
/// Default largest batch pushed, bytes; larger windows sets are split.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1 << 20;
/// Default coordinator URL.
pub const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7070";
/// Default address of the agent's `/metrics`: loopback, so nothing is
/// exposed off the node unless asked for.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9401);

/// `--metrics-listen`: `IP:PORT`, or `none` for no endpoint.
pub fn parse_metrics_listen(s: &str) -> Result<Option<SocketAddr>, MetricsListenError> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| MetricsListenError {
        given: s.to_owned(),
        example: DEFAULT_METRICS_LISTEN,
    })
}

/// What the agent samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceSpec {
    /// Every GPU through NVML.
    Nvml,
    /// The simulator with a scenario.
    Sim(Scenario),
    /// Nothing: relay hook data only.
    None,
}

impl FromStr for SourceSpec {
    type Err = SourceError;

    /// `nvml`, `none`, `sim` (steady) or `sim:SCENARIO`.
    fn from_str(s: &str) -> Result<Self, SourceError> {
        match s.split_once(':') {
            None if s == "nvml" => Ok(Self::Nvml),
            None if s == "none" => Ok(Self::None),
            None if s == "sim" => Ok(Self::Sim(Scenario::Steady)),
            Some(("sim", scenario)) => scenario
                .parse()
                .map(Self::Sim)
                .map_err(SourceError::Scenario),
            _ => Err(SourceError::Unknown {
                given: s.to_owned(),
            }),
        }
    }
}

/// The simulator's placement of this agent in a simulated job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPlacement {
    /// Nodes in the simulated job.
    pub nodes: u32,
    /// Which node this agent plays, from 0.
    pub node_index: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Seed of every random draw.
    pub seed: u64,
    /// Job id of the simulated job.
    pub job: String,
    /// Whether the simulated ranks also report what the in-process hook
    /// would: steps with section times, allocator statistics, markers.
    pub hook: bool,
}

impl Default for SimPlacement {
    fn default() -> Self {
        Self {
            nodes: 1,
            node_index: 0,
            gpus_per_node: 4,
            seed: 1,
            job: "sim-job".into(),
            hook: false,
        }
    }
}

/// Everything an agent needs to run.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Coordinator base URLs; any replica will do, the agent follows leader hints.
    pub coordinators: Vec<String>,
    /// What to sample.
    pub source: SourceSpec,
    /// Agent identity; stable across restarts.
    pub agent_id: String,
    /// Node name shown in the cluster view.
    pub node_name: String,
    /// Sampling period.
    pub sample_interval: Duration,
    /// Window length: one batch per window.
    pub window: Duration,
    /// Unacknowledged batches kept; past it the oldest not yet sent is dropped.
    pub max_buffered_batches: usize,
    /// Largest batch pushed, bytes.
    pub max_batch_bytes: usize,
    /// Simulator placement (used with `SourceSpec::Sim`).
    pub sim: SimPlacement,
    /// Where the hook endpoint listens (`unix:PATH` or a loopback
    /// `HOST:PORT`); `None` (the default): no hook endpoint.
    pub hook_listen: Option<HookAddr>,
    /// Where the node-level `/metrics` listens; `None`: not served.
    /// Default [`DEFAULT_METRICS_LISTEN`].
    pub metrics_listen: Option<SocketAddr>,
    /// This agent's token, sent with every push (`--agent-token-file`).
    pub token: Option<Secret>,
    /// Push without a token to coordinators on other hosts.
    pub insecure: bool,
    /// How https coordinators are verified, and the client certificate
    /// shown to those that require one.
    pub tls: gpumon_net::ClientTls,
    /// Where host RAM is read at each sample tick (`/proc/meminfo`); `None`:
    /// pushes carry no host memory. A simulator never sends this host's.
    pub host_meminfo: Option<std::path::PathBuf>,
}

impl AgentConfig {
    /// Defaults for a node name.
    pub fn new(node_name: &str) -> Self {
        Self {
            coordinators: vec![DEFAULT_COORDINATOR.to_owned()],
            source: SourceSpec::Nvml,
            agent_id: node_name.to_owned(),
            node_name: node_name.to_owned(),
            sample_interval: Duration::from_millis(DEFAULT_SAMPLE_INTERVAL_MS),
            window: Duration::from_millis(DEFAULT_WINDOW_MS),
            max_buffered_batches: DEFAULT_MAX_BUFFERED_BATCHES,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            sim: SimPlacement::default(),
            hook_listen: None,
            metrics_listen: Some(DEFAULT_METRICS_LISTEN),
            token: None,
            insecure: false,
            tls: gpumon_net::ClientTls::default(),
            host_meminfo: Some(crate::host::MEMINFO.into()),
        }
    }

    /// Checks the values; the error says which one and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.coordinators.is_empty() {
            return Err(ConfigError::NoCoordinators);
        }
        for url in &self.coordinators {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::Scheme { url: url.clone() });
            }
            if self.token.is_none() && !self.insecure && !is_loopback_url(url) {
                return Err(ConfigError::NoToken { url: url.clone() });
            }
        }
        let sample_ms = self.sample_interval.as_millis();
        if !(10..=60_000).contains(&sample_ms) {
            return Err(ConfigError::SampleInterval { sample_ms });
        }
        if self.window < self.sample_interval || self.window > Duration::from_secs(600) {
            return Err(ConfigError::Window {
                window_ms: self.window.as_millis(),
                sample_ms,
            });
        }
        if self.max_buffered_batches == 0 {
            return Err(ConfigError::BufferedBatches);
        }
        if self.max_batch_bytes < 4096 {
            return Err(ConfigError::BatchBytes {
                bytes: self.max_batch_bytes,
            });
        }
        if self.agent_id.is_empty() || self.node_name.is_empty() {
            return Err(ConfigError::EmptyNames);
        }
        if let Some(addr) = &self.hook_listen {
            // Any HookAddr is loopback or a short enough socket path by
            // construction; checked again so a future constructor cannot
            // slip past.
            let valid = match (addr.unix_path(), addr.tcp_addr()) {
                (Some(path), _) => HookAddr::unix(path).is_ok(),
                (None, Some(sock)) => sock.ip().is_loopback(),
                (None, None) => false,
            };
            if !valid {
                return Err(ConfigError::HookAddr { addr: addr.clone() });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        assert_eq!("nvml".parse::<SourceSpec>(), Ok(SourceSpec::Nvml));
        assert_eq!("none".parse::<SourceSpec>(), Ok(SourceSpec::None));
        assert_eq!(
            "sim".parse::<SourceSpec>(),
            Ok(SourceSpec::Sim(Scenario::Steady))
        );
        assert_eq!(
            "sim:leak".parse::<SourceSpec>(),
            Ok(SourceSpec::Sim(Scenario::Leak))
        );
        assert!("sim:nope"
            .parse::<SourceSpec>()
            .unwrap_err()
            .to_string()
            .contains("leak"));
        assert!("cuda"
            .parse::<SourceSpec>()
            .unwrap_err()
            .to_string()
            .contains("nvml"));
    }

    #[test]
    fn metrics_listen_takes_an_address_or_none() {
        assert_eq!(
            parse_metrics_listen("0.0.0.0:9500"),
            Ok(Some("0.0.0.0:9500".parse().unwrap()))
        );
        assert_eq!(parse_metrics_listen("none"), Ok(None));
        assert_eq!(
            AgentConfig::new("n").metrics_listen.map(|a| a.port()),
            Some(9401)
        );
        let err = parse_metrics_listen("localhost").unwrap_err().to_string();
        assert!(err.contains("\"localhost\" is not IP:PORT"), "{err}");
    }

    #[test]
    fn rejects_a_window_shorter_than_the_sample_interval() {
        let mut c = AgentConfig::new("n");
        c.window = Duration::from_millis(100);
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("window 100 ms"));
        c.window = Duration::from_secs(2);
        c.coordinators = vec!["127.0.0.1:7070".into()];
        assert!(c.validate().unwrap_err().to_string().contains("http://"));
    }

    #[test]
    fn the_hook_endpoint_is_off_by_default_and_checked_when_set() {
        let mut c = AgentConfig::new("n");
        assert_eq!(c.hook_listen, None);
        c.hook_listen = Some("unix:/tmp/gpumon-test/hook.sock".parse().unwrap());
        c.validate().unwrap();
        c.hook_listen = Some("[::1]:7071".parse().unwrap());
        c.validate().unwrap();
    }
}
