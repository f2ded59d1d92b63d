//! Raft RPC handlers: postcard in, postcard `Result<Response, RaftError>` out.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{de::DeserializeOwned, Serialize};

use super::ApiContext;
use crate::raft::election::{decide, PreVoteRequest, Voter};
use crate::raft::network::{RAFT_VERSION, RAFT_VERSION_HEADER};
use crate::raft::standing::Standing;
use openraft::raft::AppendEntriesResponse;

/// Why an RPC was refused: a 400 with this text.
type Refusal = (StatusCode, String);

fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let got = headers
        .get(RAFT_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    if got == RAFT_VERSION {
        return Ok(());
    }
    tracing::error!(
        got,
        want = RAFT_VERSION,
        "refused Raft RPC from a peer of another protocol version"
    );
    Err((
        StatusCode::BAD_REQUEST,
        format!("raft protocol version {got} is not supported; this replica speaks version {RAFT_VERSION}"),
    ))
}

fn decode<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, Refusal> {
    check_version(headers)?;
    postcard::from_bytes(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("undecodable Raft RPC body: {e}"),
        )
    })
}

fn encode<T: Serialize>(value: &T) -> Response {
    match postcard::to_allocvec(value) {
        Ok(bytes) => bytes.into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

pub async fn append(State(state): State<ApiContext>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&headers, &body) {
        Ok(req) => {
            let resp = state.inner.raft.append_entries(req).await;
            // Any answer but "your term is behind" accepts the sender as leader.
            if matches!(&resp, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                state.inner.contact.touch();
            }
            encode(&resp)
        }
        Err(refusal) => refusal.into_response(),
    }
}

pub async fn vote(State(state): State<ApiContext>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&headers, &body) {
        Ok(req) => {
            let resp = state.inner.raft.vote(req).await;
            // Granting a vote restarts the election clock, as in Raft.
            if matches!(&resp, Ok(r) if r.vote_granted) {
                state.inner.contact.touch();
            }
            encode(&resp)
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /raft/prevote`: whether this replica would vote for the asker
/// (see `raft::election`); changes nothing.
pub async fn prevote(State(state): State<ApiContext>, headers: HeaderMap, body: Bytes) -> Response {
    let req: PreVoteRequest = match decode(&headers, &body) {
        Ok(req) => req,
        Err(refusal) => return refusal.into_response(),
    };
    let inner = &state.inner;
    let standing = Standing::of(&inner.raft.metrics().borrow(), inner.id);
    let me = Voter {
        standing,
        since_contact: inner.contact.since(),
        last_log: inner.raft.data_metrics().borrow().last_log,
        backed: inner.backing.backed(),
    };
    let answer = decide(&me, &req);
    if answer.granted {
        inner.backing.back(req.candidate);
    }
    encode(&answer)
}

pub async fn snapshot(
    State(state): State<ApiContext>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match decode(&headers, &body) {
        Ok(req) => encode(&state.inner.raft.install_snapshot(req).await),
        Err(refusal) => refusal.into_response(),
    }
}
