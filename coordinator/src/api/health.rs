//! `GET /healthz`: liveness, for load balancers and orchestrators.

/// Liveness.
///
/// `ok` while the HTTP server runs; says nothing about Raft (see `GET /api/v1/raft`).
#[utoipa::path(
    get,
    path = "/healthz",
    responses((status = 200, description = "The server is up.", body = String, content_type = "text/plain")),
)]
pub async fn healthz() -> &'static str {
    "ok"
}
