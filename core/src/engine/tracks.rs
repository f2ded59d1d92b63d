//! The engine's per-GPU, per-job and per-rank state. Plain data: the logic
//! that moves it lives in `gpu.rs`, `rank.rs` and `job.rs`.

use std::collections::{BTreeMap, VecDeque};

use gpumon_proto::api;
use serde::{Deserialize, Serialize};

use super::alerts::Subject;
use super::early::EarlyWatch;
use super::envelope::Envelope;
use super::forecast::{OomForecast, Risk};
use super::latch::Latch;
use super::memory_level::LevelMessages;
use super::regime::RegimeSeries;
use super::straggler::StragglerTracker;
use crate::not_state::NotState;
use crate::shared::Shared;

/// A user marker (`gpumon.mark`), as a job track keeps it; the API's
/// `gpumon_proto::api::Marker` is converted from it where read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    /// Trace time, seconds.
    pub t: f64,
    /// The rank that set it.
    pub rank: u32,
    /// Its name.
    pub name: String,
}

impl From<&Marker> for api::Marker {
    fn from(m: &Marker) -> Self {
        Self {
            t: m.t,
            rank: m.rank,
            name: m.name.clone(),
        }
    }
}

/// Ranks linked to one GPU at most (MPS or several jobs sharing a device).
pub const MAX_RANKS_PER_GPU: usize = 64;
/// Markers kept per job.
pub const MAX_MARKERS: usize = 64;

/// Every GPU's track, by node and index; each copied on write (see
/// `crate::shared`), so cloning the engine for a snapshot copies no track.
pub type GpuTracks = BTreeMap<String, BTreeMap<u32, Shared<GpuTrack>>>;

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTrack {
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) total: u64,
    pub(crate) first_t: f64,
    pub(crate) last_t: f64,
    pub(crate) samples: u64,
    pub(crate) used_sum: f64,
    pub(crate) used_peak: u64,
    pub(crate) used_last: u64,
    pub(crate) util_sum: f64,
    pub(crate) util_samples: u64,
    pub(crate) util_last: Option<f64>,
    pub(crate) clock_mhz: Option<f64>,
    pub(crate) power_w: Option<f64>,
    /// Since when memory is in use (None while idle).
    pub(crate) active_since: Option<f64>,
    pub(crate) envelope: Envelope,
    pub(crate) regime: RegimeSeries,
    /// (job, rank, pid) of the processes on it.
    pub(crate) ranks: Vec<(String, u32, u32)>,
    pub(crate) forecast: Option<OomForecast>,
    pub(crate) risk: Risk,
    pub(crate) oom_latch: Latch,
    /// A significant upward trend, even one too small to forecast.
    pub(crate) growing: bool,
    /// The first minutes' watch for a leak that starts with the job.
    pub(crate) early: EarlyWatch,
    #[serde(skip)]
    pub(crate) level_messages: NotState<LevelMessages>,
}

/// One job.
pub type JobTrack = JobTrackWith<StragglerTracker>;

/// One job, with its straggler state `S`: generic so that older snapshot
/// formats, which laid the straggler state out differently, decode into it
/// (see `legacy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTrackWith<S> {
    pub(crate) world_size: u32,
    pub(crate) first_t: f64,
    pub(crate) last_t: f64,
    pub(crate) ended_t: Option<f64>,
    pub(crate) ranks: BTreeMap<u32, Shared<RankTrack>>,
    pub(crate) straggler: S,
    pub(crate) imbalance_window: i64,
    pub(crate) markers: VecDeque<Marker>,
}

impl<S> JobTrackWith<S> {
    /// The same job with its straggler state mapped by `f`.
    pub(crate) fn map_straggler<T>(self, f: impl FnOnce(S) -> T) -> JobTrackWith<T> {
        JobTrackWith {
            world_size: self.world_size,
            first_t: self.first_t,
            last_t: self.last_t,
            ended_t: self.ended_t,
            ranks: self.ranks,
            straggler: f(self.straggler),
            imbalance_window: self.imbalance_window,
            markers: self.markers,
        }
    }
}

/// One rank of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankTrack {
    pub(crate) local_rank: u32,
    pub(crate) node: Option<String>,
    pub(crate) gpu: Option<u32>,
    pub(crate) pid: u32,
    pub(crate) first_t: f64,
    pub(crate) last_t: f64,
    pub(crate) ended_t: Option<f64>,
    /// Its own memory (per-process where NVML lists it).
    pub(crate) memory: Envelope,
    /// Recent window peaks of its own memory.
    pub(crate) levels: VecDeque<f64>,
    pub(crate) used_peak: u64,
    pub(crate) used_last: u64,
    pub(crate) alloc: Option<AllocTrack>,
    pub(crate) leak: Latch,
    pub(crate) leak_rate: Option<f64>,
    pub(crate) fragmentation: Latch,
    pub(crate) imbalance: Latch,
    pub(crate) steps: u64,
    pub(crate) last_step_ms: Option<f64>,
}

/// The allocator statistics of one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocTrack {
    pub(crate) first_t: f64,
    pub(crate) last_t: f64,
    pub(crate) allocated_env: Envelope,
    pub(crate) reserved_env: Envelope,
    pub(crate) allocated: RegimeSeries,
    pub(crate) reserved: RegimeSeries,
    /// (t, reserved peak - allocated peak) per window: the cache's size.
    pub(crate) gap: VecDeque<(f64, f64)>,
    pub(crate) allocated_last: u64,
    pub(crate) reserved_last: u64,
    pub(crate) inactive_split: u64,
    pub(crate) retries: u64,
    /// Whether any report carried `num_alloc_retries`.
    pub(crate) retries_known: bool,
    /// `num_alloc_retries` at each recent window close, newest last.
    pub(crate) retry_history: VecDeque<u64>,
    pub(crate) retry_streak: u32,
    pub(crate) ooms: u64,
    /// The first minutes' watch on `peak_allocated`: live tensors that keep
    /// reaching new highs at a steady rate once the start-up ramp is over.
    /// `peak_allocated` at each closed window since its last reset, when
    /// the hook reports it: a leak keeps making new highs.
    pub(crate) peak_history: VecDeque<(f64, u64)>,
    pub(crate) early: EarlyWatch,
}

impl GpuTrack {
    /// Who an OOM on this GPU is about: its ranks, or the GPU when it has none.
    pub(super) fn oom_subjects(&self, node: &str, gpu: u32) -> Vec<Subject> {
        if self.ranks.is_empty() {
            return vec![Subject::Gpu(node.to_owned(), gpu)];
        }
        self.ranks
            .iter()
            .map(|(j, r, _)| Subject::Rank(j.clone(), *r))
            .collect()
    }

    pub(crate) fn new(t: f64, uuid: &str, name: &str, total: u64, window_s: f64) -> Self {
        Self {
            uuid: uuid.to_owned(),
            name: name.to_owned(),
            total,
            first_t: t,
            last_t: t,
            samples: 0,
            used_sum: 0.0,
            used_peak: 0,
            used_last: 0,
            util_sum: 0.0,
            util_samples: 0,
            util_last: None,
            clock_mhz: None,
            power_w: None,
            active_since: None,
            envelope: Envelope::new(window_s),
            regime: RegimeSeries::new(),
            ranks: Vec::new(),
            forecast: None,
            risk: Risk::None,
            oom_latch: Latch::default(),
            growing: false,
            early: EarlyWatch::default(),
            level_messages: NotState::default(),
        }
    }
}

impl JobTrack {
    pub(crate) fn new(t: f64, world_size: u32) -> Self {
        Self {
            world_size,
            first_t: t,
            last_t: t,
            ended_t: None,
            ranks: BTreeMap::new(),
            straggler: StragglerTracker::default(),
            imbalance_window: i64::MIN,
            markers: VecDeque::new(),
        }
    }

    /// Live ranks, or every rank once the job has ended.
    pub(crate) fn live_ranks(&self) -> usize {
        self.ranks.values().filter(|r| r.ended_t.is_none()).count()
    }
}

impl RankTrack {
    pub(crate) fn new(t: f64, window_s: f64) -> Self {
        Self {
            local_rank: 0,
            node: None,
            gpu: None,
            pid: 0,
            first_t: t,
            last_t: t,
            ended_t: None,
            memory: Envelope::new(window_s),
            levels: VecDeque::new(),
            used_peak: 0,
            used_last: 0,
            alloc: None,
            leak: Latch::default(),
            leak_rate: None,
            fragmentation: Latch::default(),
            imbalance: Latch::default(),
            steps: 0,
            last_step_ms: None,
        }
    }
}

impl AllocTrack {
    pub(crate) fn new(t: f64, window_s: f64) -> Self {
        Self {
            first_t: t,
            last_t: t,
            allocated_env: Envelope::new(window_s),
            reserved_env: Envelope::new(window_s),
            allocated: RegimeSeries::new(),
            reserved: RegimeSeries::new(),
            gap: VecDeque::new(),
            allocated_last: 0,
            reserved_last: 0,
            inactive_split: 0,
            retries: 0,
            retries_known: false,
            retry_history: VecDeque::new(),
            retry_streak: 0,
            ooms: 0,
            peak_history: VecDeque::new(),
            early: EarlyWatch::default(),
        }
    }
}
