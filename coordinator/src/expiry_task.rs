//! The leader's expiry task: every [`EXPIRE_EVERY`], on the leader only, it
//! proposes `Expire { stale_after_ms }` through the replica's one write
//! path (`service::Proposer`), so every replica
//! forgets the same quiet agents, GPUs and long-ended jobs (see
//! `gpumon_common::cluster::expiry`). Time inside is the data's, so a
//! proposal racing a leader change does nothing twice.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::raft::{Command, CommandV1};
use crate::service::Proposer;

/// How often the leader proposes an expiry.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(60);

/// Starts the task; it ends when `stop` turns true. `stale_after` zero:
/// nothing expires.
pub fn spawn(
    proposer: Proposer,
    stale_after: Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if stale_after.is_zero() {
            return;
        }
        let stale_after_ms = u64::try_from(stale_after.as_millis()).unwrap_or(u64::MAX);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(EXPIRE_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !proposer.leads() {
                continue;
            }
            let command = Command::V1(CommandV1::Expire { stale_after_ms });
            if let Err(e) = proposer.write(command, "the expiry").await {
                // Lost leadership meanwhile: the new leader expires.
                tracing::debug!(error = %e, "expiry not committed");
            }
        }
    })
}
