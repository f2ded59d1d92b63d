//! Raft RPC handlers: postcard in, postcard `Result<Response, RaftError>` out.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{de::DeserializeOwned, Serialize};

use super::AppState;
use crate::raft::network::{RAFT_VERSION, RAFT_VERSION_HEADER};

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

pub async fn append(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&headers, &body) {
        Ok(req) => encode(&state.inner.raft.append_entries(req).await),
        Err(refusal) => refusal.into_response(),
    }
}

pub async fn vote(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&headers, &body) {
        Ok(req) => encode(&state.inner.raft.vote(req).await),
        Err(refusal) => refusal.into_response(),
    }
}

pub async fn snapshot(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&headers, &body) {
        Ok(req) => encode(&state.inner.raft.install_snapshot(req).await),
        Err(refusal) => refusal.into_response(),
    }
}
