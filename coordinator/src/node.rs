//! Starting and stopping a coordinator: storage, Raft, HTTP server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use gpumon_core::cluster::ClusterEvent;
use gpumon_net::{ApiListener, ServerTls};
use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use thiserror::Error;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::api::{self, ApiContext, ApiParts};
use crate::config::{CoordinatorConfig, Formation};
use crate::notify::{Notifier, NotifyStats};
use crate::peer_link::PeerLink;
use crate::raft::election::Backing;
use crate::raft::log_store::LogStore;
use crate::raft::network::HttpNetwork;
use crate::raft::standing::Contact;
use crate::raft::state_machine::StateMachine;
use crate::raft::timing::{
    ELECTION_TIMEOUT_MS, HEARTBEAT_MS, MAX_ENTRIES_PER_APPEND, SNAPSHOT_CHUNK_TIMEOUT_MS,
};
use crate::raft::{snapshot_schedule, Raft};
use crate::remote_write::RemoteWriteStats;
use crate::service::{Proposer, StorageGuard};

/// File name of the Raft log inside the data directory.
pub const LOG_FILE: &str = "raft-log.redb";

/// Why a coordinator could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The Raft log could not be opened.
    #[error(transparent)]
    Log(#[from] crate::raft::log_store::OpenLogError),
    /// The snapshot could not be loaded.
    #[error(transparent)]
    Snapshot(#[from] crate::raft::state_machine::LoadSnapshotError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// openraft refused to start.
    #[error("raft: {0}")]
    Raft(String),
}

/// Initializes a replica whose log is empty, as `config.formation` says; a
/// replica with a log resumes from it and ignores `--peers`.
async fn form(raft: &Raft, config: &CoordinatorConfig, advertise: &str) -> Result<(), StartError> {
    let raft_err = |e: String| StartError::Raft(e);
    if raft
        .is_initialized()
        .await
        .map_err(|e| raft_err(e.to_string()))?
    {
        tracing::info!(id = config.id, "resumed from the existing Raft log");
        return Ok(());
    }
    let members: BTreeMap<u64, BasicNode> = match &config.formation {
        Formation::Join => {
            tracing::info!(
                id = config.id,
                %advertise,
                "waiting to be added: run `gpumon cluster add {}={advertise}` against the cluster",
                config.id
            );
            return Ok(());
        }
        Formation::Single => BTreeMap::from([(
            config.id,
            BasicNode {
                addr: advertise.to_owned(),
            },
        )]),
        Formation::Peers(peers) => peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect(),
    };
    let voters: Vec<String> = members
        .iter()
        .map(|(id, n)| format!("{id}={}", n.addr))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => {
            tracing::info!(id = config.id, voters = %voters.join(","), "initialized a new cluster");
            Ok(())
        }
        // Another replica's vote or log reached us first: already formed.
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
            tracing::info!(id = config.id, "the cluster was formed by a peer");
            Ok(())
        }
        Err(e) => Err(raft_err(e.to_string())),
    }
}

/// Opens the data directory (made if missing), the Raft log in it and the
/// state machine with its latest snapshot.
fn open_storage(config: &CoordinatorConfig) -> Result<(LogStore, StateMachine), StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    let log_store = LogStore::open(&config.data_dir.join(LOG_FILE))?;
    let state_machine = StateMachine::open(&config.data_dir, config.limits, &config.engine)?;
    Ok((log_store, state_machine))
}

/// The API's socket, bound, and how this replica reaches and is reached by
/// its peers.
struct Bound {
    listener: tokio::net::TcpListener,
    /// The server side of TLS, when the replica serves it.
    server_tls: Option<Arc<rustls::ServerConfig>>,
    /// The client side towards peers: scheme, TLS roots and identity.
    link: PeerLink,
    local_addr: SocketAddr,
    /// The address peers are told to reach this replica at.
    advertise: String,
}

impl Bound {
    /// Loads the TLS files and binds `config.listen`.
    async fn bind(config: &CoordinatorConfig) -> Result<Self, StartError> {
        let server_tls = config
            .tls
            .as_ref()
            .map(ServerTls::config)
            .transpose()
            .map_err(|e| StartError::Config(e.to_string()))?;
        let link = PeerLink::new(config.tls.as_ref(), config.peer_ca_file.as_deref())
            .map_err(|e| StartError::Config(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: config.listen.clone(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
        let advertise = config
            .advertised()
            .map(str::to_owned)
            .unwrap_or_else(|| local_addr.to_string());
        Ok(Bound {
            listener,
            server_tls,
            link,
            local_addr,
            advertise,
        })
    }
}

/// openraft's settings: our timings, no snapshots or elections of its own
/// (our schedule and pre-vote run them), bounded AppendEntries.
fn raft_config(config: &CoordinatorConfig) -> Result<openraft::Config, StartError> {
    openraft::Config {
        cluster_name: "gpumon".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MS.0,
        election_timeout_max: ELECTION_TIMEOUT_MS.1,
        // Snapshots follow our own schedule (raft::snapshot_schedule).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 100,
        // A peer further behind than two snapshot periods gets the snapshot.
        replication_lag_threshold: config.snapshot_every_entries.saturating_mul(2).max(1000),
        snapshot_max_chunk_size: config.snapshot_chunk_bytes,
        // An AppendEntries must be answered within a heartbeat period;
        // an entry may be a batch of pushes (service::batcher), so a
        // few of them are what one call carries.
        max_payload_entries: MAX_ENTRIES_PER_APPEND,
        install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT_MS,
        // Elections start after a pre-vote round (raft::election).
        enable_elect: false,
        ..Default::default()
    }
    .validate()
    .map_err(|e| StartError::Raft(e.to_string()))
}

/// The replica's background tasks, and the state they share with the API.
struct Tasks {
    snapshots: JoinHandle<()>,
    expiry: JoinHandle<()>,
    contact: Contact,
    backing: Backing,
    elections: JoinHandle<()>,
    planner: JoinHandle<()>,
    notifier: Notifier,
    remote_write: Option<JoinHandle<()>>,
    remote_write_stats: RemoteWriteStats,
}

impl Tasks {
    /// Starts the snapshot schedule, expiry, elections, the release
    /// planner, the notifier and (when configured) the remote-write sender;
    /// each ends when `stopped` turns true.
    fn spawn(
        config: &CoordinatorConfig,
        raft: &Raft,
        state_machine: &StateMachine,
        proposer: &Proposer,
        bound: &Bound,
        stopped: &watch::Receiver<bool>,
    ) -> Result<Self, StartError> {
        let snapshots = snapshot_schedule::spawn(
            raft.clone(),
            config.id,
            config.snapshot_every_entries,
            stopped.clone(),
        );
        let expiry =
            crate::expiry_task::spawn(proposer.clone(), config.expire_after, stopped.clone());
        let contact = Contact::default();
        let backing = Backing::default();
        let elections = crate::raft::election::spawn(
            raft.clone(),
            config.id,
            contact.clone(),
            backing.clone(),
            &bound.link,
            config.credentials.cluster_secret.clone(),
            stopped.clone(),
        );
        let planner = crate::release_task::spawn(
            proposer.clone(),
            state_machine.clone(),
            config.planner.clone(),
            stopped.clone(),
        );
        let notifier = Notifier::spawn(
            proposer.clone(),
            state_machine.clone(),
            config.notify.clone(),
            bound.link.url(&bound.advertise),
            stopped.clone(),
        );
        let remote_write_stats = RemoteWriteStats::default();
        let remote_write = config
            .remote_write
            .clone()
            .map(|rw| {
                crate::remote_write::spawn(
                    rw,
                    proposer.clone(),
                    state_machine.clone(),
                    remote_write_stats.clone(),
                    stopped.clone(),
                )
            })
            .transpose()
            .map_err(|e| StartError::Config(e.to_string()))?;
        Ok(Tasks {
            snapshots,
            expiry,
            contact,
            backing,
            elections,
            planner,
            notifier,
            remote_write,
            remote_write_stats,
        })
    }
}

/// Serves the API on `listener` (TLS when `tls` is given, within
/// `config.connections`) until `stopped` turns true.
fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    config: &CoordinatorConfig,
    state: ApiContext,
    mut stopped: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    let router = api::router(state).into_make_service_with_connect_info::<SocketAddr>();
    let listener = ApiListener::with_limits(listener, tls, config.connections)
        .map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?
        .tap_io(|_| {});
    Ok(tokio::spawn(async move {
        // Graceful shutdown waits for open responses, so the long-lived
        // `/api/v1/stream` responses end on the same signal.
        let shutdown = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "API server failed");
        }
    }))
}

/// A running coordinator.
pub struct Coordinator {
    id: u64,
    local_addr: SocketAddr,
    scheme: &'static str,
    raft: Raft,
    state_machine: StateMachine,
    /// `true` once shutting down; the server and every `/api/v1/stream` watch it.
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    snapshots: JoinHandle<()>,
    planner: JoinHandle<()>,
    expiry: JoinHandle<()>,
    elections: JoinHandle<()>,
    notifier: Notifier,
    remote_write: Option<JoinHandle<()>>,
    remote_write_stats: RemoteWriteStats,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("id", &self.id)
            .field("addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Opens storage, starts Raft and serves the API; a fresh single-node
    /// cluster initializes itself (once: a restart finds its membership in the log).
    pub async fn start(config: CoordinatorConfig) -> Result<Self, StartError> {
        config
            .validate()
            .map_err(|e| StartError::Config(e.to_string()))?;
        let (log_store, state_machine) = open_storage(&config)?;
        let bound = Bound::bind(&config).await?;

        let raft_config = raft_config(&config)?;
        let committed = log_store.committed();
        let raft = Raft::new(
            config.id,
            Arc::new(raft_config),
            HttpNetwork::new(config.credentials.cluster_secret.clone(), &bound.link),
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        form(&raft, &config, &bound.advertise).await?;

        let (stop, stopped) = watch::channel(false);
        let proposer = Proposer::new(
            config.id,
            raft.clone(),
            StorageGuard::new(&config.data_dir, config.min_free_bytes),
            bound.link.clone(),
        );
        let Tasks {
            snapshots,
            expiry,
            contact,
            backing,
            elections,
            planner,
            notifier,
            remote_write,
            remote_write_stats,
        } = Tasks::spawn(&config, &raft, &state_machine, &proposer, &bound, &stopped)?;
        let state = ApiContext::new(ApiParts {
            id: config.id,
            raft: raft.clone(),
            state_machine: state_machine.clone(),
            committed,
            max_push_bytes: config.max_push_bytes,
            max_pushes_in_flight: config.max_pushes_in_flight,
            credentials: config.credentials.clone(),
            data_dir: config.data_dir.clone(),
            proposer,
            planner_rules: config.planner.rules(),
            shutdown: stopped.clone(),
            notify_stats: notifier.stats(),
            link: bound.link.clone(),
            contact,
            backing,
            rank_series: config.metrics_rank_series,
            remote_write_stats: remote_write.is_some().then(|| remote_write_stats.clone()),
        });
        let server = serve(bound.listener, bound.server_tls, &config, state, stopped)?;
        tracing::info!(id = config.id, addr = %bound.local_addr, data_dir = %config.data_dir.display(), "coordinator up");
        Ok(Self {
            id: config.id,
            local_addr: bound.local_addr,
            scheme: bound.link.scheme(),
            raft,
            state_machine,
            stop,
            server,
            snapshots,
            planner,
            expiry,
            elections,
            notifier,
            remote_write,
            remote_write_stats,
        })
    }

    /// This node's Raft id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The address the API is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Base URL of the API, e.g. `http://127.0.0.1:7070` (`https://` with TLS).
    pub fn api_url(&self) -> String {
        format!("{}://{}", self.scheme, self.local_addr)
    }

    /// Events from every entry this replica applies.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.state_machine.subscribe()
    }

    /// The notifier's counters (sent, failed, retried, dropped, unrecorded
    /// per receiver kind); a shared handle that keeps counting.
    pub fn notify_stats(&self) -> NotifyStats {
        self.notifier.stats()
    }

    /// The remote-write sender's counters (all zero when it is off); a
    /// shared handle that keeps counting.
    pub fn remote_write_stats(&self) -> RemoteWriteStats {
        self.remote_write_stats.clone()
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Stops serving and shuts Raft down; committed data stays on disk.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        let _ = (&mut self.server).await;
        let _ = (&mut self.snapshots).await;
        let _ = (&mut self.planner).await;
        let _ = (&mut self.expiry).await;
        let _ = (&mut self.elections).await;
        self.notifier.join().await;
        if let Some(rw) = &mut self.remote_write {
            let _ = rw.await;
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}
