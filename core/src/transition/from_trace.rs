//! A trace turned back into the commands a live cluster would have committed,
//! so `gpumon replay` runs the replica's own transition.
//!
//! Each node's samples come as pushes from an agent named after the node
//! (incarnation 1, sequence numbers from 1), one window of one sample per
//! `gpu` record. Consecutive records of one node and one kind (windows, or
//! hook records) share a push, as an agent's would, up to
//! [`MAX_BATCH`]; a push holds one kind only, so applying it keeps the
//! trace's order. A `rank` record names the training process a later window
//! of its GPU lists; as the live agent does, the window then carries the
//! rank on that process. `alloc`, `step` and `event` records become the hook
//! records their rank's node pushes. Times go from seconds to the
//! milliseconds the wire carries.

use std::collections::HashMap;

use gpumon_proto::{
    AllocRecord, AllocStats, BytesStat, CollectiveWait, EventRecord, GaugeStat, GpuInfo, GpuWindow,
    HookRecord, ProcWindow, PushBatch, RankInfo, StallRecord, StepRecord,
};

use super::{Command, CommandV1};
use crate::records::{GpuRef, RankRef, RecordRef, SettingsRecord};
use crate::settings::SettingsChange;

/// The command of a `settings` record, as the admin's change was committed.
pub fn settings_command(record: &SettingsRecord) -> Command {
    Command::V1(CommandV1::Settings(SettingsChange {
        job: record.job.clone(),
        set: record
            .set
            .iter()
            .map(|(k, v)| (k.clone(), v.text()))
            .collect(),
        reset: record.reset.clone(),
        reset_all: record.reset_all,
    }))
}

/// The node that pushes hook records of a rank no `rank` record placed.
pub const UNPLACED_NODE: &str = "trace";

/// Windows or hook records in one push at most.
pub const MAX_BATCH: usize = 64;

/// Ranks remembered per trace; beyond it the oldest placement is forgotten
/// (the engine tracks far fewer).
const MAX_PLACEMENTS: usize = 1 << 16;

/// A rank placed on a GPU: its process and identity.
#[derive(Debug, Clone)]
struct Placed {
    pid: u32,
    info: RankInfo,
}

/// Turns trace records into commands, in order: [`TraceCommands::add`] each
/// record, then [`TraceCommands::finish`].
#[derive(Debug, Default)]
pub struct TraceCommands {
    /// The push being filled.
    pending: Option<PushBatch>,
    /// Last sequence number pushed per node.
    seqs: HashMap<String, u64>,
    /// Where each rank runs now, node and device index, by job and rank.
    placements: HashMap<String, HashMap<u32, (String, u32)>>,
    /// Placements remembered.
    placed: usize,
    /// The ranks placed on each GPU, by node and device index.
    on_gpu: HashMap<String, HashMap<u32, Vec<Placed>>>,
}

impl TraceCommands {
    /// Takes one record; returns the push it completed, if any (the record
    /// then starts the next one). A `rank` record only places its rank for
    /// the windows that follow. A `settings` record is a command of its
    /// own, not a push: it returns the push being filled, and
    /// [`settings_command`] gives the change, to apply after it.
    pub fn add(&mut self, record: &RecordRef<'_>) -> Option<Command> {
        let (node, window, hook) = match record {
            RecordRef::Settings(_) => return self.finish(),
            RecordRef::Gpu(g) => (g.node.as_ref(), Some(self.window(g)), None),
            RecordRef::Rank(r) => {
                self.place(r);
                return None;
            }
            RecordRef::Alloc(a) => (
                self.node_of(&a.job, a.rank),
                None,
                Some(HookRecord::Alloc(AllocRecord {
                    t_ms: ms(a.t),
                    job: a.job.to_string(),
                    rank: a.rank,
                    stats: AllocStats {
                        allocated: a.allocated,
                        reserved: a.reserved,
                        peak_allocated: a.peak_allocated,
                        inactive_split: a.inactive_split,
                        alloc_retries: a.alloc_retries,
                        ooms: a.ooms,
                        ..AllocStats::default()
                    },
                    limit: a.limit(),
                })),
            ),
            RecordRef::Step(s) => (
                self.node_of(&s.job, s.rank),
                None,
                Some(HookRecord::Step(StepRecord {
                    group: s.group,
                    waits: s.waits.clone(),
                    collectives: s.collectives.clone(),
                    t_ms: ms(s.t),
                    job: s.job.to_string(),
                    rank: s.rank,
                    step: s.step,
                    duration_ms: s.duration_ms,
                    sections: s
                        .sections
                        .iter()
                        .map(|(name, v)| (name.to_string(), *v))
                        .collect(),
                })),
            ),
            RecordRef::Event(e) => (
                self.node_of(&e.job, e.rank),
                None,
                Some(HookRecord::Event(EventRecord {
                    t_ms: ms(e.t),
                    job: e.job.to_string(),
                    rank: e.rank,
                    name: e.name.to_string(),
                    detail: e.detail.as_ref().map(|d| d.to_string()),
                    snapshot: None,
                })),
            ),
            RecordRef::Stall(s) => (
                self.node_of(&s.job, s.rank),
                None,
                Some(HookRecord::Stall(StallRecord {
                    t_ms: ms(s.t),
                    job: s.job.clone(),
                    rank: s.rank,
                    step: s.step,
                    quiet_ms: ms(s.quiet_s),
                    source: s.source.clone(),
                    waiting: s.waiting.as_ref().map(|w| CollectiveWait {
                        group: w.group.clone(),
                        desc: w.desc.clone(),
                        seq: w.seq,
                        op: w.op.clone(),
                        numel: w.numel,
                        waited_ms: ms(w.waited_s),
                        timeout_ms: w.timeout_s.map(ms),
                    }),
                    entered: s.entered.clone(),
                    marker: s.marker.clone(),
                })),
            ),
        };
        let fits = self.pending.as_ref().is_some_and(|p| {
            p.node == node
                && match (&window, &hook) {
                    (Some(_), _) => p.hook.is_empty() && p.windows.len() < MAX_BATCH,
                    _ => p.windows.is_empty() && p.hook.len() < MAX_BATCH,
                }
        });
        let done = if fits {
            None
        } else {
            let node = node.to_owned();
            let seq = self.seqs.entry(node.clone()).or_default();
            *seq += 1;
            let next = PushBatch {
                agent_id: node.clone(),
                incarnation: 1,
                seq: *seq,
                node,
                dropped_batches: 0,
                windows: Vec::new(),
                hook: Vec::new(),
                acks: Vec::new(),
            };
            self.pending.replace(next).map(push)
        };
        if let Some(pending) = self.pending.as_mut() {
            pending.windows.extend(window);
            pending.hook.extend(hook);
        }
        done
    }

    /// The last push, once every record was added.
    pub fn finish(&mut self) -> Option<Command> {
        self.pending.take().map(push)
    }

    fn place(&mut self, r: &RankRef<'_>) {
        let known = self
            .placements
            .get(r.job.as_ref())
            .and_then(|ranks| ranks.get(&r.rank));
        if let Some((node, gpu)) = known {
            if let Some(list) = self.on_gpu.get_mut(node).and_then(|g| g.get_mut(gpu)) {
                list.retain(|p| !(p.info.job == r.job && p.info.rank == r.rank));
            }
        } else if self.placed >= MAX_PLACEMENTS {
            return;
        } else {
            self.placed += 1;
        }
        self.placements
            .entry(r.job.to_string())
            .or_default()
            .insert(r.rank, (r.node.to_string(), r.gpu));
        self.on_gpu
            .entry(r.node.to_string())
            .or_default()
            .entry(r.gpu)
            .or_default()
            .push(Placed {
                pid: r.pid,
                info: RankInfo {
                    job: r.job.to_string(),
                    rank: r.rank,
                    local_rank: r.local_rank,
                    world_size: r.world_size,
                    master_addr: None,
                    master_port: None,
                },
            });
    }

    fn node_of(&self, job: &str, rank: u32) -> &str {
        self.placements
            .get(job)
            .and_then(|ranks| ranks.get(&rank))
            .map_or(UNPLACED_NODE, |(node, _)| node.as_str())
    }

    /// The ranks placed on one GPU.
    fn placed_on(&self, node: &str, gpu: u32) -> &[Placed] {
        self.on_gpu
            .get(node)
            .and_then(|g| g.get(&gpu))
            .map_or(&[], Vec::as_slice)
    }

    /// One record's window: one sample, or a recorded window's peak
    /// (`used`), least and newest sample as the live engine saw them (the
    /// trace keeps no mean; the peak stands in). A process carries the rank placed on it; a GPU
    /// that lists no processes and holds exactly one placed rank gives that
    /// rank its whole memory, as the engine does for a live window.
    fn window(&self, g: &GpuRef<'_>) -> GpuWindow {
        let placed = self.placed_on(&g.node, g.gpu);
        let mut procs: Vec<ProcWindow> = g
            .procs
            .iter()
            .map(|p| ProcWindow {
                pid: p.pid,
                used_bytes: BytesStat::single(p.used),
                rank: placed
                    .iter()
                    .find(|r| r.pid == p.pid)
                    .map(|r| r.info.clone()),
            })
            .collect();
        if procs.is_empty() {
            if let [only] = placed {
                procs.push(ProcWindow {
                    pid: only.pid,
                    used_bytes: BytesStat::single(g.used),
                    rank: Some(only.info.clone()),
                });
            }
        }
        let t_ms = ms(g.t);
        GpuWindow {
            gpu: GpuInfo {
                uuid: g.uuid.to_string(),
                index: g.gpu,
                name: g.name.to_string(),
                total_bytes: g.total,
            },
            start_ms: t_ms,
            end_ms: t_ms,
            samples: 1,
            used_bytes: used(g),
            reserved_bytes: None,
            util_pct: g.util.map(gauge),
            sm_clock_mhz: g.sm_clock_mhz.map(gauge),
            power_w: g.power_w.map(gauge),
            procs,
        }
    }
}

/// A `gpu` record's memory as a window's: the least is at most the newest,
/// as a window's always is.
fn used(g: &GpuRef<'_>) -> BytesStat {
    let last = g.used_last.unwrap_or(g.used);
    BytesStat {
        min: g.used_min.unwrap_or(g.used).min(last),
        max: g.used,
        last,
        mean: g.used,
    }
}

fn push(batch: PushBatch) -> Command {
    Command::V1(CommandV1::Push(batch))
}

/// Trace seconds as wire milliseconds (the reader has refused negative and
/// non-finite times).
fn ms(t: f64) -> u64 {
    (t * 1000.0).round() as u64
}

fn gauge(v: f64) -> GaugeStat {
    let v = v as f32;
    GaugeStat {
        min: v,
        max: v,
        last: v,
        mean: v,
    }
}
