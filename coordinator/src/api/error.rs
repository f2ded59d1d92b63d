//! The one error type of the API: a status, a code and a reason for the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gpumon_proto::api::ApiErrorBody;

/// An error answered to an API client.
#[derive(Debug)]
pub enum ApiError {
    /// 404: no such job, node or route.
    NotFound(String),
    /// 400: the request cannot be understood.
    BadRequest(String),
    /// 413: the body is over the limit.
    TooLarge(String),
    /// 503: no leader, or the Raft core is unavailable; try again.
    Unavailable(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m),
            ApiError::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
        };
        (
            status,
            Json(ApiErrorBody {
                error: code.into(),
                message,
            }),
        )
            .into_response()
    }
}
