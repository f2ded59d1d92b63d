//! The simulator source (`gpumon agent --source sim[:SCENARIO]`): one node of
//! a torchrun job on simulated H100s, for demos and end-to-end tests.
//!
//! A [`SimSource`] plays `gpus_per_node` ranks of a job of `nodes` nodes. Each
//! rank runs a training step about once a second (the same steps on every
//! rank: ranks are synchronous), its allocations go through a model of
//! PyTorch's caching allocator, and NVML's view of it comes out: per-process
//! `used` is the allocator's reserved staircase plus a CUDA context, the GPU's
//! `used` is their sum plus a little driver memory. A [`Scenario`] puts one of
//! the anomalies gpumon detects on a known rank. Processes carry their
//! [`RankInfo`], as discovery would have filled it from their environment.
//!
//! Samples are a deterministic function of the settings and of the sequence
//! of times sampled: two sources with the same settings, sampled at the same
//! times, give equal samples, whichever node or process they run in. That is
//! what lets several simulated agents form one consistent job and lets tests
//! assert on exact values.
//!
//! With [`SimSettings::hook`], each rank also reports what gpumon's
//! in-process hook would: allocator statistics three times a step, every
//! step with its section times (the straggler's forward and backward passes
//! a quarter slower), a warm-up marker, and its OOM. They wait in a bounded
//! queue (oldest dropped and counted) for [`GpuSource::take_hook_records`].
//!
//! ```
//! use gpumon_agent::source::sim::{Scenario, SimSettings, SimSource};
//! use gpumon_agent::source::GpuSource;
//!
//! let settings = SimSettings::new(Scenario::Leak, 2, 0, 4);
//! let mut sim = SimSource::new(settings).unwrap();
//! let samples = sim.sample(1_000).unwrap();
//! assert_eq!(samples.len(), 4);
//! assert_eq!(sim.name(), "sim:leak");
//! ```

mod allocator;
mod gauges;
mod hook_reports;
mod process;
pub mod rng;
mod scenario;
mod timing;
mod workload;

pub use scenario::Scenario;

use std::collections::VecDeque;

use gpumon_proto::{GpuInfo, GpuSample, HookRecord, ProcSample, RankInfo};

use self::gauges::Activity;
use self::hook_reports::Tape;
use self::process::SimRank;
use self::rng::{fnv1a, hash};
use self::timing::Pace;
use self::workload::{Anomalies, JobParams, Workload};
use super::{GpuSource, SourceError};

const MIB: u64 = 1 << 20;

/// Product name of every simulated GPU.
pub const GPU_NAME: &str = "NVIDIA H100 80GB HBM3 (simulated)";
/// Total memory of every simulated GPU, bytes (80 GiB).
pub const GPU_TOTAL_BYTES: u64 = 85_899_345_920;
/// Memory the driver reserves on each GPU, bytes (NVML's `reserved`).
const DRIVER_RESERVED_BYTES: u64 = 512 * MIB;
/// Memory in use on each GPU outside any process, bytes.
const DRIVER_USED_BYTES: u64 = 6 * MIB;
/// Smallest CUDA context of a rank, bytes; each rank adds up to 14 MiB.
const CONTEXT_BYTES: u64 = 500 * MIB;
/// Most GPUs on one simulated node.
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// Fake pids are this plus the global rank.
const PID_BASE: u32 = 10_000;
/// `MASTER_ADDR` of every simulated job.
const MASTER_ADDR: &str = "node-0";
/// `MASTER_PORT` of every simulated job.
const MASTER_PORT: u16 = 29_500;
/// Hash stream of per-GPU noise keys (streams are numbered across the
/// simulator's files so that no two draw the same numbers).
const STREAM_GPU: u64 = 8;
/// Hash stream of CUDA context sizes.
const STREAM_CONTEXT: u64 = 9;
/// Hook records kept for [`GpuSource::take_hook_records`]; beyond, the
/// oldest are dropped and counted (about 15 s of a 16-GPU node).
pub const MAX_QUEUED_HOOK_RECORDS: usize = 1024;

/// What to simulate: the job, its shape and this node's place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSettings {
    /// Which anomaly, if any, the job shows.
    pub scenario: Scenario,
    /// Nodes in the job (at least 1).
    pub nodes: u32,
    /// This node's index, `0..nodes`; it hosts global ranks
    /// `node_index * gpus_per_node ..` `(node_index + 1) * gpus_per_node`.
    pub node_index: u32,
    /// GPUs, and ranks, per node (1 to [`MAX_GPUS_PER_NODE`]).
    pub gpus_per_node: u32,
    /// Seed of every random choice: step length, memory sizes, noise, UUIDs.
    /// Every node of one job must use the same seed.
    pub seed: u64,
    /// Job id, as `TORCHELASTIC_RUN_ID` would give it.
    pub job: String,
    /// When step 0 starts, ms since the Unix epoch; samples before it show the
    /// job loaded but not yet stepping.
    pub start_ms: u64,
    /// Whether the ranks also report what the in-process hook would (steps
    /// with section times, allocator statistics, markers).
    pub hook: bool,
}

impl SimSettings {
    /// Settings for node `node_index` of a `nodes` x `gpus_per_node` job
    /// running `scenario`, with seed 1, job `sim-job` and step 0 at time 0.
    pub fn new(scenario: Scenario, nodes: u32, node_index: u32, gpus_per_node: u32) -> Self {
        Self {
            scenario,
            nodes,
            node_index,
            gpus_per_node,
            seed: 1,
            job: "sim-job".into(),
            start_ms: 0,
            hook: false,
        }
    }

    /// Checks the settings and returns the world size.
    fn validate(&self) -> Result<u32, SourceError> {
        let bad = |msg: String| Err(SourceError::BadSimulation(msg));
        if self.nodes == 0 {
            return bad("simulator needs at least 1 node, got 0".into());
        }
        if self.node_index >= self.nodes {
            return bad(format!(
                "simulator node index {} is out of range for {} node(s): use 0..{}",
                self.node_index, self.nodes, self.nodes
            ));
        }
        if !(1..=MAX_GPUS_PER_NODE).contains(&self.gpus_per_node) {
            return bad(format!(
                "simulator GPUs per node must be 1 to {MAX_GPUS_PER_NODE}, got {}",
                self.gpus_per_node
            ));
        }
        if self.job.trim().is_empty() {
            return bad("simulator job id is empty: give the job a name".into());
        }
        match self.nodes.checked_mul(self.gpus_per_node) {
            Some(world) if world <= u32::MAX - PID_BASE => Ok(world),
            _ => bad(format!(
                "simulated world of {} nodes x {} GPUs is too large",
                self.nodes, self.gpus_per_node
            )),
        }
    }
}

/// A simulated node: [`GpuSource`] over `gpus_per_node` fake H100s, each
/// running one rank of the job in [`SimSettings`].
#[derive(Debug)]
pub struct SimSource {
    /// What is simulated.
    settings: SimSettings,
    /// Step length, ms.
    step_ms: u64,
    /// The GPUs, by local index.
    gpus: Vec<GpuInfo>,
    /// Per-GPU noise keys, by local index.
    gpu_keys: Vec<u64>,
    /// The ranks, by local index (rank `i` runs on GPU `i`).
    ranks: Vec<SimRank>,
    /// Global rank of the throttled GPU, if any.
    straggler: Option<u32>,
    /// Hook records not taken yet, oldest first (with `settings.hook`).
    hook_records: VecDeque<HookRecord>,
    /// Hook records dropped because nobody took them in time.
    hook_dropped: u64,
}

impl SimSource {
    /// A simulated node with `settings`; fails with
    /// [`SourceError::BadSimulation`] when the settings make no job (no node,
    /// node index out of range, 0 or more than 16 GPUs, empty job id).
    pub fn new(settings: SimSettings) -> Result<Self, SourceError> {
        let world_size = settings.validate()?;
        let seed = settings.seed;
        let params = JobParams::new(seed);
        let roles = settings.scenario.roles(world_size);
        let job_tag = fnv1a(&settings.job);
        let capacity = GPU_TOTAL_BYTES - DRIVER_RESERVED_BYTES - DRIVER_USED_BYTES;

        let mut gpus = Vec::new();
        let mut gpu_keys = Vec::new();
        let mut ranks = Vec::new();
        for local in 0..settings.gpus_per_node {
            let rank = settings.node_index * settings.gpus_per_node + local;
            gpus.push(GpuInfo {
                uuid: format!(
                    "GPU-sim-{seed:x}-{:08x}-n{}-g{local}",
                    job_tag as u32, settings.node_index
                ),
                index: local,
                name: GPU_NAME.into(),
                total_bytes: GPU_TOTAL_BYTES,
            });
            gpu_keys.push(hash(&[seed, STREAM_GPU, job_tag, u64::from(rank)]));
            let anomalies = Anomalies {
                leak: roles.leak == Some(rank),
                fragmentation: roles.fragmentation == Some(rank),
                imbalance: roles.imbalance == Some(rank),
            };
            let info = RankInfo {
                job: settings.job.clone(),
                rank,
                local_rank: local,
                world_size,
                master_addr: Some(MASTER_ADDR.into()),
                master_port: Some(MASTER_PORT),
            };
            let context =
                CONTEXT_BYTES + hash(&[seed, STREAM_CONTEXT, u64::from(rank)]) % 8 * 2 * MIB;
            let workload = Workload::new(seed, rank, &params, anomalies);
            ranks.push(
                SimRank::new(info, PID_BASE + rank, context, workload, capacity)
                    .pace(Pace::of(rank, roles.straggler)),
            );
        }
        Ok(Self {
            step_ms: params.step_ms,
            settings,
            gpus,
            gpu_keys,
            ranks,
            straggler: roles.straggler,
            hook_records: VecDeque::new(),
            hook_dropped: 0,
        })
    }

    /// Hook records dropped so far because they were not taken before
    /// [`MAX_QUEUED_HOOK_RECORDS`] newer ones piled up.
    pub fn dropped_hook_records(&self) -> u64 {
        self.hook_dropped
    }

    /// Queues a sample's hook records, in time order, within the bound.
    fn queue(&mut self, mut records: Vec<HookRecord>) {
        // Stable: each rank's records keep their order.
        records.sort_by_key(HookRecord::t_ms);
        for r in records {
            if self.hook_records.len() == MAX_QUEUED_HOOK_RECORDS {
                self.hook_records.pop_front();
                self.hook_dropped += 1;
            }
            self.hook_records.push_back(r);
        }
    }
}

impl GpuSource for SimSource {
    fn name(&self) -> String {
        format!("sim:{}", self.settings.scenario.name())
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        self.gpus.clone()
    }

    fn sample(&mut self, t_ms: u64) -> Result<Vec<GpuSample>, SourceError> {
        let elapsed = t_ms.saturating_sub(self.settings.start_ms);
        let step_fraction = (elapsed % self.step_ms) as f64 / self.step_ms as f64;
        let mut samples = Vec::with_capacity(self.ranks.len());
        let mut tape = self.settings.hook.then(|| Tape {
            start_ms: self.settings.start_ms,
            records: Vec::new(),
        });
        for ((gpu, key), rank) in self.gpus.iter().zip(&self.gpu_keys).zip(&mut self.ranks) {
            rank.advance(elapsed, tape.as_mut());
            let mut procs = Vec::new();
            let activity = if !rank.alive() {
                Activity::Idle
            } else {
                procs.push(ProcSample {
                    pid: rank.pid,
                    used_bytes: rank.used_bytes(),
                    rank: Some(rank.info.clone()),
                });
                if self.straggler == Some(rank.info.rank) {
                    Activity::Throttled
                } else {
                    Activity::Training
                }
            };
            let used: u64 = procs.iter().map(|p| p.used_bytes).sum();
            // NVML: used + reserved + free = total.
            let used = (used + DRIVER_USED_BYTES).min(GPU_TOTAL_BYTES - DRIVER_RESERVED_BYTES);
            let g = gauges::read(*key, t_ms, step_fraction, activity);
            samples.push(GpuSample {
                t_ms,
                gpu: gpu.clone(),
                used_bytes: used,
                reserved_bytes: Some(DRIVER_RESERVED_BYTES),
                util_pct: Some(g.util_pct),
                sm_clock_mhz: Some(g.sm_clock_mhz),
                power_w: Some(g.power_w),
                procs,
            });
        }
        if let Some(tape) = tape {
            self.queue(tape.records);
        }
        Ok(samples)
    }

    fn take_hook_records(&mut self) -> Vec<HookRecord> {
        self.hook_records.drain(..).collect()
    }
}

#[cfg(test)]
mod tests;
