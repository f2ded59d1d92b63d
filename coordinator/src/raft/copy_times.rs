//! How long the state lock is held to copy the replicated state for a
//! snapshot or a digest: the time every push waits behind them. A
//! histogram per reason, served on `/metrics` as
//! `gpumon_state_copy_seconds{for="snapshot|digest"}`.
//!
//! The copy is cheap by design (entries are shared copy-on-write, see
//! `gpumon_core::shared`); this is how an operator sees that it stays so.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds of the buckets, seconds.
pub const BUCKETS_S: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
];

/// Why the state was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFor {
    /// A Raft snapshot.
    Snapshot,
    /// A state digest (`GET /api/v1/raft`).
    Digest,
}

impl CopyFor {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Digest => "digest",
        }
    }
}

/// One histogram: per-bucket counts (the last: above every bound), count,
/// sum and max in microseconds.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS_S.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
    max_us: AtomicU64,
}

/// What one histogram holds, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyStats {
    /// Per bucket of [`BUCKETS_S`] (not cumulative), then `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Copies recorded.
    pub count: u64,
    /// Their total time, seconds.
    pub sum_s: f64,
    /// The longest, seconds.
    pub max_s: f64,
}

/// The copy times of one replica; clones share them.
#[derive(Debug, Clone, Default)]
pub struct CopyTimes {
    snapshot: Arc<Histogram>,
    digest: Arc<Histogram>,
}

impl CopyTimes {
    fn of(&self, why: CopyFor) -> &Histogram {
        match why {
            CopyFor::Snapshot => &self.snapshot,
            CopyFor::Digest => &self.digest,
        }
    }

    /// Records one copy that held the lock for `held`.
    pub fn record(&self, why: CopyFor, held: Duration) {
        let h = self.of(why);
        let s = held.as_secs_f64();
        let i = BUCKETS_S
            .iter()
            .position(|&bound| s <= bound)
            .unwrap_or(BUCKETS_S.len());
        h.buckets[i].fetch_add(1, Ordering::Relaxed);
        h.count.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
        h.sum_us.fetch_add(us, Ordering::Relaxed);
        h.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The histogram of `why` now.
    pub fn stats(&self, why: CopyFor) -> CopyStats {
        let h = self.of(why);
        let bounds = BUCKETS_S.iter().copied().chain([f64::INFINITY]);
        CopyStats {
            buckets: bounds
                .zip(&h.buckets)
                .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
                .collect(),
            count: h.count.load(Ordering::Relaxed),
            sum_s: h.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            max_s: h.max_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_copy_lands_in_the_first_bucket_that_holds_it() {
        let times = CopyTimes::default();
        times.record(CopyFor::Snapshot, Duration::from_micros(300));
        times.record(CopyFor::Snapshot, Duration::from_millis(3));
        times.record(CopyFor::Snapshot, Duration::from_secs(2));
        let s = times.stats(CopyFor::Snapshot);
        assert_eq!(s.count, 3);
        let count_at = |bound: f64| s.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(count_at(0.0005), 1);
        assert_eq!(count_at(0.005), 1);
        assert_eq!(count_at(f64::INFINITY), 1);
        assert!((s.max_s - 2.0).abs() < 1e-9);
        assert_eq!(times.stats(CopyFor::Digest).count, 0);
    }
}
