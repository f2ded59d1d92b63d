//! The gpumon node agent.
//!
//! It samples every GPU of its node ([`source`]: NVML, a simulator, or
//! nothing), attributes each GPU process to its torchrun job and rank
//! ([`discovery`]), folds samples into windows (`gpumon_common::window`) and
//! pushes them to the coordinators ([`uplink`]). [`run`] wires it together.
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
pub mod discovery;
mod run;
pub mod source;
pub mod uplink;

pub use config::{AgentConfig, SimPlacement, SourceSpec};
pub use run::{run, AgentError};
