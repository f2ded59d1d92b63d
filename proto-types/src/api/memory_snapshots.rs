//! Named allocator snapshots (`gpumon.snapshot(NAME)`): the two answers of
//! `GET /api/v1/jobs/{job}/snapshots`, the list and, with `?a=&b=`, the
//! comparison rank by rank.

use serde::{Deserialize, Serialize};

use super::query::Consistency;
use crate::hook::AllocStats;

/// `GET /api/v1/jobs/{job}/snapshots`'s query: both of `a` and `b` to
/// compare two snapshots, or neither to list them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct MemorySnapshotsQuery {
    /// The earlier snapshot's name.
    pub a: Option<String>,
    /// The later snapshot's name.
    pub b: Option<String>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// One rank's entry in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankMemorySnapshot {
    /// Global rank.
    pub rank: u32,
    /// When it took the snapshot, seconds since the Unix epoch.
    pub t: f64,
    /// The allocator's statistics then.
    #[serde(flatten)]
    pub stats: AllocStats,
}

/// One named snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamedMemorySnapshot {
    /// Its name.
    pub name: String,
    /// When the first rank took it.
    pub first_t: f64,
    /// When the last rank took it.
    pub last_t: f64,
    /// Every rank that took it.
    pub ranks: Vec<RankMemorySnapshot>,
}

/// The list form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemorySnapshotList {
    /// The job.
    pub job: String,
    /// Its snapshots by name.
    pub snapshots: Vec<NamedMemorySnapshot>,
}

/// `b - a` for each statistic both snapshots carry, bytes or counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatsDelta {
    /// Change in allocated bytes.
    pub allocated: i128,
    /// Change in reserved bytes.
    pub reserved: i128,
    /// Change in active bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i128>,
    /// Change in inactive-split bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive_split: Option<i128>,
    /// Change in the allocated peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_allocated: Option<i128>,
    /// Change in the reserved peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_reserved: Option<i128>,
    /// Allocation retries in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_retries: Option<i128>,
    /// OOMs in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ooms: Option<i128>,
}

/// One rank compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankMemoryComparison {
    /// Global rank.
    pub rank: u32,
    /// Its entry in `a`, when it took that snapshot.
    pub a: Option<AllocStats>,
    /// Its entry in `b`, when it took that snapshot.
    pub b: Option<AllocStats>,
    /// `b - a`, when it took both.
    pub delta: Option<StatsDelta>,
}

/// The comparison form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemorySnapshotComparison {
    /// The job.
    pub job: String,
    /// The earlier snapshot's name.
    pub a: String,
    /// The later snapshot's name.
    pub b: String,
    /// Every rank in either snapshot.
    pub ranks: Vec<RankMemoryComparison>,
}

/// `GET /api/v1/jobs/{job}/snapshots`'s answer: the list without `a` and
/// `b`, the comparison with both (serialized as the one it is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum MemorySnapshotsAnswer {
    /// The comparison form (tried first when reading: it has `a` and `b`).
    Comparison(MemorySnapshotComparison),
    /// The list form.
    List(MemorySnapshotList),
}
