//! The agent → coordinator protocol.
//!
//! An agent sends a [`Hello`] when it starts and whenever it reaches a new
//! leader, then a stream of [`PushBatch`]es stamped `(agent_id, incarnation,
//! seq)`. The coordinator answers each with a [`CoordinatorReply`]. Delivery is
//! at-least-once (an agent re-sends what was not acknowledged); the state
//! machine drops a batch whose `seq` it has already applied for that
//! `(agent_id, incarnation)`, so the effect is exactly-once.
//!
//! Version 2 adds the Kubernetes placement of the batch's processes
//! ([`PushBatchV2`]). An agent sends a push as version 2 only when it has a
//! placement to carry, and as version 1 otherwise, so an agent outside
//! Kubernetes still talks to a coordinator that knows version 1 alone.

use serde::{Deserialize, Serialize};

use crate::hook::{ActionAck, HookRecord};
use crate::placement::ProcPlacement;
use crate::sample::{GpuInfo, GpuWindow};

/// Everything an agent sends to a coordinator; the variant is the protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentMessage {
    /// Protocol version 1.
    V1(AgentMessageV1),
    /// Protocol version 2: pushes carry placements.
    V2(AgentMessageV2),
}

impl AgentMessage {
    /// A push in the oldest version that carries it: version 1 without
    /// placements, version 2 with.
    pub fn push(batch: PushBatch, placements: Vec<ProcPlacement>) -> Self {
        if placements.is_empty() {
            Self::V1(AgentMessageV1::Push(batch))
        } else {
            Self::V2(AgentMessageV2::Push(PushBatchV2 { batch, placements }))
        }
    }
}

/// The messages of protocol version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentMessageV1 {
    /// An agent introduces itself.
    Hello(Hello),
    /// Windows of samples.
    Push(PushBatch),
}

/// The messages of protocol version 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentMessageV2 {
    /// An agent introduces itself (as in version 1).
    Hello(Hello),
    /// Windows of samples with the placement of their processes.
    Push(PushBatchV2),
}

/// An agent introduces itself and its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Stable agent identity (defaults to the node name).
    pub agent_id: String,
    /// Random id drawn at each agent start; `seq` restarts at 1 with it.
    pub incarnation: u64,
    /// Node (host) name the agent runs on.
    pub node: String,
    /// The agent's version string.
    pub agent_version: String,
    /// What it samples: `nvml`, `sim:SCENARIO` or `none`.
    pub source: String,
    /// The GPUs it sees.
    pub gpus: Vec<GpuInfo>,
}

/// A batch of windows, one or more per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushBatch {
    /// Stable agent identity.
    pub agent_id: String,
    /// The agent's current incarnation.
    pub incarnation: u64,
    /// Position of this batch in the incarnation's stream, from 1.
    pub seq: u64,
    /// Node (host) name.
    pub node: String,
    /// Batches the agent dropped (buffer full) since it started; lets the
    /// coordinator show gaps.
    pub dropped_batches: u64,
    /// The windows.
    pub windows: Vec<GpuWindow>,
    /// Records from the in-process hooks on the node, oldest first.
    pub hook: Vec<HookRecord>,
    /// How actions delivered earlier ended.
    pub acks: Vec<ActionAck>,
}

/// A version 1 batch and where in Kubernetes its processes run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushBatchV2 {
    /// The batch, as version 1 lays it out.
    pub batch: PushBatch,
    /// The placement of processes in `batch.windows`, by pid; a process
    /// without one is unknown or outside Kubernetes.
    pub placements: Vec<ProcPlacement>,
}

/// What a coordinator answers to an [`AgentMessage`]; the variant is the protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorReply {
    /// Protocol version 1.
    V1(CoordinatorReplyV1),
}

/// The reply of protocol version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorReplyV1 {
    /// What happened to the message.
    pub outcome: PushOutcome,
    /// Actions for the agent to deliver to training processes.
    pub actions: Vec<PendingAction>,
}

/// What happened to a pushed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PushOutcome {
    /// Committed through Raft. `acked_seq` is the batch's seq (0 for a hello);
    /// `duplicate` tells that it had been applied before.
    Committed {
        /// The acknowledged sequence number.
        acked_seq: u64,
        /// The batch had been applied already and changed nothing.
        duplicate: bool,
    },
    /// This replica is not the leader; send to `leader_url` when known.
    NotLeader {
        /// Base URL of the leader's API, e.g. `http://10.0.0.1:7070`.
        leader_url: Option<String>,
    },
}

/// An action for a training process, handed to its node's agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAction {
    /// Action id, unique in the cluster.
    pub id: u64,
    /// Target job.
    pub job: String,
    /// Target rank.
    pub rank: u32,
    /// What to do.
    pub kind: ActionKind,
    /// Why it was issued, for the user's callback and the logs.
    pub reason: String,
}

/// The kinds of action a training process can carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// `gc.collect()` then `torch.cuda.empty_cache()` at the next step boundary.
    ReleaseCache,
}

impl ActionKind {
    /// The name used in the API and by the hook: `release_cache`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReleaseCache => "release_cache",
        }
    }
}
