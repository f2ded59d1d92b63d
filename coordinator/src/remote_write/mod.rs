//! Prometheus remote-write of the raw per-GPU series: how a fleet's
//! per-GPU memory history reaches long-term storage (Prometheus, Mimir,
//! Thanos, VictoriaMetrics...) without a scrape of every GPU.
//!
//! Only the Raft leader sends, so each window is written once. Every
//! `interval` it takes from its applied view the windows that arrived since
//! its last take ([`collect`]: per GPU, memory used and the window's peak at
//! each window's end; capacity and utilization of the newest window),
//! normalizes them and cuts them into requests ([`encode`]: protobuf
//! `WriteRequest` of remote-write 1.0, [`proto`], compressed with snappy),
//! queues them ([`queue`], bounded in samples, the oldest dropped) and
//! POSTs them in order (`sender`), retrying 5xx, 429 and network errors
//! with backoff; other answers are not retried. Nothing goes through Raft:
//! the sender only reads the view, which every replica holds alike.
//!
//! Leader changes: a replica that becomes the leader starts from its view
//! as it is then; windows it already holds count as sent. So nothing is
//! written twice (a receiver refuses a sample older than the newest of its
//! series, and would refuse the whole request with it), and what is lost
//! is what arrived after the old leader's last take and before the new
//! leader's start: up to one interval plus the election, per GPU. A replica
//! that stops leading stops taking but still sends what it had queued.
//!
//! Counters for `/metrics` are in [`stats`].

pub mod collect;
pub mod config;
mod config_error;
pub mod encode;
mod error_log;
pub mod proto;
pub mod queue;
mod sender;
pub mod stats;

pub use config::RemoteWriteConfig;
pub use config_error::{RemoteWriteConfigError, UrlError};
pub use sender::SenderError;
pub use stats::{RemoteWriteCounts, RemoteWriteStats};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::raft::state_machine::StateMachine;
use crate::service::Proposer;

/// Starts the sender of `config`, counting into `stats`; it ends when
/// `stop` turns true. Fails when the CA file or the token cannot be used.
pub fn spawn(
    config: RemoteWriteConfig,
    proposer: Proposer,
    state_machine: StateMachine,
    stats: RemoteWriteStats,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, SenderError> {
    let sender = sender::Sender::new(config, proposer, state_machine, stats)?;
    Ok(tokio::spawn(sender.run(stop)))
}
