//! The JSON documents of the coordinator's read API (`/api/v1/...`).
//!
//! Times are milliseconds since the Unix epoch as stamped by the agents (the
//! coordinator never reads its own clock into the state). Memory is in bytes.

use serde::{Deserialize, Serialize};

/// `GET /api/v1/cluster`: the whole cluster at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// Newest sample time applied, ms (0 before any data).
    pub now_ms: u64,
    /// Agents known to the cluster.
    pub agents: Vec<AgentView>,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of GPUs.
    pub gpus: usize,
    /// Jobs with at least one live rank.
    pub live_jobs: usize,
    /// Ranks alive now.
    pub live_ranks: usize,
    /// Replicated ingest counters.
    pub ingest: IngestCounters,
    /// The replica that answered (its own, unreplicated figures); absent
    /// where the view was computed offline.
    #[serde(default)]
    pub coordinator: Option<ReplicaStatus>,
}

/// The answering replica's own status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// Raft node id.
    pub id: u64,
    /// Current leader's id, when known.
    pub leader: Option<u64>,
    /// Current Raft term.
    pub term: u64,
    /// Index of the last applied log entry.
    pub applied_index: Option<u64>,
    /// Pushes this replica refused, by reason.
    pub rejected_pushes: RejectedPushes,
}

/// Pushes refused before they reached the log, counted per replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedPushes {
    /// Larger than the coordinator's `max_push_bytes`.
    pub too_large: u64,
    /// Of a protocol version this build does not speak.
    pub bad_version: u64,
    /// Undecodable, or over a per-message bound.
    pub malformed: u64,
}

/// One agent as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    /// Agent identity.
    pub agent_id: String,
    /// Node it runs on.
    pub node: String,
    /// Current incarnation.
    pub incarnation: u64,
    /// Its version string (empty until it said hello).
    pub agent_version: String,
    /// What it samples.
    pub source: String,
    /// Newest window end received, ms.
    pub last_seen_ms: u64,
    /// Highest batch seq applied for the current incarnation.
    pub last_seq: u64,
    /// Batches the agent reported dropping.
    pub dropped_batches: u64,
}

/// Counters kept by the replicated state machine (identical on every replica).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestCounters {
    /// Batches applied.
    pub batches_applied: u64,
    /// Batches dropped as already applied.
    pub batches_duplicate: u64,
    /// Windows applied.
    pub windows_applied: u64,
    /// Windows or fields skipped as invalid (non-finite, absurd, oversized names).
    pub windows_skipped: u64,
}

/// `GET /api/v1/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodesView {
    /// Every node, by name.
    pub nodes: Vec<NodeView>,
}

/// One node and its GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Node name.
    pub node: String,
    /// Agent reporting for it.
    pub agent_id: String,
    /// Newest window end, ms.
    pub last_seen_ms: u64,
    /// GPUs by index.
    pub gpus: Vec<GpuView>,
}

/// One GPU's latest state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    /// NVML UUID.
    pub uuid: String,
    /// Index on its node.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// Capacity.
    pub total_bytes: u64,
    /// Used at the end of the newest window.
    pub used_bytes: u64,
    /// Highest used ever seen (window max).
    pub peak_used_bytes: u64,
    /// Mean utilization over the newest window, percent.
    pub util_pct: Option<f32>,
    /// Mean SM clock over the newest window, MHz.
    pub sm_clock_mhz: Option<f32>,
    /// Mean power over the newest window, watts.
    pub power_w: Option<f32>,
    /// Processes in the newest window.
    pub processes: Vec<ProcessView>,
}

/// A process on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessView {
    /// Process id on its node.
    pub pid: u32,
    /// GPU memory held at the end of the newest window.
    pub used_bytes: u64,
    /// Its job, when attributed.
    pub job: Option<String>,
    /// Its rank, when attributed.
    pub rank: Option<u32>,
}

/// `GET /api/v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsView {
    /// Every job known, live ones first, then by id.
    pub jobs: Vec<JobView>,
}

/// One job and its ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Job id.
    pub job: String,
    /// `WORLD_SIZE` as the ranks report it.
    pub world_size: u32,
    /// Ranks seen, by rank.
    pub ranks: Vec<RankView>,
    /// Whether any rank is alive.
    pub live: bool,
}

/// One rank's latest state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankView {
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Rank on its node.
    pub local_rank: u32,
    /// Node name.
    pub node: String,
    /// GPU index on that node (from NVML's PID→UUID mapping).
    pub gpu: u32,
    /// GPU UUID.
    pub gpu_uuid: String,
    /// Process id.
    pub pid: u32,
    /// Memory the rank's process holds now, bytes.
    pub used_bytes: u64,
    /// Highest memory the rank's process held, bytes.
    pub peak_used_bytes: u64,
    /// The GPU's capacity, bytes.
    pub total_bytes: u64,
    /// Memory in use on the whole GPU now, bytes (other processes included).
    pub gpu_used_bytes: u64,
    /// First time seen, ms.
    pub first_seen_ms: u64,
    /// Newest window that showed it, ms.
    pub last_seen_ms: u64,
    /// When it left its GPU (process gone), ms; `None` while alive.
    pub ended_ms: Option<u64>,
}

/// `GET /api/v1/jobs/{job}`: a job with each rank's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    /// Job id.
    pub job: String,
    /// `WORLD_SIZE`.
    pub world_size: u32,
    /// Whether any rank is alive.
    pub live: bool,
    /// Ranks with history.
    pub ranks: Vec<RankDetail>,
}

/// One rank with its memory history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankDetail {
    /// Latest state.
    #[serde(flatten)]
    pub view: RankView,
    /// Window-by-window memory of the rank's process, oldest first (bounded).
    pub history: Vec<HistoryPoint>,
}

/// One window of a memory series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryPoint {
    /// Window end, ms.
    pub t_ms: u64,
    /// Lowest value in the window, bytes.
    pub min: u64,
    /// Highest value in the window, bytes.
    pub max: u64,
    /// Last value, bytes.
    pub last: u64,
    /// Mean, bytes.
    pub mean: u64,
}

/// An error body of the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiErrorBody {
    /// Short machine-readable code, e.g. `not_found`.
    pub error: String,
    /// What went wrong and what to do.
    pub message: String,
    /// With `not_leader` (HTTP 421): the leader's base URL, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_url: Option<String>,
}

/// `GET /api/v1/raft`: one replica's Raft figures, from its own view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Hash of the replicated data at `applied_index` (cluster view,
    /// histories, detector, alert and action state; not Raft's own
    /// bookkeeping): equal on every replica that applied the same entries,
    /// and unchanged by a restart or a new term.
    pub state_digest: String,
}

/// A member of the Raft cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftMember {
    /// Raft node id.
    pub id: u64,
    /// `host:port` of its API and Raft RPC.
    pub addr: String,
}

/// The leader's view of one member's replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct AddMember {
    /// Its Raft id.
    pub id: u64,
    /// `host:port` where it listens.
    pub addr: String,
    /// Keep it a learner (replicates, serves reads, never votes).
    #[serde(default)]
    pub learner: bool,
}
