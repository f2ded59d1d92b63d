//! Actions on training processes.
//!
//! - `GET /api/v1/actions?job=&state=&limit=`: the replicated action book,
//!   oldest first, from this replica's state.
//! - `POST /api/v1/actions` (admin, leader only): JSON
//!   `{"kind": "release_cache", "job": J, "ranks": [R, ...], "reason": "..."}`;
//!   answers what became of each rank's request (`issued` with its id,
//!   `existing` when one is outstanding, `expired` when the rank has ended,
//!   `unknown_rank`).
//!
//! The rules and the leader's write are the service's
//! (`Service::issue_actions`); agents receive actions in the reply to their
//! pushes (`Service::push`).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::Json;
use gpumon_proto::api::{
    ActionEntry, ActionsBody, ActionsQuery, ApiErrorBody, IssueRequest, IssueResponse,
};

use super::error_answers::{AdminErrors, ReadErrors};
use super::params::check_job_name;
use super::{ApiContext, ApiError};

/// Most actions one response carries.
const MAX_LIMIT: usize = 4096;

/// Actions on training processes and how they ended.
#[utoipa::path(
    get,
    path = "/api/v1/actions",
    params(ActionsQuery),
    responses((status = 200, description = "OK", body = ActionsBody), ReadErrors),
)]
pub async fn list(
    State(state): State<ApiContext>,
    RawQuery(query): RawQuery,
) -> Result<Json<ActionsBody>, ApiError> {
    let q: ActionsQuery = match query.as_deref() {
        None | Some("") => ActionsQuery::default(),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad query {q:?}: {e}; known parameters: job=NAME, state=planned|delivered|done|failed|expired, limit=N, consistency=local|linearizable"
            ))
        })?,
    };
    if let Some(job) = &q.job {
        check_job_name(job)?;
    }
    let limit = q.limit.unwrap_or(MAX_LIMIT);
    if limit > MAX_LIMIT {
        return Err(ApiError::BadRequest(format!(
            "limit {limit} is above the maximum of {MAX_LIMIT}"
        )));
    }
    let applied = state.inner.state_machine.read();
    let wanted = q.state.map(gpumon_core::actions::ActionState::from);
    let matching: Vec<_> = applied
        .actions
        .entries()
        .filter(|a| q.job.as_deref().is_none_or(|j| a.job == j))
        .filter(|a| wanted.is_none_or(|s| a.state == s))
        .collect();
    let truncated = matching.len().saturating_sub(limit);
    Ok(Json(ActionsBody {
        actions: matching
            .into_iter()
            .skip(truncated)
            .map(ActionEntry::from)
            .collect(),
        truncated,
    }))
}

/// Issue actions by hand (admin, leader only).
#[utoipa::path(
    post,
    path = "/api/v1/actions",
    request_body = IssueRequest,
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "What became of each rank's request.", body = IssueResponse),
        (status = 404, description = "No such job.", body = ApiErrorBody),
        (status = 413, description = "Body over the size limit.", body = ApiErrorBody),
        AdminErrors,
    ),
)]
pub async fn issue(
    State(state): State<ApiContext>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: axum::body::Bytes,
) -> Result<Json<IssueResponse>, ApiError> {
    let req: IssueRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body must be JSON {{\"kind\": \"release_cache\", \"job\": \"JOB\", \"ranks\": [0, 1], \"reason\": \"optional\"}}: {e}"
        ))
    })?;
    check_job_name(&req.job)?;
    let reason = format!("requested by an admin from {}", peer.ip());
    Ok(Json(state.inner.service.issue_actions(req, reason).await?))
}
