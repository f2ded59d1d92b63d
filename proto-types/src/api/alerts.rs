//! Alert episodes as the API shows them: `GET /api/v1/alerts`, its query
//! and its answer.
//!
//! Times named `t` and `*_t` are seconds since the Unix epoch (trace time).

use serde::{Deserialize, Serialize};

use super::query::Consistency;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A rank (or GPU) is forecast to run out of memory.
    OomPredicted,
    /// Memory that is never given back.
    Leak,
    /// The caching allocator holds memory it cannot reuse.
    Fragmentation,
    /// A rank holds clearly more memory than its peers.
    Imbalance,
    /// A rank's compute is persistently slower than its peers'.
    Straggler,
    /// A GPU's used memory is at or above a fixed level of its capacity
    /// (warning or critical), whatever the trend.
    MemoryLevel,
    /// One pipeline stage does persistently more work per step than the
    /// others, which wait for it (the alert's rank is the stage's lowest).
    StageImbalance,
    /// A job's live ranks have finished no step for 10 median steps (at
    /// least a minute) while they wait in a collective; the alert's rank is
    /// the one they wait for.
    Hang,
    /// A process group's collectives take longer for every member while
    /// the members' own work is unchanged (the alert's rank is the group's
    /// lowest in the deciding step).
    SlowLink,
    /// A rank's memory outside the caching allocator (NVML's figure for the
    /// process less the allocator's reserved: CUDA context, NCCL buffers,
    /// library workspaces) grew well above what it was after start-up.
    OutsideMemory,
}

impl AlertKind {
    /// Every kind, in a fixed order.
    pub const ALL: [AlertKind; 10] = [
        AlertKind::OomPredicted,
        AlertKind::Leak,
        AlertKind::Fragmentation,
        AlertKind::Imbalance,
        AlertKind::Straggler,
        AlertKind::MemoryLevel,
        AlertKind::StageImbalance,
        AlertKind::Hang,
        AlertKind::SlowLink,
        AlertKind::OutsideMemory,
    ];

    /// The name used in reports and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::OomPredicted => "oom_predicted",
            AlertKind::Leak => "leak",
            AlertKind::Fragmentation => "fragmentation",
            AlertKind::Imbalance => "imbalance",
            AlertKind::Straggler => "straggler",
            AlertKind::MemoryLevel => "memory_level",
            AlertKind::StageImbalance => "stage_imbalance",
            AlertKind::Hang => "hang",
            AlertKind::SlowLink => "slow_link",
            AlertKind::OutsideMemory => "outside_memory",
        }
    }
}

/// How urgent an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth a look.
    Warning,
    /// Act soon.
    High,
    /// Act now.
    Critical,
}

/// One alert episode, as reports and the API show it. Fields that do not
/// apply to its kind are `null` (the type is also stored in Raft snapshots,
/// whose binary encoding cannot skip fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alert {
    /// Sequence number, unique per engine.
    pub id: u64,
    /// What it is about.
    pub kind: AlertKind,
    /// The job, when the subject is a rank.
    #[serde(default)]
    pub job: Option<String>,
    /// The rank, when the subject is a rank.
    #[serde(default)]
    pub rank: Option<u32>,
    /// The node of the GPU involved, when known.
    #[serde(default)]
    pub node: Option<String>,
    /// The GPU index involved, when known.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// Trace time it first fired, seconds.
    pub t: f64,
    /// Current severity.
    pub severity: Severity,
    /// Trace time of the latest update, seconds.
    pub updated_t: f64,
    /// Trace time it resolved, seconds; absent while active.
    #[serde(default)]
    pub resolved_t: Option<f64>,
    /// Predicted OOM time, seconds (OOM alerts).
    #[serde(default)]
    pub predicted_oom_t: Option<f64>,
    /// Interval of the predicted OOM time, seconds (OOM alerts).
    #[serde(default)]
    pub predicted_oom_interval: Option<[f64; 2]>,
    /// 0 to 1 (OOM alerts).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Growth, bytes per second (OOM and leak alerts).
    #[serde(default)]
    pub rate_bytes_per_s: Option<f64>,
    /// How many times slower than its peers (straggler alerts).
    #[serde(default)]
    pub slowdown: Option<f64>,
    /// The slowest section (straggler alerts).
    #[serde(default)]
    pub section: Option<String>,
    /// Bytes above the job's median (imbalance alerts).
    #[serde(default)]
    pub excess_bytes: Option<f64>,
    /// Percent above the job's median (imbalance alerts).
    #[serde(default)]
    pub excess_pct: Option<f64>,
    /// Bytes `empty_cache()` could release.
    #[serde(default)]
    pub reclaimable_bytes: Option<f64>,
    /// What to do about it.
    #[serde(default)]
    pub recommendation: Option<String>,
    /// One line for people.
    pub message: String,
}

impl Alert {
    /// True until resolved.
    pub fn is_active(&self) -> bool {
        self.resolved_t.is_none()
    }
}

/// `GET /api/v1/alerts`'s query; unknown parameters are refused so that
/// typos do not pass silently.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct AlertsQuery {
    /// Only active episodes.
    pub active: Option<bool>,
    /// Only this job's.
    pub job: Option<String>,
    /// At most this many, the newest (default 1000, at most 10000).
    pub limit: Option<usize>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// `GET /api/v1/alerts`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertsBody {
    /// Newest trace time the engine has seen, seconds since the Unix epoch.
    pub now: Option<f64>,
    /// Matching episodes, oldest first.
    pub alerts: Vec<Alert>,
    /// Matching episodes left out by `limit`.
    pub truncated: usize,
}
