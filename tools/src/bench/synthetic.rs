//! What one simulated agent sends: its hello and its windows.
//!
//! Everything here is a pure function of the agent's index, the GPU, the
//! window period's number and the run's start time, so an agent keeps no
//! buffer of windows: a backlog is a range of period numbers, generated
//! when it is pushed. That is why the load does not come from the agent's
//! simulator ([`gpumon_agent::source::sim`]), which models a training job
//! sample by sample in time order and would make the bench measure its own
//! client; the noise and the GPU's capacity do come from it. The numbers are plausible for a training job, so the
//! coordinator's analysis engine does its real work: memory oscillating
//! slowly between about 42 and 58 GiB of 80 GiB with a spread inside each
//! window, utilization, SM clock and power gauges, and one process per GPU
//! that holds a rank of a torchrun-like job of up to [`crate::args::bench::AGENTS_PER_JOB`] agents
//! (or `agents_per_job`). With `step_ms`, every rank also reports a training
//! step that often, as its hook would, with the automatic anatomy's sections
//! and its peer group: the straggler detector scores every step of every job.

use std::f64::consts::TAU;
use std::ops::Range;

use gpumon_agent::source::sim::rng::unit;
use gpumon_agent::source::sim::GPU_TOTAL_BYTES;
use gpumon_proto::{
    BytesStat, GaugeStat, GpuInfo, GpuWindow, Hello, HookRecord, ProcWindow, PushBatch, RankInfo,
    StepRecord,
};

const GIB: f64 = (1u64 << 30) as f64;
/// Memory a GPU holds beyond its one process (CUDA context, other users).
const NON_PROCESS_BYTES: u64 = 512 << 20;
/// Period of the slow memory oscillation, seconds.
const OSCILLATION_S: f64 = 120.0;

/// The fixed shape of every simulated agent in a run.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Simulated agents (nodes).
    pub agents: usize,
    /// GPUs per agent.
    pub gpus: u32,
    /// Readings folded into each window, at least 1.
    pub samples_per_window: u32,
    /// Window period, ms.
    pub window_ms: u64,
    /// Wall-clock time of period 0's start for agent 0, ms since the Unix epoch.
    pub t0_ms: u64,
    /// Agents per job.
    pub agents_per_job: usize,
    /// Each rank's step, ms; 0: no step records.
    pub step_ms: u64,
}

impl Shape {
    /// Agent `index`'s start offset within the first period, ms: agents are
    /// staggered evenly over one window period.
    pub fn offset_ms(&self, index: usize) -> u64 {
        (index as u128 * u128::from(self.window_ms) / self.agents.max(1) as u128) as u64
    }
}

/// One simulated agent's identity and GPUs.
#[derive(Debug)]
pub struct SimAgent {
    shape: Shape,
    index: usize,
    agent_id: String,
    node: String,
    gpus: Vec<GpuInfo>,
    ranks: Vec<RankInfo>,
}

impl SimAgent {
    /// Agent number `index` (from 0) of a run shaped `shape`.
    pub fn new(shape: Shape, index: usize) -> Self {
        let per_job = shape.agents_per_job.max(1);
        let job = index / per_job;
        let first = job * per_job;
        let agents_in_job = (shape.agents - first).min(per_job) as u32;
        let world_size = agents_in_job * shape.gpus;
        let gpus = (0..shape.gpus)
            .map(|g| GpuInfo {
                uuid: format!("GPU-bench-{index}-{g}"),
                index: g,
                name: "bench".into(),
                total_bytes: GPU_TOTAL_BYTES,
            })
            .collect();
        let ranks = (0..shape.gpus)
            .map(|g| RankInfo {
                job: format!("bench-job-{job}"),
                rank: (index - first) as u32 * shape.gpus + g,
                local_rank: g,
                world_size,
                master_addr: Some(format!("bench-node-{first}")),
                master_port: Some(29500),
            })
            .collect();
        Self {
            shape,
            index,
            agent_id: format!("bench-agent-{index}"),
            node: format!("bench-node-{index}"),
            gpus,
            ranks,
        }
    }

    /// The agent's hello for `incarnation`.
    pub fn hello(&self, incarnation: u64) -> Hello {
        Hello {
            agent_id: self.agent_id.clone(),
            incarnation,
            node: self.node.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            source: "bench".into(),
            gpus: self.gpus.clone(),
        }
    }

    /// A batch carrying every GPU's window of each period in `periods`, in
    /// order, and the steps its ranks ended in those periods.
    pub fn batch(&self, incarnation: u64, seq: u64, periods: Range<u64>) -> PushBatch {
        let hook = self.steps(periods.clone());
        let windows = periods
            .flat_map(|k| (0..self.shape.gpus).map(move |g| (k, g)))
            .map(|(k, g)| self.window(g, k))
            .collect();
        PushBatch {
            agent_id: self.agent_id.clone(),
            incarnation,
            seq,
            node: self.node.clone(),
            dropped_batches: 0,
            windows,
            hook,
            acks: Vec::new(),
        }
    }

    /// The step records of every rank whose step ended in `periods`: step
    /// `n` of every job ends `n` steps after the run's start, so a step is
    /// in exactly one batch of each agent.
    fn steps(&self, periods: Range<u64>) -> Vec<HookRecord> {
        let s = self.shape;
        if s.step_ms == 0 || periods.is_empty() {
            return Vec::new();
        }
        let at = |k: u64| s.offset_ms(self.index) + k * s.window_ms;
        let (from, to) = (at(periods.start), at(periods.end));
        let first = from.div_ceil(s.step_ms).max(1);
        let mut out = Vec::new();
        for n in (first..).take_while(|n| n * s.step_ms < to) {
            for rank in &self.ranks {
                out.push(HookRecord::Step(self.step(rank, n)));
            }
        }
        out
    }

    /// Rank `rank`'s step `n`: a step of `step_ms` split as the hook's
    /// automatic anatomy splits it, a little noise in each part.
    fn step(&self, rank: &RankInfo, n: u64) -> StepRecord {
        let s = self.shape;
        let step_ms = s.step_ms as f64;
        let noise = |draw: u64| 1.0 + 0.04 * (unit(&[u64::from(rank.rank), n, draw]) - 0.5);
        let own = [
            ("data", 0.05),
            ("forward", 0.25),
            ("backward", 0.45),
            ("optimizer", 0.05),
        ];
        let mut sections: Vec<(String, f64)> = own
            .iter()
            .zip(0..)
            .map(|(&(name, share), draw)| (name.to_owned(), step_ms * share * noise(draw)))
            .collect();
        let busy: f64 = sections.iter().map(|(_, ms)| ms).sum();
        sections.push(("comm_wait".to_owned(), (step_ms - busy).max(0.0)));
        StepRecord {
            t_ms: s.t0_ms + n * s.step_ms,
            job: rank.job.clone(),
            rank: rank.rank,
            step: n,
            duration_ms: step_ms,
            sections,
            group: Some(0),
            waits: Default::default(),
            collectives: Vec::new(),
        }
    }

    /// GPU `g`'s window of period `k`.
    pub fn window(&self, g: u32, k: u64) -> GpuWindow {
        let s = self.shape;
        let start_ms = s.t0_ms + s.offset_ms(self.index) + k * s.window_ms;
        let n = u64::from(s.samples_per_window);
        // The last of n evenly spaced readings.
        let end_ms = start_ms + (n - 1) * s.window_ms / n;
        let (agent, gpu) = (self.index as u64, u64::from(g));
        // Per GPU: its phase and level; per window: its spread and gauges.
        let noise = |draw: u64| unit(&[agent, gpu, k, draw]);
        let t_s = (k * s.window_ms) as f64 / 1000.0;
        let phase = unit(&[agent, gpu, 0]) * TAU;
        let level = 50.0 * GIB
            + (unit(&[agent, gpu, 1]) - 0.5) * 4.0 * GIB
            + 5.0 * GIB * (TAU * t_s / OSCILLATION_S + phase).sin();
        let used = if n == 1 {
            BytesStat::single(level as u64)
        } else {
            spread(level, noise(0) * GIB, noise(1) * GIB, noise(2))
        };
        let util = 70.0 + 30.0 * noise(3) as f32;
        let clock = 1700.0 + 280.0 * noise(4) as f32;
        let power = 400.0 + 300.0 * noise(5) as f32;
        let wobble = if n == 1 { 0.0 } else { noise(6) as f32 };
        let proc_used = BytesStat {
            min: used.min - NON_PROCESS_BYTES,
            max: used.max - NON_PROCESS_BYTES,
            last: used.last - NON_PROCESS_BYTES,
            mean: used.mean - NON_PROCESS_BYTES,
        };
        GpuWindow {
            gpu: self.gpus[g as usize].clone(),
            start_ms,
            end_ms,
            samples: s.samples_per_window,
            used_bytes: used,
            reserved_bytes: Some(NON_PROCESS_BYTES / 2),
            util_pct: Some(gauge(util, 5.0 * wobble, 100.0)),
            sm_clock_mhz: Some(gauge(clock, 30.0 * wobble, 1980.0)),
            power_w: Some(gauge(power, 40.0 * wobble, 700.0)),
            procs: vec![ProcWindow {
                pid: 4000 + g,
                used_bytes: proc_used,
                rank: Some(self.ranks[g as usize].clone()),
            }],
        }
    }
}

/// min = level - below, max = level + above, mean = level, last at
/// `last_frac` of the way from min to max.
fn spread(level: f64, below: f64, above: f64, last_frac: f64) -> BytesStat {
    let mean = level as u64;
    let min = mean - below as u64;
    let max = mean + above as u64;
    BytesStat {
        min,
        max,
        last: min + ((max - min) as f64 * last_frac) as u64,
        mean,
    }
}

/// A gauge centered on `mean`, `width` either side, capped at `cap` (which
/// `mean` never exceeds), so min <= mean <= max and min <= last <= max.
fn gauge(mean: f32, width: f32, cap: f32) -> GaugeStat {
    let mean = mean.min(cap);
    GaugeStat {
        min: mean - width,
        max: (mean + width).min(cap),
        last: mean,
        mean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_core::cluster::{Cluster, Limits};

    fn shape(agents: usize, gpus: u32, samples: u32) -> Shape {
        Shape {
            agents,
            gpus,
            samples_per_window: samples,
            window_ms: 250,
            t0_ms: 1_700_000_000_000,
            agents_per_job: crate::args::bench::AGENTS_PER_JOB,
            step_ms: 0,
        }
    }

    #[test]
    fn every_rank_reports_each_step_once_across_its_batches() {
        let s = Shape {
            step_ms: 400,
            agents_per_job: 4,
            ..shape(4, 2, 5)
        };
        for i in 0..4 {
            let a = SimAgent::new(s, i);
            // Periods of 250 ms: 0..8 is 2 s, steps 1 to 5 for every agent
            // whatever its offset (steps end at 400 ms, 800 ms, ...).
            let mut steps: Vec<(u32, u64)> = [0..3, 3..4, 4..8]
                .into_iter()
                .flat_map(|p| a.batch(1, 1, p).hook)
                .map(|r| match r {
                    HookRecord::Step(st) => {
                        assert_eq!(st.job, "bench-job-0");
                        assert!(
                            st.sections.iter().map(|(_, ms)| ms).sum::<f64>() <= 400.0 * 1.0001
                        );
                        (st.rank, st.step)
                    }
                    other => panic!("{other:?}"),
                })
                .collect();
            steps.sort_unstable();
            // The agent's 2 s run from its offset: steps 1 to 4, and 5 once
            // the offset carries it past 2 s.
            let last = (s.offset_ms(i) + 2000 - 1) / 400;
            let want: Vec<(u32, u64)> = [2 * i as u32, 2 * i as u32 + 1]
                .iter()
                .flat_map(|&r| (1..=last).map(move |n| (r, n)))
                .collect();
            assert_eq!(steps, want, "agent {i}");
        }
    }

    #[test]
    fn windows_are_consistent_and_plausible() {
        for samples in [1, 5, 40] {
            let s = shape(40, 8, samples);
            for i in [0, 17, 39] {
                let a = SimAgent::new(s, i);
                for g in 0..8 {
                    let mut last_end = 0;
                    for k in 0..600 {
                        let w = a.window(g, k);
                        let u = w.used_bytes;
                        assert!(u.min <= u.mean && u.mean <= u.max, "{u:?}");
                        assert!(u.min <= u.last && u.last <= u.max, "{u:?}");
                        assert!(u.min >= 40 << 30 && u.max <= 60 << 30, "{u:?}");
                        for gs in [w.util_pct, w.sm_clock_mhz, w.power_w] {
                            let gs = gs.unwrap();
                            assert!(gs.min <= gs.mean && gs.mean <= gs.max, "{gs:?}");
                            assert!(gs.min <= gs.last && gs.last <= gs.max, "{gs:?}");
                        }
                        assert_eq!(w.samples, samples);
                        assert!(w.start_ms <= w.end_ms && w.end_ms < w.start_ms + 250);
                        assert!(w.start_ms > last_end || k == 0, "windows do not overlap");
                        last_end = w.end_ms;
                        let p = &w.procs[0];
                        assert!(p.used_bytes.max <= u.max && p.used_bytes.min <= p.used_bytes.mean);
                    }
                }
            }
        }
    }

    #[test]
    fn the_coordinators_view_applies_every_window() {
        let s = shape(20, 8, 5);
        let mut state = Cluster::new(Limits::default());
        for i in 0..20 {
            let a = SimAgent::new(s, i);
            state.apply_hello(&a.hello(9));
            let out = state.apply_push(&a.batch(9, 1, 0..30));
            assert_eq!((out.windows_applied, out.windows_skipped), (240, 0));
        }
        let jobs = state.jobs_view();
        assert_eq!(jobs.jobs.len(), 2);
        assert_eq!(jobs.jobs[0].world_size, 128);
        assert_eq!(jobs.jobs[0].ranks.len(), 128);
        assert_eq!(state.nodes_view().nodes.len(), 20);
    }

    #[test]
    fn ranks_form_jobs_of_several_agents() {
        let s = shape(20, 4, 5);
        let last = SimAgent::new(s, 19).window(3, 0);
        let r = last.procs[0].rank.clone().unwrap();
        assert_eq!(r.job, "bench-job-1");
        // Agents 16..20 make the second job: 4 agents x 4 GPUs.
        assert_eq!((r.rank, r.world_size), (15, 16));
        let first = SimAgent::new(s, 0).window(0, 0).procs[0]
            .rank
            .clone()
            .unwrap();
        assert_eq!(
            (first.job.as_str(), first.rank, first.world_size),
            ("bench-job-0", 0, 64)
        );
        assert_eq!(last.gpu.uuid, "GPU-bench-19-3");
        assert_eq!(last.gpu.total_bytes, 80 << 30);
    }

    #[test]
    fn agents_are_staggered_over_one_period() {
        let s = shape(8, 1, 5);
        let offsets: Vec<u64> = (0..8).map(|i| s.offset_ms(i)).collect();
        assert_eq!(offsets, vec![0, 31, 62, 93, 125, 156, 187, 218]);
    }

    #[test]
    fn a_batch_holds_every_gpu_of_every_period_in_order() {
        let a = SimAgent::new(shape(2, 3, 5), 1);
        let b = a.batch(7, 4, 2..5);
        assert_eq!(
            (b.agent_id.as_str(), b.node.as_str()),
            ("bench-agent-1", "bench-node-1")
        );
        assert_eq!((b.incarnation, b.seq), (7, 4));
        assert_eq!(b.windows.len(), 9);
        let order: Vec<(u64, u32)> = b
            .windows
            .iter()
            .map(|w| (w.start_ms, w.gpu.index))
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted);
        assert_eq!(b.windows[0], a.window(0, 2));
    }
}
