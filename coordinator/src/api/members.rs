//! Membership changes: `POST /api/v1/cluster/members` adds a replica (as a
//! learner that has caught up, then a voter), `DELETE
//! /api/v1/cluster/members/{id}` removes one. Both are admin routes (see
//! `auth`), carried out on the leader by the service (`Service::add_member`,
//! `Service::remove_member`; a follower answers 421 with the leader's URL),
//! and answer with the new [`RaftStatus`].

use axum::extract::{Path, State};
use axum::Json;
use gpumon_proto::api::{AddMember, ApiErrorBody, RaftStatus};

use super::error_answers::AdminErrors;
use super::raft_status::status;
use super::{ApiContext, ApiError};

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
    State(state): State<ApiContext>,
    body: axum::body::Bytes,
) -> Result<Json<RaftStatus>, ApiError> {
    let req: AddMember = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body must be JSON {{\"id\": N, \"addr\": \"HOST:PORT\", \"learner\": false}}: {e}"
        ))
    })?;
    state.inner.service.add_member(req).await?;
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
    State(state): State<ApiContext>,
    Path(id): Path<u64>,
) -> Result<Json<RaftStatus>, ApiError> {
    state.inner.service.remove_member(id).await?;
    Ok(Json(status(&state)))
}
