//! The detection engine: envelopes, regimes, OOM forecasts, leaks,
//! fragmentation, imbalance and stragglers, over one stream of observations.
//!
//! It is pure and deterministic: time comes only from the data, maps are
//! ordered, and nothing reads a clock or does I/O. The coordinator's state
//! machine feeds it every applied batch on every replica, and `gpumon replay`
//! feeds it a trace; both run this code, so a replay reproduces what
//! production decided. Feed it with [`Engine::observe_gpu`],
//! [`Engine::observe_rank`], [`Engine::observe_alloc`],
//! [`Engine::observe_step`] and [`Engine::observe_event`]; read alerts from
//! [`Engine::alerts`] and state from the summaries in [`summary`].
//!
//! Detectors, one module each, with their method in the module docs:
//! [`envelope`], [`regime`], [`trend`], [`forecast`], [`early`], [`leak`],
//! [`fragmentation`], [`imbalance`], [`straggler`], [`memory_level`] (and
//! [`host_level`], the same levels on a node's host RAM, fed by
//! [`Engine::observe_host`]).
//!
//! ```
//! use gpumon_core::engine::{Engine, EngineConfig, RankObs};
//! let mut engine = Engine::new(EngineConfig::default());
//! engine.observe_rank(&RankObs {
//!     t: 0.0, job: "job-a", rank: 0, local_rank: 0, world_size: 1,
//!     node: "node-0", gpu: 0, pid: 42,
//! });
//! assert_eq!(engine.alerts().count(), 0);
//! ```

mod alerts;
pub(crate) mod config;
pub mod early;
pub mod envelope;
mod fits;
pub mod forecast;
pub mod fragmentation;
mod gpu;
pub mod hang;
pub mod host_level;
pub mod imbalance;
mod input;
mod job;
mod latch;
pub mod leak;
pub mod legacy;
pub mod limits;
pub mod memory_level;
pub mod outside;
mod rank;
pub mod regime;
pub(crate) mod robust_stats;
mod silence;
pub mod straggler;
pub mod summary;
mod tracks;
pub mod trend;
mod window_input;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use alerts::{Alert, AlertBook, AlertKind, Severity, Subject};
pub use config::EngineConfig;
pub use forecast::{OomForecast, Risk};
pub use input::{AllocObs, GpuObs, RankObs};
pub use latch::{Edge, Latch};
pub use tracks::Marker;

use crate::derived_count::DerivedCount;
use crate::not_state::NotState;
use crate::settings::{Settings, SettingsChange, SettingsError};
use crate::shared::Shared;
use limits::LimitWatch;
use outside::OutsideWatch;
use tracks::{GpuTracks, JobTrack};
use trend::TrendScratch;

/// Counts of what the engine received and what it set aside.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineCounters {
    /// GPU observations.
    pub gpu: u64,
    /// Rank observations.
    pub rank: u64,
    /// Allocator observations.
    pub alloc: u64,
    /// Step observations.
    pub step: u64,
    /// Markers.
    pub event: u64,
    /// Observations more than `window_s` older than the newest one seen.
    pub late: u64,
    /// Observations ignored because a bound (GPUs, jobs, ranks) was reached.
    pub over_limit: u64,
    /// Observations ignored for a time that is not a finite number.
    pub invalid: u64,
}

#[derive(Debug, Default, Clone)]
struct Scratch {
    trend: TrendScratch,
    points: Vec<(f64, f64)>,
    values: Vec<f64>,
}

/// The engine; see the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Engine {
    #[serde(with = "crate::settings::as_toml")]
    cfg: Settings,
    now: f64,
    nodes: GpuTracks,
    gpu_count: usize,
    jobs: BTreeMap<String, Shared<JobTrack>>,
    alerts: AlertBook,
    counters: EngineCounters,
    /// Ranks seen before their GPU: (node, gpu, job, rank, pid).
    pending_links: Vec<(String, u32, String, u32, u32)>,
    /// Memory outside the caching allocator, per rank (snapshot format 10).
    outside: OutsideWatch,
    /// What bounds each rank's memory besides its GPU (snapshot format 12).
    limits: LimitWatch,
    #[serde(skip)]
    scratch: NotState<Scratch>,
    /// Whether a job was forgotten since [`Engine::take_forgot_jobs`] last
    /// asked (the replicated state forgets its records of it too).
    #[serde(skip)]
    forgot_jobs: bool,
    /// Rank tracks in all jobs, for the bound on them (`max_ranks_per_job`
    /// holds in all jobs together too); derived, never serialized.
    #[serde(skip)]
    ranks: NotState<DerivedCount>,
}

impl PartialEq for Engine {
    fn eq(&self, other: &Self) -> bool {
        self.cfg == other.cfg
            && self.now == other.now
            && self.nodes == other.nodes
            && self.jobs == other.jobs
            && self.alerts == other.alerts
            && self.counters == other.counters
            && self.pending_links == other.pending_links
            && self.outside == other.outside
            && self.limits == other.limits
    }
}

impl Engine {
    /// An empty engine.
    pub fn new(cfg: EngineConfig) -> Self {
        let alerts = AlertBook::new(cfg.max_alerts);
        Self {
            cfg: Settings::new(cfg),
            now: f64::NEG_INFINITY,
            nodes: BTreeMap::new(),
            gpu_count: 0,
            jobs: BTreeMap::new(),
            alerts,
            counters: EngineCounters::default(),
            pending_links: Vec::new(),
            outside: OutsideWatch::new(),
            limits: LimitWatch::new(),
            scratch: NotState::default(),
            forgot_jobs: false,
            ranks: NotState::default(),
        }
    }

    /// The cluster-wide configuration it runs with, live settings applied.
    pub fn config(&self) -> &EngineConfig {
        self.cfg.effective()
    }

    /// Its settings: the configuration it started with and the live
    /// overrides, cluster-wide and per job.
    pub fn settings(&self) -> &Settings {
        &self.cfg
    }

    /// Applies a live settings change whole, from the next observation on,
    /// or refuses it (see [`Settings::apply`]).
    pub fn change_settings(&mut self, change: &SettingsChange) -> Result<(), SettingsError> {
        self.cfg.apply(change)
    }

    /// Newest trace time seen, seconds (`-inf` before any observation).
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Whether a job was forgotten since the last call.
    pub fn take_forgot_jobs(&mut self) -> bool {
        std::mem::take(&mut self.forgot_jobs)
    }

    /// Jobs tracked, live and ended.
    pub fn jobs_tracked(&self) -> usize {
        self.jobs.len()
    }

    /// Whether the job is tracked (live, or ended and not yet forgotten).
    pub fn tracks_job(&self, name: &str) -> bool {
        self.jobs.contains_key(name)
    }

    /// Alert episodes in firing order.
    pub fn alerts(&self) -> impl DoubleEndedIterator<Item = &Alert> + ExactSizeIterator {
        self.alerts.episodes()
    }

    /// Whether the job is tracked and has not ended.
    pub fn live_job(&self, name: &str) -> bool {
        self.jobs.get(name).is_some_and(|j| j.ended_t.is_none())
    }

    /// Whether the rank of the job is tracked.
    pub fn tracks_rank(&self, job: &str, rank: u32) -> bool {
        self.jobs
            .get(job)
            .is_some_and(|j| j.ranks.contains_key(&rank))
    }

    /// The job's ranks in order, each with when its process ended, if it has.
    pub fn ranks_ended(&self, job: &str) -> Vec<(u32, Option<f64>)> {
        self.jobs.get(job).map_or_else(Vec::new, |j| {
            j.ranks.iter().map(|(&rank, r)| (rank, r.ended_t)).collect()
        })
    }

    /// The job's world size, when a rank said it.
    pub fn world_size(&self, job: &str) -> Option<u32> {
        self.jobs.get(job).map(|j| j.world_size).filter(|&w| w > 0)
    }

    pub(crate) fn alerts_mut(&mut self) -> &mut AlertBook {
        &mut self.alerts
    }

    /// The alert book (episodes and which are active).
    pub fn alert_book(&self) -> &AlertBook {
        &self.alerts
    }

    /// What was received and set aside.
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// A marker (`gpumon.mark`) for a job's timeline.
    pub fn observe_event(&mut self, t: f64, job: &str, rank: u32, name: &str) {
        self.counters.event += 1;
        if !self.tick(t) {
            return;
        }
        if let Some(j) = self.jobs.get_mut(job) {
            if j.markers.len() == tracks::MAX_MARKERS {
                j.markers.pop_front();
            }
            j.markers.push_back(Marker {
                t,
                rank,
                name: name.chars().take(200).collect(),
            });
        }
    }

    /// Advances the engine's notion of now; counts observations that arrive
    /// later than the skew the envelopes absorb.
    /// Returns false (and counts it) for a time that is not finite.
    fn tick(&mut self, t: f64) -> bool {
        if !t.is_finite() {
            self.counters.invalid += 1;
            return false;
        }
        if t > self.now {
            let before = self.now;
            self.now = t;
            self.sweep_if_due(before, t);
        } else if t < self.now - self.cfg.window_s {
            self.counters.late += 1;
        }
        true
    }
}

impl Engine {
    /// (node, GPU index) of the tracks `self` and `other` still share.
    #[cfg(test)]
    pub(crate) fn gpu_tracks_shared_with(&self, other: &Self) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for (node, gpus) in &self.nodes {
            for (index, track) in gpus {
                let theirs = other.nodes.get(node).and_then(|g| g.get(index));
                if theirs.is_some_and(|t| Shared::same(track, t)) {
                    out.push((node.clone(), *index));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
