//! `GET /metrics`: this replica's view of the cluster for Prometheus.
//!
//! A scrape-time collector ([`collector::StateCollector`]) copies what it
//! reports out of the replicated state ([`scrape::Scrape`]) and encodes it,
//! so the series of a job disappear from the next scrape once the job ends,
//! and every replica that applied the same log serves the same values (Raft
//! figures and refused pushes aside, which are this replica's own).
//!
//! The answer is OpenMetrics 1.0 text; a client whose `Accept` prefers
//! `text/plain` gets the classic text format 0.0.4 (see
//! [`gpumon_runtime::exposition`]), which is what `promtool check metrics`
//! reads.
//!
//! Bounds: at most [`scrape::MAX_RANK_SERIES`] ranks get per-rank series
//! (the rest are counted in `gpumon_metrics_ranks_omitted`), at most
//! [`scrape::MAX_SECTIONS_PER_RANK`] sections per rank; GPUs, agents and
//! jobs are bounded by the cluster view's own limits.

mod collector;
mod families;
pub mod rank_series;
mod remote_write;
mod scrape;

use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use gpumon_runtime::exposition::Format;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use super::{ApiContext, ApiError};

/// Prometheus metrics from this replica's state.
///
/// OpenMetrics 1.0 text by default; the classic text format 0.0.4 (the same
/// samples) to a client whose Accept header prefers text/plain.
#[utoipa::path(
    get,
    path = "/metrics",
    responses((status = 200, description = "The metrics.", content(
        (String = "application/openmetrics-text"),
        (String = "text/plain"),
    ))),
)]
pub async fn metrics(State(state): State<ApiContext>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(ACCEPT).and_then(|v| v.to_str().ok()));
    // Encoding a large cluster takes a while: off the async workers.
    let text = tokio::task::spawn_blocking(move || render(state)).await;
    match text {
        Ok(Ok(text)) => (
            [(
                CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            )],
            format.render(text),
        )
            .into_response(),
        Ok(Err(e)) => {
            ApiError::Unavailable(format!("cannot encode the metrics: {e}")).into_response()
        }
        Err(e) => ApiError::Unavailable(format!("metrics encoder failed: {e}")).into_response(),
    }
}

/// The OpenMetrics text of this replica's state now.
fn render(state: ApiContext) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector::StateCollector::new(state)));
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}
