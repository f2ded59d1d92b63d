//! The engine as older snapshot formats laid it out, so a replica can still
//! load its data dir after an upgrade (see the coordinator's
//! `snapshot_file`): formats up to 4 before memory levels (of GPUs and of
//! host RAM) joined its configuration, format 5 with its configuration
//! encoded field by field, format 6 before the straggler tracker's peer
//! groups, formats 7 and 8 before its collective waits. Postcard is field-order sensitive: these mirrors must keep the
//! old order exactly.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::alerts::AlertBook;
use super::config::EngineConfig;
use super::early::EarlyParams;
use super::forecast::ForecastParams;
use super::fragmentation::FragmentationParams;
use super::imbalance::ImbalanceParams;
use super::leak::LeakParams;
use super::memory_level::MemoryLevelParams;
use super::outside::OutsideWatch;
use super::regime::RegimeParams;
use super::straggler::legacy::{StragglerTrackerV10, StragglerTrackerV6, StragglerTrackerV8};
use super::straggler::{StragglerParams, StragglerTracker};
use super::tracks::{GpuTracks, JobTrackWith};
use super::{Engine, EngineCounters};
use crate::settings::Settings;
use crate::shared::Shared;

/// [`EngineConfig`] before `memory_levels`.
#[derive(Debug, Deserialize)]
pub struct EngineConfigV4 {
    window_s: f64,
    warmup_s: f64,
    z_interval: f64,
    idle_frac: f64,
    regime: RegimeParams,
    forecast: ForecastParams,
    early: EarlyParams,
    oom_raise_after: u32,
    oom_clear_after: u32,
    leak: LeakParams,
    fragmentation: FragmentationParams,
    imbalance: ImbalanceParams,
    straggler: StragglerParamsV5,
    max_alerts: usize,
    max_gpus: usize,
    max_jobs: usize,
    max_ranks_per_job: usize,
}

impl EngineConfigV4 {
    /// The current configuration: what this one lacks comes from `current`,
    /// the replica's, or from `levels`.
    fn upgrade(self, current: &EngineConfig, levels: [MemoryLevelParams; 2]) -> EngineConfig {
        let c = self;
        let [memory_levels, host_memory_levels] = levels;
        EngineConfig {
            window_s: c.window_s,
            warmup_s: c.warmup_s,
            z_interval: c.z_interval,
            idle_frac: c.idle_frac,
            regime: c.regime,
            forecast: c.forecast,
            early: c.early,
            oom_raise_after: c.oom_raise_after,
            oom_clear_after: c.oom_clear_after,
            leak: c.leak,
            fragmentation: c.fragmentation,
            imbalance: c.imbalance,
            straggler: c.straggler.upgrade(&current.straggler),
            max_alerts: c.max_alerts,
            max_gpus: c.max_gpus,
            max_jobs: c.max_jobs,
            max_ranks_per_job: c.max_ranks_per_job,
            silent_s: current.silent_s,
            memory_levels,
            host_memory_levels,
            outside: current.outside,
        }
    }
}

/// [`EngineConfig`] as format 5 encoded it, field by field: format 4's and
/// the memory levels (postcard lays a nested struct's fields out inline).
#[derive(Debug, Deserialize)]
pub struct EngineConfigV5 {
    v4: EngineConfigV4,
    memory_levels: MemoryLevelParams,
    host_memory_levels: MemoryLevelParams,
}

/// [`StragglerParams`] up to format 5, before the loss floor and the
/// shortest episode, which come from the replica's configuration, as does
/// `max_pending_steps` (format 5's 8 lost half the steps of jobs with short
/// steps).
#[derive(Debug, Deserialize)]
struct StragglerParamsV5 {
    min_slowdown: f64,
    k_sigma: f64,
    h_sigma: f64,
    clip_sigma: f64,
    min_sigma: f64,
    window_steps: usize,
    min_steps: usize,
    warmup_steps: u64,
    min_ranks: usize,
    /// Replaced by the replica's value on upgrade.
    _max_pending_steps: usize,
}

impl StragglerParamsV5 {
    fn upgrade(self, current: &StragglerParams) -> StragglerParams {
        let o = self;
        StragglerParams {
            min_slowdown: o.min_slowdown,
            k_sigma: o.k_sigma,
            h_sigma: o.h_sigma,
            clip_sigma: o.clip_sigma,
            min_sigma: o.min_sigma,
            window_steps: o.window_steps,
            min_steps: o.min_steps,
            warmup_steps: o.warmup_steps,
            min_ranks: o.min_ranks,
            ..*current
        }
    }
}

/// [`Engine`] with its configuration `C`, straggler tracker `S` (by
/// default that of formats 2 to 6) and watch of memory outside the
/// allocator `O` (none before format 10), as older formats hold it; none
/// holds device limits (format 12 on).
#[derive(Debug, Deserialize)]
pub struct EngineWith<C, S = StragglerTrackerV6, O = ()> {
    cfg: C,
    now: f64,
    nodes: GpuTracks,
    gpu_count: usize,
    jobs: BTreeMap<String, Shared<JobTrackWith<S>>>,
    alerts: AlertBook,
    counters: EngineCounters,
    pending_links: Vec<(String, u32, String, u32, u32)>,
    outside: O,
}

/// [`Engine`] as snapshot formats 2 to 4 hold it.
pub type EngineV4 = EngineWith<EngineConfigV4>;
/// [`Engine`] as snapshot format 5 holds it.
pub type EngineV5 = EngineWith<EngineConfigV5>;
/// [`Engine`] as snapshot format 6 holds it.
pub type EngineV6 = EngineWith<ConfigToml>;
/// [`Engine`] as snapshot formats 7 and 8 hold it: before collective waits.
pub type EngineV8 = EngineWith<ConfigToml, StragglerTrackerV8>;
/// [`Engine`] as snapshot format 9 holds it: before memory outside the
/// allocator.
pub type EngineV9 = EngineWith<ConfigToml, StragglerTrackerV10>;
/// [`Engine`] as snapshot format 10 holds it: before collectives listed
/// one by one.
pub type EngineV10 = EngineWith<ConfigToml, StragglerTrackerV10, OutsideWatch>;
/// [`Engine`] as snapshot format 11 holds it: before device limits.
pub type EngineV11 = EngineWith<ConfigToml, StragglerTracker, OutsideWatch>;

/// The configuration as TOML text of what differs from the defaults (formats 6 on).
#[derive(Debug, Deserialize)]
pub struct ConfigToml(#[serde(with = "crate::settings::as_toml")] Settings);

impl IntoEngine for EngineV6 {
    /// The engine with its straggler trackers upgraded.
    fn into_engine(self) -> Engine {
        self.upgrade_with(|cfg| cfg.0, StragglerTrackerV6::upgrade)
    }
}

impl IntoEngine for EngineV9 {
    /// The engine with no rank's memory outside the allocator seen.
    fn into_engine(self) -> Engine {
        self.upgrade_with(|cfg| cfg.0, StragglerTrackerV10::upgrade)
    }
}

impl IntoEngine for EngineV10 {
    /// The engine with no collective listed one by one yet.
    fn into_engine(self) -> Engine {
        self.upgrade_with(|cfg| cfg.0, StragglerTrackerV10::upgrade)
    }
}

impl IntoEngine for EngineV11 {
    /// The engine with no rank's device limit known.
    fn into_engine(self) -> Engine {
        self.upgrade_with(|cfg| cfg.0, |tracker| tracker)
    }
}

impl IntoEngine for EngineV8 {
    /// The engine with its straggler trackers upgraded.
    fn into_engine(self) -> Engine {
        self.upgrade_with(|cfg| cfg.0, StragglerTrackerV8::upgrade)
    }
}

/// An older format's engine that upgrades with nothing from the replica.
pub trait IntoEngine {
    /// The current engine; what the format lacks starts empty.
    fn into_engine(self) -> Engine;
}

impl<C> EngineWith<C> {
    /// The engine, its configuration upgraded by `upgrade`.
    fn upgrade_cfg(self, upgrade: impl FnOnce(C) -> EngineConfig) -> Engine {
        self.upgrade_with(|c| Settings::new(upgrade(c)), StragglerTrackerV6::upgrade)
    }
}

/// The watch of memory outside the allocator an older format holds: none
/// before format 10.
pub trait OutsideOf {
    /// The current watch.
    fn watch(self) -> OutsideWatch;
}

impl OutsideOf for () {
    fn watch(self) -> OutsideWatch {
        OutsideWatch::new()
    }
}

impl OutsideOf for OutsideWatch {
    fn watch(self) -> OutsideWatch {
        self
    }
}

impl<C, S: Clone, O: OutsideOf> EngineWith<C, S, O> {
    /// The engine, its configuration upgraded by `upgrade` and its straggler
    /// trackers by `tracker`.
    fn upgrade_with(
        self,
        upgrade: impl FnOnce(C) -> Settings,
        tracker: impl Fn(S) -> super::straggler::StragglerTracker,
    ) -> Engine {
        Engine {
            cfg: upgrade(self.cfg),
            now: self.now,
            nodes: self.nodes,
            gpu_count: self.gpu_count,
            jobs: self
                .jobs
                .into_iter()
                .map(|(name, job)| {
                    let job = job.into_inner().map_straggler(&tracker);
                    (name, Shared::new(job))
                })
                .collect(),
            alerts: self.alerts,
            counters: self.counters,
            pending_links: self.pending_links,
            outside: self.outside.watch(),
            limits: Default::default(),
            scratch: Default::default(),
            forgot_jobs: false,
            ranks: Default::default(),
        }
    }
}

impl EngineV4 {
    /// The engine with the memory levels and tunables it never had: those
    /// of `current`, the replica's configuration.
    pub fn upgrade(self, current: &EngineConfig) -> Engine {
        let levels = [
            current.memory_levels.clone(),
            current.host_memory_levels.clone(),
        ];
        self.upgrade_cfg(|cfg| cfg.upgrade(current, levels))
    }
}

impl EngineV5 {
    /// The engine with the tunables format 5 lacks from `current`, the
    /// replica's configuration.
    pub fn upgrade(self, current: &EngineConfig) -> Engine {
        self.upgrade_cfg(|cfg| {
            let levels = [cfg.memory_levels, cfg.host_memory_levels];
            cfg.v4.upgrade(current, levels)
        })
    }
}
