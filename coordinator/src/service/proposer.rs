//! The one write path of a replica: every proposal through Raft, whether a
//! client's request or a leader-only task's (expiry, release planning,
//! recording a sent notification), goes through [`Proposer::write`], with
//! its checks: the disk has room for the entry, this replica, if it is the
//! leader, still has a majority behind it (see `raft::standing`), and the
//! commit comes within [`WRITE_DEADLINE`]. And [`Proposer::leads`] is the
//! one definition of "leader" for every leader-only side effect (sending
//! notifications and remote-write batches, planning actions, expiring): the
//! leader a majority still acknowledges, not merely openraft's leader, so a
//! leader cut off from the others stops acting before a new one starts.

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;

use super::{ServiceError, StorageGuard};
use crate::peer_link::PeerLink;
use crate::raft::standing::Standing;
use crate::raft::{Command, CommandResult, Raft};

/// Longest a write waits for its commit before the client is told to
/// retry: under the 2 s a client may wait for an answer, cut leader or not.
pub const WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_millis(1_800);

/// What a proposal needs: the Raft handle, the storage check, and how to
/// name the leader to a client. Clones share them.
#[derive(Clone)]
pub struct Proposer {
    pub(super) id: u64,
    pub(super) raft: Raft,
    pub(super) storage: StorageGuard,
    pub(super) link: PeerLink,
}

impl std::fmt::Debug for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Proposer {
    /// The proposer of replica `id`.
    pub fn new(id: u64, raft: Raft, storage: StorageGuard, link: PeerLink) -> Self {
        Self {
            id,
            raft,
            storage,
            link,
        }
    }

    /// The Raft handle, for reading its metrics.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// This replica's standing now.
    pub fn standing(&self) -> Standing {
        Standing::of(&self.raft.metrics().borrow(), self.id)
    }

    /// Whether this replica is the leader a majority acknowledges: the
    /// condition of every leader-only side effect.
    pub fn leads(&self) -> bool {
        self.standing() == Standing::Leader
    }

    /// [`Self::leads`], and caught up: it has applied an entry of its own
    /// term, so everything an earlier leader committed is in its state (a
    /// new leader that read its state sooner could repeat what the old one
    /// recorded, a notification for one).
    pub fn leads_caught_up(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        Standing::of(&m, self.id) == Standing::Leader
            && m.last_applied
                .is_some_and(|l| l.leader_id.term == m.current_term)
    }

    /// Whether the disk has room for a write now: a leader that could not
    /// record a side effect does not perform it (a notification sent but
    /// not recorded would be sent again every round).
    pub fn can_write(&self) -> bool {
        self.storage.check().is_ok()
    }

    /// Proposes `command` and waits, at most [`WRITE_DEADLINE`], for it to
    /// be applied here; refused at once while the disk is too full to take
    /// it or while this replica, the leader, is cut off from the majority.
    /// `what` names the command in the error.
    pub async fn write(&self, command: Command, what: &str) -> Result<CommandResult, ServiceError> {
        self.storage.check()?;
        if let Standing::SteppedDown(quiet) = self.standing() {
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

/// The answer of a leader cut off from the majority.
pub(super) fn stepped_down(quiet: std::time::Duration) -> ServiceError {
    ServiceError::Unavailable(format!(
        "this replica was the leader but no majority of replicas has answered it for {} ms, so it has stepped down: retry on another replica",
        quiet.as_millis()
    ))
}

/// What a failed proposal means for the client.
pub(super) fn write_error(
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
