//! Live settings.
//!
//! - `GET /api/v1/config?job=`: every live key with the value in effect
//!   (cluster-wide, or for the job's ranks), where it comes from, what it
//!   takes, and the overrides set, from this replica's state.
//! - `POST /api/v1/config` (admin, leader only): JSON
//!   `{"job": J, "set": {"straggler.min_loss_ms": 5}, "reset": [KEY], "reset_all": false}`;
//!   the change goes through the Raft log and applies whole, from the next
//!   window, or is refused with 400 naming the key and what it takes.
//!
//! The keys, their bounds and scopes are `gpumon_core::settings::keys`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::Json;
use gpumon_core::settings::{Overrides, Scope, Settings, KEYS};
use gpumon_proto::api::{ApiErrorBody, ConfigBody, ConfigChange, ConfigQuery, SettingView};

use super::error_answers::{AdminErrors, ReadErrors};
use super::params::check_job_name;
use super::{ApiContext, ApiError};

/// The live settings in effect.
#[utoipa::path(
    get,
    path = "/api/v1/config",
    params(ConfigQuery),
    responses((status = 200, description = "OK", body = ConfigBody), ReadErrors),
)]
pub async fn show(
    State(state): State<ApiContext>,
    RawQuery(query): RawQuery,
) -> Result<Json<ConfigBody>, ApiError> {
    let q: ConfigQuery = match query.as_deref() {
        None | Some("") => ConfigQuery::default(),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad query {q:?}: {e}; known parameters: job=NAME, consistency=local|linearizable"
            ))
        })?,
    };
    if let Some(job) = &q.job {
        check_job_name(job)?;
    }
    let applied = state.inner.state_machine.read();
    Ok(Json(config_body(
        applied.engine.settings(),
        q.job.as_deref(),
    )))
}

/// Change the live settings (admin, leader only).
#[utoipa::path(
    post,
    path = "/api/v1/config",
    request_body = ConfigChange,
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The settings after the change.", body = ConfigBody),
        (status = 409, description = "The state the change met refused it.", body = ApiErrorBody),
        (status = 413, description = "Body over the size limit.", body = ApiErrorBody),
        AdminErrors,
    ),
)]
pub async fn change(
    State(state): State<ApiContext>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: axum::body::Bytes,
) -> Result<Json<ConfigBody>, ApiError> {
    let req: ConfigChange = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body must be JSON {{\"job\": \"optional\", \"set\": {{\"straggler.min_loss_ms\": 5}}, \"reset\": [\"KEY\"], \"reset_all\": false}}: {e}"
        ))
    })?;
    if let Some(job) = &req.job {
        check_job_name(job)?;
    }
    let change = state.inner.service.change_settings(req).await?;
    tracing::info!(from = %peer.ip(), "admin changed the live settings");
    let applied = state.inner.state_machine.read();
    Ok(Json(config_body(
        applied.engine.settings(),
        change.job.as_deref(),
    )))
}

/// The API's view of `settings`, for `job` or cluster-wide.
pub fn config_body(settings: &Settings, job: Option<&str>) -> ConfigBody {
    let job_overrides = job.and_then(|j| settings.job_overrides().get(j));
    let entries = KEYS
        .iter()
        .map(|key| {
            let source = if job_overrides.is_some_and(|o| o.contains_key(key.name)) {
                "job"
            } else if settings.cluster_overrides().contains_key(key.name) {
                "cluster"
            } else {
                "config"
            };
            SettingView {
                key: key.name.to_owned(),
                value: settings.value(key, job).map(|v| v.text()),
                source: source.to_owned(),
                scope: match key.scope {
                    Scope::Cluster => "cluster",
                    Scope::Job => "job",
                }
                .to_owned(),
                takes: key.bounds(),
                about: key.about.to_owned(),
            }
        })
        .collect();
    ConfigBody {
        job: job.map(str::to_owned),
        settings: entries,
        cluster_overrides: texts(settings.cluster_overrides()),
        job_overrides: settings
            .job_overrides()
            .iter()
            .map(|(j, o)| (j.clone(), texts(o)))
            .collect(),
    }
}

fn texts(o: &Overrides) -> BTreeMap<String, String> {
    o.iter().map(|(k, v)| (k.clone(), v.text())).collect()
}
