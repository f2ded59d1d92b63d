//! Every tunable of the engine, with documented defaults. The same values run
//! live and in replay; a replica must use the same ones as its peers.

use serde::{Deserialize, Serialize};

use super::early::EarlyParams;
use super::forecast::ForecastParams;
use super::fragmentation::FragmentationParams;
use super::imbalance::ImbalanceParams;
use super::leak::LeakParams;
use super::memory_level::MemoryLevelParams;
use super::outside::OutsideParams;
use super::regime::RegimeParams;
use super::straggler::StragglerParams;

/// Engine configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Width of the envelope windows, seconds.
    pub window_s: f64,
    /// A GPU's or rank's first seconds of memory are its start-up ramp, not a
    /// trend, seconds.
    pub warmup_s: f64,
    /// Two-sided normal quantile of the slope intervals (1.96 for 95 %).
    pub z_interval: f64,
    /// A GPU whose used memory falls below this fraction of its capacity has
    /// no live training process.
    pub idle_frac: f64,
    /// Regime detection.
    pub regime: RegimeParams,
    /// OOM forecast.
    pub forecast: ForecastParams,
    /// Early warning for jobs that leak from their first steps.
    pub early: EarlyParams,
    /// OOM alert: consecutive windows at warning or above before raising.
    pub oom_raise_after: u32,
    /// OOM alert: consecutive windows below warning before clearing.
    pub oom_clear_after: u32,
    /// Leak detection.
    pub leak: LeakParams,
    /// Fragmentation detection.
    pub fragmentation: FragmentationParams,
    /// Imbalance detection.
    pub imbalance: ImbalanceParams,
    /// Straggler detection.
    pub straggler: StragglerParams,
    /// Alert episodes kept.
    pub max_alerts: usize,
    /// GPUs tracked; more are counted and ignored.
    pub max_gpus: usize,
    /// Jobs tracked, live and ended; the oldest ended job is forgotten first.
    pub max_jobs: usize,
    /// Ranks tracked per job, and in all jobs together.
    pub max_ranks_per_job: usize,
    /// A job or GPU not heard of for this long is forgotten (its node
    /// stopped reporting, its process died unseen), seconds; 0 never.
    pub silent_s: f64,
    /// Fixed levels of a GPU's capacity that raise `memory_level` alerts.
    pub memory_levels: MemoryLevelParams,
    /// Fixed levels of a node's host RAM that raise `memory_level` alerts
    /// about the host.
    pub host_memory_levels: MemoryLevelParams,
    /// Growth of memory outside the caching allocator.
    pub outside: OutsideParams,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            window_s: 10.0,
            warmup_s: 30.0,
            z_interval: 1.96,
            idle_frac: 0.01,
            regime: RegimeParams::default(),
            forecast: ForecastParams::default(),
            early: EarlyParams::default(),
            oom_raise_after: 2,
            oom_clear_after: 3,
            leak: LeakParams::default(),
            fragmentation: FragmentationParams::default(),
            imbalance: ImbalanceParams::default(),
            straggler: StragglerParams::default(),
            max_alerts: 10_000,
            max_gpus: crate::cluster::DEFAULT_MAX_GPUS,
            max_jobs: 1024,
            max_ranks_per_job: crate::cluster::DEFAULT_MAX_RANKS,
            silent_s: 300.0,
            memory_levels: MemoryLevelParams::default(),
            host_memory_levels: MemoryLevelParams::host_default(),
            outside: OutsideParams::default(),
        }
    }
}
