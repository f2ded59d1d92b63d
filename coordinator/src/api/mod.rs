//! The coordinator's HTTP surface. Every route is declared once, in the
//! route table [`routes::ROUTES`] (method, path, layers, who may call it and
//! its handler), which [`router`] builds the axum router from; every JSON
//! body is a type of [`gpumon_proto::api`], and the OpenAPI document
//! (`GET /api/v1/openapi.json`, see `openapi`) describes each documented
//! route's parameters and answers.
//!
//! Every read is served from this replica's own state; adding
//! `?consistency=linearizable` makes it reflect every write committed before
//! the request (see `consistency`). Membership changes go to the leader: a
//! follower answers 421 with the leader's URL.

mod actions;
mod alerts;
mod auth;
mod auth_error;
mod config;
mod consistency;
mod dashboard;
mod error;
mod error_answers;
mod forward;
mod health;
mod ingest;
mod job_params;
mod job_scale;
mod log_gate;
mod members;
mod memory_snapshots;
mod metrics;
mod openapi;
mod params;
mod postcard_schema;
mod raft_rpc;
mod raft_status;
mod read;
mod routes;
mod stream;
mod stream_slots;
mod view_age;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::Router;
use tokio::sync::watch;

pub use error::ApiError;

use gpumon_core::actions::IssueRules;

use crate::credentials::Credentials;
use crate::notify::NotifyStats;
use crate::peer_link::PeerLink;
use crate::raft::election::Backing;
use crate::raft::log_store::CommittedIndex;
use crate::raft::network::MAX_RAFT_RPC_BYTES;
use crate::raft::standing::Contact;
use crate::raft::state_machine::StateMachine;
use crate::raft::Raft;
use crate::remote_write::RemoteWriteStats;
use crate::service::{Admission, Proposer, Service};
pub use metrics::rank_series::RankSeries;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct ApiContext {
    inner: Arc<Inner>,
}

/// What a node hands the API when it starts.
#[allow(missing_debug_implementations)]
pub struct ApiParts {
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
    /// Pushes between decoding and commit at once; more are answered 429.
    pub max_pushes_in_flight: usize,
    /// Who may call what.
    pub credentials: Credentials,
    /// The data directory, which readiness checks takes writes.
    pub data_dir: std::path::PathBuf,
    /// The replica's one write path (its storage check refuses writes,
    /// 507, below the free space the data directory keeps).
    pub proposer: Proposer,
    /// Expiry and rate limit given to actions an admin issues.
    pub planner_rules: IssueRules,
    /// Turns `true` when the node stops, which ends every open stream.
    pub shutdown: watch::Receiver<bool>,
    /// The notifier's counters, for `/metrics`.
    pub notify_stats: NotifyStats,
    /// How this replica reaches its peers.
    pub link: PeerLink,
    /// When this replica last heard from a leader.
    pub contact: Contact,
    /// The candidate this replica backs in an election.
    pub backing: Backing,
    /// Which live ranks get per-rank series on `/metrics`.
    pub rank_series: RankSeries,
    /// The remote-write sender's counters, for `/metrics`, when it is on.
    pub remote_write_stats: Option<RemoteWriteStats>,
}

struct Inner {
    id: u64,
    raft: Raft,
    state_machine: StateMachine,
    committed: CommittedIndex,
    max_push_bytes: usize,
    credentials: Credentials,
    data_dir: std::path::PathBuf,
    refused: auth::Refused,
    service: Service,
    notify_stats: NotifyStats,
    rejected: Rejected,
    shutdown: watch::Receiver<bool>,
    /// The slots of `/api/v1/stream` responses.
    stream_slots: stream_slots::StreamSlots,
    /// Client requests forwarded to the leader; its own pool, apart from Raft RPC.
    forward: reqwest::Client,
    /// How this replica reaches its peers.
    link: PeerLink,
    /// When this replica last heard from a leader.
    contact: Contact,
    /// The candidate this replica backs in an election.
    backing: Backing,
    /// Which live ranks get per-rank series on `/metrics`.
    rank_series: RankSeries,
    remote_write_stats: Option<RemoteWriteStats>,
    /// Whether the data directory takes writes, for `/readyz`.
    dir_probe: health::DirProbe,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiContext")
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
    busy: AtomicU64,
    full: AtomicU64,
    out_of_bounds: AtomicU64,
    forbidden: AtomicU64,
    /// One warning line per interval for all of them.
    log: log_gate::LogGate,
}

impl ApiContext {
    /// State for a node.
    pub fn new(parts: ApiParts) -> Self {
        let service = Service::new(
            parts.proposer,
            parts.state_machine.clone(),
            parts.planner_rules,
            Admission::new(parts.max_pushes_in_flight),
        );
        Self {
            inner: Arc::new(Inner {
                id: parts.id,
                raft: parts.raft,
                state_machine: parts.state_machine,
                committed: parts.committed,
                max_push_bytes: parts.max_push_bytes,
                credentials: parts.credentials,
                data_dir: parts.data_dir,
                refused: auth::Refused::default(),
                service,
                notify_stats: parts.notify_stats,
                rejected: Rejected::default(),
                shutdown: parts.shutdown,
                stream_slots: stream_slots::StreamSlots::default(),
                forward: forward::client(&parts.link),
                link: parts.link,
                contact: parts.contact,
                backing: parts.backing,
                rank_series: parts.rank_series,
                remote_write_stats: parts.remote_write_stats,
                dir_probe: health::DirProbe::default(),
            }),
        }
    }
}

/// All routes, from the route table ([`routes::ROUTES`]). Authentication
/// is every route's outermost layer: a request that fails it costs no
/// quorum round, no forwarding and no work of the layers inside.
pub fn router(state: ApiContext) -> Router {
    let (mut reads, mut rpc, mut rest) = (Router::new(), Router::new(), Router::new());
    for r in routes::ROUTES {
        let (group, layered) = match r.group {
            // Reads may ask for `?consistency=linearizable`.
            routes::Group::Consistent => (
                &mut reads,
                r.method_router()
                    .layer(middleware::from_fn_with_state(
                        state.clone(),
                        consistency::consistency,
                    ))
                    .layer(middleware::from_fn_with_state(
                        state.clone(),
                        view_age::stamp,
                    )),
            ),
            routes::Group::RaftRpc => (&mut rpc, r.method_router()),
            routes::Group::Api | routes::Group::Dashboard => (&mut rest, r.method_router()),
        };
        let guarded = layered.layer(middleware::from_fn_with_state(
            (state.clone(), r.access),
            auth::require,
        ));
        *group = std::mem::take(group).route(r.path, guarded);
    }
    rest.merge(reads)
        .merge(rpc.layer(DefaultBodyLimit::max(MAX_RAFT_RPC_BYTES)))
        .fallback(|| async {
            ApiError::NotFound("no such route; the API lives under /api/v1/".into())
        })
        .with_state(state)
}
