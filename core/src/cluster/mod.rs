//! The cluster view: agents, nodes, GPUs, jobs and ranks with bounded history.
//!
//! [`Cluster`] is what the coordinator's Raft state machine holds and what
//! its snapshots serialize. Applying the same messages in the same order gives
//! the same state on every replica: nothing here reads a clock, a random
//! source or the environment, and every map is ordered.
//!
//! Delivery from agents is at-least-once; [`Cluster::apply_push`] drops a
//! batch whose `seq` was already applied for its `(agent_id, incarnation)`,
//! which makes the effect exactly-once.
//!
//! One entry cannot poison an agent or the clock: a `seq` more than
//! [`MAX_SEQ_GAP`](crate::limits::MAX_SEQ_GAP) past its incarnation's last
//! one is refused and counted (its windows as skipped; an incarnation not
//! remembered has no last one, and any seq starts it), and a window ending
//! more than [`MAX_CLOCK_LEAP_MS`](crate::limits::MAX_CLOCK_LEAP_MS) past
//! the clock (`now_ms`, the newest applied window end) is skipped and moves
//! the clock by that much only. Both are relative to the state alone; the
//! leader checks the same seq, and times against its wall clock, before it
//! proposes (the coordinator's `service::push_bounds`), so these catch what
//! an older leader let into the log.
//!
//! A rank keeps the Kubernetes placement of its process (pod, namespace,
//! container) when the agent sent one ([`Cluster::apply_push_placed`]);
//! a placement without the shapes Kubernetes gives its names is skipped and
//! counted with the skipped windows and fields.
//!
//! A node keeps the newest host RAM reading its agent pushed
//! ([`Cluster::apply_host`]); the reading is forgotten with the
//! node's agents.
//!
//! Everything is bounded by [`Limits`]: history per series, ended jobs kept
//! for post-mortems, ranks, GPUs and agents; past a bound the state skips and
//! counts rather than grows.

mod apply;
mod expiry;
mod export;
mod history;
mod host;
mod kept;
mod legacy;
mod placement;
mod read;
mod ring;
mod slice;
mod validate;

use std::collections::BTreeMap;

use gpumon_proto::{GpuInfo, HostMemory, PodPlacement, RankInfo};
use serde::{Deserialize, Serialize};

use crate::shared::Shared;

pub use apply::{ClusterEvent, PushApplied};
pub use expiry::{Expired, OverLimit};
pub use export::GpuSeries;
pub use history::History;
pub use host::{check_host, InvalidHost};
pub use kept::{IngestCounters, ProcessView};
pub use legacy::ClusterV4;
pub use placement::{
    check_placement, is_container_id, is_dns_label, is_dns_subdomain, is_pod_uid, InvalidPlacement,
};
pub use ring::Ring;
pub use validate::{is_valid_name, InvalidWindow};

/// Default windows kept per memory series (at the default 2 s window: 34 min).
pub const DEFAULT_HISTORY_WINDOWS: usize = 1024;
/// Default number of ended jobs kept for post-mortems.
pub const DEFAULT_MAX_ENDED_JOBS: usize = 64;
/// Default cap on ranks tracked at once (live and ended): two per GPU.
pub const DEFAULT_MAX_RANKS: usize = 131_072;
/// Default cap on GPUs tracked: a 64k-GPU fleet.
pub const DEFAULT_MAX_GPUS: usize = 65_536;
/// Default cap on agents tracked: 64k GPUs on nodes of 4 or more.
pub const DEFAULT_MAX_AGENTS: usize = 16_384;
/// An agent not heard from for this long (data time) is down, and the live
/// ranks on its node are shown as lost.
pub const AGENT_STALE_MS: u64 = 30_000;
/// Incarnations remembered per agent for de-duplication.
pub const INCARNATIONS_REMEMBERED: usize = 4;

/// Bounds on the state's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Windows kept per GPU and per rank series.
    pub history_windows: usize,
    /// Ended jobs kept; the oldest-ended is forgotten first.
    pub max_ended_jobs: usize,
    /// Ranks tracked at once.
    pub max_ranks: usize,
    /// GPUs tracked.
    pub max_gpus: usize,
    /// Agents tracked.
    pub max_agents: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            history_windows: DEFAULT_HISTORY_WINDOWS,
            max_ended_jobs: DEFAULT_MAX_ENDED_JOBS,
            max_ranks: DEFAULT_MAX_RANKS,
            max_gpus: DEFAULT_MAX_GPUS,
            max_agents: DEFAULT_MAX_AGENTS,
        }
    }
}

/// The replicated cluster view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    limits: Limits,
    now_ms: u64,
    agents: BTreeMap<String, Shared<AgentEntry>>,
    gpus: BTreeMap<String, Shared<GpuEntry>>,
    ranks: BTreeMap<RankKey, Shared<RankEntry>>,
    counters: IngestCounters,
    /// Each node's newest host RAM reading, by node name.
    hosts: BTreeMap<String, HostMemory>,
}

/// `(job, rank)`.
type RankKey = (String, u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct AgentEntry {
    node: String,
    incarnation: u64,
    agent_version: String,
    source: String,
    last_seen_ms: u64,
    dropped_batches: u64,
    /// `(incarnation, last applied seq)`, newest first, at most
    /// [`INCARNATIONS_REMEMBERED`].
    seqs: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GpuEntry {
    node: String,
    info: GpuInfo,
    last_end_ms: u64,
    used_bytes: u64,
    peak_used_bytes: u64,
    util_pct: Option<f32>,
    sm_clock_mhz: Option<f32>,
    power_w: Option<f32>,
    processes: Vec<ProcessView>,
    /// Ranks whose process was on this GPU in its newest window.
    live_ranks: Vec<RankKey>,
    history: History,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RankEntry {
    info: RankInfo,
    node: String,
    gpu_uuid: String,
    gpu_index: u32,
    pid: u32,
    used_bytes: u64,
    peak_used_bytes: u64,
    total_bytes: u64,
    gpu_used_bytes: u64,
    first_seen_ms: u64,
    last_seen_ms: u64,
    ended_ms: Option<u64>,
    history: History,
    /// Where in Kubernetes the rank's process runs, when known.
    placement: Option<PodPlacement>,
}

impl Cluster {
    /// An empty cluster with these bounds.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            now_ms: 0,
            agents: BTreeMap::new(),
            gpus: BTreeMap::new(),
            ranks: BTreeMap::new(),
            counters: IngestCounters::default(),
            hosts: BTreeMap::new(),
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Newest window end applied, ms since the Unix epoch (agent clocks).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The replicated ingest counters.
    pub fn counters(&self) -> IngestCounters {
        self.counters
    }
}

impl Cluster {
    /// GPU uuids whose entry `self` and `other` still share (not copied
    /// apart since one was cloned from the other).
    #[cfg(test)]
    pub(crate) fn gpus_shared_with(&self, other: &Self) -> Vec<String> {
        self.gpus
            .iter()
            .filter(|(uuid, e)| other.gpus.get(*uuid).is_some_and(|o| Shared::same(e, o)))
            .map(|(uuid, _)| uuid.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
