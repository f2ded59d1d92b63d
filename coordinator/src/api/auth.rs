//! Authorization, in one place: every route in the route table (`routes`)
//! names the [`Access`] it needs, and [`router`](super::router) puts this
//! layer in front of it; handlers never check credentials themselves.
//!
//! Today's rules:
//! - [`Access::Admin`] (membership changes, issuing actions): the admin
//!   token as `Authorization: Bearer <token>`; with no token configured,
//!   clients on loopback only. Refusals are 401 with what is missing.
//! - [`Access::Open`], [`Access::Read`], [`Access::Agent`], [`Access::Peer`]:
//!   answered to anyone who can reach the replica; bind it to a network
//!   only the cluster can reach (see docs/operations.md, "Security").
//!   The kinds stay apart so a credential for each can be required here
//!   without touching a handler.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};

/// Who a route is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Liveness and the dashboard's files.
    Open,
    /// Reading the cluster's state.
    Read,
    /// Agents pushing.
    Agent,
    /// Changing the cluster by hand.
    Admin,
    /// Raft RPC between replicas.
    Peer,
}

/// The layer: lets the request through when the caller may have `access`.
pub async fn require(
    State((state, access)): State<(AppState, Access)>,
    request: Request,
    next: Next,
) -> Response {
    // Served without the peer's address (an in-process router), the caller
    // counts as remote.
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0);
    let allowed = match access {
        Access::Admin => admin(&state, peer, &request),
        Access::Open | Access::Read | Access::Agent | Access::Peer => Ok(()),
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(peer = %peer.ip(), path = request.uri().path(), reason = %refusal_text(&refusal), "refused a request");
            refusal.into_response()
        }
    }
}

fn refusal_text(e: &ApiError) -> &str {
    match e {
        ApiError::Unauthorized(m) => m,
        _ => "refused",
    }
}

/// An admin: the token, or loopback when none is configured.
fn admin(state: &AppState, peer: SocketAddr, request: &Request) -> Result<(), ApiError> {
    let Some(token) = &state.inner.admin_token else {
        if peer.ip().is_loopback() {
            return Ok(());
        }
        return Err(ApiError::Unauthorized(format!(
            "admin requests from {} need an admin token; start the coordinators with --admin-token (GPUMON_ADMIN_TOKEN)",
            peer.ip()
        )));
    };
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::Unauthorized("wrong admin token".into())),
        None => Err(ApiError::Unauthorized(
            "this request needs `Authorization: Bearer <admin token>`".into(),
        )),
    }
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn compares_whole_tokens() {
        assert!(same(b"abcdefgh", b"abcdefgh"));
        assert!(!same(b"abcdefgh", b"abcdefgX"));
        assert!(!same(b"abc", b"abcd"));
    }
}
