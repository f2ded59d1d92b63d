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
//! Agents receive actions in the reply to their pushes ([`for_agent`]);
//! handing one out is itself recorded through Raft (`delivered`), so a
//! failover neither loses nor repeats it.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use gpumon_common::actions::{ActionOrigin, ActionRequest};
use gpumon_proto::api::{
    ActionEntry, ActionState, ActionsBody, ActionsQuery, ApiErrorBody, IssueOutcome, IssueRequest,
    IssueResponse, IssuedAction,
};
use gpumon_proto::PendingAction;
use openraft::error::{ClientWriteError, RaftError};

use super::openapi::{AdminErrors, ReadErrors};
use super::params::check_job_name;
use super::raft_status::leader_url;
use super::{admin, ApiError, AppState};
use crate::raft::{Command, CommandV1};

/// Most ranks one request may name.
pub const MAX_RANKS_PER_REQUEST: usize = 4096;
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
    State(state): State<AppState>,
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
    let matching: Vec<&ActionEntry> = applied
        .actions
        .entries()
        .filter(|a| q.job.as_deref().is_none_or(|j| a.job == j))
        .filter(|a| q.state.is_none_or(|s| a.state == s))
        .collect();
    let truncated = matching.len().saturating_sub(limit);
    Ok(Json(ActionsBody {
        actions: matching.into_iter().skip(truncated).cloned().collect(),
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
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<IssueResponse>, ApiError> {
    admin::authorize(&state, peer, &headers)?;
    let req: IssueRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body must be JSON {{\"kind\": \"release_cache\", \"job\": \"JOB\", \"ranks\": [0, 1], \"reason\": \"optional\"}}: {e}"
        ))
    })?;
    if req.ranks.is_empty() || req.ranks.len() > MAX_RANKS_PER_REQUEST {
        return Err(ApiError::BadRequest(format!(
            "ranks must name 1 to {MAX_RANKS_PER_REQUEST} ranks, not {}",
            req.ranks.len()
        )));
    }
    let mut ranks = req.ranks.clone();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.len() != req.ranks.len() {
        return Err(ApiError::BadRequest("ranks must not repeat".into()));
    }
    check_job_name(&req.job)?;
    if !state.inner.state_machine.read().state.has_job(&req.job) {
        return Err(ApiError::NotFound(format!("no job {:?}", req.job)));
    }
    let m = state.inner.raft.metrics().borrow().clone();
    if m.current_leader != Some(state.inner.id) {
        return Err(ApiError::NotLeader(leader_url(&m)));
    }
    let reason = req
        .reason
        .unwrap_or_else(|| format!("requested by an admin from {}", peer.ip()));
    let requests: Vec<ActionRequest> = req
        .ranks
        .iter()
        .map(|&rank| ActionRequest {
            kind: req.kind,
            job: req.job.clone(),
            rank,
            reason: reason.clone(),
            origin: ActionOrigin::Admin,
        })
        .collect();
    let rules = state.inner.planner_rules;
    let resp = state
        .inner
        .raft
        .client_write(Command::V1(CommandV1::IssueActions { requests, rules }))
        .await
        .map_err(|e| match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                ApiError::NotLeader(f.leader_node.map(|n| format!("http://{}", n.addr)))
            }
            e => ApiError::Unavailable(format!("cannot commit the actions: {e}")),
        })?;
    let actions = req
        .ranks
        .iter()
        .zip(resp.data.issued)
        .map(|(&rank, outcome)| {
            let id = match outcome {
                IssueOutcome::Issued { id }
                | IssueOutcome::Existing { id }
                | IssueOutcome::Expired { id } => Some(id),
                _ => None,
            };
            tracing::info!(job = %req.job, rank, ?outcome, "admin issued {}", req.kind.name());
            IssuedAction { rank, id, outcome }
        })
        .collect();
    Ok(Json(IssueResponse { actions }))
}

/// The actions to hand the agent on `node` in the reply to its push: every
/// outstanding one for a rank on that node. Planned ones are first recorded
/// as delivered through Raft; if that fails, only those recorded earlier go out.
pub async fn for_agent(state: &AppState, node: &str) -> Vec<PendingAction> {
    let inner = &state.inner;
    let (planned, mut pending) = {
        let applied = inner.state_machine.read();
        let out = applied.actions.outstanding_on(node);
        if out.is_empty() {
            return Vec::new();
        }
        let planned: Vec<u64> = out
            .iter()
            .filter(|a| a.state == ActionState::Planned)
            .map(|a| a.id)
            .collect();
        let pending: Vec<PendingAction> = out
            .iter()
            .map(|a| PendingAction {
                id: a.id,
                job: a.job.clone(),
                rank: a.rank,
                kind: a.kind,
                reason: a.reason.clone(),
            })
            .collect();
        (planned, pending)
    };
    if !planned.is_empty() {
        let command = Command::V1(CommandV1::DeliverActions {
            node: node.to_owned(),
            ids: planned.clone(),
        });
        if let Err(e) = inner.raft.client_write(command).await {
            tracing::warn!(error = %e, node, "could not record the delivery of actions; holding them back");
            pending.retain(|a| !planned.contains(&a.id));
        }
    }
    pending
}
