//! The coordinator's HTTP surface.
//!
//! | route | body | what |
//! | --- | --- | --- |
//! | `POST /api/v1/ingest` | postcard `AgentMessage` | agents push; answered with postcard `CoordinatorReply` |
//! | `GET /api/v1/cluster` | | [`gpumon_proto::api::ClusterView`] |
//! | `GET /api/v1/nodes` | | [`gpumon_proto::api::NodesView`] |
//! | `GET /api/v1/jobs` | | [`gpumon_proto::api::JobsView`] |
//! | `GET /api/v1/jobs/{job}` | | [`gpumon_proto::api::JobDetail`] plus `analysis`: the engine's forecasts and flags per rank |
//! | `GET /api/v1/alerts?active=&job=&limit=` | | alert episodes, oldest first |
//! | `GET /api/v1/stream` | | chunked `application/x-ndjson`: a trace v1 record per line (absolute epoch `t`) for every window applied from now on; see `stream` |
//! | `GET /healthz` | | `ok` |
//! | `POST /raft/{append,vote,snapshot}` | postcard | Raft RPC between replicas |

mod alerts;
mod error;
mod ingest;
mod raft_rpc;
mod read;
mod stream;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::{watch, Semaphore};

pub use error::ApiError;

use crate::config::MAX_RAFT_RPC_BYTES;
use crate::raft::state_machine::StateMachine;
use crate::raft::Raft;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    raft: Raft,
    state_machine: StateMachine,
    max_push_bytes: usize,
    rejected: Rejected,
    /// `true` once the node shuts down.
    shutdown: watch::Receiver<bool>,
    /// One permit per open `/api/v1/stream` response.
    stream_slots: Arc<Semaphore>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Per-replica counters of refused pushes.
#[derive(Debug, Default)]
struct Rejected {
    too_large: AtomicU64,
    bad_version: AtomicU64,
    malformed: AtomicU64,
}

impl AppState {
    /// State for a node; `shutdown` turns `true` when the node stops, which
    /// ends every open stream.
    pub fn new(
        id: u64,
        raft: Raft,
        state_machine: StateMachine,
        max_push_bytes: usize,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                id,
                raft,
                state_machine,
                max_push_bytes,
                rejected: Rejected::default(),
                shutdown,
                stream_slots: Arc::new(Semaphore::new(stream::MAX_STREAM_CLIENTS)),
            }),
        }
    }
}

/// All routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/api/v1/ingest",
            post(ingest::ingest).layer(DefaultBodyLimit::disable()),
        )
        .route("/api/v1/cluster", get(read::cluster))
        .route("/api/v1/nodes", get(read::nodes))
        .route("/api/v1/jobs", get(read::jobs))
        .route("/api/v1/jobs/{job}", get(read::job))
        .route("/api/v1/alerts", get(alerts::alerts))
        .route("/api/v1/stream", get(stream::stream))
        .route("/healthz", get(|| async { "ok" }))
        .merge(
            Router::new()
                .route("/raft/append", post(raft_rpc::append))
                .route("/raft/vote", post(raft_rpc::vote))
                .route("/raft/snapshot", post(raft_rpc::snapshot))
                .layer(DefaultBodyLimit::max(MAX_RAFT_RPC_BYTES)),
        )
        .fallback(|| async {
            ApiError::NotFound("no such route; the API lives under /api/v1/".into())
        })
        .with_state(state)
}
