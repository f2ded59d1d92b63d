//! The sender's counters, shared with `/metrics`: samples by outcome,
//! requests by answer, the last success, and whether this replica sends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Label of requests that got no HTTP answer (connection, TLS, timeout).
pub const NO_ANSWER: &str = "error";

#[derive(Debug, Default)]
struct Cells {
    sent: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    queued: AtomicUsize,
    last_success_ms: AtomicU64,
    sending: AtomicBool,
    /// Requests by status code, or [`NO_ANSWER`]: at most the 500 HTTP
    /// codes and one more.
    requests: Mutex<BTreeMap<String, u64>>,
}

/// What `/metrics` shows of the sender.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteWriteCounts {
    /// Samples the receiver accepted.
    pub sent: u64,
    /// Samples dropped before they were sent: the queue was full, the take
    /// ran past its budget, or the replica stopped.
    pub dropped: u64,
    /// Samples in requests the receiver refused (4xx other than 429).
    pub failed: u64,
    /// Samples waiting to be sent.
    pub queued: usize,
    /// When a request last succeeded, ms since the epoch (0: never).
    pub last_success_ms: u64,
    /// Whether this replica sends (it leads and has taken its start).
    pub sending: bool,
    /// Requests by status code (`"error"`: no answer).
    pub requests: BTreeMap<String, u64>,
}

/// The counters; clones share them.
#[derive(Debug, Clone, Default)]
pub struct RemoteWriteStats(Arc<Cells>);

impl RemoteWriteStats {
    pub(crate) fn sent(&self, samples: usize, at_ms: u64) {
        self.0.sent.fetch_add(samples as u64, Relaxed);
        self.0.last_success_ms.fetch_max(at_ms, Relaxed);
    }

    pub(crate) fn dropped(&self, samples: usize) {
        self.0.dropped.fetch_add(samples as u64, Relaxed);
    }

    pub(crate) fn failed(&self, samples: usize) {
        self.0.failed.fetch_add(samples as u64, Relaxed);
    }

    pub(crate) fn set_queued(&self, samples: usize) {
        self.0.queued.store(samples, Relaxed);
    }

    pub(crate) fn set_sending(&self, sending: bool) {
        self.0.sending.store(sending, Relaxed);
    }

    pub(crate) fn request(&self, code: &str) {
        let mut requests = self.0.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry(code.to_owned()).or_default() += 1;
    }

    /// The counts now.
    pub fn get(&self) -> RemoteWriteCounts {
        let c = &self.0;
        RemoteWriteCounts {
            sent: c.sent.load(Relaxed),
            dropped: c.dropped.load(Relaxed),
            failed: c.failed.load(Relaxed),
            queued: c.queued.load(Relaxed),
            last_success_ms: c.last_success_ms.load(Relaxed),
            sending: c.sending.load(Relaxed),
            requests: c.requests.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}
