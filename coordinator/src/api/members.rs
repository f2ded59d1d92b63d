//! Membership changes, on the leader only (a follower answers 421 with the
//! leader's URL): `POST /api/v1/cluster/members` adds a replica as a learner,
//! waits until it has caught up, then makes it a voter; `DELETE
//! /api/v1/cluster/members/{id}` removes one. Both need admin rights (see
//! `admin`) and answer with the new [`RaftStatus`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::Json;
use gpumon_proto::api::{AddMember, ApiErrorBody, RaftStatus};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};

use super::openapi::AdminErrors;
use super::raft_status::{leader_url, status};
use super::{admin, ApiError, AppState};
use crate::peers::check_addr;

/// Time allowed for a new replica to catch up before it becomes a voter.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(120);

/// Add a replica: learner, then voter unless `learner` is true (admin).
#[utoipa::path(
    post,
    path = "/api/v1/cluster/members",
    request_body = AddMember,
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The new Raft status.", body = RaftStatus),
        (status = 409, description = "Conflicts with the current membership.", body = ApiErrorBody),
        AdminErrors,
    ),
)]
pub async fn add(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<RaftStatus>, ApiError> {
    admin::authorize(&state, peer, &headers)?;
    let req: AddMember = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body must be JSON {{\"id\": N, \"addr\": \"HOST:PORT\", \"learner\": false}}: {e}"
        ))
    })?;
    if req.id == 0 {
        return Err(ApiError::BadRequest("Raft node ids start at 1".into()));
    }
    check_addr(&req.addr).map_err(ApiError::BadRequest)?;
    let raft = &state.inner.raft;
    ensure_leader(&state)?;
    let membership = raft.metrics().borrow().membership_config.clone();
    let current = membership.membership();
    if let Some(node) = current.get_node(&req.id) {
        if node.addr != req.addr {
            return Err(ApiError::Conflict(format!(
                "replica {} is already a member at {}; remove it first to move it",
                req.id, node.addr
            )));
        }
    }
    if let Some((other, _)) = current
        .nodes()
        .find(|(id, n)| **id != req.id && n.addr == req.addr)
    {
        return Err(ApiError::Conflict(format!(
            "{} is already the address of replica {other}",
            req.addr
        )));
    }
    let is_voter = current.voter_ids().any(|v| v == req.id);
    tracing::info!(id = req.id, addr = %req.addr, "adding a replica as a learner");
    let added = tokio::time::timeout(
        CATCH_UP_WITHIN,
        raft.add_learner(req.id, BasicNode { addr: req.addr.clone() }, true),
    )
    .await
    .map_err(|_| {
        ApiError::Unavailable(format!(
            "replica {} did not catch up within {CATCH_UP_WITHIN:?}; it stays a learner. Is it running at {}?",
            req.id, req.addr
        ))
    })?;
    added.map_err(write_error)?;
    if !req.learner && !is_voter {
        tracing::info!(id = req.id, "promoting the replica to voter");
        raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([req.id])), false)
            .await
            .map_err(write_error)?;
    }
    Ok(Json(status(&state)))
}

/// Remove a replica (admin).
#[utoipa::path(
    delete,
    path = "/api/v1/cluster/members/{id}",
    params(("id" = u64, Path, description = "The replica's Raft id.")),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The new Raft status.", body = RaftStatus),
        (status = 404, description = "No such member.", body = ApiErrorBody),
        (status = 409, description = "Conflicts with the current membership.", body = ApiErrorBody),
        AdminErrors,
    ),
)]
pub async fn remove(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Json<RaftStatus>, ApiError> {
    admin::authorize(&state, peer, &headers)?;
    ensure_leader(&state)?;
    let raft = &state.inner.raft;
    let membership = raft.metrics().borrow().membership_config.clone();
    let current = membership.membership();
    if current.get_node(&id).is_none() {
        return Err(ApiError::NotFound(format!("replica {id} is not a member")));
    }
    let voters: BTreeSet<u64> = current.voter_ids().collect();
    if voters.len() == 1 && voters.contains(&id) {
        return Err(ApiError::Conflict(format!(
            "replica {id} is the last voter; a cluster cannot remove its last voter"
        )));
    }
    tracing::info!(id, "removing a replica");
    if voters.contains(&id) {
        raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
    }
    // A voter that was removed above stays a learner until removed as a node.
    let still_node = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&id)
        .is_some();
    if still_node {
        raft.change_membership(
            ChangeMembers::<u64, BasicNode>::RemoveNodes(BTreeSet::from([id])),
            false,
        )
        .await
        .map_err(write_error)?;
    }
    Ok(Json(status(&state)))
}

/// A 421 with the leader's URL unless this replica leads.
fn ensure_leader(state: &AppState) -> Result<(), ApiError> {
    let m = state.inner.raft.metrics().borrow().clone();
    if m.current_leader == Some(state.inner.id) {
        return Ok(());
    }
    Err(ApiError::NotLeader(leader_url(&m)))
}

fn write_error(e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> ApiError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            ApiError::NotLeader(f.leader_node.map(|n| format!("http://{}", n.addr)))
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            ApiError::Conflict(e.to_string())
        }
        e => ApiError::Unavailable(format!("membership change failed: {e}")),
    }
}
