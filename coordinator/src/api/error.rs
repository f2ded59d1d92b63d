//! The one error type of the API: a status, a code and a reason for the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gpumon_proto::api::ApiErrorBody;

use crate::service::ServiceError;

/// An error answered to an API client.
#[derive(Debug)]
pub enum ApiError {
    /// 404: no such job, node, member or route.
    NotFound(String),
    /// 400: the request cannot be understood.
    BadRequest(String),
    /// 401: an admin request without the right token.
    Unauthorized(String),
    /// 403: the credential is right but not for this (an agent token bound
    /// to other agents).
    Forbidden(String),
    /// 409: the request contradicts the current state.
    Conflict(String),
    /// 413: the body is over the limit.
    TooLarge(String),
    /// 421: only the leader does this; the leader's base URL when known.
    NotLeader(Option<String>),
    /// 503: no leader, or the Raft core is unavailable; try again.
    Unavailable(String),
    /// 507: the disk is too full to take the write.
    InsufficientStorage(String),
    /// 429: too much now; retry after the duration. The message says what.
    Busy(std::time::Duration, String),
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(m) => ApiError::BadRequest(m),
            ServiceError::NotFound(m) => ApiError::NotFound(m),
            ServiceError::Conflict(m) => ApiError::Conflict(m),
            ServiceError::NotLeader(url) => ApiError::NotLeader(url),
            ServiceError::Unavailable(m) => ApiError::Unavailable(m),
            ServiceError::InsufficientStorage(m) => ApiError::InsufficientStorage(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut leader_url = None;
        let (status, code, message) = match self {
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m),
            ApiError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, "unauthorized", m),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", m),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, "conflict", m),
            ApiError::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", m),
            ApiError::NotLeader(url) => {
                let m = match &url {
                    Some(u) => format!("this replica is not the leader; send it to {u}"),
                    None => "this replica is not the leader and knows no leader yet; retry".into(),
                };
                leader_url = url;
                (StatusCode::MISDIRECTED_REQUEST, "not_leader", m)
            }
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
            ApiError::InsufficientStorage(m) => {
                (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage", m)
            }
            ApiError::Busy(after, message) => {
                let body = ApiErrorBody {
                    error: "busy".into(),
                    message: format!("{message}; retry after {} s", after.as_secs().max(1)),
                    leader_url: None,
                };
                let retry_after = after.as_secs().max(1).to_string();
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(axum::http::header::RETRY_AFTER, retry_after)],
                    Json(body),
                )
                    .into_response();
            }
        };
        let mut response = (
            status,
            Json(ApiErrorBody {
                error: code.into(),
                message,
                leader_url,
            }),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // Retryable at once, on this replica or another.
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}
