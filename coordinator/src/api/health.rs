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
//!   reason it is not. The data directory is probed one probe at a time,
//!   and at most once every [`PROBE_EVERY`] while it takes writes
//!   ([`DirProbe`]): `/readyz` is open
//!   to anyone, and concurrent probes of the same file raced into spurious
//!   503s while a flood of them was a flood of fsyncs on the log's disk.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::ApiContext;
use crate::raft::standing::{millis, Standing, STEP_DOWN_AFTER};

/// Committed entries a ready replica may still have to apply.
pub const MAX_READY_APPLY_LAG: u64 = 1024;

/// Longest time a data directory probe's answer is reused.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Whether the data directory takes a write, checked by one caller at a
/// time, and at most once every [`PROBE_EVERY`] while it does: the others
/// wait and reuse a success. A failure is not reused, so a directory that
/// takes writes again is ready at the next probe.
#[derive(Debug, Default)]
pub(crate) struct DirProbe {
    /// When the last probe succeeded.
    last_ok: tokio::sync::Mutex<Option<Instant>>,
    /// Probes written, for tests.
    probes: AtomicU64,
}

impl DirProbe {
    /// The data directory's answer, at most [`PROBE_EVERY`] old.
    pub(crate) async fn check(&self, dir: &Path) -> Result<(), String> {
        let mut last_ok = self.last_ok.lock().await;
        if last_ok.is_some_and(|at| at.elapsed() < PROBE_EVERY) {
            return Ok(());
        }
        self.probes.fetch_add(1, Relaxed);
        let owned = dir.to_owned();
        let answer = match tokio::task::spawn_blocking(move || probe_write(&owned)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "data directory {} does not take writes: {e}",
                dir.display()
            )),
            Err(e) => Err(format!("cannot check the data directory: {e}")),
        };
        *last_ok = answer.is_ok().then(Instant::now);
        answer
    }
}

/// Liveness.
#[utoipa::path(
    get,
    path = "/healthz",
    responses(
        (status = 200, description = "The server is up and its Raft core runs.", body = String, content_type = "text/plain"),
        (status = 503, description = "The Raft core has stopped; the body says why. Restart the replica.", body = String, content_type = "text/plain"),
    ),
)]
pub async fn healthz(State(state): State<ApiContext>) -> Response {
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
pub async fn readyz(State(state): State<ApiContext>) -> Response {
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
    if let Err(reason) = inner.dir_probe.check(&inner.data_dir).await {
        reasons.push(reason);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_probes_share_one_write_and_all_see_it_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let probe = std::sync::Arc::new(DirProbe::default());
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (probe, path) = (probe.clone(), dir.path().to_owned());
            calls.spawn(async move { probe.check(&path).await });
        }
        while let Some(answer) = calls.join_next().await {
            assert_eq!(answer.unwrap(), Ok(()));
        }
        // 64 calls, within a second or a few on a busy machine: a probe a second.
        let probes = probe.probes.load(Relaxed);
        assert!((1..=4).contains(&probes), "{probes} probes");
        assert!(!dir.path().join(".readyz-probe").exists());
    }

    #[tokio::test]
    async fn a_directory_that_takes_no_write_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let answer = DirProbe::default().check(&gone).await.unwrap_err();
        assert!(
            answer.contains("does not take writes") && answer.contains("gone"),
            "{answer}"
        );
    }
}
