//! [`Replicated::apply`]: one command in, its effects out.

use gpumon_proto::{GpuWindow, HookRecord, HostMemory, ProcPlacement, PushBatch, PushBatchV2};

use super::{Command, CommandResult, CommandV1, Replicated};
use crate::actions::RankPlace;
use crate::cluster::{Cluster, ClusterEvent};
use crate::engine::hang::HangWatch;
use crate::hook_records::check_record;
use crate::records::{SettingValue, SettingsRecord};
use crate::settings::SettingsChange;

/// The windows and hook records of one pushed batch that were applied:
/// duplicates and invalid ones left out, in the batch's order. Live readers
/// (the coordinator's `GET /api/v1/stream`) get these.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedBatch {
    /// Node the windows were sampled on.
    pub node: String,
    /// The applied windows.
    pub windows: Vec<GpuWindow>,
    /// The applied hook records.
    pub hook: Vec<HookRecord>,
    /// A live settings change that took effect (then `node` is empty and
    /// there are no windows or records), at the data time it did.
    pub settings: Option<SettingsRecord>,
}

/// What applying one command did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// The answer for the proposer.
    pub result: CommandResult,
    /// What happened to the view, in order, for logs and live displays.
    pub events: Vec<ClusterEvent>,
    /// The push's applied windows and records, when they were asked for and
    /// anything was applied: one per push (several for a batch of pushes).
    pub applied: Vec<AppliedBatch>,
}

impl Replicated {
    /// Applies one committed command. `keep_applied` asks for the push's
    /// applied windows and records in [`Effects::applied`]; they are moved
    /// out of the command, so asking costs nothing but a filter, and not
    /// asking (nobody streams) costs nothing at all.
    pub fn apply(&mut self, command: Command, keep_applied: bool) -> Effects {
        let Command::V1(command) = command;
        let effects = self.apply_v1(command, keep_applied);
        self.forget_what_the_engine_forgot();
        effects
    }

    /// The named snapshots and step times of jobs the engine forgot (gone
    /// silent, or the oldest ended one pushed out) go with them; a scan of
    /// the jobs, only when the engine forgot one.
    fn forget_what_the_engine_forgot(&mut self) {
        if self.engine.take_forgot_jobs() {
            let engine = &self.engine;
            self.hook.retain_jobs(|job| engine.tracks_job(job));
            self.steps.retain_jobs(|job| engine.tracks_job(job));
        }
    }

    fn apply_v1(&mut self, command: CommandV1, keep_applied: bool) -> Effects {
        match command {
            CommandV1::Batch(pushes) => self.apply_batch(pushes, keep_applied),
            CommandV1::Hello(hello) => Effects {
                events: self.cluster.apply_hello(&hello),
                ..Effects::default()
            },
            CommandV1::Push(batch) => self.apply_push(batch, &[], None, keep_applied),
            CommandV1::PushPlaced(PushBatchV2 {
                batch,
                placements,
                host,
            }) => self.apply_push(batch, &placements, host.as_ref(), keep_applied),
            CommandV1::IssueActions { requests, rules } => {
                let t = self.now_t();
                let issued = requests
                    .iter()
                    .map(|req| {
                        let place = place_of(&self.cluster, &self.hangs, &req.job, req.rank);
                        self.actions.issue(t, req, &rules, place)
                    })
                    .collect();
                Effects {
                    result: CommandResult {
                        issued,
                        ..CommandResult::default()
                    },
                    ..Effects::default()
                }
            }
            CommandV1::DeliverActions { node, ids } => {
                let t = self.now_t();
                self.actions.deliver(&node, &ids, t);
                Effects::default()
            }
            CommandV1::Notified { entries, at_ms } => {
                self.notify.apply(&entries, at_ms);
                Effects::default()
            }
            CommandV1::Settings(change) => self.apply_settings(change, keep_applied),
            CommandV1::Expire { stale_after_ms } => {
                let mut events = Vec::new();
                self.cluster.expire(stale_after_ms, &mut events);
                let (t, state) = (self.now_t(), &self.cluster);
                self.engine
                    .forget_hosts(t, |node| state.host(node).is_some());
                Effects {
                    events,
                    ..Effects::default()
                }
            }
        }
    }

    /// A live settings change, whole or not at all; one that took effect
    /// is handed to live readers as a trace's `settings` record.
    fn apply_settings(&mut self, change: SettingsChange, keep_applied: bool) -> Effects {
        match self.engine.change_settings(&change) {
            Ok(()) => Effects {
                applied: keep_applied
                    .then(|| AppliedBatch {
                        node: String::new(),
                        windows: Vec::new(),
                        hook: Vec::new(),
                        settings: Some(settings_record(self.now_t(), change)),
                    })
                    .into_iter()
                    .collect(),
                ..Effects::default()
            },
            Err(reason) => Effects {
                result: CommandResult {
                    settings_refused: Some(reason.to_string()),
                    ..CommandResult::default()
                },
                ..Effects::default()
            },
        }
    }

    /// Each push of a batch as an entry of its own, in order.
    fn apply_batch(&mut self, pushes: Vec<CommandV1>, keep_applied: bool) -> Effects {
        let mut all = Effects::default();
        for push in pushes {
            let one = match push {
                CommandV1::Push(_) | CommandV1::PushPlaced(_) => self.apply_v1(push, keep_applied),
                // The leader batches pushes only; anything else is no push.
                _ => Effects::default(),
            };
            all.result.each.push(one.result);
            all.events.extend(one.events);
            all.applied.extend(one.applied);
        }
        all
    }

    fn apply_push(
        &mut self,
        batch: PushBatch,
        placements: &[ProcPlacement],
        host: Option<&HostMemory>,
        keep_applied: bool,
    ) -> Effects {
        let out = self.cluster.apply_push_placed(&batch, placements);
        for &i in &out.applied_indexes {
            if let Some(w) = batch.windows.get(i as usize) {
                self.engine.observe_window(&batch.node, w);
            }
        }
        let fresh = !out.duplicate && !out.refused;
        if fresh {
            if let Some(h) = host.filter(|h| self.cluster.apply_host(&batch, h)) {
                let t = h.t_ms as f64 / 1000.0;
                self.engine
                    .observe_host(t, &batch.node, h.used_max_bytes, h.total_bytes);
            }
            self.hook.apply(&mut self.engine, &batch.hook);
            self.hangs
                .observe(&mut self.engine, &batch.node, &batch.hook, &self.actions);
            self.observe_steps(&batch.hook);
            let t = self.now_t();
            for ack in &batch.acks {
                self.actions.ack(&batch.node, ack, t);
            }
            if !self.actions.nothing_outstanding() {
                let (state, hangs) = (&self.cluster, &self.hangs);
                self.actions
                    .expire(t, |job, rank| place_of(state, hangs, job, rank));
            }
        }
        let result = CommandResult {
            duplicate: out.duplicate,
            refused: out.refused,
            windows_applied: out.windows_applied as u32,
            windows_skipped: out.windows_skipped as u32,
            ..CommandResult::default()
        };
        let hook_applied = fresh && !batch.hook.is_empty();
        let applied = (keep_applied && (!out.applied_indexes.is_empty() || hook_applied))
            .then(|| applied_part(batch, &out.applied_indexes, hook_applied))
            .into_iter()
            .collect();
        Effects {
            result,
            events: out.events,
            applied,
        }
    }
}

/// Where a rank is, for actions: the cluster view's placement, else the
/// node whose agent forwarded its stall reports (a rank no NVML window
/// lists, as on CPUs, can still be asked for hang evidence).
fn place_of<'a>(state: &'a Cluster, hangs: &'a HangWatch, job: &str, rank: u32) -> RankPlace<'a> {
    match state.rank_place(job, rank) {
        RankPlace::Unknown => hangs
            .node_of(job, rank)
            .map_or(RankPlace::Unknown, |node| RankPlace::Live { node }),
        place => place,
    }
}

/// The batch's applied windows and valid hook records, moved out of it.
fn applied_part(batch: PushBatch, applied_indexes: &[u32], hook_applied: bool) -> AppliedBatch {
    let mut keep = vec![false; batch.windows.len()];
    for &i in applied_indexes {
        if let Some(k) = keep.get_mut(i as usize) {
            *k = true;
        }
    }
    let windows = batch
        .windows
        .into_iter()
        .zip(keep)
        .filter_map(|(w, k)| k.then_some(w))
        .collect();
    let hook = if hook_applied {
        batch
            .hook
            .into_iter()
            .filter(|r| check_record(r).is_ok())
            .collect()
    } else {
        Vec::new()
    };
    AppliedBatch {
        node: batch.node,
        windows,
        hook,
        settings: None,
    }
}

/// A change as a trace records it: numbers as numbers, names as text.
fn settings_record(t: f64, change: SettingsChange) -> SettingsRecord {
    let value = |text: String| match text.parse::<f64>() {
        Ok(n) if n.is_finite() => SettingValue::Number(n),
        _ => SettingValue::Text(text),
    };
    SettingsRecord {
        t,
        job: change.job,
        set: change.set.into_iter().map(|(k, v)| (k, value(v))).collect(),
        reset: change.reset,
        reset_all: change.reset_all,
    }
}
