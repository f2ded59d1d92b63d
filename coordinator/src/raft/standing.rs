//! Where this replica stands with its cluster, beyond what openraft's own
//! state says: whether a leader still reaches a majority, when a follower
//! last heard from its leader, and so how old the view it serves is.
//!
//! openraft 0.9 keeps a leader that is cut off from its peers in the
//! `Leader` state until a higher term reaches it. gpumon does not let such
//! a replica act as the leader: once no majority has acknowledged it for
//! [`STEP_DOWN_AFTER`] (openraft's leader lease, after which the others may
//! elect someone else), it refuses writes at once, says so in
//! `/api/v1/raft` (`role: "stepped_down"`) and `/readyz`, and its reads
//! carry the age of their view.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{RaftMetrics, ServerState};

/// How long a leader may go without a majority's acknowledgement before it
/// stops acting as the leader: openraft's leader lease (the longest
/// election timeout), after which the other replicas may elect another.
pub const STEP_DOWN_AFTER: Duration = Duration::from_millis(super::timing::ELECTION_TIMEOUT_MS.1);

/// When this replica last heard from a leader it follows (an append it
/// accepted) or granted a vote; clones share it.
#[derive(Debug, Clone)]
pub struct Contact {
    origin: Instant,
    /// Milliseconds after `origin`.
    last_ms: Arc<AtomicU64>,
}

impl Default for Contact {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: Arc::default(),
        }
    }
}

impl Contact {
    /// Heard from a leader (or granted a vote) now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Time since then (since start when never).
    pub fn since(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}

/// This replica's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The leader, acknowledged by a majority within [`STEP_DOWN_AFTER`]
    /// (or the only voter).
    Leader,
    /// openraft's leader, but no majority has acknowledged it for this long:
    /// it acts as no leader.
    SteppedDown(Duration),
    /// Not the leader.
    Other,
}

impl Standing {
    /// The standing of replica `id` per its metrics.
    pub fn of(m: &RaftMetrics<u64, openraft::BasicNode>, id: u64) -> Self {
        if m.state != ServerState::Leader || m.current_leader != Some(id) {
            return Self::Other;
        }
        if m.membership_config.membership().voter_ids().count() <= 1 {
            return Self::Leader;
        }
        match m.millis_since_quorum_ack.map(Duration::from_millis) {
            Some(quiet) if quiet <= STEP_DOWN_AFTER => Self::Leader,
            Some(quiet) => Self::SteppedDown(quiet),
            None => Self::SteppedDown(STEP_DOWN_AFTER),
        }
    }

    /// How old the view this replica serves may be: zero for an
    /// acknowledged leader; since the last majority acknowledgement for a
    /// stepped-down one; since the last word from a leader for the others.
    pub fn view_age(self, contact: &Contact) -> Duration {
        match self {
            Self::Leader => Duration::ZERO,
            Self::SteppedDown(quiet) => quiet,
            Self::Other => contact.since(),
        }
    }
}

/// A duration in whole milliseconds, saturating.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_counts_from_the_last_touch_and_never_goes_back() {
        let c = Contact {
            origin: Instant::now() - Duration::from_secs(5),
            last_ms: Arc::default(),
        };
        assert!(
            c.since() >= Duration::from_secs(5),
            "never touched: since start"
        );
        c.touch();
        assert!(c.since() < Duration::from_secs(1));
        // An older touch (a late RPC) does not move it back.
        c.last_ms.fetch_max(10, Ordering::Relaxed);
        assert!(c.since() < Duration::from_secs(1));
    }
}
