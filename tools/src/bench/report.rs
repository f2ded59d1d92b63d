//! The report at the end of a run (JSON or a short table) and the
//! once-a-second progress lines.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;

use super::counters::{Phase, Stats};
use super::latency::Snapshot;
use super::IngestConfig;

/// What `gpumon bench ingest --json` prints. Rates are per second of the
/// measured period; latencies are push-to-commit, in milliseconds, `null`
/// when no push committed in the measured period.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Committed GPU-samples per second.
    pub samples_per_s: f64,
    /// Committed windows (one GPU over one period) per second.
    pub windows_per_s: f64,
    /// Committed pushes per second.
    pub pushes_per_s: f64,
    /// Committed hook step records per second (with `--step-ms`).
    pub steps_per_s: f64,
    /// What the agents offer: agents x gpus_per_agent x rate_hz.
    pub offered_samples_per_s: f64,
    /// Median push-to-commit latency.
    pub p50_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// Largest.
    pub max_ms: Option<f64>,
    /// Failed attempts in the measured period (no leader, 5xx, transport errors).
    pub errors: u64,
    /// Messages refused with a 4xx over the whole run (a generator bug).
    pub rejected: u64,
    /// Leader hints followed in the measured period.
    pub not_leader_hops: u64,
    /// Simulated agents.
    pub agents: usize,
    /// GPUs per agent.
    pub gpus_per_agent: u32,
    /// Readings per second per GPU.
    pub rate_hz: f64,
    /// Window period.
    pub window_ms: u64,
    /// Agents per job.
    pub agents_per_job: usize,
    /// Each rank's step, ms (0: no step records).
    pub step_ms: u64,
    /// Measured period, seconds.
    pub duration_s: f64,
    /// Warmup before it, seconds.
    pub warmup_s: f64,
    /// `samples` of every window: round(rate_hz x window_ms / 1000), at least 1.
    pub samples_per_window: u32,
    /// Committed GPU-samples in the measured period.
    pub committed_samples: u64,
    /// Committed pushes in the measured period.
    pub committed_pushes: u64,
    /// Committed pushes the coordinator had applied before (a retry after an
    /// unseen commit); their windows count once.
    pub duplicates: u64,
    /// Failed attempts during warmup and drain.
    pub errors_unmeasured: u64,
    /// Windows dropped because an agent's backlog was full.
    pub dropped_windows: u64,
    /// Requests still in flight when the drain ended (cancelled).
    pub cancelled_in_flight: u64,
    /// Windows committed over the whole run (warmup and drain included).
    pub windows_committed_total: u64,
    /// Windows the cluster view applied over the whole run, from its
    /// replicated counters (`null` when they could not be read). Below
    /// `windows_committed_total` when the view refused some (its limits):
    /// the figures to trust are the applied ones.
    pub cluster_windows_applied: Option<u64>,
    /// Windows the cluster view skipped over the whole run.
    pub cluster_windows_skipped: Option<u64>,
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| (d.as_secs_f64() * 1e5).round() / 100.0)
}

fn per_s(n: u64, secs: f64) -> f64 {
    (n as f64 / secs * 100.0).round() / 100.0
}

impl Report {
    /// The report from the counters at the end of a run.
    pub fn new(config: &IngestConfig, stats: &Stats, applied: Option<(u64, u64)>) -> Self {
        let secs = config.duration.as_secs_f64();
        let latency = stats.latency.snapshot();
        let samples = stats.samples.load(Relaxed);
        let pushes = stats.pushes.load(Relaxed);
        Self {
            samples_per_s: per_s(samples, secs),
            windows_per_s: per_s(stats.windows.load(Relaxed), secs),
            pushes_per_s: per_s(pushes, secs),
            steps_per_s: per_s(stats.steps.load(Relaxed), secs),
            offered_samples_per_s: config.offered_samples_per_s(),
            p50_ms: ms(latency.quantile(0.5)),
            p90_ms: ms(latency.quantile(0.9)),
            p99_ms: ms(latency.quantile(0.99)),
            max_ms: ms(latency.max()),
            errors: stats.errors.load(Relaxed),
            rejected: stats.rejected.load(Relaxed),
            not_leader_hops: stats.not_leader_hops.load(Relaxed),
            agents: config.agents,
            gpus_per_agent: config.gpus,
            rate_hz: config.rate_hz,
            window_ms: config.window_ms,
            agents_per_job: config.agents_per_job,
            step_ms: config.step_ms,
            duration_s: secs,
            warmup_s: config.warmup.as_secs_f64(),
            samples_per_window: config.samples_per_window,
            committed_samples: samples,
            committed_pushes: pushes,
            duplicates: stats.duplicates.load(Relaxed),
            errors_unmeasured: stats.errors_unmeasured.load(Relaxed),
            dropped_windows: stats.dropped_windows.load(Relaxed),
            cancelled_in_flight: stats.in_flight.load(Relaxed),
            windows_committed_total: stats.samples_total.load(Relaxed)
                / u64::from(config.samples_per_window.max(1)),
            cluster_windows_applied: applied.map(|(a, _)| a),
            cluster_windows_skipped: applied.map(|(_, s)| s),
        }
    }

    /// The short table printed without `--json`.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "gpumon bench ingest: {} agents x {} GPUs at {} Hz, {} ms windows ({} samples each); {} s measured after {} s warmup",
            self.agents, self.gpus_per_agent, self.rate_hz, self.window_ms, self.samples_per_window,
            self.duration_s, self.warmup_s
        );
        let share = if self.offered_samples_per_s > 0.0 {
            100.0 * self.samples_per_s / self.offered_samples_per_s
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  committed  {:.1} GPU-samples/s of {:.1} offered ({share:.1} %)",
            self.samples_per_s, self.offered_samples_per_s
        );
        let _ = writeln!(
            out,
            "             {:.1} windows/s, {:.1} pushes/s",
            self.windows_per_s, self.pushes_per_s
        );
        if self.step_ms > 0 {
            let _ = writeln!(
                out,
                "             {:.1} step records/s (a step every {} ms per rank, {} agents per job)",
                self.steps_per_s, self.step_ms, self.agents_per_job
            );
        }
        if let (Some(applied), Some(skipped)) =
            (self.cluster_windows_applied, self.cluster_windows_skipped)
        {
            let _ = writeln!(
                out,
                "  applied    {applied} windows applied to the cluster view, {skipped} skipped, of {} committed (whole run)",
                self.windows_committed_total
            );
        }
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "  latency    p50 {} ms   p90 {} ms   p99 {} ms   max {} ms (push to commit)",
            f(self.p50_ms),
            f(self.p90_ms),
            f(self.p99_ms),
            f(self.max_ms)
        );
        let _ = writeln!(
            out,
            "  errors     {} (+{} in warmup/drain)   rejected {}   not-leader hops {}   duplicates {}   dropped windows {}",
            self.errors, self.errors_unmeasured, self.rejected, self.not_leader_hops,
            self.duplicates, self.dropped_windows
        );
        out
    }
}

/// Totals at the last progress line, to print what changed since.
#[derive(Debug, Default)]
pub struct Progress {
    samples: u64,
    pushes: u64,
    errors: u64,
}

impl Progress {
    /// One progress line for the `interval` since the last, `elapsed` into the run.
    pub fn line(&mut self, stats: &Stats, elapsed: Duration, interval: Duration) -> String {
        let samples = stats.samples_total.load(Relaxed);
        let pushes = stats.pushes_total.load(Relaxed);
        let errors = stats.errors_total.load(Relaxed);
        let secs = interval.as_secs_f64().max(1e-3);
        let lat: Snapshot = stats.latency_interval.take();
        let f = |d: Option<Duration>| ms(d).map_or("-".to_owned(), |v| format!("{v:.1}"));
        // The phase the interval just ended was (mostly) in.
        let now = tokio::time::Instant::now();
        let phase = match stats.phase(now.checked_sub(interval / 2).unwrap_or(now)) {
            Phase::Warmup => "warmup",
            Phase::Measured => "measure",
            Phase::Drain => "drain",
        };
        let line = format!(
            "bench {:>6.1} s {phase:<7} {:>10.0} samples/s {:>8.1} pushes/s  p50 {} ms  p99 {} ms  in flight {}  errors {}",
            elapsed.as_secs_f64(),
            (samples - self.samples) as f64 / secs,
            (pushes - self.pushes) as f64 / secs,
            f(lat.quantile(0.5)),
            f(lat.quantile(0.99)),
            stats.in_flight.load(Relaxed),
            errors - self.errors,
        );
        *self = Self {
            samples,
            pushes,
            errors,
        };
        line
    }
}
