//! Backpressure: at most so many pushes are between decoding and their
//! commit at once. One more is refused at once with "busy, retry after"
//! (429 with `Retry-After`), which agents honor while they keep buffering,
//! instead of piling up proposals the Raft pipeline cannot take: a flood
//! then costs the flooders, not the cluster, and commits are back to their
//! usual latency as soon as it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default pushes in flight on one replica.
pub const DEFAULT_MAX_PUSHES_IN_FLIGHT: usize = 512;

/// What a refused pusher is told to wait.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a pusher refused at a limit is told to wait: room comes back as
/// entries expire, not in a second.
pub const FULL_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The in-flight bound; clones share it.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
}

impl Admission {
    /// At most `max` pushes in flight.
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
        }
    }

    /// A slot for one push, held until it is answered; `None` when full.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pipeline_refuses_until_a_slot_frees() {
        let a = Admission::new(2);
        let first = a.admit().expect("a slot");
        let _second = a.admit().expect("a slot");
        assert!(a.admit().is_none(), "full");
        drop(first);
        assert!(a.admit().is_some(), "a slot freed");
    }
}
