//! Why an agent's configuration is refused at start-up ([`ConfigError`]),
//! or a `--source` or `--metrics-listen` is not one ([`SourceError`],
//! [`MetricsListenError`]): the setting and its value, as the usage error
//! says it.

use thiserror::Error;

use crate::hook_endpoint::HookAddr;

/// A refused agent configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// No coordinator to push to.
    #[error("at least one coordinator URL is needed (--coordinators)")]
    NoCoordinators,
    /// A coordinator URL that is not http(s).
    #[error("coordinator URL {url:?} must start with http:// or https://")]
    Scheme {
        /// The URL.
        url: String,
    },
    /// A coordinator on another host, with no token and not `--insecure`.
    #[error(
        "coordinator {url} is on another host: give this agent its token (--agent-token-file), or --insecure to push without one"
    )]
    NoToken {
        /// The URL.
        url: String,
    },
    /// A sample interval outside 10..=60000 ms.
    #[error("sample interval {sample_ms} ms is outside 10..=60000 ms")]
    SampleInterval {
        /// The interval, ms.
        sample_ms: u128,
    },
    /// A window shorter than the sample interval or longer than 10 minutes.
    #[error(
        "window {window_ms} ms must be at least the sample interval ({sample_ms} ms) and at most 600000 ms"
    )]
    Window {
        /// The window, ms.
        window_ms: u128,
        /// The sample interval, ms.
        sample_ms: u128,
    },
    /// `max_buffered_batches = 0`.
    #[error("max_buffered_batches must be at least 1")]
    BufferedBatches,
    /// `max_batch_bytes` below 4 KiB.
    #[error("max_batch_bytes {bytes} is below the 4096-byte minimum")]
    BatchBytes {
        /// The value given.
        bytes: usize,
    },
    /// An empty agent id or node name.
    #[error("agent id and node name must not be empty")]
    EmptyNames,
    /// A hook address that is neither loopback nor a usable socket path.
    #[error("hook address {addr} is not a usable hook endpoint")]
    HookAddr {
        /// The address.
        addr: HookAddr,
    },
}

/// A `--metrics-listen` that is neither `IP:PORT` nor `none`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("metrics address {given:?} is not IP:PORT (e.g. {example}) or none")]
pub struct MetricsListenError {
    /// The address given.
    pub given: String,
    /// An address that would do: the default.
    pub example: std::net::SocketAddr,
}

/// A `--source` that names no source.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SourceError {
    /// Not `nvml`, `none`, `sim` or `sim:SCENARIO`.
    #[error("unknown source {given:?}: use nvml, none, sim or sim:SCENARIO")]
    Unknown {
        /// The source given.
        given: String,
    },
    /// `sim:SCENARIO` with an unknown scenario (the simulator's reason).
    #[error("{0}")]
    Scenario(String),
}
