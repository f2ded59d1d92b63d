//! The sweep's JSON output (`gpumon sweep --json FILE`): the command
//! template, the parameters and one result per point run. Its layout is
//! versioned by `gpumon_sweep`; fields are only added. Memory is bytes,
//! times are seconds since the Unix epoch unless named `_ms` or `_s`.
//! The CSV and HTML outputs are made from this; docs/profile.md describes
//! every field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::grid::Param;

/// Format version, in the `gpumon_sweep` field.
pub const SWEEP_VERSION: u32 = 1;

/// The whole output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Format version ([`SWEEP_VERSION`]).
    pub gpumon_sweep: u32,
    /// The command as given, `{name}` placeholders and all.
    pub command: Vec<String>,
    /// The `--env VAR=VALUE` templates given.
    pub env: Vec<String>,
    /// The parameters, in the order given (the first is the outermost loop).
    pub params: Vec<Param>,
    /// Points in the grid.
    pub grid_points: usize,
    /// When the sweep started.
    pub started_t: f64,
    /// When the latest point ended (the file is rewritten after each).
    pub ended_t: f64,
    /// The points run, in order.
    pub points: Vec<PointResult>,
    /// Points not run because a smaller value of the first parameter ran
    /// out of memory (`--stop-after-oom`).
    pub skipped: Vec<Skipped>,
    /// The sweep was stopped (Ctrl-C or SIGTERM) before its last point.
    pub interrupted: bool,
}

/// How a point ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It ran to its end and exited 0.
    Ok,
    /// It ran out of memory (its profile report says so): a result.
    Oom,
    /// It ran past `--point-timeout` and was stopped.
    Timeout,
    /// Anything else: a non-zero exit, a missing or unreadable report, a
    /// stop of the sweep.
    Failed,
}

impl Status {
    /// Its name in the outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Oom => "oom",
            Status::Timeout => "timeout",
            Status::Failed => "failed",
        }
    }
}

/// What a point's profile report says, reduced to one line of numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// Highest GPU memory used, on any of its GPUs.
    pub peak_gpu_used_bytes: Option<u64>,
    /// Capacity of the GPU that was fullest (by share).
    pub gpu_total_bytes: Option<u64>,
    /// Highest share of a GPU's capacity in use, percent.
    pub peak_gpu_used_pct: Option<f64>,
    /// Highest allocated (live tensors) of any rank, from the hook.
    pub peak_allocated_bytes: Option<u64>,
    /// Highest reserved (the caching allocator's) of any rank.
    pub peak_reserved_bytes: Option<u64>,
    /// Step time, ms: the median over ranks of each rank's median.
    pub step_ms_p50: Option<f64>,
    /// Step time, ms: the median over ranks of each rank's 90th percentile.
    pub step_ms_p90: Option<f64>,
    /// Steps finished, by the rank that finished most.
    pub steps: u64,
    /// Alert episodes by kind (`memory_level`, `leak`, ...).
    pub alerts: BTreeMap<String, u64>,
}

/// One point run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Its place in the grid, from 1 (as in the progress lines and the
    /// work directory's file names).
    pub point: usize,
    /// Each parameter's value.
    pub params: BTreeMap<String, String>,
    /// How it ended.
    pub status: Status,
    /// `gpumon profile`'s exit code (the command's own), when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended `gpumon profile`, when one did.
    pub exit_signal: Option<i32>,
    /// Why it ran out of memory, failed or was stopped, for people.
    pub reason: Option<String>,
    /// From its profile report (all empty when there was none).
    #[serde(flatten)]
    pub measures: Measures,
    /// Its profile report, when kept (`--keep-reports`, or it did not end ok).
    pub report: Option<String>,
    /// Its output (the command's and gpumon's), when kept.
    pub log: Option<String>,
    /// How long it ran, seconds.
    pub wall_s: f64,
}

/// A point not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// Its place in the grid, from 1.
    pub point: usize,
    /// Each parameter's value.
    pub params: BTreeMap<String, String>,
}
