//! `GET /api/v1/jobs/{job}/snapshots`: the named allocator snapshots a job's
//! ranks took with `gpumon.snapshot(NAME)`. With `?a=NAME&b=NAME` it
//! compares two of them rank by rank: each statistic in `b` minus `a`
//! (e.g. what `allocated` grew by between "before_training" and "epoch_1").

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use gpumon_common::hook_records::MemorySnapshotSet;
use gpumon_proto::api::{
    ApiErrorBody, MemorySnapshotComparison, MemorySnapshotList, MemorySnapshotsAnswer,
    MemorySnapshotsQuery, NamedMemorySnapshot, RankMemoryComparison, RankMemorySnapshot,
    StatsDelta,
};
use gpumon_proto::AllocStats;

use super::error_answers::ReadErrors;
use super::params::check_job_name;
use super::{ApiError, AppState};

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

fn named(name: &str, set: &MemorySnapshotSet) -> NamedMemorySnapshot {
    NamedMemorySnapshot {
        name: name.to_owned(),
        first_t: set.first_t,
        last_t: set.last_t,
        ranks: set
            .ranks
            .iter()
            .map(|(&rank, (t, stats))| RankMemorySnapshot {
                rank,
                t: *t,
                stats: *stats,
            })
            .collect(),
    }
}

/// Named allocator snapshots (`gpumon.snapshot`); with `a` and `b`, their
/// difference per rank.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{job}/snapshots",
    params(("job" = String, Path, description = "The job's name."), MemorySnapshotsQuery),
    responses(
        (status = 200, description = "The list without `a` and `b`, the comparison with both.", body = MemorySnapshotsAnswer),
        (status = 404, description = "No such job, or no such snapshot.", body = ApiErrorBody),
        ReadErrors,
    ),
)]
pub async fn snapshots(
    State(state): State<AppState>,
    Path(job): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<MemorySnapshotsAnswer>, ApiError> {
    let q: MemorySnapshotsQuery = match query.as_deref() {
        None | Some("") => MemorySnapshotsQuery::default(),
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
        (None, None) => Ok(Json(MemorySnapshotsAnswer::List(MemorySnapshotList {
            job,
            snapshots: sets.iter().map(|(n, s)| named(n, s)).collect(),
        }))),
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
                    RankMemoryComparison {
                        rank,
                        a: ea,
                        b: eb,
                        delta,
                    }
                })
                .collect();
            Ok(Json(MemorySnapshotsAnswer::Comparison(
                MemorySnapshotComparison { job, a, b, ranks },
            )))
        }
        _ => Err(ApiError::BadRequest(
            "give both a=NAME and b=NAME to compare two snapshots, or neither to list them".into(),
        )),
    }
}
