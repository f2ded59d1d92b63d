//! `gpumon bench`: load generators against a running cluster.
//!
//! `gpumon bench ingest` simulates many agents pushing to the coordinators
//! and reports sustained committed throughput and push-to-commit latency:
//!
//! ```text
//! gpumon bench ingest --coordinators http://c1:7070,http://c2:7070,http://c3:7070 \
//!     --agents 1000 --gpus-per-agent 8 --rate 2 --duration 30 --json
//! ```
//!
//! Definitions:
//!
//! - `--rate HZ` is readings per second per GPU (the agent's sampling rate);
//!   a *GPU-sample* is one reading of one GPU. The cluster is offered
//!   `agents x gpus-per-agent x rate` GPU-samples per second.
//! - Like the real agent, each simulated agent folds its readings into
//!   windows: every `--window-ms` it has one `GpuWindow` per GPU whose
//!   `samples` is round(rate x window_ms / 1000), at least 1.
//! - Each agent sends a `Hello`, then one `PushBatch` per window period (seq
//!   1, 2, 3…, a random incarnation), to `POST /api/v1/ingest`, following
//!   leader hints. At most one push is in flight per agent: periods that
//!   close meanwhile are queued and go out together in the next push, so the
//!   load is closed-loop and a cluster that cannot keep up shows as committed
//!   throughput below offered. Agents start staggered over one window period.
//! - Push-to-commit latency runs from sending the request to receiving the
//!   `Committed` reply, leader hops included (not earlier failed attempts:
//!   those are counted in `errors`).
//! - The first `--warmup` seconds are not counted; the next `--duration`
//!   seconds are measured, counting what commits in them; then the agents
//!   stop and in-flight pushes get at most [`DRAIN`] to finish.
//!
//! Files: `synthetic` makes what an agent sends, the agent's own push
//! client ([`gpumon_agent::push`]) delivers one message, `agent` runs one
//! agent, `counters` counts, `latency` is the histogram and `report`
//! prints.
//!
//! The coordinator tracks at most `max_agents` agents (2048 by default) and
//! as many GPUs and ranks as its limits allow: pushes beyond them still
//! commit through Raft, but their windows are skipped by the view. Each
//! agent holds one connection, so `ulimit -n` must exceed `--agents`.

mod agent;
mod counters;
mod latency;
mod report;
mod synthetic;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::args::{BenchArgs, BenchCommand, IngestArgs};
use crate::failure::{usage, Failure};
use agent::AgentRun;
use counters::Stats;
use gpumon_agent::push::Pusher;
use gpumon_agent::source::sim::rng::hash;
use report::{Progress, Report};
use synthetic::{Shape, SimAgent};

/// Most simulated agents.
pub const MAX_AGENTS: u64 = 100_000;
/// Most GPUs per simulated agent.
pub const MAX_GPUS: u32 = 64;
/// Shortest window period, ms.
pub const MIN_WINDOW_MS: u64 = 10;
/// Longest window period, ms (one hour).
pub const MAX_WINDOW_MS: u64 = 3_600_000;
/// Highest sampling rate, Hz.
pub const MAX_RATE_HZ: f64 = 1e6;
/// Longest warmup or measured period, seconds (one week).
pub const MAX_SECS: f64 = 7.0 * 86_400.0;
/// Time in-flight pushes get to finish after the measured period.
pub const DRAIN: Duration = Duration::from_secs(5);
/// Time allowed for one push request.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Validated settings of one run.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Base URLs, no trailing slash.
    pub urls: Vec<String>,
    /// Simulated agents.
    pub agents: usize,
    /// GPUs per agent.
    pub gpus: u32,
    /// Readings per second per GPU.
    pub rate_hz: f64,
    /// Window period, ms.
    pub window_ms: u64,
    /// `samples` of each window.
    pub samples_per_window: u32,
    /// Measured period.
    pub duration: Duration,
    /// Uncounted start.
    pub warmup: Duration,
    /// Agents per job.
    pub agents_per_job: usize,
    /// Each rank's step, ms; 0: none.
    pub step_ms: u64,
    /// The agent token sent with every push.
    pub token: Option<gpumon_runtime::secrets::Secret>,
    /// How https coordinators are verified, and the client certificate.
    pub tls: gpumon_net::ClientTls,
}

impl IngestConfig {
    /// agents x GPUs x rate.
    pub fn offered_samples_per_s(&self) -> f64 {
        self.agents as f64 * f64::from(self.gpus) * self.rate_hz
    }
}

fn secs(flag: &str, v: f64, zero_ok: bool) -> Result<Duration, Failure> {
    let ok = v.is_finite() && v <= MAX_SECS && (v > 0.0 || (zero_ok && v == 0.0));
    if !ok {
        let what = if zero_ok {
            "zero or more"
        } else {
            "more than zero"
        };
        return Err(usage(format!(
            "{flag} {v}: give {what} seconds (at most {MAX_SECS})"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Checks the flags; every problem is a usage error naming its flag.
pub fn resolve(args: IngestArgs) -> Result<IngestConfig, Failure> {
    if !(1..=MAX_AGENTS).contains(&args.agents) {
        return Err(usage(format!(
            "--agents {}: give between 1 and {MAX_AGENTS} agents",
            args.agents
        )));
    }
    if !(1..=MAX_GPUS).contains(&args.gpus_per_agent) {
        return Err(usage(format!(
            "--gpus-per-agent {}: give between 1 and {MAX_GPUS} GPUs",
            args.gpus_per_agent
        )));
    }
    if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= MAX_RATE_HZ) {
        return Err(usage(format!(
            "--rate {}: give readings per second per GPU, more than 0 and at most {MAX_RATE_HZ}",
            args.rate
        )));
    }
    if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&args.window_ms) {
        return Err(usage(format!(
            "--window-ms {}: give between {MIN_WINDOW_MS} and {MAX_WINDOW_MS} ms",
            args.window_ms
        )));
    }
    if !(1..=MAX_AGENTS).contains(&args.agents_per_job) {
        return Err(usage(format!(
            "--agents-per-job {}: give between 1 and {MAX_AGENTS} agents",
            args.agents_per_job
        )));
    }
    if args.step_ms != 0 && !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&args.step_ms) {
        return Err(usage(format!(
            "--step-ms {}: give 0 (no steps) or between {MIN_WINDOW_MS} and {MAX_WINDOW_MS} ms",
            args.step_ms
        )));
    }
    let duration = secs("--duration", args.duration, false)?;
    let warmup = secs("--warmup", args.warmup, true)?;
    let mut urls = Vec::with_capacity(args.coordinators.len());
    for raw in &args.coordinators {
        let url = raw.trim().trim_end_matches('/');
        match reqwest::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                urls.push(url.to_owned())
            }
            _ => {
                return Err(usage(format!(
                    "--coordinators {raw:?}: give coordinator base URLs such as http://127.0.0.1:7070, comma-separated"
                )))
            }
        }
    }
    if urls.is_empty() {
        return Err(usage("--coordinators: give at least one URL"));
    }
    let samples = (args.rate * args.window_ms as f64 / 1000.0)
        .round()
        .max(1.0);
    let token = match &args.agent_token_file {
        Some(path) => Some(gpumon_runtime::secrets::read_secret(path).map_err(usage)?),
        None => None,
    };
    let tls = args.tls.resolve((None, None, None)).map_err(usage)?;
    Ok(IngestConfig {
        urls,
        agents: args.agents as usize,
        gpus: args.gpus_per_agent,
        rate_hz: args.rate,
        window_ms: args.window_ms,
        samples_per_window: samples as u32,
        duration,
        warmup,
        agents_per_job: args.agents_per_job as usize,
        step_ms: args.step_ms,
        token,
        tls,
    })
}

/// Runs `gpumon bench`.
pub async fn run(args: BenchArgs) -> Result<(), Failure> {
    let BenchCommand::Ingest(args) = args.what;
    let (json, quiet) = (args.json, args.quiet);
    let config = resolve(args)?;
    if !quiet {
        warn_about(&config);
    }
    let before = view_counters(&config).await;
    let stats = ingest(&config, quiet).await?;
    let after = view_counters(&config).await;
    let applied = before.zip(after).map(|(b, a)| {
        (
            a.windows_applied.saturating_sub(b.windows_applied),
            a.windows_skipped.saturating_sub(b.windows_skipped),
        )
    });
    let report = Report::new(&config, &stats, applied);
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table());
    }
    if let Some(why) = stats.first_rejection.get() {
        eprintln!(
            "bench: {} messages were refused (a generator bug); the first: {why}",
            report.rejected
        );
    }
    if stats
        .committed_total
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        let why = stats.first_error.get().map_or("", String::as_str);
        return Err(Failure::Runtime(anyhow!(
            "the cluster never committed a push in {:.1} s (no leader, or no URL reachable?); first error: {why}",
            (config.warmup + config.duration).as_secs_f64()
        )));
    }
    Ok(())
}

/// The cluster view's replicated ingest counters, read from the leader
/// (a linearizable read through any replica); `None` when no replica
/// answers. Other load on the cluster meanwhile counts too.
async fn view_counters(config: &IngestConfig) -> Option<gpumon_proto::api::IngestCounters> {
    let client = gpumon_net::client_builder(&config.tls)
        .ok()?
        .timeout(Duration::from_secs(10))
        .build()
        .ok()?;
    for url in &config.urls {
        let got = client
            .get(format!("{url}/api/v1/cluster?consistency=linearizable"))
            .send()
            .await;
        if let Ok(resp) = got {
            if let Ok(view) = resp.json::<gpumon_proto::api::ClusterView>().await {
                return Some(view.ingest);
            }
        }
    }
    None
}

/// Runs the agents for warmup + duration, drains, and returns the counters.
async fn ingest(config: &IngestConfig, quiet: bool) -> Result<Arc<Stats>, Failure> {
    let client = gpumon_net::client_builder(&config.tls)
        .map_err(|e| anyhow!("{e}"))?
        .timeout(PUSH_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(config.agents)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| anyhow!("cannot build the HTTP client: {e}"))?;
    let pusher =
        Arc::new(Pusher::new(client, config.urls.clone()).with_token(config.token.clone()));
    let start = Instant::now();
    let t0_ms = gpumon_runtime::clock::wall_ms();
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let stats = Arc::new(Stats::new(measure_from, end));
    let shape = Shape {
        agents: config.agents,
        gpus: config.gpus,
        samples_per_window: config.samples_per_window,
        window_ms: config.window_ms,
        t0_ms,
        agents_per_job: config.agents_per_job,
        step_ms: config.step_ms,
    };
    // Incarnations differ between runs (a rerun against the same cluster
    // must not look like duplicates) and between agents.
    let seed = u64::from(std::process::id()) ^ t0_ms.rotate_left(20) ^ start_nanos();
    let window = Duration::from_millis(config.window_ms);
    let mut agents = JoinSet::new();
    for i in 0..config.agents {
        let run = AgentRun {
            sim: SimAgent::new(shape, i),
            incarnation: hash(&[seed, i as u64]),
            gpus: config.gpus,
            samples_per_window: config.samples_per_window,
            start: start + Duration::from_millis(shape.offset_ms(i)),
            window,
            first_url: i % config.urls.len(),
        };
        agents.spawn(run.run(pusher.clone(), stats.clone()));
    }
    let progress = (!quiet).then(|| tokio::spawn(progress(stats.clone(), start)));
    tokio::time::sleep_until(end).await;
    let drained =
        tokio::time::timeout(DRAIN, async { while agents.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        agents.abort_all();
        while agents.join_next().await.is_some() {}
    }
    if let Some(p) = progress {
        p.abort();
    }
    Ok(stats)
}

fn start_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()))
}

/// A progress line on standard error every second.
async fn progress(stats: Arc<Stats>, start: Instant) {
    let mut tick = tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    let mut state = Progress::default();
    let mut last = start;
    loop {
        tick.tick().await;
        // The actual time, not the tick's: a busy runtime can run this late.
        let now = Instant::now();
        eprintln!("{}", state.line(&stats, now - start, now - last));
        last = now;
    }
}

/// Says on standard error what could skew the figures.
fn warn_about(config: &IngestConfig) {
    let effective = f64::from(config.samples_per_window) * 1000.0 / config.window_ms as f64;
    if (effective - config.rate_hz).abs() > config.rate_hz * 0.01 {
        eprintln!(
            "bench: {} Hz x {} ms windows rounds to {} samples per window ({effective:.2} Hz); offered_samples_per_s uses {} Hz",
            config.rate_hz, config.window_ms, config.samples_per_window, config.rate_hz
        );
    }
    if let Some(limit) = open_files_limit() {
        if limit < config.agents as u64 + 64 {
            eprintln!(
                "bench: {} agents need about {} connections but `ulimit -n` is {limit}; expect transport errors",
                config.agents,
                config.agents + 64
            );
        }
    }
}

/// The soft limit on open files, from /proc (Linux); `None` elsewhere.
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> IngestArgs {
        IngestArgs {
            coordinators: vec![
                "http://127.0.0.1:7070/".into(),
                "http://10.0.0.2:7070".into(),
            ],
            agents: 8,
            gpus_per_agent: 4,
            rate: 20.0,
            window_ms: 250,
            duration: 2.0,
            warmup: 1.0,
            agents_per_job: 16,
            step_ms: 0,
            agent_token_file: None,
            tls: crate::args::ClientTlsArgs::default(),
            json: true,
            quiet: true,
        }
    }

    fn usage_text(a: IngestArgs) -> String {
        match resolve(a) {
            Err(Failure::Usage(e)) => e.to_string(),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn resolves_good_flags() {
        let c = resolve(args()).unwrap();
        assert_eq!(
            c.urls,
            vec!["http://127.0.0.1:7070", "http://10.0.0.2:7070"]
        );
        assert_eq!(c.samples_per_window, 5);
        assert_eq!(c.offered_samples_per_s(), 640.0);
        let c = resolve(IngestArgs {
            rate: 0.1,
            ..args()
        })
        .unwrap();
        assert_eq!(c.samples_per_window, 1, "at least one sample per window");
    }

    #[test]
    fn bad_flags_are_usage_errors_naming_the_flag() {
        let cases: Vec<(IngestArgs, &str)> = vec![
            (
                IngestArgs {
                    agents: 0,
                    ..args()
                },
                "--agents 0",
            ),
            (
                IngestArgs {
                    agents: 100_001,
                    ..args()
                },
                "--agents",
            ),
            (
                IngestArgs {
                    gpus_per_agent: 65,
                    ..args()
                },
                "--gpus-per-agent",
            ),
            (
                IngestArgs {
                    agents_per_job: 0,
                    ..args()
                },
                "--agents-per-job 0",
            ),
            (
                IngestArgs {
                    step_ms: 5,
                    ..args()
                },
                "--step-ms 5",
            ),
            (
                IngestArgs {
                    rate: f64::NAN,
                    ..args()
                },
                "--rate",
            ),
            (
                IngestArgs {
                    rate: 0.0,
                    ..args()
                },
                "--rate",
            ),
            (
                IngestArgs {
                    window_ms: 9,
                    ..args()
                },
                "--window-ms",
            ),
            (
                IngestArgs {
                    duration: 0.0,
                    ..args()
                },
                "--duration",
            ),
            (
                IngestArgs {
                    warmup: -1.0,
                    ..args()
                },
                "--warmup",
            ),
            (
                IngestArgs {
                    coordinators: vec!["127.0.0.1:7070".into()],
                    ..args()
                },
                "--coordinators",
            ),
            (
                IngestArgs {
                    coordinators: vec!["ftp://c:7070".into()],
                    ..args()
                },
                "--coordinators",
            ),
            (
                IngestArgs {
                    agent_token_file: Some("/nonexistent/gpumon-token".into()),
                    ..args()
                },
                "/nonexistent/gpumon-token",
            ),
            (
                IngestArgs {
                    coordinators: vec![],
                    ..args()
                },
                "--coordinators",
            ),
        ];
        for (a, want) in cases {
            let text = usage_text(a);
            assert!(text.contains(want), "{text:?} should name {want}");
        }
        assert!(resolve(IngestArgs {
            warmup: 0.0,
            ..args()
        })
        .is_ok());
    }
}
