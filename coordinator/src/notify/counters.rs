//! The notifier's counters, per receiver kind (three values: a bounded
//! label for `/metrics`), shared between the leader loop and the workers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gpumon_core::notify::ReceiverKind;

/// Counts of one receiver kind since this replica started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotifyCounts {
    /// Notifications a receiver accepted (2xx).
    pub sent: u64,
    /// Notifications that failed every attempt (they are tried again later).
    pub failed: u64,
    /// Attempts retried after a failure or timeout.
    pub retried: u64,
    /// Notifications not queued because the receiver's queue was full
    /// (tried again next round).
    pub dropped: u64,
    /// Notifications sent and recorded through Raft.
    pub recorded: u64,
    /// Notifications sent but not recorded through Raft (leadership lost
    /// meanwhile): the next leader may send them again.
    pub unrecorded: u64,
}

#[derive(Debug, Default)]
struct Cells {
    sent: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    dropped: AtomicU64,
    recorded: AtomicU64,
    unrecorded: AtomicU64,
}

/// What a counter counts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Sent,
    Failed,
    Retried,
    Dropped,
    Recorded,
    Unrecorded,
}

/// The counters; clones share them.
#[derive(Debug, Clone, Default)]
pub struct NotifyStats(Arc<[Cells; 3]>);

fn slot(kind: ReceiverKind) -> usize {
    match kind {
        ReceiverKind::Webhook => 0,
        ReceiverKind::Slack => 1,
        ReceiverKind::Alertmanager => 2,
    }
}

impl NotifyStats {
    pub(crate) fn add(&self, kind: ReceiverKind, what: Count) {
        let c = &self.0[slot(kind)];
        let cell = match what {
            Count::Sent => &c.sent,
            Count::Failed => &c.failed,
            Count::Retried => &c.retried,
            Count::Dropped => &c.dropped,
            Count::Recorded => &c.recorded,
            Count::Unrecorded => &c.unrecorded,
        };
        cell.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts of one kind.
    pub fn get(&self, kind: ReceiverKind) -> NotifyCounts {
        let c = &self.0[slot(kind)];
        NotifyCounts {
            sent: c.sent.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            recorded: c.recorded.load(Ordering::Relaxed),
            unrecorded: c.unrecorded.load(Ordering::Relaxed),
        }
    }

    /// Every kind's counts, in [`ReceiverKind::ALL`] order (for `/metrics`).
    pub fn all(&self) -> Vec<(ReceiverKind, NotifyCounts)> {
        ReceiverKind::ALL
            .iter()
            .map(|k| (*k, self.get(*k)))
            .collect()
    }
}
