//! `GET /api/v1/alerts`: the detection engine's alert episodes, from this
//! replica's own state (identical on every replica: the engine is part of
//! the replicated state machine).

use axum::extract::{RawQuery, State};
use axum::Json;
use gpumon_proto::api::{Alert, AlertsBody, AlertsQuery};

use super::error_answers::ReadErrors;
use super::params::check_job_name;
use super::{ApiContext, ApiError};

/// Most episodes one response carries.
pub const MAX_ALERTS_PER_RESPONSE: usize = 10_000;
/// Episodes returned when no `limit` is given.
const DEFAULT_LIMIT: usize = 1_000;

/// Alert episodes, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/alerts",
    params(AlertsQuery),
    responses((status = 200, description = "OK", body = AlertsBody), ReadErrors),
)]
pub async fn alerts(
    State(state): State<ApiContext>,
    RawQuery(query): RawQuery,
) -> Result<Json<AlertsBody>, ApiError> {
    let q: AlertsQuery = match query.as_deref() {
        None | Some("") => AlertsQuery::default(),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad query {q:?}: {e}; known parameters: active=true|false, job=NAME, limit=N, consistency=local|linearizable"
            ))
        })?,
    };
    if let Some(job) = &q.job {
        check_job_name(job)?;
    }
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit > MAX_ALERTS_PER_RESPONSE {
        return Err(ApiError::BadRequest(format!(
            "limit {limit} is above the maximum of {MAX_ALERTS_PER_RESPONSE}"
        )));
    }
    let applied = state.inner.state_machine.read();
    let engine = &applied.engine;
    let matching: Vec<_> = engine
        .alerts()
        .filter(|a| !q.active.unwrap_or(false) || a.is_active())
        .filter(|a| q.job.as_deref().is_none_or(|j| a.job.as_deref() == Some(j)))
        .collect();
    let truncated = matching.len().saturating_sub(limit);
    Ok(Json(AlertsBody {
        now: engine.now().is_finite().then(|| engine.now()),
        alerts: matching
            .into_iter()
            .skip(truncated)
            .map(Alert::from)
            .collect(),
        truncated,
    }))
}
