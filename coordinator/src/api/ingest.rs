//! `POST /api/v1/ingest`: agent messages in, through Raft, replies out.
//!
//! Refusals never reach the log: an oversized body is 413, an unknown
//! protocol version, an undecodable body or a push out of the service's
//! bounds 400, each with the reason in the body and counted per replica
//! (`/api/v1/cluster` → `coordinator.rejected_pushes`); the log gets one
//! line per 10 s for all of them, with how many it left out.
//! What happens to a decoded message (bounds, the commit, `NotLeader` with
//! the leader's URL, the actions and alerts handed to the agent) is the
//! service's (`crate::service`, `Service::push`); the reply is in the
//! message's protocol version.

use std::sync::atomic::Ordering::Relaxed;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use gpumon_proto::api::ApiErrorBody;
use gpumon_proto::wire::{self, DecodeError};
use gpumon_proto::{AgentMessage, AgentMessageV1, AgentMessageV2, CoordinatorReply};
use gpumon_runtime::clock::wall_ms;

use super::auth::AgentBinding;
use super::postcard_schema::Postcard;
use super::{ApiContext, ApiError};
use crate::service::{PushError, Refusal, FULL_RETRY_AFTER, RETRY_AFTER};

/// Agents push windows and hook records (postcard `AgentMessage`).
#[utoipa::path(
    post,
    path = "/api/v1/ingest",
    request_body(content = Postcard, description = "postcard `AgentMessage`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "postcard `CoordinatorReply` in the message's protocol version: acknowledged sequence numbers and actions for the agent, and (version 2) the active alerts about its node for its hooks.", body = Postcard, content_type = "application/octet-stream"),
        (status = 400, description = "Refused, never retried: an unknown protocol version, an undecodable body, more windows, hook records or acks than one batch may carry, more placements than its windows have processes, seq 0 or one more than 4096 past the last applied for the agent's incarnation, or a time (window start or end, hook record) more than 5 minutes ahead of the leader's clock or before 2020. The reason names the field, its value and the bound.", body = ApiErrorBody),
        (status = 403, description = "The agent token is bound to other agents: the message's agent id or node is not among them. Nothing of it is applied.", body = ApiErrorBody),
        (status = 413, description = "Push over the size limit.", body = ApiErrorBody),
        (status = 421, description = "Not the leader; `leader_url` says where.", body = ApiErrorBody),
        (status = 429, description = "Too many pushes in flight on this replica, or the push would add agents, GPUs or live ranks past the cluster's limits (the message says which); retry after `Retry-After` seconds, keeping the batch.", body = ApiErrorBody),
        (status = 503, description = "No leader, or the push could not be committed; retry.", body = ApiErrorBody),
    ),
)]
pub async fn ingest(
    State(state): State<ApiContext>,
    binding: Option<Extension<AgentBinding>>,
    body: Body,
) -> Result<Response, ApiError> {
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
        if let Some(left_out) = inner.rejected.log.pass(wall_ms()) {
            tracing::warn!(error = %e, left_out, "refused a push");
        }
        ApiError::BadRequest(e.to_string())
    })?;
    if let Some(Extension(binding)) = binding {
        let (agent_id, node) = speaker(&msg);
        if let Err(why) = binding.allows(agent_id, node) {
            inner.rejected.forbidden.fetch_add(1, Relaxed);
            if let Some(left_out) = inner.rejected.log.pass(wall_ms()) {
                tracing::warn!(agent_id, node, reason = %why, left_out, "refused a push for another agent");
            }
            return Err(ApiError::Forbidden(why.to_string()));
        }
    }
    let version = msg.version();
    let reply = match inner.service.push(msg, bytes.len()).await {
        Ok(reply) => reply,
        Err(PushError::Refused(refused)) => {
            let counter = match refused.kind {
                Refusal::TooMany => &inner.rejected.malformed,
                Refusal::OutOfBounds => &inner.rejected.out_of_bounds,
            };
            counter.fetch_add(1, Relaxed);
            if let Some(left_out) = inner.rejected.log.pass(wall_ms()) {
                tracing::warn!(error = %refused, left_out, "refused a push");
            }
            return Err(ApiError::BadRequest(refused.message));
        }
        Err(PushError::Busy) => {
            inner.rejected.busy.fetch_add(1, Relaxed);
            let what = "too many pushes in flight on this replica".to_owned();
            return Err(ApiError::Busy(RETRY_AFTER, what));
        }
        Err(PushError::Full(why)) => {
            inner.rejected.full.fetch_add(1, Relaxed);
            if let Some(left_out) = inner.rejected.log.pass(wall_ms()) {
                tracing::warn!(reason = %why, left_out, "refused a push at a limit");
            }
            return Err(ApiError::Busy(FULL_RETRY_AFTER, why));
        }
        Err(PushError::Service(e)) => return Err(e.into()),
    };
    let reply = CoordinatorReply::in_version(version, reply);
    Ok((
        [(CONTENT_TYPE, "application/octet-stream")],
        wire::encode(&reply),
    )
        .into_response())
}

/// The agent id and node a message speaks for.
fn speaker(msg: &AgentMessage) -> (&str, &str) {
    match msg {
        AgentMessage::V1(AgentMessageV1::Hello(h))
        | AgentMessage::V2(AgentMessageV2::Hello(h))
        | AgentMessage::V3(AgentMessageV2::Hello(h))
        | AgentMessage::V4(AgentMessageV2::Hello(h))
        | AgentMessage::V5(AgentMessageV2::Hello(h))
        | AgentMessage::V6(AgentMessageV2::Hello(h))
        | AgentMessage::V7(AgentMessageV2::Hello(h)) => (&h.agent_id, &h.node),
        AgentMessage::V1(AgentMessageV1::Push(b)) => (&b.agent_id, &b.node),
        AgentMessage::V2(AgentMessageV2::Push(p))
        | AgentMessage::V3(AgentMessageV2::Push(p))
        | AgentMessage::V4(AgentMessageV2::Push(p))
        | AgentMessage::V5(AgentMessageV2::Push(p))
        | AgentMessage::V6(AgentMessageV2::Push(p))
        | AgentMessage::V7(AgentMessageV2::Push(p)) => (&p.batch.agent_id, &p.batch.node),
    }
}
