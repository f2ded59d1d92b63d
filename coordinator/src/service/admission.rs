//! Backpressure: at most so many pushes are between decoding and their
//! commit at once. One more is refused at once with "busy, retry after"
//! (429 with `Retry-After`), which agents honor while they keep buffering,
//! instead of piling up proposals the Raft pipeline cannot take: a flood
//! then costs the flooders, not the cluster, and commits are back to their
//! usual latency as soon as it ends.
//!
//! The bound is in slots of [`SLOT_BYTES`] of the push as it came on the
//! wire: an agent's usual push (a few KiB) takes one slot, a push of 4 MiB
//! takes 256. So the default lets thousands of agents' pushes wait for the
//! leader's next batch (`service::batcher`) while the pushes held at once
//! never amount to more than 32 MiB on the wire.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default slots of pushes in flight on one replica: 2,048 usual pushes,
/// 32 MiB of pushes at most. More would only queue: on the 2-core test box
/// 4,096 held at 64k GPUs raised the latency past the write deadline
/// without committing more (BENCHMARKS.md).
pub const DEFAULT_MAX_PUSHES_IN_FLIGHT: usize = 2_048;

/// A push takes one slot per this many bytes (at least one).
pub const SLOT_BYTES: usize = 16 * 1024;

/// What a refused pusher is told to wait.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a pusher refused at a limit is told to wait: room comes back as
/// entries expire, not in a second.
pub const FULL_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The in-flight bound; clones share it.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    slots: usize,
}

impl Admission {
    /// At most `max` slots of pushes in flight.
    pub fn new(max: usize) -> Self {
        let slots = max.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(slots)),
            slots,
        }
    }

    /// The slots for a push of `wire_bytes`, held until it is answered;
    /// `None` when they are not free. A push larger than every slot
    /// together takes them all (when all are free).
    pub fn admit(&self, wire_bytes: usize) -> Option<OwnedSemaphorePermit> {
        let wanted = wire_bytes.div_ceil(SLOT_BYTES).clamp(1, self.slots);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        self.permits.clone().try_acquire_many_owned(wanted).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pipeline_refuses_until_a_slot_frees() {
        let a = Admission::new(2);
        let first = a.admit(100).expect("a slot");
        let _second = a.admit(0).expect("a slot");
        assert!(a.admit(100).is_none(), "full");
        drop(first);
        assert!(a.admit(100).is_some(), "a slot freed");
    }

    #[test]
    fn a_push_takes_a_slot_per_16_kib_and_one_larger_than_all_takes_all() {
        let a = Admission::new(8);
        let big = a.admit(5 * SLOT_BYTES).expect("five slots");
        let _small = a.admit(SLOT_BYTES).expect("one slot");
        assert!(
            a.admit(2 * SLOT_BYTES + 1).is_none(),
            "three wanted, two free"
        );
        let _two = a.admit(2 * SLOT_BYTES).expect("the last two");
        drop(big);
        drop(_small);
        drop(_two);
        let all = a
            .admit(100 * SLOT_BYTES)
            .expect("larger than all: all of them");
        assert!(a.admit(1).is_none());
        drop(all);
        assert!(a.admit(1).is_some());
    }
}
