//! Every read answer carries `x-gpumon-view-age-ms`: how old this replica's
//! view may be (see `raft::standing`). A replica cut off from its cluster
//! keeps serving what it has; the header says how stale that is, so a
//! dashboard or script can show or refuse it.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use super::ApiContext;
use crate::raft::standing::{millis, Standing};

/// The header's name.
pub const VIEW_AGE_HEADER: &str = "x-gpumon-view-age-ms";

/// Adds the header to the answer.
pub async fn stamp(State(state): State<ApiContext>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let inner = &state.inner;
    let standing = Standing::of(&inner.raft.metrics().borrow(), inner.id);
    let age = millis(standing.view_age(&inner.contact));
    response
        .headers_mut()
        .insert(VIEW_AGE_HEADER, HeaderValue::from(age));
    response
}
