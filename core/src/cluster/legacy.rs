//! The cluster view as snapshot formats 1 to 4 laid it out: ranks without
//! their placement, nodes without their host memory. Postcard writes fields in order without names, so an
//! older snapshot is read into these types and upgraded
//! ([`Cluster::from`]); the placement of each rank starts unknown and
//! fills in from the next push that carries it.

use std::collections::BTreeMap;

use super::IngestCounters;
use gpumon_proto::RankInfo;
use serde::{Deserialize, Serialize};

use super::{AgentEntry, Cluster, GpuEntry, History, Limits, RankEntry, RankKey};
use crate::shared::Shared;

/// [`Cluster`] as snapshot formats 1 to 4 hold it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterV4 {
    limits: Limits,
    now_ms: u64,
    agents: BTreeMap<String, Shared<AgentEntry>>,
    gpus: BTreeMap<String, Shared<GpuEntry>>,
    ranks: BTreeMap<RankKey, Shared<RankEntryV4>>,
    counters: IngestCounters,
}

/// A rank before it kept a placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RankEntryV4 {
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
}

/// The conversions of one rank between the layouts: the same fields, and
/// no placement in the older one.
macro_rules! rank_fields {
    ($($field:ident),* $(,)?) => {
        fn upgrade(r: RankEntryV4) -> RankEntry {
            RankEntry { $($field: r.$field,)* placement: None }
        }

        fn downgrade(r: RankEntry) -> RankEntryV4 {
            RankEntryV4 { $($field: r.$field,)* }
        }
    };
}

rank_fields!(
    info,
    node,
    gpu_uuid,
    gpu_index,
    pid,
    used_bytes,
    peak_used_bytes,
    total_bytes,
    gpu_used_bytes,
    first_seen_ms,
    last_seen_ms,
    ended_ms,
    history,
);

impl From<ClusterV4> for Cluster {
    fn from(old: ClusterV4) -> Self {
        let ranks = old
            .ranks
            .into_iter()
            .map(|(key, r)| (key, Shared::new(upgrade(RankEntryV4::clone(&r)))))
            .collect();
        Self {
            limits: old.limits,
            now_ms: old.now_ms,
            agents: old.agents,
            gpus: old.gpus,
            ranks,
            counters: old.counters,
            hosts: BTreeMap::new(),
        }
    }
}

impl From<&Cluster> for ClusterV4 {
    /// What a build before placements would have held: every placement
    /// and host memory is left out. For writing older snapshot formats in tests.
    fn from(state: &Cluster) -> Self {
        let ranks = state
            .ranks
            .iter()
            .map(|(key, r)| (key.clone(), Shared::new(downgrade(RankEntry::clone(r)))))
            .collect();
        Self {
            limits: state.limits,
            now_ms: state.now_ms,
            agents: state.agents.clone(),
            gpus: state.gpus.clone(),
            ranks,
            counters: state.counters,
        }
    }
}
