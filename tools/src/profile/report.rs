//! The profile report (`gpumon profile --json FILE`): what one run of one
//! command used, per GPU, per rank and on the host, what the engine found,
//! and what to change. Its layout is versioned by `gpumon_profile`; fields
//! are only added. Times are seconds since the Unix epoch, memory is bytes.
//!
//! The HTML report and `gpumon sweep` read this type, and so may users'
//! scripts: docs/profile.md describes every field.

use std::collections::BTreeMap;

use gpumon_core::engine::{Alert, Risk};
use gpumon_proto::api::OomForecast;
use gpumon_proto::api::{ActionEntry, NamedMemorySnapshot, StepVerdict};
use serde::{Deserialize, Serialize};

/// Report format version, in the `gpumon_profile` field.
pub const PROFILE_VERSION: u32 = 1;

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    /// Format version ([`PROFILE_VERSION`]).
    pub gpumon_profile: u32,
    /// The command as given, program first.
    pub command: Vec<String>,
    /// When the command started.
    pub started_t: f64,
    /// When it ended (or the report was written).
    pub ended_t: f64,
    /// How it ended.
    pub exit: ExitInfo,
    /// Where GPU samples came from: `nvml`, `hook` (the hook's memory
    /// source, no NVML), or a simulator's name.
    pub source: String,
    /// The memory levels in force, percent.
    pub levels: Levels,
    /// Host RAM and the command's process tree.
    pub host: HostReport,
    /// Per GPU, by node then index.
    pub gpus: Vec<GpuReport>,
    /// Per rank, by job then rank.
    pub ranks: Vec<RankReport>,
    /// Per job: world size and the job's OOM forecast (its earliest rank's).
    pub jobs: BTreeMap<String, JobReport>,
    /// The hook's marks and named snapshots, oldest first (bounded).
    pub marks: Vec<Mark>,
    /// Allocator snapshots the hook saved (PyTorch's format), by path.
    pub allocator_snapshots: Vec<String>,
    /// Every alert episode, the engine's and the host's, in firing order.
    pub alerts: Vec<Alert>,
    /// What to change, with numbers.
    pub recommendations: Vec<Recommendation>,
    /// Counts of what was read and skipped.
    pub summary: Summary,
    /// Named allocator snapshots (`gpumon.snapshot`) by job, each with
    /// every rank's statistics: what `gpumon snapshots diff --profile`
    /// compares.
    #[serde(default)]
    pub snapshots: BTreeMap<String, Vec<NamedMemorySnapshot>>,
    /// The actions the engine issued to the hooks and how they ended: a
    /// hung job's evidence dumps, whose `detail` names the files saved.
    #[serde(default)]
    pub actions: Vec<ActionEntry>,
}

/// How the command ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// It ran out of GPU memory (the allocator counted an OOM, or the hook
    /// reported one) or was killed while host RAM was at its critical level.
    pub oom: bool,
    /// Why `oom` is true, for people.
    pub oom_reason: Option<String>,
    /// gpumon stopped it (Ctrl-C or SIGTERM to gpumon).
    pub interrupted: bool,
}

/// Memory levels, percent of capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Levels {
    /// GPU warning level.
    pub gpu_warning_pct: f64,
    /// GPU critical level.
    pub gpu_critical_pct: f64,
    /// Host RAM warning level.
    pub host_warning_pct: f64,
    /// Host RAM critical level.
    pub host_critical_pct: f64,
}

/// A point of a timeline: time, then the series' values.
pub type Point<const N: usize> = (f64, [u64; N]);

/// Host RAM and the command's process tree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// Host RAM.
    pub total_bytes: u64,
    /// Highest RAM in use (total less available).
    pub peak_used_bytes: u64,
    /// Mean RAM in use.
    pub avg_used_bytes: u64,
    /// Highest resident memory of the command and its descendants.
    pub peak_rss_bytes: u64,
    /// Mean resident memory of the process tree.
    pub avg_rss_bytes: u64,
    /// `(t, [used, rss])`, at most a few thousand points.
    pub timeline: Vec<Point<2>>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    /// Node name.
    pub node: String,
    /// Device index.
    pub gpu: u32,
    /// Device UUID.
    pub uuid: String,
    /// Device model.
    pub name: String,
    /// Capacity.
    pub total_bytes: u64,
    /// Highest used memory (the highest sample of any window).
    pub peak_used_bytes: u64,
    /// Mean used memory over the windows.
    pub avg_used_bytes: u64,
    /// Mean utilization, percent, when known.
    pub avg_util_pct: Option<f64>,
    /// OOM risk at the end.
    pub risk: Risk,
    /// OOM forecast at the end, when memory grew.
    pub forecast: Option<OomForecast>,
    /// `(t, [used, highest in window])`, at most a few thousand points.
    pub timeline: Vec<Point<2>>,
}

/// One rank (one training process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Node, when known.
    pub node: Option<String>,
    /// GPU index, when known.
    pub gpu: Option<u32>,
    /// Process id, when known.
    pub pid: Option<u32>,
    /// Highest allocated (live tensors), from the hook.
    pub peak_allocated_bytes: Option<u64>,
    /// Mean allocated, from the hook.
    pub avg_allocated_bytes: Option<u64>,
    /// Highest reserved (the caching allocator's), from the hook.
    pub peak_reserved_bytes: Option<u64>,
    /// Mean reserved, from the hook.
    pub avg_reserved_bytes: Option<u64>,
    /// Lowest allocated seen after the first step: what stays between
    /// steps (parameters, gradients, optimizer state).
    pub floor_allocated_bytes: Option<u64>,
    /// Highest used memory of the process on its GPU (NVML or the hook).
    pub peak_used_bytes: u64,
    /// Memory outside the caching allocator at the end: NVML's figure for
    /// the process less `reserved` (CUDA context, NCCL buffers, library
    /// workspaces); with NVML and the hook both.
    #[serde(default)]
    pub outside_allocator_bytes: Option<u64>,
    /// The same after the rank's start-up.
    #[serde(default)]
    pub outside_allocator_baseline_bytes: Option<u64>,
    /// The limit its memory met first at the end, when its hook reported
    /// what bounds it (its allocator's cap, a MIG slice): the forecast,
    /// the levels and the batch advice read it instead of the GPU's
    /// capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<gpumon_proto::api::MemoryLimit>,
    /// OOM errors the allocator counted.
    pub ooms: u64,
    /// Steps finished.
    pub steps: u64,
    /// Step time, ms: median and 90th percentile over the recent steps.
    pub step_ms: Option<Quantiles>,
    /// Section times, ms per step: median over the recent steps, by name.
    pub sections: BTreeMap<String, Quantiles>,
    /// Where the rank's step goes and what bounds it.
    #[serde(default)]
    pub step_verdict: Option<StepVerdict>,
    /// Leak verdict at the end, with its rate.
    pub leak: bool,
    /// Leak rate, bytes per second, when leaking.
    pub leak_bytes_per_s: Option<f64>,
    /// Fragmentation verdict at the end.
    pub fragmentation: bool,
    /// Imbalance verdict at the end.
    pub imbalance: bool,
    /// Straggler verdict at the end.
    pub straggler: bool,
    /// How much slower than its peers, when a straggler.
    pub slowdown: Option<f64>,
    /// OOM risk at the end.
    pub risk: Risk,
    /// OOM forecast at the end.
    pub forecast: Option<OomForecast>,
    /// `(t, [allocated, reserved])` from the hook, at most a few thousand points.
    pub timeline: Vec<Point<2>>,
}

/// Median and 90th percentile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// World size.
    pub world_size: u32,
    /// The job's OOM forecast: its earliest rank's, when any grows.
    pub forecast_rank: Option<u32>,
    /// That rank's forecast.
    pub forecast: Option<OomForecast>,
    /// Where the job's step goes (its ranks' medians) and what bounds it.
    #[serde(default)]
    pub step_verdict: Option<StepVerdict>,
}

/// A mark, a named snapshot or another hook event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// When.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Rank.
    pub rank: u32,
    /// The name given (`gpumon.mark`, `gpumon.snapshot`, or the hook's own:
    /// `model`, `nonfinite`, `allocator_snapshot`).
    pub name: String,
    /// Its detail text.
    pub detail: Option<String>,
    /// Allocated and reserved at a named snapshot.
    pub snapshot: Option<[u64; 2]>,
}

/// Something to change, where it applies, and the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// `batch_size`, `expandable_segments`, `gradient_checkpointing`,
    /// `leak`, `straggler` or `host_memory`.
    pub kind: String,
    /// Where it applies: `job` and `rank`, when it is one rank's.
    pub job: Option<String>,
    /// The rank it applies to.
    pub rank: Option<u32>,
    /// The advice, for people, with its numbers.
    pub text: String,
    /// The numbers, by name (e.g. `batch_fraction`, `reclaimable_bytes`).
    pub numbers: BTreeMap<String, f64>,
}

/// Counts of what the run produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// GPU windows applied.
    pub windows: u64,
    /// Hook records applied.
    pub hook_records: u64,
    /// Windows the cluster's checks refused.
    pub windows_skipped: u64,
    /// Hook records the checks refused.
    pub hook_records_skipped: u64,
    /// Host samples taken.
    pub host_samples: u64,
    /// Marks beyond the bound, left out.
    pub marks_dropped: u64,
}
