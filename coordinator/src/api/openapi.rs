//! `GET /api/v1/openapi.json`: the OpenAPI 3 description of the HTTP API,
//! written by hand in `openapi.json` beside this file and compiled in. The
//! test `coordinator/tests/openapi.rs` keeps it true: every route the router
//! serves is documented with its methods and vice versa, and every documented
//! read answers with the fields its schema requires.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

/// The document.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

pub async fn openapi() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_json_and_openapi_3() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        assert!(doc["paths"]["/api/v1/jobs/{job}"]["get"].is_object());
    }
}
