//! The JSON read API, served from this replica's own state.

use axum::extract::{Path, State};
use axum::Json;
use gpumon_common::engine::view::JobSummary;
use gpumon_common::hook::RankSteps;
use gpumon_proto::api::{
    ClusterView, JobDetail, JobsView, NodesView, RejectedPushes, ReplicaStatus,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use super::params::{check_job_name, OnlyConsistency};
use super::{ApiError, AppState};

pub async fn cluster(_: OnlyConsistency, State(state): State<AppState>) -> Json<ClusterView> {
    let inner = &state.inner;
    let mut view = inner.state_machine.read().state.cluster_view();
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
        },
    });
    Json(view)
}

pub async fn nodes(_: OnlyConsistency, State(state): State<AppState>) -> Json<NodesView> {
    Json(state.inner.state_machine.read().state.nodes_view())
}

pub async fn jobs(_: OnlyConsistency, State(state): State<AppState>) -> Json<JobsView> {
    Json(state.inner.state_machine.read().state.jobs_view())
}

/// A job's view and, beside it, what the detection engine makes of it.
#[derive(Debug, Serialize)]
pub struct JobWithAnalysis {
    /// The cluster view of the job.
    #[serde(flatten)]
    pub detail: JobDetail,
    /// Forecasts and flags per rank; absent until the engine saw the job.
    pub analysis: Option<JobSummary>,
    /// Latest and smoothed step and section times per rank (with the hook).
    pub steps: BTreeMap<u32, RankSteps>,
}

pub async fn job(
    _: OnlyConsistency,
    State(state): State<AppState>,
    Path(job): Path<String>,
) -> Result<Json<JobWithAnalysis>, ApiError> {
    check_job_name(&job)?;
    let applied = state.inner.state_machine.read();
    let detail = applied.state.job_detail(&job).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no job {job:?}; GET /api/v1/jobs lists the known jobs"
        ))
    })?;
    Ok(Json(JobWithAnalysis {
        detail,
        analysis: applied.engine.job(&job),
        steps: applied.steps.job(&job).cloned().unwrap_or_default(),
    }))
}
