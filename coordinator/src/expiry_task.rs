//! The leader's expiry task: every [`period`] of `expire_after_s`, on the
//! leader only, it proposes `Expire { stale_after_ms }` through the
//! replica's one write path (`service::Proposer`), so every replica
//! forgets the same quiet agents, GPUs and long-ended jobs (see
//! `gpumon_core::cluster::expiry`). Time inside is the data's, so a
//! proposal racing a leader change does nothing twice.
//!
//! The period is a tenth of `expire_after_s`, between [`MIN_EXPIRE_EVERY`]
//! and [`EXPIRE_EVERY`]: an entry outstays its expiry by at most a tenth.
//! With a fixed minute, a short `expire_after_s` (60 s) kept quiet agents
//! twice as long as asked, and the soak (`tests/soak.rs`, where data time
//! runs some 50 times faster than the wall clock) saw no expiry at all in
//! its 50 s: replaced nodes piled up in the view.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::raft::{Command, CommandV1};
use crate::service::Proposer;

/// The longest period between two expiries (the default `expire_after_s`
/// of an hour is checked once a minute).
pub const EXPIRE_EVERY: Duration = Duration::from_secs(60);
/// The shortest period between two expiries (each is a log entry).
pub const MIN_EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// How often the leader proposes an expiry for `stale_after`: a tenth of
/// it, within [`MIN_EXPIRE_EVERY`] and [`EXPIRE_EVERY`].
pub fn period(stale_after: Duration) -> Duration {
    (stale_after / 10).clamp(MIN_EXPIRE_EVERY, EXPIRE_EVERY)
}

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
        let every = period(stale_after);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_a_tenth_of_the_expiry_within_a_second_and_a_minute() {
        let s = Duration::from_secs;
        assert_eq!(period(s(3600)), s(60), "the default: once a minute");
        assert_eq!(period(s(600)), s(60));
        assert_eq!(period(s(60)), s(6));
        assert_eq!(period(s(5)), s(1));
    }
}
