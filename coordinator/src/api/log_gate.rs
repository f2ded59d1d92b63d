//! At most one log line per interval for what any client can cause at will
//! (a refused request, a refused push), with how many were left out, so a
//! flood of bad requests cannot flood the log and the disk under it. The
//! counters in `/metrics` still count every one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Interval between two lines of one gate, ms.
pub const LOG_EVERY_MS: u64 = 10_000;

/// One kind of event's gate.
#[derive(Debug, Default)]
pub struct LogGate {
    last_ms: AtomicU64,
    left_out: AtomicU64,
}

impl LogGate {
    /// `Some(n)` when a line may be written at `now_ms` (wall clock,
    /// [`gpumon_runtime::clock::wall_ms`]), `n` being how many events went unlogged
    /// since the last one; `None` (and counted) otherwise.
    pub fn pass(&self, now_ms: u64) -> Option<u64> {
        let last = self.last_ms.load(Relaxed);
        let due = last == 0 || now_ms.saturating_sub(last) >= LOG_EVERY_MS;
        if due
            && self
                .last_ms
                .compare_exchange(last, now_ms.max(1), Relaxed, Relaxed)
                .is_ok()
        {
            Some(self.left_out.swap(0, Relaxed))
        } else {
            self.left_out.fetch_add(1, Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_then_the_count_of_those_left_out() {
        let gate = LogGate::default();
        assert_eq!(gate.pass(1_000), Some(0));
        for i in 1..=500 {
            assert_eq!(gate.pass(1_000 + i), None);
        }
        assert_eq!(gate.pass(1_000 + LOG_EVERY_MS - 1), None);
        assert_eq!(gate.pass(1_000 + LOG_EVERY_MS), Some(501));
        assert_eq!(gate.pass(1_000 + LOG_EVERY_MS + 1), None);
    }
}
