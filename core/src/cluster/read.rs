//! Reading the view as the API's documents.

use std::collections::{BTreeMap, BTreeSet};

use gpumon_proto::api::{
    AgentView, ClusterView, GpuView, JobDetail, JobView, JobsView, NodeView, NodesView, RankDetail,
    RankView,
};

use super::{Cluster, RankEntry, AGENT_STALE_MS};
use crate::actions::RankPlace;

impl Cluster {
    /// Where a rank runs, for actions: its node while live.
    pub fn rank_place(&self, job: &str, rank: u32) -> RankPlace<'_> {
        match self.ranks.get(&(job.to_owned(), rank)) {
            None => RankPlace::Unknown,
            Some(r) if r.ended_ms.is_some() => RankPlace::Ended,
            Some(r) => RankPlace::Live { node: &r.node },
        }
    }

    /// True when the view has seen this job (live or ended).
    pub fn has_job(&self, job: &str) -> bool {
        self.ranks
            .range((job.to_owned(), 0)..=(job.to_owned(), u32::MAX))
            .next()
            .is_some()
    }

    /// `GET /api/v1/cluster`.
    pub fn cluster_view(&self) -> ClusterView {
        let live: Vec<&RankEntry> = self
            .ranks
            .values()
            .filter(|r| r.ended_ms.is_none())
            .map(|r| &**r)
            .collect();
        let live_jobs: BTreeSet<&str> = live.iter().map(|r| r.info.job.as_str()).collect();
        let nodes: BTreeSet<&str> = self
            .agents
            .values()
            .map(|a| a.node.as_str())
            .chain(self.gpus.values().map(|g| g.node.as_str()))
            .collect();
        ClusterView {
            now_ms: self.now_ms,
            agents: self
                .agents
                .iter()
                .map(|(id, a)| AgentView {
                    agent_id: id.clone(),
                    node: a.node.clone(),
                    incarnation: a.incarnation,
                    agent_version: a.agent_version.clone(),
                    source: a.source.clone(),
                    last_seen_ms: a.last_seen_ms,
                    last_seq: a.seqs.first().map_or(0, |(_, s)| *s),
                    dropped_batches: a.dropped_batches,
                })
                .collect(),
            nodes: nodes.len(),
            gpus: self.gpus.len(),
            live_jobs: live_jobs.len(),
            live_ranks: live.len(),
            ingest: self.counters.into(),
            coordinator: None,
        }
    }

    /// `GET /api/v1/nodes`: nodes with GPUs or host memory, by name; GPUs
    /// by index.
    pub fn nodes_view(&self) -> NodesView {
        let mut nodes: BTreeMap<&str, NodeView> = BTreeMap::new();
        let node_entry = |node: &str| -> NodeView {
            let agent = self.agents.iter().find(|(_, a)| a.node == node);
            let host = self.hosts.get(node);
            NodeView {
                node: node.to_owned(),
                agent_id: agent.map(|(id, _)| id.clone()).unwrap_or_default(),
                last_seen_ms: agent.map_or(0, |(_, a)| a.last_seen_ms),
                host_total_bytes: host.map(|h| h.total_bytes),
                host_used_bytes: host.map(|h| h.used_max_bytes),
                gpus: Vec::new(),
            }
        };
        let mut gpus: Vec<_> = self.gpus.values().collect();
        gpus.sort_by(|a, b| (&a.node, a.info.index).cmp(&(&b.node, b.info.index)));
        for node in self.hosts.keys() {
            nodes.insert(node, node_entry(node));
        }
        for g in gpus {
            let node = nodes.entry(&g.node).or_insert_with(|| node_entry(&g.node));
            node.gpus.push(GpuView {
                uuid: g.info.uuid.clone(),
                index: g.info.index,
                name: g.info.name.clone(),
                total_bytes: g.info.total_bytes,
                used_bytes: g.used_bytes,
                peak_used_bytes: g.peak_used_bytes,
                util_pct: g.util_pct,
                sm_clock_mhz: g.sm_clock_mhz,
                power_w: g.power_w,
                processes: g.processes.iter().map(Into::into).collect(),
            });
        }
        NodesView {
            nodes: nodes.into_values().collect(),
        }
    }

    /// `GET /api/v1/jobs`: live jobs first, then by id.
    pub fn jobs_view(&self) -> JobsView {
        let up = self.nodes_up();
        let mut jobs: Vec<JobView> = Vec::new();
        for ((job, _), r) in &self.ranks {
            if jobs.last().is_none_or(|j| &j.job != job) {
                jobs.push(JobView {
                    job: job.clone(),
                    world_size: 0,
                    ranks: Vec::new(),
                    live: false,
                });
            }
            let view = jobs.last_mut().expect("pushed above");
            view.world_size = view.world_size.max(r.info.world_size);
            view.live |= r.ended_ms.is_none();
            view.ranks.push(rank_view(r, &up));
        }
        jobs.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.job.cmp(&b.job)));
        JobsView { jobs }
    }

    /// `GET /api/v1/jobs/{job}`; `None` for a job never seen (or forgotten).
    pub fn job_detail(&self, job: &str) -> Option<JobDetail> {
        let up = self.nodes_up();
        let ranks: Vec<RankDetail> = self
            .job_ranks(job)
            .map(|(_, r)| RankDetail {
                view: rank_view(r, &up),
                history: r.history.iter().collect(),
            })
            .collect();
        if ranks.is_empty() {
            return None;
        }
        Some(JobDetail {
            job: job.to_owned(),
            world_size: self
                .job_ranks(job)
                .map(|(_, r)| r.info.world_size)
                .max()
                .unwrap_or(0),
            live: ranks.iter().any(|r| r.view.ended_ms.is_none()),
            ranks,
        })
    }
}

impl Cluster {
    /// Nodes with an agent heard from within [`AGENT_STALE_MS`] of the
    /// view's clock.
    pub(super) fn nodes_up(&self) -> BTreeSet<&str> {
        self.agents
            .values()
            .filter(|a| self.now_ms.saturating_sub(a.last_seen_ms) <= AGENT_STALE_MS)
            .map(|a| a.node.as_str())
            .collect()
    }
}

/// A rank as the API shows it; lost when alive but its node is not in `up`.
pub(super) fn rank_view(r: &RankEntry, up: &BTreeSet<&str>) -> RankView {
    RankView {
        job: r.info.job.clone(),
        rank: r.info.rank,
        local_rank: r.info.local_rank,
        node: r.node.clone(),
        gpu: r.gpu_index,
        gpu_uuid: r.gpu_uuid.clone(),
        pid: r.pid,
        used_bytes: r.used_bytes,
        peak_used_bytes: r.peak_used_bytes,
        total_bytes: r.total_bytes,
        gpu_used_bytes: r.gpu_used_bytes,
        first_seen_ms: r.first_seen_ms,
        last_seen_ms: r.last_seen_ms,
        ended_ms: r.ended_ms,
        lost: r.ended_ms.is_none() && !up.contains(r.node.as_str()),
        placement: r.placement.clone(),
    }
}
