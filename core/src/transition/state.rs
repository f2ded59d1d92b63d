//! [`Replicated`]: everything the commands build, and nothing else.

use gpumon_proto::HookRecord;
use serde::{Deserialize, Serialize};

use crate::actions::ActionBook;
use crate::cluster::{Cluster, Limits};
use crate::engine::hang::HangWatch;
use crate::engine::{legacy, Engine, EngineConfig};
use crate::hook_records::{check_record, HookData, StepBounds, StepTimes};
use crate::notify::NotifyBook;

/// The replicated data: the same on every replica that applied the same
/// commands. The field order is the snapshot encoding's (postcard is
/// field-order sensitive): add fields at the end, with a new snapshot format.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Replicated {
    /// The cluster view: agents, GPUs, jobs, ranks and their histories.
    pub cluster: Cluster,
    /// The detection engine: forecasts, alerts, detector state.
    pub engine: Engine,
    /// Actions on training processes and how they ended.
    pub actions: ActionBook,
    /// Hook data beside the engine: named allocator snapshots, counters.
    pub hook: HookData,
    /// Step and section times per rank, from the hooks.
    pub steps: StepTimes,
    /// Notifications the leaders sent, per receiver and alert key.
    pub notify: NotifyBook,
    /// Hung jobs: each rank's latest stall report and the open episodes.
    pub hangs: HangWatch,
}

impl Replicated {
    /// Nothing applied yet.
    pub fn new(limits: Limits, engine_config: &EngineConfig) -> Self {
        Self {
            cluster: Cluster::new(limits),
            engine: Engine::new(engine_config.clone()),
            actions: ActionBook::default(),
            hook: HookData::default(),
            steps: StepTimes::default(),
            notify: NotifyBook::default(),
            hangs: HangWatch::default(),
        }
    }

    /// Data time for actions, seconds: the newest time the engine has seen.
    pub fn now_t(&self) -> f64 {
        let t = self.engine.now();
        if t.is_finite() {
            t
        } else {
            0.0
        }
    }

    /// Folds a batch's valid step records into the step times, and forgets
    /// the jobs the engine no longer tracks.
    pub(super) fn observe_steps(&mut self, records: &[HookRecord]) {
        let cfg = self.engine.config();
        let bounds = StepBounds::for_limits(cfg.max_jobs, cfg.max_ranks_per_job);
        let mut any = false;
        for record in records {
            if let HookRecord::Step(s) = record {
                if check_record(record).is_ok() {
                    self.steps.observe(bounds, s);
                    any = true;
                }
            }
        }
        if any {
            let engine = &self.engine;
            self.steps.retain_jobs(|job| engine.tracks_job(job));
        }
    }
}

/// [`Replicated`] as snapshot formats 8 to 11 laid it out: the same parts,
/// with the engine `E` of the format ([`crate::engine::legacy`]).
#[derive(Debug, Deserialize)]
pub struct ReplicatedWith<E> {
    state: Cluster,
    engine: E,
    actions: ActionBook,
    hook: HookData,
    steps: StepTimes,
    notify: NotifyBook,
    hangs: HangWatch,
}

/// Format 8: the straggler trackers before collective waits.
pub type ReplicatedV8 = ReplicatedWith<legacy::EngineV8>;
/// Format 9: the engine before memory outside the allocator.
pub type ReplicatedV9 = ReplicatedWith<legacy::EngineV9>;
/// Format 10: the straggler trackers before collectives listed one by one.
pub type ReplicatedV10 = ReplicatedWith<legacy::EngineV10>;
/// Format 11: the engine before device limits.
pub type ReplicatedV11 = ReplicatedWith<legacy::EngineV11>;

impl<E: legacy::IntoEngine> ReplicatedWith<E> {
    /// The current layout, with what the format's engine lacks starting
    /// empty.
    pub fn upgrade(self) -> Replicated {
        let old = self;
        Replicated {
            cluster: old.state,
            engine: old.engine.into_engine(),
            actions: old.actions,
            hook: old.hook,
            steps: old.steps,
            notify: old.notify,
            hangs: old.hangs,
        }
    }
}

/// [`Replicated`] as snapshot formats 6 and 7 laid it out: before hung
/// jobs, with the engine `E` of the format.
#[derive(Debug, Deserialize)]
pub struct ReplicatedBeforeHangs<E> {
    state: Cluster,
    engine: E,
    actions: ActionBook,
    hook: HookData,
    steps: StepTimes,
    notify: NotifyBook,
}

/// Format 6: the straggler trackers before peer groups.
pub type ReplicatedV6 = ReplicatedBeforeHangs<legacy::EngineV6>;
/// Format 7: before hung jobs (and collective waits).
pub type ReplicatedV7 = ReplicatedBeforeHangs<legacy::EngineV8>;

impl<E: legacy::IntoEngine> ReplicatedBeforeHangs<E> {
    /// The current layout, with no stall seen.
    pub fn upgrade(self) -> Replicated {
        let old = self;
        Replicated {
            cluster: old.state,
            engine: old.engine.into_engine(),
            actions: old.actions,
            hook: old.hook,
            steps: old.steps,
            notify: old.notify,
            hangs: HangWatch::default(),
        }
    }
}

/// [`Replicated`] as snapshot format 5 laid it out: the engine's
/// configuration field by field ([`crate::engine::legacy::EngineV5`]).
#[derive(Debug, Deserialize)]
pub struct ReplicatedV5 {
    state: Cluster,
    engine: crate::engine::legacy::EngineV5,
    actions: ActionBook,
    hook: HookData,
    steps: StepTimes,
    notify: NotifyBook,
}

impl ReplicatedV5 {
    /// The current layout, with the tunables format 5 lacks from the
    /// replica's configuration.
    pub fn upgrade(self, engine_config: &EngineConfig) -> Replicated {
        let old = self;
        Replicated {
            cluster: old.state,
            engine: old.engine.upgrade(engine_config),
            actions: old.actions,
            hook: old.hook,
            steps: old.steps,
            notify: old.notify,
            hangs: HangWatch::default(),
        }
    }
}

/// [`Replicated`] as snapshot format 4 laid it out: ranks before their
/// placement (`cluster::legacy`) and the engine before memory levels
/// ([`crate::engine::legacy`]).
#[derive(Debug, Deserialize)]
pub struct ReplicatedV4 {
    state: crate::cluster::ClusterV4,
    engine: crate::engine::legacy::EngineV4,
    actions: ActionBook,
    hook: HookData,
    steps: StepTimes,
    notify: NotifyBook,
}

impl ReplicatedV4 {
    /// The current layout, with the replica's configured memory levels.
    pub fn upgrade(self, engine_config: &EngineConfig) -> Replicated {
        Replicated {
            cluster: self.state.into(),
            engine: self.engine.upgrade(engine_config),
            actions: self.actions,
            hook: self.hook,
            steps: self.steps,
            notify: self.notify,
            hangs: HangWatch::default(),
        }
    }
}
