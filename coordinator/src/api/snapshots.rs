//! `GET /api/v1/jobs/{job}/snapshots`: the named allocator snapshots a job's
//! ranks took with `gpumon.snapshot(NAME)`. With `?a=NAME&b=NAME` it
//! compares two of them rank by rank: each statistic in `b` minus `a`
//! (e.g. what `allocated` grew by between "before_training" and "epoch_1").

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gpumon_common::hook::SnapshotSet;
use gpumon_proto::AllocStats;
use serde::{Deserialize, Serialize};

use super::params::check_job_name;
use super::{ApiError, AppState};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotsQuery {
    a: Option<String>,
    b: Option<String>,
    #[serde(rename = "consistency")]
    _consistency: Option<serde::de::IgnoredAny>,
}

/// One rank's entry in a snapshot.
#[derive(Debug, Serialize)]
pub struct RankSnapshot {
    /// Global rank.
    pub rank: u32,
    /// When it took the snapshot, seconds since the Unix epoch.
    pub t: f64,
    /// The allocator's statistics then.
    #[serde(flatten)]
    pub stats: AllocStats,
}

/// One named snapshot.
#[derive(Debug, Serialize)]
pub struct NamedSnapshot {
    /// Its name.
    pub name: String,
    /// When the first rank took it.
    pub first_t: f64,
    /// When the last rank took it.
    pub last_t: f64,
    /// Every rank that took it.
    pub ranks: Vec<RankSnapshot>,
}

/// The list form.
#[derive(Debug, Serialize)]
pub struct SnapshotList {
    /// The job.
    pub job: String,
    /// Its snapshots by name.
    pub snapshots: Vec<NamedSnapshot>,
}

/// `b - a` for each statistic both snapshots carry, bytes or counts.
#[derive(Debug, Default, Serialize)]
pub struct StatsDelta {
    /// Change in allocated bytes.
    pub allocated: i128,
    /// Change in reserved bytes.
    pub reserved: i128,
    /// Change in active bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<i128>,
    /// Change in inactive-split bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inactive_split: Option<i128>,
    /// Change in the allocated peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_allocated: Option<i128>,
    /// Change in the reserved peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_reserved: Option<i128>,
    /// Allocation retries in between.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_retries: Option<i128>,
    /// OOMs in between.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ooms: Option<i128>,
}

fn delta(a: &AllocStats, b: &AllocStats) -> StatsDelta {
    let d = |x: Option<u64>, y: Option<u64>| Some(i128::from(y?) - i128::from(x?));
    StatsDelta {
        allocated: i128::from(b.allocated) - i128::from(a.allocated),
        reserved: i128::from(b.reserved) - i128::from(a.reserved),
        active: d(a.active, b.active),
        inactive_split: d(a.inactive_split, b.inactive_split),
        peak_allocated: d(a.peak_allocated, b.peak_allocated),
        peak_reserved: d(a.peak_reserved, b.peak_reserved),
        alloc_retries: d(a.alloc_retries, b.alloc_retries),
        ooms: d(a.ooms, b.ooms),
    }
}

/// One rank compared.
#[derive(Debug, Serialize)]
pub struct RankComparison {
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
#[derive(Debug, Serialize)]
pub struct SnapshotComparison {
    /// The job.
    pub job: String,
    /// The earlier snapshot's name.
    pub a: String,
    /// The later snapshot's name.
    pub b: String,
    /// Every rank in either snapshot.
    pub ranks: Vec<RankComparison>,
}

fn named(name: &str, set: &SnapshotSet) -> NamedSnapshot {
    NamedSnapshot {
        name: name.to_owned(),
        first_t: set.first_t,
        last_t: set.last_t,
        ranks: set
            .ranks
            .iter()
            .map(|(&rank, (t, stats))| RankSnapshot {
                rank,
                t: *t,
                stats: *stats,
            })
            .collect(),
    }
}

pub async fn snapshots(
    State(state): State<AppState>,
    Path(job): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let q: SnapshotsQuery = match query.as_deref() {
        None | Some("") => SnapshotsQuery::default(),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad query {q:?}: {e}; known parameters: a=NAME, b=NAME, consistency=local|linearizable"
            ))
        })?,
    };
    check_job_name(&job)?;
    let applied = state.inner.state_machine.read();
    let sets = applied.hook.snapshots().job(&job);
    if sets.is_none() && !applied.state.has_job(&job) {
        return Err(ApiError::NotFound(format!("no job {job:?}")));
    }
    let empty = BTreeMap::new();
    let sets = sets.unwrap_or(&empty);
    match (q.a, q.b) {
        (None, None) => Ok(Json(SnapshotList {
            job,
            snapshots: sets.iter().map(|(n, s)| named(n, s)).collect(),
        })
        .into_response()),
        (Some(a), Some(b)) => {
            let find = |name: &str| {
                sets.get(name).ok_or_else(|| {
                    ApiError::NotFound(format!(
                        "job {job:?} has no snapshot {name:?}; it has: {}",
                        sets.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })
            };
            let (sa, sb) = (find(&a)?, find(&b)?);
            let mut ranks: Vec<u32> = sa.ranks.keys().chain(sb.ranks.keys()).copied().collect();
            ranks.sort_unstable();
            ranks.dedup();
            let ranks = ranks
                .into_iter()
                .map(|rank| {
                    let ea = sa.ranks.get(&rank).map(|(_, s)| *s);
                    let eb = sb.ranks.get(&rank).map(|(_, s)| *s);
                    let delta = match (&ea, &eb) {
                        (Some(x), Some(y)) => Some(delta(x, y)),
                        _ => None,
                    };
                    RankComparison {
                        rank,
                        a: ea,
                        b: eb,
                        delta,
                    }
                })
                .collect();
            Ok(Json(SnapshotComparison { job, a, b, ranks }).into_response())
        }
        _ => Err(ApiError::BadRequest(
            "give both a=NAME and b=NAME to compare two snapshots, or neither to list them".into(),
        )),
    }
}
