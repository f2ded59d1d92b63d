//! [`PushSplitter`]: one agent's push cut into one push per group.
//!
//! The rules (docs/sharding.md gives the reasons):
//!
//! - **Windows** go to the group of each job with a rank among their
//!   processes. In a group's copy, a process of another group's job keeps
//!   its pid and memory but not its rank: every group sees the device's
//!   processes whole, and only its own jobs' ranks.
//! - A window also goes to the group of a job that had a rank on the GPU in
//!   the GPU's previous window and has none now, so that group sees the
//!   rank leave and ends it as one group would. A job that is still on the
//!   GPU but now routes elsewhere (it was pinned to a new group) is not
//!   followed: moving a job hands its slice over instead.
//! - A window that goes nowhere by those rules (an idle GPU) goes to the
//!   node's **home group**, as do the node's host RAM and the batch's own
//!   acks. Acks queued with [`PushSplitter::queue_ack`] go to the group
//!   that handed the action out (action ids are per group).
//! - **Hook records** go to the group of their job; a **placement** to the
//!   group of the job whose rank its process is (the first valid one per
//!   process; one for a process with no rank is left out, as no view keeps
//!   it).
//! - **Seq**: every part keeps the agent's `(agent_id, incarnation, seq)`.
//!   A group gets only the seqs that carry something for it, so its stream
//!   rises with gaps; the transition and the leader take any seq above the
//!   last applied one and within [`MAX_SEQ_GAP`] of it. So a group the agent
//!   has pushed to in this incarnation gets an empty part once
//!   [`KEEPALIVE_SEQS`] seqs have gone by without one, and its gap stays
//!   inside the bound. The agent keeps and re-sends the parts, not the
//!   push (cutting it again would follow the GPUs as they are now): each
//!   group drops a part it applied before as a duplicate, as one group
//!   drops the whole.

use std::collections::{BTreeMap, BTreeSet};

use gpumon_proto::{ActionAck, GpuWindow, Hello, PushBatch, PushBatchV2};

use super::map::{GroupId, GroupMap};
use gpumon_core::cluster::check_placement;
use gpumon_core::limits::MAX_SEQ_GAP;
use gpumon_core::transition::{Command, CommandV1};

/// A group the agent pushed to in this incarnation hears from it at least
/// once every this many seqs: a quarter of [`MAX_SEQ_GAP`], which leaves
/// the rest of the bound for batches lost while the group was unreachable.
pub const KEEPALIVE_SEQS: u64 = MAX_SEQ_GAP / 4;

/// GPUs whose last window's jobs are remembered: a node's, with room. A GPU
/// past it is not followed, and a rank that leaves it ends in its group
/// when the GPU expires there.
pub const MAX_REMEMBERED_GPUS: usize = 256;

/// One group's part of a push.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPush {
    /// Where it goes.
    pub group: GroupId,
    /// What it carries, with the agent's stamp.
    pub push: PushBatchV2,
}

impl GroupPush {
    /// The command the group's leader proposes for it
    /// ([`CommandV1::for_push`]).
    pub fn into_command(self) -> Command {
        Command::V1(CommandV1::for_push(self.push))
    }

    /// Whether it carries nothing but the agent's stamp (a keep-alive).
    pub fn is_empty(&self) -> bool {
        let b = &self.push.batch;
        b.windows.is_empty()
            && b.hook.is_empty()
            && b.acks.is_empty()
            && self.push.placements.is_empty()
            && self.push.host.is_none()
    }
}

/// Cuts one agent's pushes into one push per group. One per agent: it
/// remembers, for that agent, which jobs each GPU last showed and which
/// seq each group last got.
#[derive(Debug, Clone, Default)]
pub struct PushSplitter {
    /// `(agent_id, incarnation)` of the pushes split so far.
    stream: Option<(String, u64)>,
    /// By GPU uuid: the jobs with a rank in its last window, and the group
    /// each went to.
    gpu_jobs: BTreeMap<String, Vec<(String, GroupId)>>,
    /// By group: the last seq it got in this incarnation.
    last_sent: BTreeMap<GroupId, u64>,
    /// Acks for the next push, by the group that handed the action out.
    acks: BTreeMap<GroupId, Vec<ActionAck>>,
}

impl PushSplitter {
    /// Nothing split yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The group an agent's hello goes to: its node's home.
    pub fn hello_group(map: &GroupMap, hello: &Hello) -> GroupId {
        map.home_of_node(&hello.node)
    }

    /// Sends `ack` with the next push, to `group`, which handed the action
    /// out. The caller bounds what it queues as it bounds a batch's acks:
    /// a part with more acks than the leader takes is refused whole.
    pub fn queue_ack(&mut self, group: GroupId, ack: ActionAck) {
        self.acks.entry(group).or_default().push(ack);
    }

    /// The parts of an agent's command, each for its group, in group
    /// order: a hello to the node's home, a push split. `None` for a
    /// command no agent sends (each group's leader proposes those).
    pub fn route(&mut self, map: &GroupMap, command: Command) -> Option<Vec<(GroupId, Command)>> {
        let Command::V1(command) = command;
        let pushed = match command {
            CommandV1::Hello(hello) => {
                let home = Self::hello_group(map, &hello);
                return Some(vec![(home, Command::V1(CommandV1::Hello(hello)))]);
            }
            CommandV1::Push(batch) => PushBatchV2::from(batch),
            CommandV1::PushPlaced(pushed) => pushed,
            // A batch is a leader's, of pushes already routed to its group.
            CommandV1::IssueActions { .. }
            | CommandV1::DeliverActions { .. }
            | CommandV1::Notified { .. }
            | CommandV1::Expire { .. }
            | CommandV1::Settings(_)
            | CommandV1::Batch(_) => return None,
        };
        let parts = self.split(map, pushed);
        Some(
            parts
                .into_iter()
                .map(|part| (part.group, part.into_command()))
                .collect(),
        )
    }

    /// Cuts `pushed` into one push per group that has something in it or is
    /// due a keep-alive, in group order; see the module docs for the rules.
    pub fn split(&mut self, map: &GroupMap, pushed: PushBatchV2) -> Vec<GroupPush> {
        let PushBatchV2 {
            batch:
                PushBatch {
                    agent_id,
                    incarnation,
                    seq,
                    node,
                    dropped_batches,
                    windows,
                    hook,
                    acks,
                },
            placements,
            host,
        } = pushed;
        let stream = (agent_id, incarnation);
        if self.stream.as_ref() != Some(&stream) {
            // A new incarnation starts a new seq stream in every group.
            self.last_sent.clear();
            self.stream = Some(stream.clone());
        }
        let home = map.home_of_node(&node);
        let mut parts = Parts::new(PushBatch {
            agent_id: stream.0,
            incarnation,
            seq,
            node,
            dropped_batches,
            windows: Vec::new(),
            hook: Vec::new(),
            acks: Vec::new(),
        });

        // Which group gets each process's placement: its rank's job's.
        let mut pid_group: BTreeMap<u32, GroupId> = BTreeMap::new();
        for w in windows {
            for (group, part_window) in self.window_parts(map, home, w) {
                for p in &part_window.procs {
                    if p.rank.is_some() {
                        pid_group.entry(p.pid).or_insert(group);
                    }
                }
                parts.get(group).batch.windows.push(part_window);
            }
        }
        for record in hook {
            let group = map.group_of_job(record.subject().0);
            parts.get(group).batch.hook.push(record);
        }
        let mut placed: BTreeSet<u32> = BTreeSet::new();
        for p in placements {
            let Some(&group) = pid_group.get(&p.pid) else {
                continue;
            };
            if check_placement(&p.placement).is_ok() && placed.insert(p.pid) {
                parts.get(group).placements.push(p);
            }
        }
        if let Some(h) = host {
            parts.get(home).host = Some(h);
        }
        if !acks.is_empty() {
            parts.get(home).batch.acks.extend(acks);
        }
        for (group, acks) in std::mem::take(&mut self.acks) {
            parts.get(group).batch.acks.extend(acks);
        }

        let due: Vec<GroupId> = self
            .last_sent
            .iter()
            .filter(|(_, &last)| seq.saturating_sub(last) >= KEEPALIVE_SEQS)
            .map(|(&group, _)| group)
            .collect();
        for group in due {
            parts.get(group);
        }
        let out = parts.finish();
        for part in &out {
            let last = self.last_sent.entry(part.group).or_insert(seq);
            *last = (*last).max(seq);
        }
        out
    }

    /// The copies of one window, by group; remembers the jobs the GPU now
    /// shows.
    fn window_parts(
        &mut self,
        map: &GroupMap,
        home: GroupId,
        w: GpuWindow,
    ) -> Vec<(GroupId, GpuWindow)> {
        let mut now: Vec<(String, GroupId)> = Vec::new();
        for r in w.procs.iter().filter_map(|p| p.rank.as_ref()) {
            if !now.iter().any(|(job, _)| *job == r.job) {
                now.push((r.job.clone(), map.group_of_job(&r.job)));
            }
        }
        let mut targets: BTreeSet<GroupId> = now.iter().map(|(_, g)| *g).collect();
        if let Some(before) = self.gpu_jobs.get(&w.gpu.uuid) {
            let left = before
                .iter()
                .filter(|(job, _)| !now.iter().any(|(j, _)| j == job));
            targets.extend(left.map(|(_, g)| *g));
        }
        if targets.is_empty() {
            targets.insert(home);
        }
        if self.gpu_jobs.contains_key(&w.gpu.uuid) || self.gpu_jobs.len() < MAX_REMEMBERED_GPUS {
            self.gpu_jobs.insert(w.gpu.uuid.clone(), now.clone());
        }
        let last = targets.len() - 1;
        let mut w = Some(w);
        let mut copies = Vec::with_capacity(targets.len());
        for (i, group) in targets.into_iter().enumerate() {
            // Every copy but the last is a clone; the last takes the window.
            let Some(mut copy) = (if i == last { w.take() } else { w.clone() }) else {
                break;
            };
            for p in &mut copy.procs {
                let elsewhere = p
                    .rank
                    .as_ref()
                    .is_some_and(|r| now.iter().any(|(job, g)| *job == r.job && *g != group));
                if elsewhere {
                    p.rank = None;
                }
            }
            copies.push((group, copy));
        }
        copies
    }
}

/// The parts being filled, by group, each stamped like the batch.
struct Parts {
    /// The batch's stamp, with nothing in it.
    stamp: PushBatch,
    by_group: BTreeMap<GroupId, PushBatchV2>,
}

impl Parts {
    fn new(stamp: PushBatch) -> Self {
        Self {
            stamp,
            by_group: BTreeMap::new(),
        }
    }

    /// The group's part, started empty with the batch's stamp.
    fn get(&mut self, group: GroupId) -> &mut PushBatchV2 {
        let stamp = &self.stamp;
        self.by_group
            .entry(group)
            .or_insert_with(|| PushBatchV2::from(stamp.clone()))
    }

    fn finish(self) -> Vec<GroupPush> {
        self.by_group
            .into_iter()
            .map(|(group, push)| GroupPush { group, push })
            .collect()
    }
}

#[cfg(test)]
mod tests;
