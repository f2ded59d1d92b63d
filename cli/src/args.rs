//! Command-line arguments. Every flag can also come from the environment
//! variable named in its help, and most from the TOML file given with
//! `--config` (flag > environment > file > default).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use gpumon_tools::args::{
    identity, BenchArgs, ClientTlsArgs, CompareArgs, ProfileArgs, RunArgs, SweepArgs,
};

/// gpumon: GPU-memory monitoring for distributed training, by job and rank.
#[derive(Debug, Parser)]
#[command(
    name = "gpumon",
    version,
    about = "gpumon: GPU-memory monitoring for distributed training, by job and rank",
    propagate_version = true
)]
pub struct Cli {
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(help = "TOML configuration file with [agent] and [coordinator] tables")]
    #[arg(long, global = true, env = "GPUMON_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample this node's GPUs and push windows to the coordinators.
    Agent(AgentArgs),
    /// Run a coordinator replica: Raft, cluster view, API.
    Coordinator(Box<CoordinatorArgs>),
    /// Show the cluster by job and rank, from a coordinator's API.
    Status(StatusArgs),
    /// A refreshing terminal view of the cluster by job and rank: memory bars, forecasts, flags, alerts.
    Top(TopArgs),
    /// Three coordinator replicas and simulated agents for a 2-node x 4-GPU job, on loopback; no GPU needed.
    Demo(DemoArgs),
    /// Run the detection engine over a recorded trace and write its report (JSON).
    Replay(ReplayArgs),
    /// Record a trace (v1) from a live cluster: every window a coordinator applies, until Ctrl-C or --duration.
    Record(RecordArgs),
    /// Show or change the coordinators' Raft membership.
    Cluster(ClusterArgs),
    /// Show or change detection and notification settings live, cluster-wide or for one job (through the Raft log; nothing restarts).
    Config(ConfigArgs),
    /// Load generators against a running cluster (`gpumon bench ingest`).
    Bench(BenchArgs),
    /// Run a training command (e.g. torchrun ...) with the gpumon hook injected; starts a local agent if none answers.
    Run(RunArgs),
    /// One node, no cluster: run a training command with the hook, watch its GPUs, host RAM and ranks, and write a report when it ends.
    Profile(ProfileArgs),
    /// Named allocator snapshots (gpumon.snapshot): list them, or show what grew between two, by rank.
    Snapshots(SnapshotsArgs),
    /// Run a training command once per point of a parameter grid, each through `gpumon profile`: peak memory, step time and OOM per point, as JSON, CSV and an HTML heatmap.
    Sweep(SweepArgs),
    /// Compare two profile reports (or two sweeps) of one command: step time and memory side by side, a verdict, and an exit status to gate CI on (0 within the limits, 1 past them, 2 not comparable).
    Compare(CompareArgs),
}

/// `gpumon snapshots`.
#[derive(Debug, Args)]
pub struct SnapshotsArgs {
    #[command(subcommand)]
    pub action: SnapshotsAction,
}

/// What `gpumon snapshots` does.
#[derive(Debug, Subcommand)]
pub enum SnapshotsAction {
    /// The snapshots each job's ranks took.
    List {
        /// Only this job.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        #[command(flatten)]
        from: SnapshotsFrom,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// What grew from snapshot A to snapshot B, per rank and statistic (B minus A).
    Diff {
        /// The earlier snapshot's name.
        a: String,
        /// The later snapshot's name.
        b: String,
        /// The job [default: the only one with snapshots].
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        #[command(flatten)]
        from: SnapshotsFrom,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Where snapshots are read from: a cluster, or a profile's report.
#[derive(Debug, Args)]
pub struct SnapshotsFrom {
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "A coordinator's base URL [default: the first of the config file's [agent] coordinators, else http://127.0.0.1:7070]"
    )]
    #[arg(
        long,
        visible_alias = "coordinators",
        env = "GPUMON_COORDINATOR",
        conflicts_with = "profile"
    )]
    pub coordinator: Option<String>,
    /// A `gpumon profile` JSON report instead of a cluster.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// `gpumon record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "A coordinator's base URL; any replica will do (each streams what it applies) [default: the first of the config file's [agent] coordinators, else http://127.0.0.1:7070]"
    )]
    #[arg(
        long,
        visible_alias = "coordinators",
        env = "GPUMON_COORDINATOR",
        value_name = "URL"
    )]
    pub coordinator: Option<String>,
    /// The trace to write; gzip-compressed when it ends in `.gz`.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
    /// Stop after this many seconds [default: run until Ctrl-C].
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// `gpumon replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace: gpumon trace v1, JSON Lines, gzip-compressed or not.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Where to write the report [default: standard output].
    #[arg(long, short, value_name = "REPORT.json")]
    pub output: Option<PathBuf>,
    /// No progress lines on standard error.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `gpumon agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Coordinator base URLs, comma-separated; any replica will do [default: http://127.0.0.1:7070].
    #[arg(
        long,
        visible_alias = "coordinator",
        env = "GPUMON_COORDINATORS",
        value_delimiter = ',',
        value_name = "URL,..."
    )]
    pub coordinators: Option<Vec<String>>,
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "What to sample: nvml, sim[:SCENARIO] (steady, leak, fragmentation, imbalance, straggler, mixed) or none [default: nvml]"
    )]
    #[arg(long, env = "GPUMON_SOURCE")]
    pub source: Option<String>,
    /// Serve the in-process Python hooks here: unix:PATH (mode 0600) or a loopback HOST:PORT [default: no hook endpoint].
    #[arg(long, env = "GPUMON_HOOK_LISTEN", value_name = "ADDR")]
    pub hook_listen: Option<String>,
    /// Serve the node-level Prometheus /metrics here: IP:PORT, or none [default: 127.0.0.1:9401].
    #[arg(long, env = "GPUMON_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// File holding this agent's token, sent with every push (owner-only) [default: none].
    #[arg(long, env = "GPUMON_AGENT_TOKEN_FILE", value_name = "FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// Push without a token to coordinators on other hosts.
    #[arg(long, env = "GPUMON_INSECURE")]
    pub insecure: bool,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    /// Agent identity, stable across restarts [default: the node name].
    #[arg(long, env = "GPUMON_AGENT_ID")]
    pub agent_id: Option<String>,
    /// Node name shown in the cluster view [default: the host name].
    #[arg(long, env = "GPUMON_NODE_NAME")]
    pub node_name: Option<String>,
    /// Sampling period in milliseconds [default: 500].
    #[arg(long, env = "GPUMON_SAMPLE_INTERVAL_MS")]
    pub sample_interval_ms: Option<u64>,
    /// Window length in milliseconds: one push per window [default: 2000].
    #[arg(long, env = "GPUMON_WINDOW_MS")]
    pub window_ms: Option<u64>,
    /// Unacknowledged batches kept while coordinators are unreachable; past it the oldest batch not yet sent is dropped and counted [default: 1024].
    #[arg(long, env = "GPUMON_MAX_BUFFERED_BATCHES")]
    pub max_buffered_batches: Option<usize>,
    /// Largest batch pushed, bytes; larger ones are split [default: 1048576].
    #[arg(long, env = "GPUMON_MAX_BATCH_BYTES")]
    pub max_batch_bytes: Option<usize>,
    /// Simulator: nodes in the simulated job [default: 1].
    #[arg(long, env = "GPUMON_SIM_NODES")]
    pub sim_nodes: Option<u32>,
    /// Simulator: which node of the job this agent plays, from 0 [default: 0].
    #[arg(long, env = "GPUMON_SIM_NODE_INDEX")]
    pub sim_node_index: Option<u32>,
    /// Simulator: GPUs per node [default: 4].
    #[arg(long, env = "GPUMON_SIM_GPUS")]
    pub sim_gpus: Option<u32>,
    /// Simulator: random seed; the same seed gives the same run [default: 1].
    #[arg(long, env = "GPUMON_SIM_SEED")]
    pub sim_seed: Option<u64>,
    /// Simulator: job id of the simulated job [default: sim-job].
    #[arg(long, env = "GPUMON_SIM_JOB")]
    pub sim_job: Option<String>,
}

/// `gpumon coordinator`.
#[derive(Debug, Args)]
pub struct CoordinatorArgs {
    /// Raft node id, a positive integer unique in the cluster [default: 1].
    #[arg(long, env = "GPUMON_ID")]
    pub id: Option<u64>,
    /// Address for the API, agents and Raft peers [default: 127.0.0.1:7070].
    #[arg(long, env = "GPUMON_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Address peers and agents use to reach this replica, when --listen is a wildcard [default: the bound address].
    #[arg(long, env = "GPUMON_ADVERTISE", value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Directory for the Raft log and snapshots [default: ./gpumon-data].
    #[arg(long, env = "GPUMON_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Largest push accepted, bytes [default: 4194304].
    #[arg(long, env = "GPUMON_MAX_PUSH_BYTES")]
    pub max_push_bytes: Option<usize>,
    /// Slots of pushes between decoding and commit at once, one per 16 KiB of a push (at least one); more are answered 429 with Retry-After [default: 2048].
    #[arg(long, env = "GPUMON_MAX_PUSHES_IN_FLIGHT")]
    pub max_pushes_in_flight: Option<usize>,
    /// Connections the API listener holds at once; more are closed at once [default: 4096].
    #[arg(long, env = "GPUMON_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections held at once from one source (an IPv4 address or an IPv6 /64); raise it for many agents behind one NAT address [default: 512].
    #[arg(long, env = "GPUMON_MAX_CONNECTIONS_PER_SOURCE")]
    pub max_connections_per_source: Option<usize>,
    /// Windows of history kept per memory series [default: 1024].
    #[arg(long, env = "GPUMON_HISTORY_WINDOWS")]
    pub history_windows: Option<usize>,
    /// Agents tracked; a push or hello past it is refused with 429 until stale ones expire (every replica the same) [default: 16384].
    #[arg(long, env = "GPUMON_MAX_AGENTS")]
    pub max_agents: Option<usize>,
    /// GPUs tracked, by the cluster view and the engine (every replica the same) [default: 65536].
    #[arg(long, env = "GPUMON_MAX_GPUS")]
    pub max_gpus: Option<usize>,
    /// Ranks tracked at once, live and ended, and per job (every replica the same) [default: 131072].
    #[arg(long, env = "GPUMON_MAX_RANKS")]
    pub max_ranks: Option<usize>,
    /// Jobs the engine tracks, live and ended; the oldest ended job goes first (every replica the same) [default: 1024].
    #[arg(long, env = "GPUMON_MAX_JOBS")]
    pub max_jobs: Option<usize>,
    /// Which live ranks get per-rank series on /metrics: auto (all up to 4096 live ranks, then only those with an active alert), all, or alerting [default: auto].
    #[arg(
        long,
        env = "GPUMON_METRICS_RANK_SERIES",
        value_name = "auto|all|alerting"
    )]
    pub metrics_rank_series: Option<String>,
    /// Forget agents, GPUs and ended jobs quiet for this many seconds of data time; 0: never [default: 3600].
    #[arg(long, env = "GPUMON_EXPIRE_AFTER_S")]
    pub expire_after_s: Option<u64>,
    /// Free space kept on the data directory's file system; writes are refused with 507 below it; 0: never [default: 67108864].
    #[arg(long, env = "GPUMON_MIN_FREE_BYTES")]
    pub min_free_bytes: Option<u64>,
    /// Raft log entries applied between snapshots on a follower; the leader waits three times as long [default: 10000].
    #[arg(long, env = "GPUMON_SNAPSHOT_EVERY_ENTRIES")]
    pub snapshot_every_entries: Option<u64>,
    /// Bytes per chunk when a snapshot is sent to a lagging replica [default: 1048576].
    #[arg(long, env = "GPUMON_SNAPSHOT_CHUNK_BYTES")]
    pub snapshot_chunk_bytes: Option<u64>,
    /// The voters a fresh cluster forms with, this replica included; every replica gets the same list. Ignored once the replica has a log (change membership with `gpumon cluster`) [default: a single-replica cluster].
    #[arg(long, env = "GPUMON_PEERS", value_name = "ID=HOST:PORT,...")]
    pub peers: Option<String>,
    /// Start empty and wait to be added to a running cluster with `gpumon cluster add`.
    #[arg(long, env = "GPUMON_JOIN", conflicts_with = "peers")]
    pub join: bool,
    /// File holding the secret replicas send each other on Raft RPC (owner-only, 16+ characters) [default: none; Raft RPC open].
    #[arg(long, env = "GPUMON_CLUSTER_SECRET_FILE", value_name = "FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// File of the agent tokens accepted on pushes, one per line (owner-only) [default: none; pushes open].
    #[arg(long, env = "GPUMON_AGENT_TOKEN_FILE", value_name = "FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// File holding the token admin requests carry; it also reads (owner-only) [default: none; admin requests only from loopback].
    #[arg(long, env = "GPUMON_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// The admin token itself; prefer --admin-token-file: a flag's value shows in `ps`.
    #[arg(
        long,
        env = "GPUMON_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        conflicts_with = "admin_token_file"
    )]
    pub admin_token: Option<String>,
    /// Reads (the JSON API, /metrics, the stream) need the admin token.
    #[arg(long, env = "GPUMON_CLOSED_READS")]
    pub closed_reads: bool,
    /// Serve the API and Raft over TLS with this certificate chain (PEM); peers are then reached over https [default: plain HTTP].
    #[arg(long, env = "GPUMON_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM, owner-only).
    #[arg(long, env = "GPUMON_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Mutual TLS: every client (agents, the CLI, peers) must present a certificate issued by a CA in this PEM file [default: none asked].
    #[arg(long, env = "GPUMON_TLS_CLIENT_CA_FILE", value_name = "FILE")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Verify peers with the CA certificates in this PEM file [default: --tls-client-ca-file, else the public roots].
    #[arg(long, env = "GPUMON_TLS_CA_FILE", value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// Run without secrets on an address other hosts can reach.
    #[arg(long, env = "GPUMON_INSECURE")]
    pub insecure: bool,
    #[command(flatten)]
    pub notify: NotifyArgs,
    #[command(flatten)]
    pub remote_write: RemoteWriteArgs,
}

/// `gpumon cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(subcommand)]
    pub what: ClusterCommand,
}

/// `gpumon config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(subcommand)]
    pub what: ConfigCommand,
}

/// What `gpumon config` does.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Every live setting: the value in effect, where it comes from, what it takes.
    Show {
        /// The values in effect for this job's ranks.
        #[arg(long)]
        job: Option<String>,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Change settings live, through the Raft log: every replica applies the change from the next window, nothing restarts.
    Set {
        /// For this job only (keys that judge a job's ranks).
        #[arg(long)]
        job: Option<String>,
        /// KEY=VALUE pairs, e.g. straggler.min_loss_ms=5.
        #[arg(value_name = "KEY=VALUE", required = true)]
        pairs: Vec<String>,
    },
    /// Put settings back to what applies without a live change (the job's to the cluster's, the cluster's to the configuration file's).
    Reset {
        /// The job's settings.
        #[arg(long)]
        job: Option<String>,
        /// Every live change of the scope.
        #[arg(long, conflicts_with = "keys")]
        all: bool,
        /// The keys.
        #[arg(value_name = "KEY", required_unless_present = "all")]
        keys: Vec<String>,
    },
}

/// How an admin command reaches the coordinators.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Coordinator base URLs, comma-separated; any replica will do.
    #[arg(
        long,
        visible_alias = "coordinator",
        env = "GPUMON_COORDINATORS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:7070",
        value_name = "URL,...",
        global = true
    )]
    pub coordinators: Vec<String>,
    /// The admin token the coordinators were started with (it also reads).
    #[arg(
        long,
        env = "GPUMON_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub admin_token: Option<String>,
    /// A file holding the admin token (owner-only).
    #[arg(
        long,
        env = "GPUMON_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        global = true,
        conflicts_with = "admin_token"
    )]
    pub admin_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// What `gpumon cluster` does.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Every replica's role, term, indexes, lag and state digest.
    Status {
        /// Print JSON (one object per replica) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Add a running replica (started with --join): it catches up as a learner, then votes.
    Add {
        /// The replica, as ID=HOST:PORT.
        #[arg(value_name = "ID=HOST:PORT")]
        member: String,
        /// Keep it a learner: it replicates and serves reads but never votes.
        #[arg(long)]
        learner: bool,
    },
    /// Remove a replica from the cluster.
    Remove {
        /// Its Raft id.
        #[arg(value_name = "ID")]
        id: u64,
    },
}

/// `gpumon status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "A coordinator's base URL [default: the first of the config file's [agent] coordinators, else http://127.0.0.1:7070]"
    )]
    #[arg(long, visible_alias = "coordinators", env = "GPUMON_COORDINATOR")]
    pub coordinator: Option<String>,
    /// Print JSON (`{"cluster", "jobs", "analysis", "alerts"}`) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// `gpumon top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "A coordinator's base URL [default: the first of the config file's [agent] coordinators, else http://127.0.0.1:7070]"
    )]
    #[arg(long, visible_alias = "coordinators", env = "GPUMON_COORDINATOR")]
    pub coordinator: Option<String>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub interval: f64,
    /// Only this job.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Print one frame and exit.
    #[arg(long)]
    pub once: bool,
    /// No colors, even on a terminal (also when NO_COLOR is set).
    #[arg(long)]
    pub no_color: bool,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// `gpumon demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Stop after this many seconds [default: run until Ctrl-C].
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Address of the first replica's API; the other two take the next ports [default: 127.0.0.1:7070-7072, or free ports if taken].
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Simulated scenario: steady, leak, fragmentation, imbalance, straggler or mixed.
    #[arg(long, default_value = "mixed")]
    pub scenario: String,
    /// Random seed of the simulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop the Raft leader every --chaos-every seconds and restart it 5 s later, while data keeps flowing.
    #[arg(long)]
    pub chaos: bool,
    /// Seconds between leader stops with --chaos.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub chaos_every: f64,
    #[command(flatten)]
    pub notify: NotifyArgs,
}

/// Where the Raft leader sends notifications about alerts (`gpumon
/// coordinator` and `gpumon demo`); each flag repeats, and replaces the
/// `[notify]` list of its kind in the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct NotifyArgs {
    /// POST each alert (firing, repeated, resolved) as JSON to this URL; repeat for more.
    #[arg(long, env = "GPUMON_NOTIFY_WEBHOOK", value_name = "URL")]
    pub notify_webhook: Vec<String>,
    /// Post each alert to this Slack incoming webhook (Block Kit); repeat for more.
    #[arg(
        long,
        env = "GPUMON_NOTIFY_SLACK",
        value_name = "URL",
        hide_env_values = true
    )]
    pub notify_slack: Vec<String>,
    /// Post alerts to this Alertmanager (base URL; POST /api/v2/alerts); repeat for more.
    #[arg(long, env = "GPUMON_NOTIFY_ALERTMANAGER", value_name = "URL")]
    pub notify_alertmanager: Vec<String>,
    /// Base URL of the dashboard that notifications link to [default: the coordinator's advertised API URL].
    #[arg(long, env = "GPUMON_DASHBOARD_URL", value_name = "URL")]
    pub dashboard_url: Option<String>,
}

/// Where the Raft leader writes the raw per-GPU series with Prometheus
/// remote-write; each flag replaces its key of the `[remote_write]` table.
#[derive(Debug, Clone, Default, Args)]
pub struct RemoteWriteArgs {
    /// Send the per-GPU series to this remote-write endpoint (e.g. http://prometheus:9090/api/v1/write) [default: none; off].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_URL", value_name = "URL")]
    pub remote_write_url: Option<String>,
    /// File holding the bearer token sent to the endpoint (owner-only).
    #[arg(
        long,
        env = "GPUMON_REMOTE_WRITE_BEARER_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub remote_write_bearer_token_file: Option<PathBuf>,
    /// Verify an https endpoint with the CA certificates in this PEM file [default: the public roots].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_CA_FILE", value_name = "FILE")]
    pub remote_write_ca_file: Option<PathBuf>,
    /// Seconds between sends [default: 15].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_INTERVAL_S", value_name = "SECS")]
    pub remote_write_interval_s: Option<f64>,
    /// Seconds allowed for one request [default: 30].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_TIMEOUT_S", value_name = "SECS")]
    pub remote_write_timeout_s: Option<f64>,
    /// Most samples in one request; more make several [default: 10000].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_MAX_SAMPLES_PER_REQUEST")]
    pub remote_write_max_samples_per_request: Option<usize>,
    /// Most samples waiting to be sent; past it the oldest requests are dropped and counted [default: 2000000].
    #[arg(long, env = "GPUMON_REMOTE_WRITE_MAX_QUEUED_SAMPLES")]
    pub remote_write_max_queued_samples: Option<usize>,
    // `help`, not a doc comment: rustdoc would take the brackets for links.
    #[arg(
        help = "A label added to every series, as NAME=VALUE (e.g. cluster=a); repeat for more; replaces [remote_write] labels"
    )]
    #[arg(long, env = "GPUMON_REMOTE_WRITE_LABEL", value_name = "NAME=VALUE")]
    pub remote_write_label: Vec<String>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// Every command takes the coordinator's URL by either spelling.
    #[test]
    fn coordinator_and_coordinators_are_one_flag() {
        let url = "http://10.0.0.5:7070";
        for argv in [
            vec!["gpumon", "status", "--coordinators", url],
            vec!["gpumon", "top", "--coordinators", url],
            vec!["gpumon", "record", "--coordinators", url, "-o", "t.jsonl"],
            vec!["gpumon", "agent", "--coordinator", url, "--insecure"],
            vec!["gpumon", "cluster", "--coordinator", url, "status"],
            vec!["gpumon", "run", "--coordinator", url, "--", "python3"],
        ] {
            let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let got = format!("{:?}", cli.command);
            assert!(got.contains(url), "{argv:?} lost the URL: {got}");
        }
    }
}
