//! The agent → coordinator protocol.
//!
//! An agent sends a [`Hello`] when it starts and whenever it reaches a new
//! leader, then a stream of [`PushBatch`]es stamped `(agent_id, incarnation,
//! seq)`. The coordinator answers each with a [`CoordinatorReply`]. Delivery is
//! at-least-once (an agent re-sends what was not acknowledged); the state
//! machine drops a batch whose `seq` it has already applied for that
//! `(agent_id, incarnation)`, so the effect is exactly-once.
//!
//! Version 2 adds the Kubernetes placement of the batch's processes and the
//! node's host RAM ([`PushBatchV2`]). An agent sends a push as version 2 only
//! when it has one of them to carry, and as version 1 otherwise. A
//! coordinator answers a version 2 message with a version 2 reply
//! ([`CoordinatorReplyV2`]), which adds the alerts about the agent's node
//! for its training processes' hooks; a version 1 message gets a version 1
//! reply, so an agent of an older build still understands its answers.
//!
//! Version 3 has version 2's messages; its pushes may hold hook step records
//! that name their rank's peer group ([`crate::StepRecord::group`]), which an
//! older coordinator could not decode. An agent sends a push as version 3
//! only when it holds such a record; it is answered in version 2.
//!
//! Version 4 likewise adds hook stall records ([`crate::StallRecord`]),
//! the hang detector's evidence; it is answered in version 2.
//!
//! Version 5 likewise adds step records with their collective waits per
//! process group ([`crate::StepRecord::waits`]); it is answered in version 2.

use serde::{Deserialize, Serialize};

use crate::api::Severity;
use crate::hook::{ActionAck, HookRecord};
use crate::placement::ProcPlacement;
use crate::sample::{GpuInfo, GpuWindow, HostMemory};

/// Everything an agent sends to a coordinator; the variant is the protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentMessage {
    /// Protocol version 1.
    V1(AgentMessageV1),
    /// Protocol version 2: pushes carry placements and host memory.
    V2(AgentMessageV2),
    /// Protocol version 3: as version 2, and hook step records may carry
    /// their rank's peer group.
    V3(AgentMessageV2),
    /// Protocol version 4: as version 3, and pushes may hold stall records
    /// ([`crate::StallRecord`]).
    V4(AgentMessageV2),
    /// Protocol version 5: as version 4, and step records may carry their
    /// collective waits ([`crate::GroupWait`]).
    V5(AgentMessageV2),
    /// Protocol version 6: as version 5, and step records may list their
    /// collectives one by one ([`crate::CollectiveArrival`]).
    V6(AgentMessageV2),
    /// Protocol version 7: as version 6, and allocator records may carry
    /// their process's device limit ([`crate::DeviceLimit`]).
    V7(AgentMessageV2),
}

impl AgentMessage {
    /// A push in the oldest version that carries it: version 1 without
    /// placements or host memory, version 2 with either, version 3 with a
    /// step record that names its peer group, version 4 with a stall record,
    /// version 5 with a step record that carries its collective waits,
    /// version 6 with one that lists its collectives, version 7 with an
    /// allocator record that carries its device limit.
    pub fn push(pushed: PushBatchV2) -> Self {
        if pushed.batch.hook.iter().any(HookRecord::needs_v7) {
            Self::V7(AgentMessageV2::Push(pushed))
        } else if pushed.batch.hook.iter().any(HookRecord::needs_v6) {
            Self::V6(AgentMessageV2::Push(pushed))
        } else if pushed.batch.hook.iter().any(HookRecord::needs_v5) {
            Self::V5(AgentMessageV2::Push(pushed))
        } else if pushed.batch.hook.iter().any(HookRecord::needs_v4) {
            Self::V4(AgentMessageV2::Push(pushed))
        } else if pushed.batch.hook.iter().any(HookRecord::needs_v3) {
            Self::V3(AgentMessageV2::Push(pushed))
        } else if pushed.placements.is_empty() && pushed.host.is_none() {
            Self::V1(AgentMessageV1::Push(pushed.batch))
        } else {
            Self::V2(AgentMessageV2::Push(pushed))
        }
    }

    /// The protocol version of the message (1 to 7).
    pub fn version(&self) -> u32 {
        match self {
            Self::V1(_) => 1,
            Self::V2(_) => 2,
            Self::V3(_) => 3,
            Self::V4(_) => 4,
            Self::V5(_) => 5,
            Self::V6(_) => 6,
            Self::V7(_) => 7,
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
    /// Windows of samples with the placement of their processes and the
    /// node's host memory.
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

/// A version 1 batch, where in Kubernetes its processes run, and the
/// node's host RAM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushBatchV2 {
    /// The batch, as version 1 lays it out.
    pub batch: PushBatch,
    /// The placement of processes in `batch.windows`, by pid; a process
    /// without one is unknown or outside Kubernetes.
    pub placements: Vec<ProcPlacement>,
    /// Host RAM over the batch's window, when the agent sampled it.
    pub host: Option<HostMemory>,
}

impl From<PushBatch> for PushBatchV2 {
    /// A batch with nothing of version 2.
    fn from(batch: PushBatch) -> Self {
        Self {
            batch,
            placements: Vec::new(),
            host: None,
        }
    }
}

/// What a coordinator answers to an [`AgentMessage`]; the variant is the
/// protocol version, the same as the message's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorReply {
    /// Protocol version 1.
    V1(CoordinatorReplyV1),
    /// Protocol version 2: with the alerts about the agent's node.
    V2(CoordinatorReplyV2),
}

impl CoordinatorReply {
    /// The reply in `version` (1 or 2) of the protocol; version 1 has no
    /// alerts, so they are left out of it.
    pub fn in_version(version: u32, reply: CoordinatorReplyV2) -> Self {
        if version >= 2 {
            Self::V2(reply)
        } else {
            Self::V1(CoordinatorReplyV1 {
                outcome: reply.outcome,
                actions: reply.actions,
            })
        }
    }

    /// The reply as version 2 lays it out (a version 1 reply has no alerts).
    pub fn into_v2(self) -> CoordinatorReplyV2 {
        match self {
            Self::V1(r) => CoordinatorReplyV2 {
                outcome: r.outcome,
                actions: r.actions,
                alerts: Vec::new(),
            },
            Self::V2(r) => r,
        }
    }
}

/// The reply of protocol version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorReplyV1 {
    /// What happened to the message.
    pub outcome: PushOutcome,
    /// Actions for the agent to deliver to training processes.
    pub actions: Vec<PendingAction>,
}

/// The reply of protocol version 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorReplyV2 {
    /// What happened to the message.
    pub outcome: PushOutcome,
    /// Actions for the agent to deliver to training processes.
    pub actions: Vec<PendingAction>,
    /// Active alerts about the agent's node (its ranks, its GPUs, its host
    /// RAM), most severe first, at most [`MAX_NODE_ALERTS`], for the agent
    /// to post to its hooks. Best effort: sent again with every committed
    /// push while active; nothing records that they were delivered.
    pub alerts: Vec<NodeAlert>,
}

/// Most alerts in one [`CoordinatorReplyV2`].
pub const MAX_NODE_ALERTS: usize = 64;
/// Longest alert kind in a [`NodeAlert`], bytes.
pub const MAX_NODE_ALERT_KIND_BYTES: usize = 64;
/// Longest alert message in a [`NodeAlert`], bytes.
pub const MAX_NODE_ALERT_MESSAGE_BYTES: usize = 1024;

/// An active alert about a node, for the hooks of its training processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAlert {
    /// The alert episode's id: the same while it is active.
    pub id: u64,
    /// What it is about, e.g. `memory_level` (a name rather than an enum,
    /// so an agent decodes kinds newer than itself).
    pub kind: String,
    /// Its severity now.
    pub severity: Severity,
    /// A sentence for the user.
    pub message: String,
    /// The job, when the alert is about a rank.
    pub job: Option<String>,
    /// The rank, when the alert is about one.
    pub rank: Option<u32>,
    /// When it last changed, ms since the Unix epoch (data time).
    pub t_ms: u64,
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
    /// Save the flight recorder and every thread's stack to files, at once,
    /// from the hook's own thread (the training thread may be hung). Issued
    /// only to ranks whose hooks reported a stall, whose agents know it.
    DumpEvidence,
}

impl ActionKind {
    /// The name used in the API and by the hook: `release_cache`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReleaseCache => "release_cache",
            Self::DumpEvidence => "dump_evidence",
        }
    }
}
