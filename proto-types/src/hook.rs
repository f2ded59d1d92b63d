//! What the in-process Python hook reports, as it travels from the agent to
//! the coordinators inside a [`crate::PushBatch`], and what comes back:
//! acknowledgements of the actions the hook carried out.
//!
//! The hook speaks JSON lines to its local agent (see
//! `agent/python/PROTOCOL.md`); the agent checks each record against the
//! registered session (job, rank, process) and forwards it in these compact
//! forms. They map one to one onto the `alloc`, `step` and `event` records
//! of trace format v1; a named snapshot is an `event` that also carries the
//! allocator's statistics.

use serde::{Deserialize, Serialize};

/// The caching allocator's statistics, from `torch.cuda.memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AllocStats {
    /// `allocated_bytes.all.current`: bytes in live tensors.
    pub allocated: u64,
    /// `reserved_bytes.all.current`: bytes the allocator holds from CUDA.
    pub reserved: u64,
    /// `active_bytes.all.current`: bytes in blocks in use, including the unused tail of split blocks.
    pub active: Option<u64>,
    /// `inactive_split_bytes.all.current`: free bytes inside split blocks, which `empty_cache` cannot return.
    pub inactive_split: Option<u64>,
    /// `allocated_bytes.all.peak`.
    pub peak_allocated: Option<u64>,
    /// `reserved_bytes.all.peak`.
    pub peak_reserved: Option<u64>,
    /// `num_alloc_retries`: cudaMalloc failures that forced a cache flush.
    pub alloc_retries: Option<u64>,
    /// `num_ooms`: out-of-memory errors the allocator raised.
    pub ooms: Option<u64>,
}

impl AllocStats {
    /// Cache that `torch.cuda.empty_cache()` could give back to the driver:
    /// reserved minus allocated minus the free parts of split blocks.
    pub fn reclaimable(&self) -> u64 {
        self.reserved
            .saturating_sub(self.allocated)
            .saturating_sub(self.inactive_split.unwrap_or(0))
    }
}

/// One record from a training process, stamped by the hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "HookRecordRepr", into = "HookRecordRepr")]
pub enum HookRecord {
    /// Allocator statistics (trace type `alloc`).
    Alloc(AllocRecord),
    /// A finished step (trace type `step`).
    Step(StepRecord),
    /// A user marker or a named snapshot (trace type `event`).
    Event(EventRecord),
    /// A rank that has finished no step for a while, and the collective it
    /// waits in (trace type `stall`; protocol version 4).
    Stall(StallRecord),
}

/// How [`HookRecord`] is encoded. Postcard cannot skip a field, so a step
/// with its peer group is a variant of its own, appended: records encoded
/// before groups existed (Raft logs, version 1 and 2 pushes) decode as
/// they were, and a step without a group is encoded as it always was.
#[derive(Clone, Serialize, Deserialize)]
enum HookRecordRepr {
    Alloc(AllocRecordV1),
    Step(StepRecordV1),
    Event(EventRecord),
    /// A step and its peer group (protocol version 3).
    GroupedStep(StepRecordV1, u32),
    /// A stalled rank (protocol version 4).
    Stall(StallRecord),
    /// A step, its peer group if any, and its collective waits per process
    /// group (protocol version 5).
    WaitedStep(StepRecordV1, Option<u32>, Vec<GroupWait>),
    /// A step, its peer group if any, its collective waits and the
    /// collectives it took part in, one by one (protocol version 6).
    ArrivedStep(
        StepRecordV1,
        Option<u32>,
        Vec<GroupWait>,
        Vec<CollectiveArrival>,
    ),
    /// Allocator statistics and what bounds the process's memory
    /// (protocol version 7).
    LimitedAlloc(AllocRecordV1, DeviceLimit),
}

/// [`AllocRecord`]'s fields before the device limit, in their order.
#[derive(Clone, Serialize, Deserialize)]
struct AllocRecordV1 {
    t_ms: u64,
    job: String,
    rank: u32,
    stats: AllocStats,
}

impl AllocRecordV1 {
    fn with(self, limit: Option<DeviceLimit>) -> AllocRecord {
        AllocRecord {
            t_ms: self.t_ms,
            job: self.job,
            rank: self.rank,
            stats: self.stats,
            limit,
        }
    }
}

impl From<AllocRecord> for HookRecordRepr {
    fn from(a: AllocRecord) -> Self {
        let v1 = AllocRecordV1 {
            t_ms: a.t_ms,
            job: a.job,
            rank: a.rank,
            stats: a.stats,
        };
        match a.limit {
            Some(limit) => Self::LimitedAlloc(v1, limit),
            None => Self::Alloc(v1),
        }
    }
}

/// [`StepRecord`]'s fields before the peer group, in their order.
#[derive(Clone, Serialize, Deserialize)]
struct StepRecordV1 {
    t_ms: u64,
    job: String,
    rank: u32,
    step: u64,
    duration_ms: f64,
    sections: Vec<(String, f64)>,
}

impl From<HookRecordRepr> for HookRecord {
    fn from(r: HookRecordRepr) -> Self {
        let step = |s: StepRecordV1, group, waits, collectives| StepRecord {
            t_ms: s.t_ms,
            job: s.job,
            rank: s.rank,
            step: s.step,
            duration_ms: s.duration_ms,
            sections: s.sections,
            group,
            waits,
            collectives,
        };
        match r {
            HookRecordRepr::Alloc(a) => Self::Alloc(a.with(None)),
            HookRecordRepr::LimitedAlloc(a, limit) => Self::Alloc(a.with(Some(limit))),
            HookRecordRepr::Step(s) => Self::Step(step(s, None, Vec::new(), Vec::new())),
            HookRecordRepr::Event(e) => Self::Event(e),
            HookRecordRepr::GroupedStep(s, g) => {
                Self::Step(step(s, Some(g), Vec::new(), Vec::new()))
            }
            HookRecordRepr::Stall(s) => Self::Stall(s),
            HookRecordRepr::WaitedStep(s, g, waits) => Self::Step(step(s, g, waits, Vec::new())),
            HookRecordRepr::ArrivedStep(s, g, waits, collectives) => {
                Self::Step(step(s, g, waits, collectives))
            }
        }
    }
}

impl From<HookRecord> for HookRecordRepr {
    fn from(r: HookRecord) -> Self {
        match r {
            HookRecord::Alloc(a) => a.into(),
            HookRecord::Event(e) => Self::Event(e),
            HookRecord::Stall(s) => Self::Stall(s),
            HookRecord::Step(s) => {
                let v1 = StepRecordV1 {
                    t_ms: s.t_ms,
                    job: s.job,
                    rank: s.rank,
                    step: s.step,
                    duration_ms: s.duration_ms,
                    sections: s.sections,
                };
                if !s.collectives.is_empty() {
                    return Self::ArrivedStep(v1, s.group, s.waits, s.collectives);
                }
                match (s.group, s.waits.is_empty()) {
                    (group, false) => Self::WaitedStep(v1, group, s.waits),
                    (Some(g), true) => Self::GroupedStep(v1, g),
                    (None, true) => Self::Step(v1),
                }
            }
        }
    }
}

impl HookRecord {
    /// Whether encoding it takes protocol version 3 (a step with its group).
    pub fn needs_v3(&self) -> bool {
        matches!(self, Self::Step(s) if s.needs_v3())
    }

    /// Whether encoding it takes protocol version 4 (a stall).
    pub fn needs_v4(&self) -> bool {
        matches!(self, Self::Stall(_))
    }

    /// Whether encoding it takes protocol version 5 (a step with its
    /// collective waits).
    pub fn needs_v5(&self) -> bool {
        matches!(self, Self::Step(s) if !s.waits.is_empty())
    }

    /// Whether encoding it takes protocol version 6 (a step with its
    /// collectives one by one).
    pub fn needs_v6(&self) -> bool {
        matches!(self, Self::Step(s) if !s.collectives.is_empty())
    }

    /// Whether encoding it takes protocol version 7 (allocator statistics
    /// with the process's device limit).
    pub fn needs_v7(&self) -> bool {
        matches!(self, Self::Alloc(a) if a.limit.is_some())
    }

    /// The job and rank the record is about.
    pub fn subject(&self) -> (&str, u32) {
        match self {
            Self::Alloc(r) => (&r.job, r.rank),
            Self::Step(r) => (&r.job, r.rank),
            Self::Event(r) => (&r.job, r.rank),
            Self::Stall(r) => (&r.job, r.rank),
        }
    }

    /// When it was taken, ms since the Unix epoch (the node's clock).
    pub fn t_ms(&self) -> u64 {
        match self {
            Self::Alloc(r) => r.t_ms,
            Self::Step(r) => r.t_ms,
            Self::Event(r) => r.t_ms,
            Self::Stall(r) => r.t_ms,
        }
    }
}

/// The allocator's statistics of one rank at one time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRecord {
    /// When, ms since the Unix epoch.
    pub t_ms: u64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// The statistics.
    pub stats: AllocStats,
    /// What bounds the process's memory besides its GPU's capacity, when
    /// the hook reports it (protocol version 7).
    pub limit: Option<DeviceLimit>,
}

/// What bounds one process's GPU memory, as its hook reads it: the device
/// as the process sees it (a MIG slice is smaller than its GPU) and the
/// caching allocator's cap, if one is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeviceLimit {
    /// The device's memory as the process sees it (`mem_get_info`'s
    /// total), bytes: a MIG slice's size on a MIG GPU.
    pub device_total: Option<u64>,
    /// The allocator's cap, when one is set below the device's memory.
    pub cap: Option<MemoryCap>,
}

/// A cap on what the caching allocator may reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryCap {
    /// Bytes the allocator may reserve; an allocation past them fails.
    pub bytes: u64,
    /// What set it.
    pub source: CapSource,
}

/// What set a process's memory cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CapSource {
    /// `torch.cuda.set_per_process_memory_fraction`.
    MemoryFraction,
    /// `PYTORCH_CUDA_ALLOC_CONF`'s `per_process_memory_fraction`.
    AllocConf,
    /// The memory source's own allocator.
    Allocator,
}

impl CapSource {
    /// The name the hook and the trace use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MemoryFraction => "memory_fraction",
            Self::AllocConf => "alloc_conf",
            Self::Allocator => "allocator",
        }
    }

    /// The source named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::MemoryFraction, Self::AllocConf, Self::Allocator]
            .into_iter()
            .find(|s| s.as_str() == name)
    }

    /// How a person sets it, for messages.
    pub fn setter(self) -> &'static str {
        match self {
            Self::MemoryFraction => "torch.cuda.set_per_process_memory_fraction",
            Self::AllocConf => "PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction",
            Self::Allocator => "its allocator",
        }
    }
}

/// One finished training step of one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// When the step ended, ms since the Unix epoch.
    pub t_ms: u64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Step number, counted by the hook from 1.
    pub step: u64,
    /// Wall time of the whole step, ms.
    pub duration_ms: f64,
    /// Time spent in named sections (`data`, `forward`, `backward`, ...), ms.
    pub sections: Vec<(String, f64)>,
    /// The rank's peer group: the lowest global rank of the ranks it
    /// shares a collective with and exchanges no point-to-point data with
    /// (the data-parallel replicas of its pipeline stage). Ranks are
    /// compared for stragglers only within their group. `None` when the
    /// hook saw no collective (the whole job is one group).
    pub group: Option<u32>,
    /// The step's collective waits per process group: how long the training
    /// thread blocked in each group's collectives (CPU clock only; empty
    /// when the hook timed none, or on the CUDA clock).
    pub waits: Vec<GroupWait>,
    /// The collectives the training thread entered during the step, one by
    /// one, in the order it entered them (CPU clock only; at most
    /// [`MAX_STEP_COLLECTIVES`], the first of the step; empty when the hook
    /// timed none).
    pub collectives: Vec<CollectiveArrival>,
}

/// Collectives a step record lists one by one at most.
pub const MAX_STEP_COLLECTIVES: usize = 32;

/// One collective a rank took part in during a step: when it entered it and
/// when it stopped waiting for it, on its own clock, relative to the start
/// of its step (the step's end less its duration).
///
/// Nodes' clocks disagree by more than a collective lasts, so the entry
/// times of different ranks are not compared as they are: a collective ends
/// at nearly the same instant on every member, so the engine aligns each
/// rank's clock on the ends of the collectives it shares with its peers and
/// then compares when they arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveArrival {
    /// The process group's name as torch numbers it on every rank (`"0"`:
    /// the default group).
    pub group: String,
    /// The collective's number in its group, counted by the hook from 1 on
    /// every rank alike.
    pub seq: u64,
    /// The operation (`all_reduce`, `all_gather_into_tensor`, ...).
    pub op: String,
    /// When the rank entered it, ms after its step began.
    pub entered_ms: f64,
    /// When it stopped waiting for it (the call returned, or the `wait()`
    /// on its work did), ms after its step began.
    pub left_ms: f64,
    /// How long the training thread blocked in it, ms.
    pub wait_ms: f64,
}

/// How long a rank blocked in one process group's collectives in a step.
///
/// A collective ends at nearly the same instant on every member, so a
/// member's wait is how long before the last of them it arrived: the rank
/// the others wait for waits least, and a wait no member escapes (the
/// group's least) is the collective's own transfer time. Each rank's wait
/// is measured on its own clock, so nodes' clocks never need to agree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupWait {
    /// The process group's name as torch numbers it on every rank (`"0"`:
    /// the default group), or `"p2p"` for point-to-point sends and
    /// receives of any group.
    pub group: String,
    /// Collective calls in the group during the step.
    pub calls: u32,
    /// Time blocked in them, ms.
    pub wait_ms: f64,
}

/// The name under which point-to-point waits are reported.
pub const P2P_WAITS: &str = "p2p";

impl StepRecord {
    /// Whether encoding it takes protocol version 3.
    pub fn needs_v3(&self) -> bool {
        self.group.is_some()
    }
}

/// A user marker (`gpumon.mark`) or a named snapshot (`gpumon.snapshot`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When, ms since the Unix epoch.
    pub t_ms: u64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// The marker's or snapshot's name.
    pub name: String,
    /// Free text the user attached.
    pub detail: Option<String>,
    /// Present for a snapshot: the allocator's statistics at that moment.
    pub snapshot: Option<AllocStats>,
}

/// A rank whose training thread has finished no step for a while, as its
/// hook's reporter thread sees it: the hang detector's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallRecord {
    /// When, ms since the Unix epoch.
    pub t_ms: u64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// The number of the rank's last finished step.
    pub step: u64,
    /// How long ago that step ended, ms.
    pub quiet_ms: u64,
    /// Where the collective sequence numbers come from: `flight_recorder`
    /// (torch's, numbered per process group by torch), `wrappers` (the
    /// hook's own count of the collectives it saw) or `none`. Numbers of
    /// different sources are not compared.
    pub source: String,
    /// The collective the rank waits in, if it waits in one.
    pub waiting: Option<CollectiveWait>,
    /// The last collective sequence number the rank entered, per process
    /// group name, most recent first.
    pub entered: Vec<(String, u64)>,
    /// The last `gpumon.mark` name since the step, if any.
    pub marker: Option<String>,
}

/// A collective a rank has entered and waits in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveWait {
    /// The process group's name (`"0"` is the default group).
    pub group: String,
    /// The group's description (`default_pg`), as torch names it.
    pub desc: String,
    /// The collective's sequence number in its group.
    pub seq: u64,
    /// The operation (`all_reduce`, `broadcast`, `send`, ...).
    pub op: String,
    /// Elements in its input.
    pub numel: u64,
    /// How long the rank has waited in it, ms.
    pub waited_ms: u64,
    /// The process group's timeout, ms, where known.
    pub timeout_ms: Option<u64>,
}

/// How an action ended in the training process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActionOutcome {
    /// Carried out; `freed_bytes` is reserved memory before minus after.
    Done {
        /// Bytes the allocator gave back to the driver.
        freed_bytes: u64,
        /// The step after which it ran, when the hook counts steps.
        at_step: Option<u64>,
    },
    /// Not carried out, and why.
    Failed {
        /// The reason, for the API and the logs.
        reason: String,
    },
}

/// An agent's report of how an action ended, sent in its next push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionAck {
    /// The action's id.
    pub id: u64,
    /// When it ended, ms since the Unix epoch.
    pub t_ms: u64,
    /// What happened.
    pub outcome: ActionOutcome,
    /// What the user's `gpumon.on_action` callback answered, if anything.
    pub response: Option<String>,
}
