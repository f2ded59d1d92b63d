//! Counters every simulated agent adds to, and the run's phases.
//!
//! A run is warmup, then the measured period, then a drain. What happens is
//! counted by when it happens: a push counts as committed in the measured
//! period when its `Committed` reply arrives in it, with every window it
//! carries (each batch is counted once, on its one `Committed` reply, even
//! when an earlier attempt had committed it unseen and the reply says
//! `duplicate`). Counting at commit time is unbiased in steady state: a push
//! just after the start carries windows from before it, as a push just after
//! the end carries windows from before that. Over a short run, a stall
//! that straddles the start of the measured period (its backlog commits
//! inside it) can read a few percent above offered; a longer `--duration`
//! dilutes it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

use super::latency::Histogram;

/// Which part of the run an instant falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the measured period: counted apart, or not at all.
    Warmup,
    /// The measured period.
    Measured,
    /// After it: in-flight pushes finish, nothing is counted but errors.
    Drain,
}

/// Counters over the whole run and over the measured period.
#[derive(Debug)]
pub struct Stats {
    /// Start of the measured period.
    pub measure_from: Instant,
    /// End of the measured period (and of the run's new pushes).
    pub measure_until: Instant,
    /// Push-to-commit latency of pushes committed in the measured period.
    pub latency: Histogram,
    /// The same, emptied at every progress line.
    pub latency_interval: Histogram,
    /// Measured period: committed GPU-samples.
    pub samples: AtomicU64,
    /// Measured period: committed windows.
    pub windows: AtomicU64,
    /// Measured period: committed hook step records.
    pub steps: AtomicU64,
    /// Measured period: committed pushes (batches, not hellos).
    pub pushes: AtomicU64,
    /// Measured period: committed pushes the coordinator had applied before.
    pub duplicates: AtomicU64,
    /// Measured period: failed attempts (no leader, 5xx, transport).
    pub errors: AtomicU64,
    /// Measured period: leader hints followed.
    pub not_leader_hops: AtomicU64,
    /// Warmup and drain: failed attempts.
    pub errors_unmeasured: AtomicU64,
    /// Whole run: messages refused with a 4xx and dropped.
    pub rejected: AtomicU64,
    /// Whole run: windows dropped from a full backlog (oldest first).
    pub dropped_windows: AtomicU64,
    /// Whole run: committed messages, hellos included.
    pub committed_total: AtomicU64,
    /// Whole run: committed GPU-samples, for progress lines.
    pub samples_total: AtomicU64,
    /// Whole run: committed pushes, for progress lines.
    pub pushes_total: AtomicU64,
    /// Whole run: failed attempts, for progress lines.
    pub errors_total: AtomicU64,
    /// Requests on the wire now.
    pub in_flight: AtomicU64,
    /// The first failure's text, for the final message.
    pub first_error: OnceLock<String>,
    /// The first refusal's text.
    pub first_rejection: OnceLock<String>,
}

impl Stats {
    /// Counters for a run whose measured period is `[measure_from, measure_until)`.
    pub fn new(measure_from: Instant, measure_until: Instant) -> Self {
        Self {
            measure_from,
            measure_until,
            latency: Histogram::default(),
            latency_interval: Histogram::default(),
            samples: AtomicU64::new(0),
            windows: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            not_leader_hops: AtomicU64::new(0),
            errors_unmeasured: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            dropped_windows: AtomicU64::new(0),
            committed_total: AtomicU64::new(0),
            samples_total: AtomicU64::new(0),
            pushes_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            first_error: OnceLock::new(),
            first_rejection: OnceLock::new(),
        }
    }

    /// The phase `now` falls in.
    pub fn phase(&self, now: Instant) -> Phase {
        if now < self.measure_from {
            Phase::Warmup
        } else if now < self.measure_until {
            Phase::Measured
        } else {
            Phase::Drain
        }
    }

    /// A committed hello.
    pub fn hello_committed(&self) {
        self.committed_total.fetch_add(1, Relaxed);
    }

    /// A committed push of `windows` windows holding `samples` GPU-samples
    /// and `steps` step records, `latency` after its request was sent.
    pub fn push_committed(
        &self,
        windows: u64,
        samples: u64,
        steps: u64,
        duplicate: bool,
        latency: Duration,
    ) {
        self.committed_total.fetch_add(1, Relaxed);
        self.pushes_total.fetch_add(1, Relaxed);
        self.samples_total.fetch_add(samples, Relaxed);
        self.latency_interval.record(latency);
        if self.phase(Instant::now()) == Phase::Measured {
            self.pushes.fetch_add(1, Relaxed);
            self.windows.fetch_add(windows, Relaxed);
            self.steps.fetch_add(steps, Relaxed);
            self.samples.fetch_add(samples, Relaxed);
            self.duplicates.fetch_add(u64::from(duplicate), Relaxed);
            self.latency.record(latency);
        }
    }

    /// A failed attempt, with why.
    pub fn error(&self, reason: impl FnOnce() -> String) {
        self.errors_total.fetch_add(1, Relaxed);
        if self.phase(Instant::now()) == Phase::Measured {
            self.errors.fetch_add(1, Relaxed);
        } else {
            self.errors_unmeasured.fetch_add(1, Relaxed);
        }
        if self.first_error.get().is_none() {
            let _ = self.first_error.set(reason());
        }
    }

    /// A leader hint followed.
    pub fn hop(&self) {
        if self.phase(Instant::now()) == Phase::Measured {
            self.not_leader_hops.fetch_add(1, Relaxed);
        }
    }

    /// A message refused for good.
    pub fn rejected(&self, reason: impl FnOnce() -> String) {
        self.rejected.fetch_add(1, Relaxed);
        if self.first_rejection.get().is_none() {
            let _ = self.first_rejection.set(reason());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_by_when_things_happen() {
        let now = Instant::now();
        let stats = Stats::new(
            now + Duration::from_secs(3600),
            now + Duration::from_secs(7200),
        );
        stats.push_committed(4, 20, 0, false, Duration::from_millis(2));
        stats.error(|| "first".into());
        stats.error(|| "second".into());
        assert_eq!(stats.phase(now), Phase::Warmup);
        assert_eq!(stats.samples.load(Relaxed), 0, "warmup is not measured");
        assert_eq!(stats.samples_total.load(Relaxed), 20);
        assert_eq!(stats.errors_unmeasured.load(Relaxed), 2);
        assert_eq!(stats.first_error.get().map(String::as_str), Some("first"));

        let stats = Stats::new(now, now + Duration::from_secs(3600));
        stats.push_committed(4, 20, 0, true, Duration::from_millis(2));
        stats.hop();
        assert_eq!(stats.samples.load(Relaxed), 20);
        assert_eq!(stats.windows.load(Relaxed), 4);
        assert_eq!(stats.duplicates.load(Relaxed), 1);
        assert_eq!(stats.not_leader_hops.load(Relaxed), 1);
        assert_eq!(stats.latency.snapshot().count(), 1);
        assert_eq!(stats.phase(now + Duration::from_secs(3600)), Phase::Drain);
    }
}
