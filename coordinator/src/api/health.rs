//! `GET /healthz` (live) and `GET /readyz` (ready), for load balancers and
//! orchestrators; both say the truth about Raft, not only about HTTP.
//!
//! - Live: the HTTP server answers and the Raft core runs. A core stopped
//!   by a fatal error (a storage failure, a panic) makes `/healthz` 503 with
//!   the error, so an orchestrator restarts the replica instead of keeping a
//!   dead one in service.
//! - Ready: live, a leader is known, this replica applies what is committed
//!   (apply lag under [`MAX_READY_APPLY_LAG`] entries), its data directory
//!   takes a write and keeps its free-space floor. A 503 lists every
//!   reason it is not.

use std::path::Path;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::raft::standing::{millis, Standing, STEP_DOWN_AFTER};

/// Committed entries a ready replica may still have to apply.
pub const MAX_READY_APPLY_LAG: u64 = 1024;

/// Liveness.
#[utoipa::path(
    get,
    path = "/healthz",
    responses(
        (status = 200, description = "The server is up and its Raft core runs.", body = String, content_type = "text/plain"),
        (status = 503, description = "The Raft core has stopped; the body says why. Restart the replica.", body = String, content_type = "text/plain"),
    ),
)]
pub async fn healthz(State(state): State<AppState>) -> Response {
    match &state.inner.raft.metrics().borrow().running_state {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(fatal) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("raft stopped: {fatal}"),
        )
            .into_response(),
    }
}

/// Readiness.
#[utoipa::path(
    get,
    path = "/readyz",
    responses(
        (status = 200, description = "Live, a leader is known, applying, and the data directory takes writes.", body = String, content_type = "text/plain"),
        (status = 503, description = "Not ready; one reason a line.", body = String, content_type = "text/plain"),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let inner = &state.inner;
    let mut reasons = Vec::new();
    {
        let m = inner.raft.metrics().borrow().clone();
        if let Err(fatal) = &m.running_state {
            reasons.push(format!("raft stopped: {fatal}"));
        }
        if m.current_leader.is_none() {
            reasons.push("no leader is known".to_owned());
        }
        match Standing::of(&m, inner.id) {
            Standing::SteppedDown(quiet) => reasons.push(format!(
                "stepped down: this replica led, but no majority of replicas has answered it for {} ms",
                millis(quiet)
            )),
            Standing::Other
                if m.current_leader.is_some()
                    && inner.contact.since() > 2 * STEP_DOWN_AFTER
                    && m.membership_config.membership().voter_ids().count() > 1 =>
            {
                reasons.push(format!(
                    "no word from the leader for {} ms: this replica's view may be stale",
                    millis(inner.contact.since())
                ))
            }
            _ => {}
        }
        let applied = m.last_applied.map_or(0, |l| l.index);
        let committed = inner.committed.get().unwrap_or(0);
        let lag = committed.saturating_sub(applied);
        if lag > MAX_READY_APPLY_LAG {
            reasons.push(format!(
                "{lag} committed entries not applied yet (ready under {MAX_READY_APPLY_LAG})"
            ));
        }
    }
    let dir = inner.data_dir.clone();
    match tokio::task::spawn_blocking(move || probe_write(&dir)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => reasons.push(format!(
            "data directory {} does not take writes: {e}",
            inner.data_dir.display()
        )),
        Err(e) => reasons.push(format!("cannot check the data directory: {e}")),
    }
    if let Err(full) = inner.service.check_storage() {
        reasons.push(full.to_string());
    }
    if reasons.is_empty() {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, reasons.join("\n")).into_response()
    }
}

/// Writes, syncs and removes a small file in `dir`.
fn probe_write(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(".readyz-probe");
    std::fs::write(&path, b"ready?")?;
    std::fs::File::open(&path)?.sync_all()?;
    std::fs::remove_file(&path)
}
