//! `gpumon bench`'s arguments: what to load and how hard. The load
//! generators themselves are `crate::bench`.

use clap::{Args, Subcommand};

/// Agents (nodes) per simulated job by default: a job's world size is this many agents' GPUs.
pub const AGENTS_PER_JOB: usize = 16;

/// `gpumon bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchCommand,
}

/// What to benchmark.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Simulated agents push windows to a running cluster; reports sustained GPU-samples/s and push-to-commit latency.
    #[command(long_about = INGEST_ABOUT)]
    Ingest(IngestArgs),
}

const INGEST_ABOUT: &str = "\
Simulated agents push windows to a running cluster; reports sustained GPU-samples/s and push-to-commit latency.

Each agent sends a Hello, then one push per window period carrying one window per GPU, each folding \
round(rate x window-ms / 1000) readings (GPU-samples). At most one push is in flight per agent: periods \
that close meanwhile go out together in the next push, so a cluster that cannot keep up commits less \
than offered (agents x gpus-per-agent x rate GPU-samples/s). Latency runs from sending a push to its \
Committed reply, leader hops included. The first --warmup seconds are not counted; --duration seconds \
are measured; in-flight pushes then get 5 s to finish.

With --step-ms, every rank of every simulated job (--agents-per-job agents of GPUs each) also \
reports a training step that often, as its hook would: sections and peer group, in the same pushes, \
so the straggler detector scores every step on every replica.

Prints samples_per_s, windows_per_s, pushes_per_s, steps_per_s, offered_samples_per_s, p50/p90/p99/max_ms, errors, \
rejected and not_leader_hops (JSON with --json). Exits 1 when the cluster never committed anything.";

/// `gpumon bench ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Coordinator base URLs, comma-separated; pushes start on them round-robin and follow the leader.
    #[arg(
        long,
        visible_alias = "coordinator",
        value_delimiter = ',',
        value_name = "URL,...",
        required = true
    )]
    pub coordinators: Vec<String>,
    /// Simulated agents (nodes), 1 to 100000; each holds a connection of its own, all from this host: past 512, start the replicas with --max-connections-per-source raised.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub agents: u64,
    /// GPUs per agent, 1 to 64.
    #[arg(long, default_value_t = 8, value_name = "G")]
    pub gpus_per_agent: u32,
    /// Readings per second per GPU (the sampling rate); one reading of one GPU is a GPU-sample.
    #[arg(long, default_value_t = 2.0, value_name = "HZ")]
    pub rate: f64,
    /// Window period, ms (at least 10): one push per agent per period, one window per GPU.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub window_ms: u64,
    /// Measured period, seconds, after the warmup.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub duration: f64,
    /// Seconds at the start whose pushes are not counted.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub warmup: f64,
    /// Agents per simulated job (the job's world size is this many agents' GPUs).
    #[arg(long, default_value_t = AGENTS_PER_JOB as u64, value_name = "N")]
    pub agents_per_job: u64,
    /// Every rank also reports a training step this often, ms, as its hook
    /// would (sections and peer group): 0 for none, else at least 10.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub step_ms: u64,
    /// File holding an agent token, sent with every push, as the agent sends it [default: none].
    #[arg(long, env = "GPUMON_AGENT_TOKEN_FILE", value_name = "FILE")]
    pub agent_token_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub tls: super::ClientTlsArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on standard error.
    #[arg(long, short)]
    pub quiet: bool,
}
