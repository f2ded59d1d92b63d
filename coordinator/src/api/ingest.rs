//! `POST /api/v1/ingest`: agent messages in, through Raft, replies out.
//!
//! Refusals never reach the log: an oversized body is 413, an unknown
//! protocol version or an undecodable body 400, each with the reason in the
//! body and counted per replica (`/api/v1/cluster` → `coordinator.rejected_pushes`).
//! A replica that is not the leader answers `NotLeader` with the leader's URL.
//! The reply to a committed push carries the actions for ranks on the
//! pushing agent's node (see `actions::for_agent`).

use std::sync::atomic::Ordering::Relaxed;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use gpumon_proto::api::ApiErrorBody;
use gpumon_proto::wire::{self, DecodeError};
use gpumon_proto::{
    AgentMessage, AgentMessageV1, CoordinatorReply, CoordinatorReplyV1, PushOutcome,
};
use openraft::error::{ClientWriteError, RaftError};

use super::openapi::Postcard;
use super::{ApiError, AppState};
use crate::config::{MAX_ACKS_PER_PUSH, MAX_HOOK_RECORDS_PER_PUSH, MAX_WINDOWS_PER_PUSH};
use crate::raft::{Command, CommandV1};

/// Agents push windows and hook records (postcard `AgentMessage`).
#[utoipa::path(
    post,
    path = "/api/v1/ingest",
    request_body(content = Postcard, description = "postcard `AgentMessage`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "postcard `CoordinatorReply`: acknowledged sequence numbers and actions for the agent.", body = Postcard, content_type = "application/octet-stream"),
        (status = 400, description = "An unknown protocol version, or an undecodable body.", body = ApiErrorBody),
        (status = 413, description = "Push over the size limit.", body = ApiErrorBody),
        (status = 421, description = "Not the leader; `leader_url` says where.", body = ApiErrorBody),
        (status = 503, description = "No leader, or the push could not be committed; retry.", body = ApiErrorBody),
    ),
)]
pub async fn ingest(State(state): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let inner = &state.inner;
    let max = inner.max_push_bytes;
    let bytes = match axum::body::to_bytes(body, max).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let too_large = e
                .into_inner()
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            if too_large {
                inner.rejected.too_large.fetch_add(1, Relaxed);
                return Err(ApiError::TooLarge(format!(
                    "push exceeds max_push_bytes ({max} bytes)"
                )));
            }
            return Err(ApiError::BadRequest("push body was cut off".into()));
        }
    };
    let msg = wire::decode::<AgentMessage>(&bytes, max).map_err(|e| {
        let counter = match e {
            DecodeError::TooLarge { .. } => &inner.rejected.too_large,
            DecodeError::UnsupportedVersion { .. } => &inner.rejected.bad_version,
            DecodeError::Malformed { .. } | DecodeError::TrailingBytes { .. } => {
                &inner.rejected.malformed
            }
        };
        counter.fetch_add(1, Relaxed);
        tracing::warn!(error = %e, "refused a push");
        ApiError::BadRequest(e.to_string())
    })?;
    let AgentMessage::V1(msg) = msg;
    let push_node = match &msg {
        AgentMessageV1::Push(batch) => Some(batch.node.clone()),
        AgentMessageV1::Hello(_) => None,
    };
    let (acked_seq, command) = match msg {
        AgentMessageV1::Hello(hello) => (0, CommandV1::Hello(hello)),
        AgentMessageV1::Push(batch) => {
            if batch.windows.len() > MAX_WINDOWS_PER_PUSH {
                inner.rejected.malformed.fetch_add(1, Relaxed);
                return Err(ApiError::BadRequest(format!(
                    "push has {} windows; at most {MAX_WINDOWS_PER_PUSH} are accepted in one batch",
                    batch.windows.len()
                )));
            }
            if batch.hook.len() > MAX_HOOK_RECORDS_PER_PUSH || batch.acks.len() > MAX_ACKS_PER_PUSH
            {
                inner.rejected.malformed.fetch_add(1, Relaxed);
                return Err(ApiError::BadRequest(format!(
                    "push has {} hook records and {} acks; at most {MAX_HOOK_RECORDS_PER_PUSH} and {MAX_ACKS_PER_PUSH} are accepted in one batch",
                    batch.hook.len(),
                    batch.acks.len()
                )));
            }
            (batch.seq, CommandV1::Push(batch))
        }
    };
    let outcome = match inner.raft.client_write(Command::V1(command)).await {
        Ok(resp) => PushOutcome::Committed {
            acked_seq,
            duplicate: resp.data.duplicate,
        },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => PushOutcome::NotLeader {
            leader_url: f.leader_node.map(|n| format!("http://{}", n.addr)),
        },
        Err(e) => {
            return Err(ApiError::Unavailable(format!(
                "cannot commit the push: {e}"
            )))
        }
    };
    let actions = match (&outcome, push_node) {
        (PushOutcome::Committed { .. }, Some(node)) => {
            super::actions::for_agent(&state, &node).await
        }
        _ => Vec::new(),
    };
    let reply = CoordinatorReply::V1(CoordinatorReplyV1 { outcome, actions });
    Ok((
        [(CONTENT_TYPE, "application/octet-stream")],
        wire::encode(&reply),
    )
        .into_response())
}
