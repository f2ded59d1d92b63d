//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 description of the HTTP API,
//! generated from the types of `gpumon_proto::api` (their doc comments are
//! the schemas' descriptions) and the `#[utoipa::path]` attribute on each
//! handler (summary, parameters, answers). The tests below keep it true to
//! the route table: every documented route is served and every served
//! route but Raft's RPC and the dashboard is documented.

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use gpumon_proto::api::Consistency;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    actions, alerts, config, health, ingest, job_scale, members, memory_snapshots, metrics,
    raft_status, read, stream,
};

/// The security scheme admin routes name.
pub const ADMIN_TOKEN: &str = "adminToken";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "gpumon coordinator API",
        version = "1",
        description = "Every replica serves every read from its own replicated state; add \
            ?consistency=linearizable to a read for one that reflects every committed write. \
            Times named `t`/`*_t` are data time in seconds since the Unix epoch; `*_ms` are \
            milliseconds. Errors are JSON {error, message}.",
    ),
    paths(
        read::cluster,
        read::nodes,
        read::jobs,
        read::job,
        job_scale::summary,
        memory_snapshots::snapshots,
        alerts::alerts,
        actions::list,
        actions::issue,
        config::show,
        config::change,
        raft_status::raft_status,
        members::add,
        members::remove,
        stream::stream,
        ingest::ingest,
        openapi,
        metrics::metrics,
        health::healthz,
        health::readyz,
    ),
    components(schemas(Consistency)),
    modifiers(&AdminTokenScheme),
)]
struct ApiDoc;

/// Adds the admin token's security scheme.
struct AdminTokenScheme;

impl Modify for AdminTokenScheme {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme = Http::builder()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The coordinator's --admin-token; without one configured, only loopback \
                 clients may make admin requests.",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(ADMIN_TOKEN, SecurityScheme::Http(scheme));
    }
}

/// The document, as a value.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as served, generated once.
static OPENAPI_JSON: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_pretty_json()
        .expect("an OpenAPI document always serializes")
});

/// This document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    responses((status = 200, description = "The OpenAPI document.", body = Object)),
)]
pub async fn openapi() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], OPENAPI_JSON.as_str())
}

#[cfg(test)]
mod tests;
