//! When each replica builds a snapshot (and so purges its log).
//!
//! openraft's own policy would have every replica snapshot at the same log
//! index. On shared hardware they would then all encode at once, and on the
//! leader the copy of the state taken under its lock delays the commits that
//! clients wait for. So the schedule is ours (openraft's policy is off):
//!
//! - a follower or learner snapshots once `every` entries have been applied
//!   since its last snapshot, plus a quarter of `every` times (id mod 4), so
//!   that followers take turns;
//! - a leader with followers waits for three times `every`: its log is what
//!   lagging followers catch up from, and its pauses are client latency;
//! - a single-replica cluster snapshots every `every` entries.
//!
//! The check runs every [`CHECK_EVERY`] from openraft's metrics.

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Raft;

/// How often the schedule looks at the applied and snapshot indexes.
pub const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Entries applied since the last snapshot after which replica `id` snapshots.
pub fn threshold(id: u64, every: u64, leader: bool, voters: usize) -> u64 {
    if leader && voters > 1 {
        every.saturating_mul(3)
    } else if voters > 1 || !leader {
        every.saturating_add((id % 4) * (every / 4))
    } else {
        every
    }
}

/// Runs the schedule until `stop` turns true.
pub fn spawn(raft: Raft, id: u64, every: u64, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The applied index a snapshot was last asked for at, so that one
        // still being built is not asked for again.
        let mut asked_at = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CHECK_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let m = raft.metrics().borrow().clone();
            let Some(applied) = m.last_applied.map(|l| l.index) else {
                continue;
            };
            let since = match m.snapshot {
                Some(s) => applied.saturating_sub(s.index),
                None => applied + 1,
            };
            let voters = m.membership_config.membership().voter_ids().count();
            let leader = m.state == ServerState::Leader;
            let due = since >= threshold(id, every, leader, voters);
            let asked_recently = asked_at.is_some_and(|a: u64| applied.saturating_sub(a) < every);
            if due && !asked_recently {
                asked_at = Some(applied);
                if raft.trigger().snapshot().await.is_err() {
                    return;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::threshold;

    #[test]
    fn followers_take_turns_and_the_leader_waits_longest() {
        let every = 2000;
        let f: Vec<u64> = (1..=3).map(|id| threshold(id, every, false, 3)).collect();
        assert_eq!(f, vec![2500, 3000, 3500]);
        assert_eq!(threshold(1, every, true, 3), 6000);
        assert_eq!(threshold(1, every, true, 1), 2000);
    }
}
