//! Who may change the cluster: a client with the admin token, or, when no
//! token is configured, a client on loopback only.

use std::net::SocketAddr;

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;

use super::{ApiError, AppState};

/// Checks an admin request; the error says what is missing.
pub fn authorize(state: &AppState, peer: SocketAddr, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.inner.admin_token else {
        if peer.ip().is_loopback() {
            return Ok(());
        }
        return Err(ApiError::Unauthorized(format!(
            "admin requests from {} need an admin token; start the coordinators with --admin-token (GPUMON_ADMIN_TOKEN)",
            peer.ip()
        )));
    };
    let given = headers
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
