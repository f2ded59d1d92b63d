//! The cluster at a glance: `GET /api/v1/cluster` and `GET /api/v1/nodes`,
//! from the replicated cluster view.
//!
//! Times are milliseconds since the Unix epoch as stamped by the agents (the
//! coordinator never reads its own clock into the state). Memory is in bytes.

use serde::{Deserialize, Serialize};

/// `GET /api/v1/cluster`: the whole cluster at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// How old this replica's view may be, ms (see `RaftStatus::view_age_ms`;
    /// also in the `x-gpumon-view-age-ms` header of every answer).
    #[serde(default)]
    pub view_age_ms: u64,
}

/// Pushes refused before they reached the log, counted per replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RejectedPushes {
    /// Larger than the coordinator's `max_push_bytes`.
    pub too_large: u64,
    /// Of a protocol version this build does not speak.
    pub bad_version: u64,
    /// Undecodable, or over a per-message bound.
    pub malformed: u64,
    /// Refused for backpressure (429): too many pushes in flight.
    #[serde(default)]
    pub busy: u64,
    /// Refused at a limit (429): new agents, GPUs or live ranks past what
    /// the cluster tracks.
    #[serde(default)]
    pub full: u64,
    /// A seq or a time out of bounds: seq 0 or too far past the agent's
    /// last one, a time too far ahead of the coordinator's clock or before
    /// 2020 (absent from older coordinators).
    #[serde(default)]
    pub out_of_bounds: u64,
    /// Refused with 403: an agent token bound to other agents (absent from
    /// older coordinators).
    #[serde(default)]
    pub forbidden: u64,
}

/// One agent as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodesView {
    /// Every node, by name.
    pub nodes: Vec<NodeView>,
}

/// One node and its GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    /// Node name.
    pub node: String,
    /// Agent reporting for it.
    pub agent_id: String,
    /// Newest window end, ms.
    pub last_seen_ms: u64,
    /// Host RAM (`MemTotal`), when the node's agent sends it.
    #[serde(default)]
    pub host_total_bytes: Option<u64>,
    /// Host RAM in use (total less available), the highest of the agent's
    /// newest window, when the agent sends it.
    #[serde(default)]
    pub host_used_bytes: Option<u64>,
    /// GPUs by index.
    pub gpus: Vec<GpuView>,
}

/// One GPU's latest state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
