//! Forwarding a client request to the leader, on a connection pool of its
//! own so that client traffic never queues behind (or in front of) Raft RPC.

use std::time::Duration;

use axum::body::Body;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::{ApiContext, ApiError};
use crate::peer_link::PeerLink;

/// Header set on a forwarded request (to the replica id that forwarded it),
/// so that a request is forwarded at most once.
pub const FORWARDED_HEADER: &str = "x-gpumon-forwarded-by";
/// Header on a forwarded answer: the address of the replica that served it.
pub const SERVED_BY_HEADER: &str = "x-gpumon-served-by";
/// Time allowed for a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest forwarded answer relayed, bytes.
const MAX_FORWARDED_BYTES: usize = 64 << 20;

/// The forwarding pool.
pub fn client(link: &PeerLink) -> reqwest::Client {
    link.client_builder()
        .timeout(FORWARD_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(8)
        .build()
        .expect("reqwest client builds")
}

/// Sends `GET uri` to the replica at `addr`, with the caller's
/// `Authorization` header when it sent one, and relays its answer.
pub async fn get(
    state: &ApiContext,
    addr: &str,
    uri: &Uri,
    credentials: Option<&HeaderValue>,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", state.inner.link.url(addr));
    let mut request = state
        .inner
        .forward
        .get(&url)
        .header(FORWARDED_HEADER, state.inner.id.to_string());
    if let Some(c) = credentials {
        request = request.header(AUTHORIZATION, c.clone());
    }
    let sent = request.send().await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return ApiError::Unavailable(format!("cannot reach the leader at {addr}: {e}"))
                .into_response()
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp.headers().get(CONTENT_TYPE).cloned();
    if resp.content_length().unwrap_or(0) > MAX_FORWARDED_BYTES as u64 {
        return ApiError::Unavailable("the leader's answer is too large to relay".into())
            .into_response();
    }
    let body = match resp.bytes().await {
        Ok(b) if b.len() <= MAX_FORWARDED_BYTES => b,
        Ok(_) => {
            return ApiError::Unavailable("the leader's answer is too large to relay".into())
                .into_response()
        }
        Err(e) => {
            return ApiError::Unavailable(format!("the leader's answer was cut off: {e}"))
                .into_response()
        }
    };
    let mut out = (status, Body::from(body)).into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert(CONTENT_TYPE, ct);
    }
    if let Ok(v) = HeaderValue::from_str(addr) {
        out.headers_mut().insert(SERVED_BY_HEADER, v);
    }
    out
}
