//! The engine as snapshot formats up to 4 laid it out, before memory
//! levels (of GPUs and of host RAM) joined its configuration, so a replica can still load its data
//! dir after an upgrade (see the coordinator's `snapshot_file`). Postcard is
//! field-order sensitive: these mirrors must keep the old order exactly.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::alerts::AlertBook;
use super::config::EngineConfig;
use super::early::EarlyParams;
use super::forecast::ForecastParams;
use super::fragmentation::FragmentationParams;
use super::imbalance::ImbalanceParams;
use super::leak::LeakParams;
use super::regime::RegimeParams;
use super::straggler::StragglerParams;
use super::tracks::{GpuTracks, JobTrack};
use super::{Engine, EngineCounters};
use crate::shared::Shared;

/// [`EngineConfig`] before `memory_levels`.
#[derive(Debug, Deserialize)]
struct EngineConfigV4 {
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
    straggler: StragglerParams,
    max_alerts: usize,
    max_gpus: usize,
    max_jobs: usize,
    max_ranks_per_job: usize,
}

/// [`Engine`] as snapshot formats 2 to 4 hold it.
#[derive(Debug, Deserialize)]
pub struct EngineV4 {
    cfg: EngineConfigV4,
    now: f64,
    nodes: GpuTracks,
    gpu_count: usize,
    jobs: BTreeMap<String, Shared<JobTrack>>,
    alerts: AlertBook,
    counters: EngineCounters,
    pending_links: Vec<(String, u32, String, u32, u32)>,
}

impl EngineV4 {
    /// The engine with the memory levels it never had: those of `levels`,
    /// the replica's configuration.
    pub fn upgrade(self, levels: &EngineConfig) -> Engine {
        let c = self.cfg;
        let cfg = EngineConfig {
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
            straggler: c.straggler,
            max_alerts: c.max_alerts,
            max_gpus: c.max_gpus,
            max_jobs: c.max_jobs,
            max_ranks_per_job: c.max_ranks_per_job,
            memory_levels: levels.memory_levels.clone(),
            host_memory_levels: levels.host_memory_levels.clone(),
        };
        Engine {
            cfg,
            now: self.now,
            nodes: self.nodes,
            gpu_count: self.gpu_count,
            jobs: self.jobs,
            alerts: self.alerts,
            counters: self.counters,
            pending_links: self.pending_links,
            scratch: Default::default(),
        }
    }
}
