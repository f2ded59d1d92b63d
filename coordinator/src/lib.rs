//! The gpumon coordinator: an openraft node whose state machine holds the
//! cluster view, with the ingest endpoint agents push to and the JSON API.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use gpumon_coordinator::{Coordinator, CoordinatorConfig};
//! let mut config = CoordinatorConfig::new(1, "/var/lib/gpumon".into());
//! config.listen = "127.0.0.1:0".into();
//! let coordinator = Coordinator::start(config).await?;
//! println!("API at {}", coordinator.api_url());
//! coordinator.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Modules: [`raft`] (types, redb log store, the openraft adapter, snapshot
//! files, HTTP network), `service` (what the cluster does on a request:
//! the rules and the leader's writes), `api` (routes, authorization,
//! handlers that translate HTTP to the service and the state), `node`
//! (start-up and shutdown), [`config`], [`credentials`] (the secrets
//! requests are checked against), [`remote_write`] (the leader's
//! Prometheus remote-write of the per-GPU series).

mod api;
pub mod config;
mod config_error;
pub mod credentials;
mod expiry_task;
mod node;
pub mod notify;
mod outbound;
pub mod peer_link;
pub mod peers;
pub mod raft;
mod release_task;
pub mod remote_write;
mod service;

pub use config::{CoordinatorConfig, Formation};
pub use credentials::Credentials;
pub use node::{Coordinator, StartError};
