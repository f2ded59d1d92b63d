//! Samples and windows: what an agent measures on a GPU and what it sends.
//!
//! An agent reads every GPU at a fixed interval ([`GpuSample`]) and folds the
//! samples of one window into a [`GpuWindow`]: min, max, last and mean of each
//! series, so the peak envelope survives downsampling (OOM happens at the peak,
//! not at the mean).

use serde::{Deserialize, Serialize};

/// Static facts about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML's UUID, e.g. `GPU-5c0a…`; the stable identity of the device.
    pub uuid: String,
    /// NVML's device index on its node.
    pub index: u32,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Total device memory in bytes.
    pub total_bytes: u64,
}

/// The torchrun job and rank that own a process, from its environment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankInfo {
    /// `TORCHELASTIC_RUN_ID`, or `MASTER_ADDR:MASTER_PORT` where that is absent.
    pub job: String,
    /// Global rank (`RANK`).
    pub rank: u32,
    /// Rank on its node (`LOCAL_RANK`); informative only, never used to pick the GPU.
    pub local_rank: u32,
    /// `WORLD_SIZE`.
    pub world_size: u32,
    /// `MASTER_ADDR`, when set.
    pub master_addr: Option<String>,
    /// `MASTER_PORT`, when set and numeric.
    pub master_port: Option<u16>,
}

/// One process on a GPU in one sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcSample {
    /// Process id, in the agent's PID namespace.
    pub pid: u32,
    /// GPU memory the process holds, bytes.
    pub used_bytes: u64,
    /// Job and rank, when the agent could attribute the process.
    pub rank: Option<RankInfo>,
}

/// One reading of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Agent wall-clock time of the reading, milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Which GPU.
    pub gpu: GpuInfo,
    /// Device memory in use, bytes (NVML `used`).
    pub used_bytes: u64,
    /// Memory the driver reserves for itself, bytes, where NVML reports it.
    pub reserved_bytes: Option<u64>,
    /// GPU utilization, percent.
    pub util_pct: Option<f32>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<f32>,
    /// Board power draw, watts.
    pub power_w: Option<f32>,
    /// Compute processes on the device.
    pub procs: Vec<ProcSample>,
}

/// min / max / last / mean of a byte series over one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BytesStat {
    /// Smallest value in the window.
    pub min: u64,
    /// Largest value in the window: the peak envelope.
    pub max: u64,
    /// The window's last value.
    pub last: u64,
    /// Arithmetic mean, rounded down.
    pub mean: u64,
}

impl BytesStat {
    /// A window holding one value.
    pub fn single(v: u64) -> Self {
        Self {
            min: v,
            max: v,
            last: v,
            mean: v,
        }
    }
}

/// min / max / last / mean of a gauge over one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeStat {
    /// Smallest value in the window.
    pub min: f32,
    /// Largest value in the window.
    pub max: f32,
    /// The window's last value.
    pub last: f32,
    /// Arithmetic mean.
    pub mean: f32,
}

impl GaugeStat {
    /// True when every field is a finite number.
    pub fn is_finite(&self) -> bool {
        self.min.is_finite()
            && self.max.is_finite()
            && self.last.is_finite()
            && self.mean.is_finite()
    }
}

/// One process over one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcWindow {
    /// Process id.
    pub pid: u32,
    /// GPU memory the process held, bytes.
    pub used_bytes: BytesStat,
    /// Job and rank, when known.
    pub rank: Option<RankInfo>,
}

/// One GPU over one window of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWindow {
    /// Which GPU.
    pub gpu: GpuInfo,
    /// Time of the window's first sample, ms since the Unix epoch (agent clock).
    pub start_ms: u64,
    /// Time of the window's last sample, ms since the Unix epoch (agent clock).
    pub end_ms: u64,
    /// How many samples the window folds.
    pub samples: u32,
    /// Device memory in use, bytes.
    pub used_bytes: BytesStat,
    /// Driver-reserved memory at the window's end, bytes.
    pub reserved_bytes: Option<u64>,
    /// Utilization, percent.
    pub util_pct: Option<GaugeStat>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<GaugeStat>,
    /// Power draw, watts.
    pub power_w: Option<GaugeStat>,
    /// Processes seen in the window; a process present in only some samples is
    /// folded over those.
    pub procs: Vec<ProcWindow>,
}

/// Host RAM over one window: its highest use and the capacity, from
/// `/proc/meminfo` (used = `MemTotal` − `MemAvailable`), sampled at the
/// same ticks as the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMemory {
    /// The newest sample of the window, ms since the Unix epoch.
    pub t_ms: u64,
    /// Host RAM (`MemTotal`).
    pub total_bytes: u64,
    /// The highest RAM in use over the window.
    pub used_max_bytes: u64,
}
