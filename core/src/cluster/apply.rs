//! Applying agent messages to the view.

use gpumon_proto::api::HistoryPoint;

use super::ProcessView;
use std::collections::BTreeMap;

use gpumon_proto::{GpuInfo, GpuWindow, Hello, PodPlacement, ProcPlacement, PushBatch};
use serde::{Deserialize, Serialize};

use super::placement::check_placement;
use super::validate::{check_name, check_window};
use super::{AgentEntry, Cluster, GpuEntry, History, RankEntry, RankKey, INCARNATIONS_REMEMBERED};
use crate::limits::{MAX_CLOCK_LEAP_MS, MAX_SEQ_GAP};
use crate::shared::Shared;

/// Something that happened to the view, for logs and live displays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClusterEvent {
    /// An agent appeared, or came back with a new incarnation.
    AgentJoined {
        /// Agent id.
        agent_id: String,
        /// Its node.
        node: String,
        /// True when the agent was known under an older incarnation.
        restarted: bool,
    },
    /// A GPU was seen for the first time.
    GpuAdded {
        /// Node.
        node: String,
        /// GPU identity.
        gpu: GpuInfo,
    },
    /// A rank appeared on a GPU (or moved to a new process).
    RankStarted {
        /// Job.
        job: String,
        /// Rank.
        rank: u32,
        /// World size.
        world_size: u32,
        /// Node.
        node: String,
        /// GPU index.
        gpu: u32,
        /// Process id.
        pid: u32,
    },
    /// A rank's process left its GPU.
    RankEnded {
        /// Job.
        job: String,
        /// Rank.
        rank: u32,
        /// When, ms.
        t_ms: u64,
    },
    /// Every rank of a job has ended.
    JobEnded {
        /// Job.
        job: String,
        /// When, ms.
        t_ms: u64,
    },
}

/// What applying a batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushApplied {
    /// The batch had been applied before; nothing changed.
    pub duplicate: bool,
    /// The batch's seq ran more than [`MAX_SEQ_GAP`] past the last one
    /// applied for its incarnation; nothing changed but the counters.
    pub refused: bool,
    /// Windows applied.
    pub windows_applied: usize,
    /// Windows skipped as invalid or over a bound.
    pub windows_skipped: usize,
    /// Indexes (in the batch) of the windows applied, for the engine.
    pub applied_indexes: Vec<u32>,
    /// What happened, in order.
    pub events: Vec<ClusterEvent>,
}

impl Cluster {
    /// Registers an agent and its GPUs. Idempotent.
    pub fn apply_hello(&mut self, hello: &Hello) -> Vec<ClusterEvent> {
        let mut events = Vec::new();
        if check_name("agent id", &hello.agent_id).is_err()
            || check_name("node", &hello.node).is_err()
        {
            self.counters.windows_skipped += 1;
            return events;
        }
        let Some(agent) =
            self.agent_entry(&hello.agent_id, &hello.node, hello.incarnation, &mut events)
        else {
            return events;
        };
        agent.agent_version = truncate(&hello.agent_version);
        agent.source = truncate(&hello.source);
        for gpu in &hello.gpus {
            if check_name("gpu uuid", &gpu.uuid).is_ok() {
                self.gpu_entry(&hello.node, gpu, &mut events);
            }
        }
        events
    }

    /// Applies a batch of windows, once per `(agent_id, incarnation, seq)`.
    pub fn apply_push(&mut self, batch: &PushBatch) -> PushApplied {
        self.apply_push_placed(batch, &[])
    }

    /// [`Self::apply_push`], and each rank whose process has a placement
    /// here keeps it. A placement that fails [`check_placement`] is skipped
    /// and counted in `windows_skipped`; one whose pid is in none of the
    /// batch's windows is passed over; where a pid repeats the first wins.
    pub fn apply_push_placed(
        &mut self,
        batch: &PushBatch,
        placements: &[ProcPlacement],
    ) -> PushApplied {
        let mut out = PushApplied::default();
        // An incarnation without a record has no history to poison: any
        // seq starts it (after lost state, or when forged incarnations
        // pushed the real one out of the few remembered).
        let known = self.last_seq(&batch.agent_id, batch.incarnation);
        out.refused = known.is_some_and(|last| batch.seq > last.saturating_add(MAX_SEQ_GAP));
        let last = known.unwrap_or(0);
        if out.refused
            || check_name("agent id", &batch.agent_id).is_err()
            || check_name("node", &batch.node).is_err()
        {
            out.windows_skipped = batch.windows.len();
            self.counters.windows_skipped += batch.windows.len() as u64;
            return out;
        }
        let Some(agent) = self.agent_entry(
            &batch.agent_id,
            &batch.node,
            batch.incarnation,
            &mut out.events,
        ) else {
            out.windows_skipped = batch.windows.len();
            self.counters.windows_skipped += batch.windows.len() as u64;
            return out;
        };
        if batch.seq <= last {
            self.counters.batches_duplicate += 1;
            out.duplicate = true;
            return out;
        }
        match agent
            .seqs
            .iter_mut()
            .find(|(inc, _)| *inc == batch.incarnation)
        {
            Some((_, slot)) => *slot = batch.seq,
            None => agent.seqs.insert(0, (batch.incarnation, batch.seq)),
        }
        agent.dropped_batches = agent.dropped_batches.max(batch.dropped_batches);
        self.counters.batches_applied += 1;
        let mut placed: BTreeMap<u32, &PodPlacement> = BTreeMap::new();
        for p in placements {
            if check_placement(&p.placement).is_ok() {
                placed.entry(p.pid).or_insert(&p.placement);
            } else {
                self.counters.windows_skipped += 1;
            }
        }
        let mut seen_ms = None;
        let leap_bound = self.leap_bound();
        let mut leapt = false;
        for (i, w) in batch.windows.iter().enumerate() {
            let leaps = w.end_ms > leap_bound;
            leapt |= leaps;
            if !leaps
                && check_window(w).is_ok()
                && self.apply_window(&batch.node, w, &placed, &mut out.events)
            {
                out.windows_applied += 1;
                out.applied_indexes.push(i as u32);
                seen_ms = seen_ms.max(Some(w.end_ms));
            } else {
                out.windows_skipped += 1;
            }
        }
        if leapt {
            self.now_ms = self.now_ms.max(leap_bound);
        }
        if let (Some(end), Some(agent)) = (seen_ms, self.agents.get_mut(&batch.agent_id)) {
            agent.last_seen_ms = agent.last_seen_ms.max(end);
        }
        self.counters.windows_applied += out.windows_applied as u64;
        self.counters.windows_skipped += out.windows_skipped as u64;
        out
    }

    /// The agent's current (newest) incarnation, when it is known.
    pub fn current_incarnation(&self, agent_id: &str) -> Option<u64> {
        self.agents.get(agent_id).map(|a| a.incarnation)
    }

    /// The last seq applied for this incarnation of the agent: 0 when it
    /// was seen in its hello alone, `None` when it is not remembered.
    pub fn last_seq(&self, agent_id: &str, incarnation: u64) -> Option<u64> {
        self.agents
            .get(agent_id)
            .and_then(|a| a.seqs.iter().find(|(inc, _)| *inc == incarnation))
            .map(|(_, last)| *last)
    }

    /// The latest window end a batch may apply: [`MAX_CLOCK_LEAP_MS`] past
    /// the clock (no bound while there is no clock yet). A batch with a
    /// window past it has that window skipped and moves the clock to the
    /// bound at most, so a cluster that heard nothing for longer than the
    /// leap catches up a leap per batch, and one bad batch moves it no further.
    pub(super) fn leap_bound(&self) -> u64 {
        match self.now_ms {
            0 => u64::MAX,
            now => now.saturating_add(MAX_CLOCK_LEAP_MS),
        }
    }

    /// Finds or creates the agent, recording `incarnation` as seen. `None` when
    /// the agent is new and the agent bound is reached.
    fn agent_entry(
        &mut self,
        agent_id: &str,
        node: &str,
        incarnation: u64,
        events: &mut Vec<ClusterEvent>,
    ) -> Option<&mut AgentEntry> {
        if !self.agents.contains_key(agent_id) && self.agents.len() >= self.limits.max_agents {
            return None;
        }
        let agent = self.agents.entry(agent_id.to_owned()).or_insert_with(|| {
            Shared::new(AgentEntry {
                node: node.to_owned(),
                incarnation,
                agent_version: String::new(),
                source: String::new(),
                last_seen_ms: 0,
                dropped_batches: 0,
                seqs: Vec::new(),
            })
        });
        if !agent.seqs.iter().any(|(inc, _)| *inc == incarnation) {
            events.push(ClusterEvent::AgentJoined {
                agent_id: agent_id.to_owned(),
                node: node.to_owned(),
                restarted: !agent.seqs.is_empty(),
            });
            agent.seqs.insert(0, (incarnation, 0));
            agent.seqs.truncate(INCARNATIONS_REMEMBERED);
            agent.incarnation = incarnation;
            agent.dropped_batches = 0;
        }
        if agent.node != node {
            let moved_from = std::mem::replace(&mut agent.node, node.to_owned());
            self.forget_host_without_agent(&moved_from);
        }
        self.agents.get_mut(agent_id).map(|a| &mut **a)
    }

    fn gpu_entry(
        &mut self,
        node: &str,
        info: &GpuInfo,
        events: &mut Vec<ClusterEvent>,
    ) -> Option<&mut GpuEntry> {
        if !self.gpus.contains_key(&info.uuid) {
            if self.gpus.len() >= self.limits.max_gpus {
                return None;
            }
            events.push(ClusterEvent::GpuAdded {
                node: node.to_owned(),
                gpu: info.clone(),
            });
            let history = self.limits.history_windows;
            self.gpus.insert(
                info.uuid.clone(),
                Shared::new(GpuEntry {
                    node: node.to_owned(),
                    info: info.clone(),
                    last_end_ms: 0,
                    used_bytes: 0,
                    peak_used_bytes: 0,
                    util_pct: None,
                    sm_clock_mhz: None,
                    power_w: None,
                    processes: Vec::new(),
                    live_ranks: Vec::new(),
                    history: History::new(history),
                }),
            );
        }
        let gpu = self.gpus.get_mut(&info.uuid)?;
        if gpu.node != node {
            node.clone_into(&mut gpu.node);
        }
        if gpu.info != *info {
            gpu.info.clone_from(info);
        }
        Some(gpu)
    }

    /// Applies one valid window, with the placements of its processes by
    /// pid; false when it was skipped over a bound.
    fn apply_window(
        &mut self,
        node: &str,
        w: &GpuWindow,
        placed: &BTreeMap<u32, &PodPlacement>,
        events: &mut Vec<ClusterEvent>,
    ) -> bool {
        let history = self.limits.history_windows;
        let Some(gpu) = self.gpu_entry(node, &w.gpu, events) else {
            return false;
        };
        gpu.peak_used_bytes = gpu.peak_used_bytes.max(w.used_bytes.max);
        // A window older than what the GPU already shows (a re-send after a
        // failover, clock skew) still counts for peaks but not for "now".
        let newest = w.end_ms >= gpu.last_end_ms;
        if newest {
            gpu.last_end_ms = w.end_ms;
            gpu.used_bytes = w.used_bytes.last;
            gpu.util_pct = w.util_pct.filter(|g| g.is_finite()).map(|g| g.mean);
            gpu.sm_clock_mhz = w.sm_clock_mhz.filter(|g| g.is_finite()).map(|g| g.mean);
            gpu.power_w = w.power_w.filter(|g| g.is_finite()).map(|g| g.mean);
            gpu.processes.clear();
            gpu.processes.extend(w.procs.iter().map(|p| ProcessView {
                pid: p.pid,
                used_bytes: p.used_bytes.last,
                job: p.rank.as_ref().map(|r| r.job.clone()),
                rank: p.rank.as_ref().map(|r| r.rank),
            }));
            gpu.history.push(point(w.end_ms, w.used_bytes));
        }
        let previous_live = if newest {
            std::mem::take(&mut gpu.live_ranks)
        } else {
            Vec::new()
        };
        let gpu_used = w.used_bytes.last;

        let mut live_now: Vec<RankKey> = Vec::new();
        for p in &w.procs {
            let Some(info) = &p.rank else { continue };
            let key = (info.job.clone(), info.rank);
            let known = self.ranks.contains_key(&key);
            if !known && !self.make_room_for_rank() {
                continue;
            }
            if !known {
                self.ranks.insert(
                    key.clone(),
                    Shared::new(RankEntry {
                        info: info.clone(),
                        node: node.to_owned(),
                        gpu_uuid: String::new(),
                        gpu_index: w.gpu.index,
                        pid: 0,
                        used_bytes: 0,
                        peak_used_bytes: 0,
                        total_bytes: w.gpu.total_bytes,
                        gpu_used_bytes: 0,
                        first_seen_ms: w.start_ms,
                        last_seen_ms: 0,
                        ended_ms: None,
                        history: History::new(history),
                        placement: None,
                    }),
                );
            }
            let Some(entry) = self.ranks.get_mut(&key) else {
                continue;
            };
            let placement = placed.get(&p.pid).copied();
            let moved = entry.pid != p.pid || entry.gpu_uuid != w.gpu.uuid;
            if newest && (moved || entry.ended_ms.is_some()) {
                events.push(ClusterEvent::RankStarted {
                    job: info.job.clone(),
                    rank: info.rank,
                    world_size: info.world_size,
                    node: node.to_owned(),
                    gpu: w.gpu.index,
                    pid: p.pid,
                });
                entry.info.clone_from(info);
                node.clone_into(&mut entry.node);
                entry.gpu_uuid.clone_from(&w.gpu.uuid);
                entry.gpu_index = w.gpu.index;
                entry.pid = p.pid;
                entry.ended_ms = None;
                // A new process: the old one's pod is not this one's.
                entry.placement = placement.cloned();
            } else if let Some(placement) = placement.filter(|_| entry.pid == p.pid) {
                if entry.placement.as_ref() != Some(placement) {
                    entry.placement = Some(placement.clone());
                }
            }
            entry.peak_used_bytes = entry.peak_used_bytes.max(p.used_bytes.max);
            if newest && w.end_ms >= entry.last_seen_ms {
                entry.used_bytes = p.used_bytes.last;
                entry.total_bytes = w.gpu.total_bytes;
                entry.gpu_used_bytes = gpu_used;
                entry.last_seen_ms = w.end_ms;
                entry.history.push(point(w.end_ms, p.used_bytes));
            }
            if newest && entry.pid == p.pid {
                live_now.push(key);
            }
        }
        if newest {
            for key in previous_live.into_iter().filter(|k| !live_now.contains(k)) {
                self.end_rank(&key, w.gpu.uuid.as_str(), w.end_ms, events);
            }
            if let Some(gpu) = self.gpus.get_mut(&w.gpu.uuid) {
                gpu.live_ranks = live_now;
            }
        }
        self.now_ms = self.now_ms.max(w.end_ms);
        true
    }

    pub(super) fn end_rank(
        &mut self,
        key: &RankKey,
        gpu_uuid: &str,
        t_ms: u64,
        events: &mut Vec<ClusterEvent>,
    ) {
        let Some(entry) = self.ranks.get_mut(key) else {
            return;
        };
        // The rank may have moved to another GPU since; only its current GPU ends it.
        if entry.ended_ms.is_some() || entry.gpu_uuid != gpu_uuid {
            return;
        }
        entry.ended_ms = Some(t_ms);
        events.push(ClusterEvent::RankEnded {
            job: key.0.clone(),
            rank: key.1,
            t_ms,
        });
        let job = &key.0;
        let all_ended = self.job_ranks(job).all(|(_, r)| r.ended_ms.is_some());
        if all_ended {
            events.push(ClusterEvent::JobEnded {
                job: job.clone(),
                t_ms,
            });
            self.forget_old_ended_jobs();
        }
    }

    pub(super) fn job_ranks<'a>(
        &'a self,
        job: &str,
    ) -> impl Iterator<Item = (&'a RankKey, &'a RankEntry)> {
        self.ranks
            .range((job.to_owned(), 0)..=(job.to_owned(), u32::MAX))
            .map(|(key, entry)| (key, &**entry))
    }

    /// Ended jobs, oldest-ended first, with the time their last rank ended.
    pub(super) fn ended_jobs(&self) -> Vec<(u64, String)> {
        let mut by_job: std::collections::BTreeMap<&str, Option<u64>> =
            std::collections::BTreeMap::new();
        for ((job, _), r) in &self.ranks {
            let slot = by_job.entry(job).or_insert(Some(0));
            *slot = match (*slot, r.ended_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        let mut ended: Vec<(u64, String)> = by_job
            .into_iter()
            .filter_map(|(j, t)| t.map(|t| (t, j.to_owned())))
            .collect();
        ended.sort();
        ended
    }

    fn forget_old_ended_jobs(&mut self) {
        let ended = self.ended_jobs();
        let excess = ended.len().saturating_sub(self.limits.max_ended_jobs);
        for (_, job) in ended.into_iter().take(excess) {
            self.forget_job(&job);
        }
    }

    pub(super) fn forget_job(&mut self, job: &str) {
        let keys: Vec<RankKey> = self.job_ranks(job).map(|(k, _)| k.clone()).collect();
        for k in keys {
            self.ranks.remove(&k);
        }
    }

    /// Makes room for one more rank by forgetting the oldest ended job; false
    /// when every tracked rank is alive and the bound is reached.
    fn make_room_for_rank(&mut self) -> bool {
        while self.ranks.len() >= self.limits.max_ranks {
            let Some((_, job)) = self.ended_jobs().into_iter().next() else {
                return false;
            };
            self.forget_job(&job);
        }
        true
    }
}

fn point(t_ms: u64, s: gpumon_proto::BytesStat) -> HistoryPoint {
    HistoryPoint {
        t_ms,
        min: s.min,
        max: s.max,
        last: s.last,
        mean: s.mean,
    }
}

fn truncate(s: &str) -> String {
    let mut end = s.len().min(crate::limits::MAX_NAME_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
