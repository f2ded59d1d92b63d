//! One simulated agent: a hello, then one push per window period, closed-loop.
//!
//! Like the real agent, at most one push is in flight. A window period
//! that closes while a push is in flight is queued, and the next push carries
//! every queued period (up to [`MAX_WINDOWS_PER_PUSH`] windows; the rest
//! follow in the next push). So when the cluster cannot keep up, pushes grow
//! and committed throughput falls below offered, instead of requests piling
//! up. A failed attempt is retried with the same batch (same seq) on the
//! next URL after [`RETRY_PAUSE`]. The backlog is a range of period numbers
//! (windows are generated when pushed, see [`super::synthetic`]); past
//! [`MAX_QUEUED_PERIODS`] the oldest periods are dropped and counted.
//!
//! The agent starts no attempt after the run's end; the caller cancels an
//! attempt still in flight after the drain.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use gpumon_proto::{wire, AgentMessage, AgentMessageV1};
use tokio::time::Instant;

use super::counters::Stats;
use super::synthetic::SimAgent;
use gpumon_agent::push::{Attempt, Pusher, Route};

/// Pause after a failed attempt before the next.
pub const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Most windows in one push (the coordinator accepts 4096; the real agent
/// splits at 1 MiB, about 4000 windows).
pub const MAX_WINDOWS_PER_PUSH: u64 = 1024;
/// Most periods waiting; the real agent keeps 1024 batches by default.
pub const MAX_QUEUED_PERIODS: u64 = 1024;

/// Window periods closed and not yet pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    /// First period not pushed yet.
    unsent: u64,
    /// Periods closed so far (period k closes at `(k + 1) * window`).
    closed: u64,
    /// Periods in one push at most.
    per_push: u64,
}

impl Backlog {
    /// An empty backlog for an agent with `gpus` GPUs.
    pub fn new(gpus: u32) -> Self {
        Self {
            unsent: 0,
            closed: 0,
            per_push: (MAX_WINDOWS_PER_PUSH / u64::from(gpus)).max(1),
        }
    }

    /// Marks every period up to `closed` (a count) as closed; returns how
    /// many of the oldest periods were dropped to keep the backlog bounded.
    pub fn close_until(&mut self, closed: u64) -> u64 {
        self.closed = self.closed.max(closed);
        let over = (self.closed - self.unsent).saturating_sub(MAX_QUEUED_PERIODS);
        self.unsent += over;
        over
    }

    /// The periods of the next push, taken out of the backlog; `None` when empty.
    pub fn take(&mut self) -> Option<Range<u64>> {
        if self.unsent == self.closed {
            return None;
        }
        let end = self.closed.min(self.unsent + self.per_push);
        let periods = self.unsent..end;
        self.unsent = end;
        Some(periods)
    }

    /// Index of the first period not closed yet.
    pub fn next_to_close(&self) -> u64 {
        self.closed
    }
}

/// What one agent needs to run.
#[derive(Debug)]
pub struct AgentRun {
    /// Its identity and windows.
    pub sim: SimAgent,
    /// Its incarnation.
    pub incarnation: u64,
    /// GPUs, for the backlog and the counts.
    pub gpus: u32,
    /// GPU-samples in one window.
    pub samples_per_window: u32,
    /// When its period 0 starts.
    pub start: Instant,
    /// Window period.
    pub window: Duration,
    /// Which URL it tries first.
    pub first_url: usize,
}

impl AgentRun {
    /// Runs the agent until the end of the measured period (`stats.measure_until`).
    pub async fn run(self, pusher: Arc<Pusher>, stats: Arc<Stats>) {
        let end = stats.measure_until;
        let mut route = Route::new(self.first_url);
        if self.start >= end {
            return;
        }
        tokio::time::sleep_until(self.start).await;
        let hello = AgentMessage::V1(AgentMessageV1::Hello(self.sim.hello(self.incarnation)));
        if deliver(&pusher, &stats, &mut route, &wire::encode(&hello), end)
            .await
            .is_some()
        {
            stats.hello_committed();
        }
        let mut backlog = Backlog::new(self.gpus);
        let mut seq = 1;
        while Instant::now() < end {
            let closed = periods_closed(self.start, self.window, Instant::now());
            let dropped = backlog.close_until(closed);
            if dropped > 0 {
                stats
                    .dropped_windows
                    .fetch_add(dropped * u64::from(self.gpus), Relaxed);
            }
            let Some(periods) = backlog.take() else {
                let next_close = period_end(self.start, self.window, backlog.next_to_close());
                tokio::time::sleep_until(next_close.min(end)).await;
                continue;
            };
            let windows = (periods.end - periods.start) * u64::from(self.gpus);
            let batch = self.sim.batch(self.incarnation, seq, periods);
            let steps = batch.hook.len() as u64;
            seq += 1;
            let body = wire::encode(&AgentMessage::push(batch.into()));
            if let Some((duplicate, latency)) =
                deliver(&pusher, &stats, &mut route, &body, end).await
            {
                let samples = windows * u64::from(self.samples_per_window);
                stats.push_committed(windows, samples, steps, duplicate, latency);
            }
        }
    }
}

/// Periods closed by `now` for an agent whose period 0 starts at `start`.
pub fn periods_closed(start: Instant, window: Duration, now: Instant) -> u64 {
    (now.saturating_duration_since(start).as_nanos() / window.as_nanos().max(1)) as u64
}

/// When period `k` closes, for an agent whose period 0 starts at `start`.
pub fn period_end(start: Instant, window: Duration, k: u64) -> Instant {
    let nanos = window.as_nanos().saturating_mul(u128::from(k) + 1);
    start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Attempts until committed, refused, or `end` passes between attempts;
/// `Some((duplicate, latency))` when committed, latency measured from the
/// sending of the attempt that committed (its leader hops included).
async fn deliver(
    pusher: &Pusher,
    stats: &Stats,
    route: &mut Route,
    body: &[u8],
    end: Instant,
) -> Option<(bool, Duration)> {
    loop {
        let sent = Instant::now();
        stats.in_flight.fetch_add(1, Relaxed);
        let got = pusher.attempt(route, body, |_| stats.hop()).await;
        stats.in_flight.fetch_sub(1, Relaxed);
        match got {
            Attempt::Committed { duplicate, .. } => return Some((duplicate, sent.elapsed())),
            Attempt::Rejected(why) => {
                tracing::debug!(%why, "a coordinator refused a message");
                stats.rejected(|| why);
                return None;
            }
            Attempt::Busy(wait) => {
                stats.error(|| format!("busy: retry after {wait:?}"));
                if Instant::now() + wait >= end {
                    return None;
                }
                tokio::time::sleep(wait).await;
            }
            Attempt::Failed(why) => {
                tracing::debug!(%why, "push failed; retrying on the next URL");
                stats.error(|| why);
                if Instant::now() + RETRY_PAUSE >= end {
                    return None;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::synthetic::Shape;

    #[test]
    fn queued_periods_go_out_in_one_push_with_the_next_seq() {
        let shape = Shape {
            agents: 1,
            gpus: 4,
            samples_per_window: 5,
            window_ms: 250,
            t0_ms: 1_700_000_000_000,
            agents_per_job: 16,
            step_ms: 0,
        };
        let sim = SimAgent::new(shape, 0);
        let mut backlog = Backlog::new(4);
        let mut seq = 1;
        let mut pushed = Vec::new();
        // One period closes, is pushed; then three close while it is in flight.
        for closed in [1, 4, 4, 5] {
            backlog.close_until(closed);
            if let Some(periods) = backlog.take() {
                pushed.push(sim.batch(7, seq, periods));
                seq += 1;
            }
        }
        let seqs: Vec<u64> = pushed.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        let sizes: Vec<usize> = pushed.iter().map(|b| b.windows.len()).collect();
        assert_eq!(
            sizes,
            vec![4, 12, 4],
            "three queued periods merged into one push"
        );
        let starts: Vec<u64> = pushed
            .iter()
            .flat_map(|b| b.windows.iter().filter(|w| w.gpu.index == 0))
            .map(|w| w.start_ms)
            .collect();
        assert_eq!(
            starts,
            (0..5)
                .map(|k| 1_700_000_000_000 + k * 250)
                .collect::<Vec<_>>(),
            "every period exactly once, in order"
        );
    }

    #[test]
    fn a_backlog_splits_large_pushes_and_drops_the_oldest_past_its_bound() {
        let mut b = Backlog::new(64);
        assert_eq!(b.close_until(20), 0);
        assert_eq!(b.take(), Some(0..16), "at most 1024 windows of 64 GPUs");
        assert_eq!(b.take(), Some(16..20));
        assert_eq!(b.take(), None);
        assert_eq!(b.close_until(20 + MAX_QUEUED_PERIODS + 5), 5);
        assert_eq!(b.take(), Some(25..41));
        assert_eq!(b.close_until(3), 0, "closing never goes back");
    }

    #[test]
    fn periods_close_at_each_window_end() {
        let start = Instant::now();
        let w = Duration::from_millis(250);
        assert_eq!(periods_closed(start, w, start), 0);
        assert_eq!(
            periods_closed(start, w, start + Duration::from_millis(249)),
            0
        );
        assert_eq!(
            periods_closed(start, w, start + Duration::from_millis(250)),
            1
        );
        assert_eq!(
            periods_closed(start, w, start + Duration::from_millis(1001)),
            4
        );
        assert_eq!(periods_closed(start + w, w, start), 0, "not started yet");
        for k in [0, 1, 7, 1000] {
            let at = period_end(start, w, k);
            assert_eq!(periods_closed(start, w, at), k + 1);
            assert_eq!(periods_closed(start, w, at - Duration::from_nanos(1)), k);
        }
    }
}
