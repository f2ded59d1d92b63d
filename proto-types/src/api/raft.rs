//! Raft figures and membership: `GET /api/v1/raft` and the bodies of
//! `POST /api/v1/cluster/members`.

use serde::{Deserialize, Serialize};

/// `GET /api/v1/raft`: one replica's Raft figures, from its own view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RaftStatus {
    /// This replica's id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// The leader's id, when known.
    pub leader: Option<u64>,
    /// The leader's base URL, when known.
    pub leader_url: Option<String>,
    /// Current term.
    pub term: u64,
    /// Index of the newest entry in this replica's log.
    pub last_log_index: Option<u64>,
    /// Newest index this replica knows to be committed.
    pub commit_index: Option<u64>,
    /// Newest index applied to this replica's state machine.
    pub applied_index: Option<u64>,
    /// Committed entries not yet applied here.
    pub apply_lag: u64,
    /// Last index covered by this replica's newest snapshot.
    pub snapshot_index: Option<u64>,
    /// Last index purged from this replica's log (covered by the snapshot).
    pub purged_index: Option<u64>,
    /// On the leader: ms since a quorum last acknowledged it.
    pub millis_since_quorum_ack: Option<u64>,
    /// Voting members.
    pub voters: Vec<RaftMember>,
    /// Non-voting members (catching up, or kept as read replicas).
    pub learners: Vec<RaftMember>,
    /// On the leader: how far each other member's log is behind; empty elsewhere.
    pub replication: Vec<PeerReplication>,
    /// Hash of the replicated data at `state_digest_index` (cluster view,
    /// histories, detector, alert and action state; not Raft's own
    /// bookkeeping): equal on every replica that applied the same entries,
    /// and unchanged by a restart or a new term.
    pub state_digest: String,
    /// The applied index the digest was taken at: `applied_index` on a
    /// quiet replica; on a busy one the digest is reused for up to a second
    /// and may trail it (absent from older coordinators).
    #[serde(default)]
    pub state_digest_index: Option<u64>,
    /// How old this replica's view may be, ms: 0 on a leader a majority
    /// acknowledges; on a follower, time since it last heard from the
    /// leader; on a leader cut off from the majority (`role:
    /// "stepped_down"`), time since the majority last answered it.
    #[serde(default)]
    pub view_age_ms: u64,
}

/// A member of the Raft cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RaftMember {
    /// Raft node id.
    pub id: u64,
    /// `host:port` of its API and Raft RPC.
    pub addr: String,
}

/// The leader's view of one member's replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeerReplication {
    /// The member.
    pub id: u64,
    /// Newest index known to match the leader's log.
    pub matched_index: Option<u64>,
    /// Entries the member is behind the leader's last log index.
    pub lag: u64,
}

/// `POST /api/v1/cluster/members`: add a replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AddMember {
    /// Its Raft id.
    pub id: u64,
    /// `host:port` where it listens.
    pub addr: String,
    /// Keep it a learner (replicates, serves reads, never votes).
    #[serde(default)]
    pub learner: bool,
}
