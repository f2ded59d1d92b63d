//! The coordinator's HTTP surface.
//!
//! | route | body | what |
//! | --- | --- | --- |
//! | `POST /api/v1/ingest` | postcard `AgentMessage` | agents push; answered with postcard `CoordinatorReply` |
//! | `GET /api/v1/cluster` | | [`gpumon_proto::api::ClusterView`] |
//! | `GET /api/v1/nodes` | | [`gpumon_proto::api::NodesView`] |
//! | `GET /api/v1/jobs` | | [`gpumon_proto::api::JobsView`] |
//! | `GET /api/v1/jobs/{job}` | | [`gpumon_proto::api::JobDetail`] plus `analysis`: the engine's forecasts and flags per rank |
//! | `GET /api/v1/jobs/{job}/snapshots?a=&b=` | | named allocator snapshots; with `a` and `b`, their difference per rank |
//! | `GET /api/v1/alerts?active=&job=&limit=` | | alert episodes, oldest first |
//! | `GET /api/v1/actions?job=&state=&limit=` | | actions on training processes and how they ended |
//! | `POST /api/v1/actions` | JSON `{"kind", "job", "ranks", "reason"}` | admin, leader: issue actions by hand |
//! | `GET /api/v1/raft` | | [`gpumon_proto::api::RaftStatus`]: this replica's Raft figures and state digest |
//! | `POST /api/v1/cluster/members` | JSON [`gpumon_proto::api::AddMember`] | admin: add a replica (learner, then voter) |
//! | `DELETE /api/v1/cluster/members/{id}` | | admin: remove a replica |
//! | `GET /api/v1/stream` | | chunked `application/x-ndjson`: a trace v1 record per line (absolute epoch `t`) for every window applied from now on; see `stream` |
//! | `GET /metrics` | | Prometheus: OpenMetrics text, or the classic text format for `Accept: text/plain`; see `metrics` |
//! | `GET /api/v1/openapi.json` | | the OpenAPI 3 document of these routes |
//! | `GET /healthz` | | `ok` |
//! | `GET /`, `GET /assets/{*path}` | | the web dashboard, compiled in; see `dashboard` |
//!
//! Every read is served from this replica's own state; adding
//! `?consistency=linearizable` makes it reflect every write committed before
//! the request (see `consistency`). Membership changes go to the leader: a
//! follower answers 421 with the leader's URL.
//! | `POST /raft/{append,vote,snapshot}` | postcard | Raft RPC between replicas |

mod actions;
mod admin;
mod alerts;
mod consistency;
mod dashboard;
mod error;
mod forward;
mod ingest;
mod members;
mod metrics;
mod openapi;
mod params;
mod raft_rpc;
mod raft_status;
mod read;
mod snapshots;
mod stream;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{delete, get, post};
use axum::Router;
use tokio::sync::{watch, Semaphore};

pub use error::ApiError;

use gpumon_common::actions::IssueRules;

use crate::config::MAX_RAFT_RPC_BYTES;
use crate::notify::NotifyStats;
use crate::raft::log_store::CommittedIndex;
use crate::raft::state_machine::StateMachine;
use crate::raft::Raft;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

/// What a node hands the API when it starts.
#[allow(missing_debug_implementations)]
pub struct AppParts {
    /// This replica's Raft id.
    pub id: u64,
    /// The Raft handle.
    pub raft: Raft,
    /// The replicated state.
    pub state_machine: StateMachine,
    /// The committed index, from the log store.
    pub committed: CommittedIndex,
    /// Largest push accepted, bytes.
    pub max_push_bytes: usize,
    /// Token membership changes must carry; `None`: loopback clients only.
    pub admin_token: Option<String>,
    /// Expiry and rate limit given to actions an admin issues.
    pub planner_rules: IssueRules,
    /// Turns `true` when the node stops, which ends every open stream.
    pub shutdown: watch::Receiver<bool>,
    /// The notifier's counters, for `/metrics`.
    pub notify_stats: NotifyStats,
}

struct Inner {
    id: u64,
    raft: Raft,
    state_machine: StateMachine,
    committed: CommittedIndex,
    max_push_bytes: usize,
    admin_token: Option<String>,
    planner_rules: IssueRules,
    notify_stats: NotifyStats,
    rejected: Rejected,
    shutdown: watch::Receiver<bool>,
    /// One permit per open `/api/v1/stream` response.
    stream_slots: Arc<Semaphore>,
    /// Client requests forwarded to the leader; its own pool, apart from Raft RPC.
    forward: reqwest::Client,
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
    /// State for a node.
    pub fn new(parts: AppParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: parts.id,
                raft: parts.raft,
                state_machine: parts.state_machine,
                committed: parts.committed,
                max_push_bytes: parts.max_push_bytes,
                admin_token: parts.admin_token,
                planner_rules: parts.planner_rules,
                notify_stats: parts.notify_stats,
                rejected: Rejected::default(),
                shutdown: parts.shutdown,
                stream_slots: Arc::new(Semaphore::new(stream::MAX_STREAM_CLIENTS)),
                forward: forward::client(),
            }),
        }
    }
}

/// All routes.
pub fn router(state: AppState) -> Router {
    // Reads that may ask for `?consistency=linearizable`.
    let reads = Router::new()
        .route("/api/v1/cluster", get(read::cluster))
        .route("/api/v1/nodes", get(read::nodes))
        .route("/api/v1/jobs", get(read::jobs))
        .route("/api/v1/jobs/{job}", get(read::job))
        .route("/api/v1/jobs/{job}/snapshots", get(snapshots::snapshots))
        .route("/api/v1/actions", get(actions::list).post(actions::issue))
        .route("/api/v1/alerts", get(alerts::alerts))
        .route("/api/v1/raft", get(raft_status::raft_status))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            consistency::consistency,
        ));
    Router::new()
        .route(
            "/api/v1/ingest",
            post(ingest::ingest).layer(DefaultBodyLimit::disable()),
        )
        .merge(reads)
        .route("/api/v1/cluster/members", post(members::add))
        .route("/api/v1/cluster/members/{id}", delete(members::remove))
        .route("/api/v1/stream", get(stream::stream))
        .route("/api/v1/openapi.json", get(openapi::openapi))
        .route("/metrics", get(metrics::metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/", get(dashboard::index))
        .route("/assets/{*path}", get(dashboard::asset))
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
