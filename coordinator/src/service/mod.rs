//! The coordinator's service layer: what the cluster does on a request,
//! apart from HTTP.
//!
//! The HTTP handlers (`api`) decode a request, check nothing but its form,
//! and call one method here; this layer holds the rules (bounds on a push,
//! which ranks an action may target, membership safety) and every write
//! that only the leader may propose through Raft: committing pushes,
//! recording which actions an agent was handed, issuing actions, changing
//! membership. Who may call what is decided before, by the API's
//! authorization layer.

mod actions;
mod admission;
mod agent_ids;
mod batcher;
mod error;
mod ingest;
mod members;
mod push_bounds;
mod storage;

use gpumon_common::actions::IssueRules;
use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;

pub use admission::{Admission, DEFAULT_MAX_PUSHES_IN_FLIGHT, FULL_RETRY_AFTER, RETRY_AFTER};
pub use agent_ids::AgentIdConflicts;
pub use error::ServiceError;
pub(crate) use ingest::wall_ms;
pub use ingest::{PushError, Refusal};
pub use storage::{StorageGuard, DEFAULT_MIN_FREE_BYTES};

use crate::peer_link::PeerLink;
use crate::raft::standing::Standing;
use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, CommandResult, Raft};

/// The write side of one replica; clones share it.
#[derive(Clone)]
pub struct Service {
    state_machine: StateMachine,
    admin_rules: IssueRules,
    /// For probing a replica before it is added.
    probe: reqwest::Client,
    /// Pushes of two agents under one id.
    agent_ids: AgentIdConflicts,
    /// The bound on pushes in flight.
    admission: Admission,
    /// Proposes and waits for commits; also this replica's id, Raft handle,
    /// storage check and peer link for the rest of the service.
    proposer: Proposer,
    /// Gathers the pushes that arrive together into one proposal.
    batcher: batcher::Batcher,
}

/// What a proposal needs: the Raft handle, the storage check, and how to
/// name the leader to a client.
#[derive(Clone)]
pub(crate) struct Proposer {
    id: u64,
    raft: Raft,
    storage: StorageGuard,
    link: PeerLink,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("id", &self.proposer.id)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// The service of replica `id`; actions an admin issues get
    /// `admin_rules`; pushes are admitted by `admission`.
    pub fn new(
        id: u64,
        raft: Raft,
        state_machine: StateMachine,
        admin_rules: IssueRules,
        admission: Admission,
        storage: StorageGuard,
        link: PeerLink,
    ) -> Self {
        let probe = link
            .client_builder()
            .connect_timeout(std::time::Duration::from_secs(2))
            .timeout(std::time::Duration::from_secs(3))
            .build()
            .expect("reqwest client builds");
        let proposer = Proposer {
            id,
            raft,
            storage,
            link,
        };
        Self {
            batcher: batcher::Batcher::start(proposer.clone()),
            proposer,
            state_machine,
            admin_rules,
            probe,
            admission,
            agent_ids: AgentIdConflicts::default(),
        }
    }

    /// Pushes seen from two agents under one agent id.
    pub fn agent_id_conflicts(&self) -> u64 {
        self.agent_ids.count()
    }

    /// Whether the data directory has the room a write needs.
    pub fn check_storage(&self) -> Result<(), ServiceError> {
        self.proposer.storage.check()
    }

    /// Refuses unless this replica is the leader and a majority still
    /// acknowledges it: `NotLeader` with the leader's URL from a follower,
    /// `Unavailable` from a leader cut off from the majority (it has
    /// stepped down, see `raft::standing`).
    fn ensure_leader(&self) -> Result<(), ServiceError> {
        let m = self.proposer.raft.metrics().borrow().clone();
        match Standing::of(&m, self.proposer.id) {
            Standing::Leader => Ok(()),
            Standing::SteppedDown(quiet) => Err(stepped_down(quiet)),
            Standing::Other => Err(ServiceError::NotLeader(leader_url(&self.proposer.link, &m))),
        }
    }

    /// Proposes `command` and waits, at most [`WRITE_DEADLINE`], for it to
    /// be applied here; refused at once while the disk is too full to take
    /// it or while this replica, the leader, is cut off from the majority.
    async fn write(&self, command: Command, what: &str) -> Result<CommandResult, ServiceError> {
        self.proposer.write(command, what).await
    }
}

impl Proposer {
    /// See [`Service::write`].
    async fn write(&self, command: Command, what: &str) -> Result<CommandResult, ServiceError> {
        self.storage.check()?;
        if let Standing::SteppedDown(quiet) = Standing::of(&self.raft.metrics().borrow(), self.id) {
            return Err(stepped_down(quiet));
        }
        match tokio::time::timeout(WRITE_DEADLINE, self.raft.client_write(command)).await {
            Ok(done) => done
                .map(|resp| resp.data)
                .map_err(|e| write_error(&self.link, e, what)),
            Err(_) => Err(ServiceError::Unavailable(format!(
                "{what} was not committed within {} ms (can this replica reach a majority of the replicas?); it may still be applied: retry, on another replica if this one stays unavailable (a retried push is recognized by its seq)",
                WRITE_DEADLINE.as_millis()
            ))),
        }
    }
}

/// The leader's base URL, as the membership names it.
pub fn leader_url(link: &PeerLink, m: &openraft::RaftMetrics<u64, BasicNode>) -> Option<String> {
    m.current_leader
        .and_then(|l| m.membership_config.membership().get_node(&l))
        .map(|n| link.url(&n.addr))
}

/// Longest a write waits for its commit before the client is told to
/// retry: under the 2 s a client may wait for an answer, cut leader or not.
pub const WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_millis(1_800);

/// The answer of a leader cut off from the majority.
fn stepped_down(quiet: std::time::Duration) -> ServiceError {
    ServiceError::Unavailable(format!(
        "this replica was the leader but no majority of replicas has answered it for {} ms, so it has stepped down: retry on another replica",
        quiet.as_millis()
    ))
}

/// What a failed proposal means for the client.
fn write_error(
    link: &PeerLink,
    e: RaftError<u64, ClientWriteError<u64, BasicNode>>,
    what: &str,
) -> ServiceError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            ServiceError::NotLeader(f.leader_node.map(|n| link.url(&n.addr)))
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            ServiceError::Conflict(e.to_string())
        }
        e => ServiceError::Unavailable(format!("cannot commit {what}: {e}")),
    }
}
