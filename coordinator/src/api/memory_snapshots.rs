//! `GET /api/v1/jobs/{job}/snapshots`: the named allocator snapshots a job's
//! ranks took with `gpumon.snapshot(NAME)`. With `?a=NAME&b=NAME` it
//! compares two of them rank by rank: each statistic in `b` minus `a`
//! (e.g. what `allocated` grew by between "before_training" and "epoch_1").

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use gpumon_core::hook_records::{compare_snapshots, named_snapshot};
use gpumon_proto::api::{
    ApiErrorBody, MemorySnapshotList, MemorySnapshotsAnswer, MemorySnapshotsQuery,
};

use super::error_answers::ReadErrors;
use super::params::check_job_name;
use super::{ApiContext, ApiError};

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
    State(state): State<ApiContext>,
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
    if sets.is_none() && !applied.cluster.has_job(&job) {
        return Err(ApiError::NotFound(format!("no job {job:?}")));
    }
    let empty = BTreeMap::new();
    let sets = sets.unwrap_or(&empty);
    match (q.a, q.b) {
        (None, None) => Ok(Json(MemorySnapshotsAnswer::List(MemorySnapshotList {
            job,
            snapshots: sets.iter().map(|(n, s)| named_snapshot(n, s)).collect(),
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
            Ok(Json(MemorySnapshotsAnswer::Comparison(compare_snapshots(
                &job,
                &named_snapshot(&a, sa),
                &named_snapshot(&b, sb),
            ))))
        }
        _ => Err(ApiError::BadRequest(
            "give both a=NAME and b=NAME to compare two snapshots, or neither to list them".into(),
        )),
    }
}
