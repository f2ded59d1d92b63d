//! The JSON read API, served from this replica's own state.

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use gpumon_proto::api::{
    ApiErrorBody, ClusterView, JobQuery, JobWithAnalysis, JobsView, NodesView, ReadQuery,
    RejectedPushes, ReplicaStatus,
};
use std::sync::atomic::Ordering::Relaxed;

use super::error_answers::ReadErrors;
use super::job_params::job_params;
use super::job_scale::job_part;
use super::params::{check_job_name, OnlyConsistency};
use super::{ApiContext, ApiError};
use crate::raft::standing::{millis, Standing};

/// Agents, counts, ingest counters and this replica's Raft view.
#[utoipa::path(
    get,
    path = "/api/v1/cluster",
    params(ReadQuery),
    responses((status = 200, description = "OK", body = ClusterView), ReadErrors),
)]
pub async fn cluster(_: OnlyConsistency, State(state): State<ApiContext>) -> Json<ClusterView> {
    let inner = &state.inner;
    let mut view = inner.state_machine.read().cluster.cluster_view();
    let metrics = inner.raft.metrics().borrow().clone();
    view.coordinator = Some(ReplicaStatus {
        id: inner.id,
        leader: metrics.current_leader,
        term: metrics.current_term,
        applied_index: metrics.last_applied.map(|l| l.index),
        rejected_pushes: RejectedPushes {
            too_large: inner.rejected.too_large.load(Relaxed),
            bad_version: inner.rejected.bad_version.load(Relaxed),
            malformed: inner.rejected.malformed.load(Relaxed),
            busy: inner.rejected.busy.load(Relaxed),
            full: inner.rejected.full.load(Relaxed),
            out_of_bounds: inner.rejected.out_of_bounds.load(Relaxed),
            forbidden: inner.rejected.forbidden.load(Relaxed),
        },
        view_age_ms: millis(Standing::of(&metrics, inner.id).view_age(&inner.contact)),
    });
    Json(view)
}

/// Nodes and their GPUs with the processes on them.
#[utoipa::path(
    get,
    path = "/api/v1/nodes",
    params(ReadQuery),
    responses((status = 200, description = "OK", body = NodesView), ReadErrors),
)]
pub async fn nodes(_: OnlyConsistency, State(state): State<ApiContext>) -> Json<NodesView> {
    Json(state.inner.state_machine.read().cluster.nodes_view())
}

/// Jobs and their ranks' placement and memory.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    params(ReadQuery),
    responses((status = 200, description = "OK", body = JobsView), ReadErrors),
)]
pub async fn jobs(_: OnlyConsistency, State(state): State<ApiContext>) -> Json<JobsView> {
    Json(state.inner.state_machine.read().cluster.jobs_view())
}

/// One job: ranks with memory history, the engine's analysis, step times.
/// Without parameters, every rank with its whole history; `since`/`until`,
/// `ranks=top:K`, `points` and `node` cut it down for big jobs.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{job}",
    params(("job" = String, Path, description = "The job's name."), JobQuery),
    responses(
        (status = 200, description = "OK", body = JobWithAnalysis),
        (status = 404, description = "No such job.", body = ApiErrorBody),
        ReadErrors,
    ),
)]
pub async fn job(
    State(state): State<ApiContext>,
    Path(job): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<JobWithAnalysis>, ApiError> {
    let params = job_params(query.as_deref())?;
    check_job_name(&job)?;
    if let Some(p) = params {
        return job_part(&state, &job, p).map(Json);
    }
    let applied = state.inner.state_machine.read();
    let detail = applied.cluster.job_detail(&job).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no job {job:?}; GET /api/v1/jobs lists the known jobs"
        ))
    })?;
    let steps = applied.steps.job(&job).cloned().unwrap_or_default();
    let (step_verdict, step_verdicts) = gpumon_core::step_verdict::of_ranks(&steps);
    Ok(Json(JobWithAnalysis {
        detail,
        analysis: applied.engine.job(&job),
        steps: steps.iter().map(|(r, s)| (*r, s.into())).collect(),
        step_verdict,
        step_verdicts,
        ranks_total: None,
        others: None,
    }))
}
