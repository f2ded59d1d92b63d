//! The arguments of the commands this crate runs: `gpumon profile`,
//! `sweep`, `compare`, `run` and `bench`, and how a client reaches
//! coordinators over https. The `gpumon` binary parses them (its own
//! `args` module places them among the other commands).

use std::path::PathBuf;

use clap::Args;
use gpumon_net::{ClientTls, Identity, TlsError};

pub mod bench;
pub use bench::{BenchArgs, BenchCommand, IngestArgs};

/// `gpumon compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a `gpumon profile --json` report, or a `gpumon sweep --json` output.
    #[arg(value_name = "A.json")]
    pub a: PathBuf,
    /// The run compared with it, of the same kind.
    #[arg(value_name = "B.json")]
    pub b: PathBuf,
    /// Largest increase of the median step time accepted, percent of A's.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub max_step_time_regression_pct: f64,
    /// Largest increase of the peak memory accepted, percent of A's.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub max_peak_memory_regression_pct: f64,
    /// Also write the comparison as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `gpumon sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// A parameter and its values, NAME=V1,V2,...; {NAME} in the command (or an --env value) takes each value, and the command gets GPUMON_SWEEP_NAME. Repeat for up to 4; the first is the outermost loop.
    #[arg(long = "param", required = true, value_name = "NAME=V1,V2,...")]
    pub params: Vec<String>,
    /// A variable for each point's command, VAR=VALUE, with {NAME} placeholders; repeatable.
    #[arg(long = "env", value_name = "VAR=VALUE")]
    pub env: Vec<String>,
    /// Where the results go as JSON [default: gpumon-sweep.json].
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where the results go as CSV [default: the JSON file's name ending in .csv].
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write a self-contained HTML page: a heatmap of peak memory over the first two parameters, and every point.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Where each point's profile report and output go [default: gpumon-sweep/ beside the JSON file].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Keep every point's report and output, not only those of points that failed or timed out.
    #[arg(long)]
    pub keep_reports: bool,
    /// Stop a point still running after this many seconds (SIGINT: it still writes its report).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=7 * 24 * 3600), value_name = "SECS")]
    pub point_timeout: u64,
    /// Once a point runs out of memory, skip the larger values of the first parameter (with the same values of the others).
    #[arg(long)]
    pub stop_after_oom: bool,
    /// Passed to gpumon profile: what to sample (nvml, none, sim:SCENARIO).
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// Passed to gpumon profile: time between two samples, ms.
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=60_000), value_name = "MS")]
    pub interval_ms: Option<u64>,
    /// Passed to gpumon profile: window length, ms.
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=600_000), value_name = "MS")]
    pub window_ms: Option<u64>,
    /// Passed to gpumon profile: GPU memory warning level, percent.
    #[arg(long, value_name = "PCT")]
    pub gpu_warning_pct: Option<f64>,
    /// Passed to gpumon profile: GPU memory critical level, percent.
    #[arg(long, value_name = "PCT")]
    pub gpu_critical_pct: Option<f64>,
    /// Passed to gpumon profile: host RAM warning level, percent.
    #[arg(long, value_name = "PCT")]
    pub host_warning_pct: Option<f64>,
    /// Passed to gpumon profile: host RAM critical level, percent.
    #[arg(long, value_name = "PCT")]
    pub host_critical_pct: Option<f64>,
    /// The command, after `--`, with {NAME} placeholders ({{ and }} for literal braces).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `gpumon profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Where the JSON report goes [default: gpumon-profile.json].
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where the HTML report goes [default: the JSON report's path with .html].
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Time between two samples of the GPUs and host RAM, ms.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000), value_name = "MS")]
    pub interval_ms: u64,
    /// Samples fold into windows this long, ms (at least the interval).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..=600_000), value_name = "MS")]
    pub window_ms: u64,
    /// What to sample: nvml, none (the hook's memory only) or sim:SCENARIO [default: nvml, the hook's memory where NVML is missing].
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// GPU memory warning level, percent of capacity [default: 80, or [engine.memory_levels] of --config].
    #[arg(long, value_name = "PCT")]
    pub gpu_warning_pct: Option<f64>,
    /// GPU memory critical level, percent [default: 95].
    #[arg(long, value_name = "PCT")]
    pub gpu_critical_pct: Option<f64>,
    /// Host RAM warning level, percent [default: 75, or [engine.host_memory_levels] of --config].
    #[arg(long, value_name = "PCT")]
    pub host_warning_pct: Option<f64>,
    /// Host RAM critical level, percent [default: 90].
    #[arg(long, value_name = "PCT")]
    pub host_critical_pct: Option<f64>,
    /// Where the hook saves PyTorch allocator snapshots [default: beside the JSON report].
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    /// The job's name for a command outside torchrun [default: profile-SCRIPT].
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// No live status line.
    #[arg(long, short)]
    pub quiet: bool,
    /// The command, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `gpumon run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent's hook endpoint: unix:PATH or a loopback HOST:PORT [default: unix:$XDG_RUNTIME_DIR/gpumon/hook.sock, else unix:/tmp/gpumon-UID/hook.sock].
    #[arg(long, env = "GPUMON_AGENT", value_name = "ADDR")]
    pub agent: Option<String>,
    /// For an agent this command starts: coordinator base URLs, comma-separated.
    #[arg(
        long,
        visible_alias = "coordinator",
        env = "GPUMON_COORDINATORS",
        value_name = "URL,..."
    )]
    pub coordinators: Option<String>,
    /// For an agent this command starts: what it samples (nvml, none, ...) [default: nvml, hook data only where NVML is missing].
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// The command, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// How a client reaches coordinators over https: whom it trusts and, for
/// coordinators that require one, the certificate it shows.
#[derive(Debug, Clone, Default, Args)]
pub struct ClientTlsArgs {
    /// Verify https coordinators with the CA certificates in this PEM file [default: the public roots].
    #[arg(long, env = "GPUMON_TLS_CA_FILE", value_name = "FILE", global = true)]
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for coordinators that require one (mutual TLS); with --tls-key-file.
    #[arg(long, env = "GPUMON_TLS_CERT_FILE", value_name = "FILE", global = true)]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM, owner-only).
    #[arg(long, env = "GPUMON_TLS_KEY_FILE", value_name = "FILE", global = true)]
    pub tls_key_file: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The settings: these flags (or their environment), else `file`'s
    /// `(tls_ca_file, tls_cert_file, tls_key_file)`; the files are read
    /// once here, so a missing or open key shows before any request.
    pub fn resolve(
        &self,
        file: (Option<&PathBuf>, Option<&PathBuf>, Option<&PathBuf>),
    ) -> Result<ClientTls, TlsFlagsError> {
        let ca_file = self.tls_ca_file.clone().or(file.0.cloned());
        let cert = self.tls_cert_file.clone().or(file.1.cloned());
        let key = self.tls_key_file.clone().or(file.2.cloned());
        let tls = ClientTls {
            ca_file,
            identity: identity(cert, key)?,
        };
        tls.config()?;
        Ok(tls)
    }
}

/// A certificate and key given together, or neither.
pub fn identity(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<Identity>, TlsFlagsError> {
    match (cert, key) {
        (Some(cert_file), Some(key_file)) => Ok(Some(Identity {
            cert_file,
            key_file,
        })),
        (None, None) => Ok(None),
        _ => Err(TlsFlagsError::Unpaired),
    }
}

/// Why the TLS flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFlagsError {
    /// A certificate without its key, or the reverse.
    #[error("--tls-cert-file and --tls-key-file go together: give both or neither")]
    Unpaired,
    /// The files cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
}
