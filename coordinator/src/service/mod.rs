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
mod proposer;
mod push_bounds;
mod settings;
mod storage;

use gpumon_core::actions::IssueRules;
use openraft::BasicNode;

pub use admission::{Admission, DEFAULT_MAX_PUSHES_IN_FLIGHT, FULL_RETRY_AFTER, RETRY_AFTER};
pub use agent_ids::AgentIdConflicts;
pub use error::ServiceError;
pub use ingest::PushError;
pub use proposer::Proposer;
use proposer::{stepped_down, write_error};
pub use push_bounds::Refusal;
pub use storage::{StorageGuard, DEFAULT_MIN_FREE_BYTES};

use crate::peer_link::PeerLink;
use crate::raft::standing::Standing;
use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, CommandResult};

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

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("id", &self.proposer.id)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// The service of the replica `proposer` writes for; actions an admin
    /// issues get `admin_rules`; pushes are admitted by `admission`.
    pub fn new(
        proposer: Proposer,
        state_machine: StateMachine,
        admin_rules: IssueRules,
        admission: Admission,
    ) -> Self {
        let probe = proposer
            .link
            .client_builder()
            .connect_timeout(std::time::Duration::from_secs(2))
            .timeout(std::time::Duration::from_secs(3))
            .build()
            .expect("reqwest client builds");
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

    /// Proposes `command` and waits, at most [`proposer::WRITE_DEADLINE`], for it to
    /// be applied here; refused at once while the disk is too full to take
    /// it or while this replica, the leader, is cut off from the majority.
    async fn write(&self, command: Command, what: &str) -> Result<CommandResult, ServiceError> {
        self.proposer.write(command, what).await
    }
}

/// The leader's base URL, as the membership names it.
pub fn leader_url(link: &PeerLink, m: &openraft::RaftMetrics<u64, BasicNode>) -> Option<String> {
    m.current_leader
        .and_then(|l| m.membership_config.membership().get_node(&l))
        .map(|n| link.url(&n.addr))
}
