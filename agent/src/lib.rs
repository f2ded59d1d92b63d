//! The gpumon node agent.
//!
//! It samples every GPU of its node ([`source`]: NVML, a simulator, or
//! nothing) and its host RAM ([`host`]), attributes each GPU process to its torchrun job and rank
//! ([`discovery`], reading `/proc` through [`procfs`]), folds samples into windows (`gpumon_core::window`) and
//! pushes them to the coordinators ([`uplink`], each delivery one [`push`]
//! attempt). With a hook address it also
//! serves the in-process hooks of the node's training processes ([`hook_endpoint`]):
//! their records travel in the same pushes, and actions come back to them.
//! It serves its node-level series for Prometheus at `/metrics` ([`metrics`]).
//! [`run`] wires it together.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use gpumon_agent::{AgentConfig, SourceSpec};
//! let mut config = AgentConfig::new("node-0");
//! config.source = SourceSpec::Sim(gpumon_agent::source::sim::Scenario::Leak);
//! let (_stop, stopped) = tokio::sync::watch::channel(false);
//! gpumon_agent::run(config, stopped).await?;
//! # Ok(()) }
//! ```

pub mod config;
mod config_error;
pub mod discovery;
pub mod hook_endpoint;
pub mod host;
pub mod metrics;
pub mod placement;
pub mod private_dir;
pub mod procfs;
pub mod push;
mod run;
pub mod source;
pub mod uplink;

pub use config::{AgentConfig, SimPlacement, SourceSpec};
pub use hook_endpoint::{HookAddr, HookAddrError, HookError};
pub use run::{run, AgentError, Sampler};
