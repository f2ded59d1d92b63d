//! A fleet of simulated agents running a stream of short training jobs,
//! for the soak (`tests/soak.rs`, issue 28 item 13).
//!
//! The soak advances in rounds. In each round every agent that is alive
//! sends one push of [`STEP_MS`] of data time: a window per GPU (all
//! agents at the same `end_ms`, so the cluster's data clock moves as one)
//! and a step record per running rank. Each agent has [`GPUS`] GPUs cut
//! into [`SLOTS`] slots of [`RANKS`] GPUs; a slot runs one job at a time,
//! one rank per GPU, for `job_rounds` rounds, then leaves its GPUs empty
//! for a round (the processes left: the job ends) and starts the next job
//! under a new name. Slots start staggered, so jobs end in most rounds.
//!
//! An agent can be silenced: it stops pushing without a word (its jobs die
//! unseen, never ended by a window) and, when its silence is over, comes
//! back as a new incarnation (a hello, `seq` from 1) and starts new jobs;
//! or it is replaced: a new machine in its place, with a new agent id,
//! node name and GPU uuids (the old ones are never heard of again, and
//! only expiry takes them out of the view). Replacements take their names
//! from a ring of [`GENERATIONS`] per place, so the names a token must be
//! bound to are known in advance ([`agent_names`]).
//!
//! A probe is a job like the others with two planted problems: rank
//! [`LEAK_RANK`] leaks [`LEAK_BYTES_PER_S`] per data-second, and rank
//! [`SLOW_RANK`]'s `forward` takes 30 % longer than its peers'. Probes run
//! on agent 0, slot 0 (agent 0 is never silenced), so the first and the
//! last probe see the same neighbours and are judged alike.
//!
//! Everything is a pure function of the round and the schedule: memory
//! steady at 20 GiB of an 80 GiB GPU (plus the leak), steps of 2 s with up
//! to 3 % of deterministic jitter per section.

use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GpuInfo, GpuWindow, Hello, HookRecord, ProcWindow,
    PushBatch, RankInfo, StepRecord,
};

/// Data time of one round (one push per agent), ms.
pub const STEP_MS: u64 = 2_000;
/// GPUs per agent.
pub const GPUS: u32 = 8;
/// Ranks per job, one per GPU.
pub const RANKS: u32 = 4;
/// Jobs an agent runs at once.
pub const SLOTS: u32 = GPUS / RANKS;
/// The probe's leaking rank.
pub const LEAK_RANK: u32 = 1;
/// The probe's slow rank.
pub const SLOW_RANK: u32 = 2;
/// How fast the probe's leaking rank grows, bytes per data-second.
pub const LEAK_BYTES_PER_S: u64 = 40 * MIB;

/// Names of replacements per agent place, reused in turn.
pub const GENERATIONS: u32 = 16;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const GPU_BYTES: u64 = 80 * GIB;
/// What an empty GPU shows in use (the driver's own).
const IDLE_BYTES: u64 = 300 * MIB;
/// A rank's steady peak.
const RANK_BYTES: u64 = 20 * GIB;
/// The step's transient allocations: the trough sits this far below the peak.
const STEP_SWING: u64 = 512 * MIB;
/// What the GPU holds beyond its processes (the CUDA context).
const OVERHEAD: u64 = GIB;
/// Section times of a step, ms; the slow rank's forward is 30 % longer.
const DATA_MS: f64 = 40.0;
const FORWARD_MS: f64 = 600.0;
const BACKWARD_MS: f64 = 1_200.0;
const SLOW_FACTOR: f64 = 1.3;

/// One job of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its number, 0 for the first job started.
    pub n: u64,
    /// The round of its first window.
    pub start_round: u64,
    /// Whether it carries the planted leak and straggler.
    pub probe: bool,
}

impl Job {
    /// The job's name (`job-000042`).
    pub fn name(&self) -> String {
        job_name(self.n)
    }
}

/// The name of job `n`.
pub fn job_name(n: u64) -> String {
    format!("job-{n:06}")
}

#[derive(Debug, Clone, Default)]
struct Slot {
    job: Option<Job>,
    /// First round a new job may start in.
    free_from: u64,
}

/// One simulated agent.
#[derive(Debug, Clone)]
struct Agent {
    /// How many times this place's machine was replaced.
    generation: u32,
    /// Replaced (not only restarted) when its silence ends.
    replace: bool,
    incarnation: u64,
    /// Last seq handed out in this incarnation.
    seq: u64,
    slots: Vec<Slot>,
    /// Silent (no pushes) until this round.
    silent_until: Option<u64>,
    needs_hello: bool,
}

/// What the fleet did in one round, besides the pushes.
#[derive(Debug, Default)]
pub struct RoundEvents {
    /// Probes whose last window was in this round.
    pub probes_done: Vec<Job>,
}

/// The fleet; see the module docs.
#[derive(Debug)]
pub struct Fleet {
    job_rounds: u64,
    base_ms: u64,
    agents: Vec<Agent>,
    next_job: u64,
    probe_pending: bool,
    /// Jobs started, ended by their windows, and lost with a silenced agent.
    pub started: u64,
    pub ended: u64,
    pub abandoned: u64,
    /// Agents silenced, come back as a new incarnation, and replaced.
    pub silenced: u64,
    pub returned: u64,
    pub replaced: u64,
}

impl Fleet {
    /// `agents` agents whose jobs each run `job_rounds` rounds, round 0 at
    /// data time `base_ms`.
    pub fn new(agents: u32, job_rounds: u64, base_ms: u64) -> Self {
        let stagger = (job_rounds + 1) / u64::from(agents * SLOTS);
        let agents = (0..agents)
            .map(|a| Agent {
                generation: 0,
                replace: false,
                incarnation: 1,
                seq: 0,
                slots: (0..SLOTS)
                    .map(|s| Slot {
                        job: None,
                        free_from: u64::from(a * SLOTS + s) * stagger,
                    })
                    .collect(),
                silent_until: None,
                needs_hello: true,
            })
            .collect();
        Self {
            job_rounds,
            base_ms,
            agents,
            next_job: 0,
            probe_pending: false,
            started: 0,
            ended: 0,
            abandoned: 0,
            silenced: 0,
            returned: 0,
            replaced: 0,
        }
    }

    /// Data time of the windows of `round`, ms.
    pub fn end_ms(&self, round: u64) -> u64 {
        self.base_ms + round * STEP_MS
    }

    /// The next job agent 0's slot 0 starts is a probe.
    pub fn plant_probe(&mut self) {
        self.probe_pending = true;
    }

    /// Whether a planted probe has not started yet.
    pub fn probe_pending(&self) -> bool {
        self.probe_pending
    }

    /// Agent `a` stops pushing from `round` for `rounds` rounds, then comes
    /// back as a new incarnation (or, with `replace`, a new machine takes
    /// its place); its running jobs are lost unseen.
    pub fn silence(&mut self, a: u32, round: u64, rounds: u64, replace: bool) {
        assert_ne!(a, 0, "agent 0 runs the probes and is never silenced");
        let agent = &mut self.agents[a as usize];
        if agent.silent_until.is_some() {
            return;
        }
        for slot in &mut agent.slots {
            if slot.job.take().is_some() {
                self.abandoned += 1;
            }
        }
        agent.silent_until = Some(round + rounds);
        agent.replace = replace;
        self.silenced += 1;
    }

    /// Whether agent `a` is silent now.
    pub fn is_silent(&self, a: u32) -> bool {
        self.agents[a as usize].silent_until.is_some()
    }

    /// The messages of `round`, per agent in order (a hello first when the
    /// agent starts or comes back): `(agent, messages)`. Agents are pushed
    /// concurrently, each agent's messages one after the other.
    pub fn round(&mut self, round: u64) -> (Vec<(u32, Vec<AgentMessage>)>, RoundEvents) {
        let end_ms = self.end_ms(round);
        let mut events = RoundEvents::default();
        let mut out = Vec::new();
        for a in 0..self.agents.len() as u32 {
            let agent = &mut self.agents[a as usize];
            match agent.silent_until {
                Some(until) if round < until => continue,
                Some(_) => {
                    agent.silent_until = None;
                    if std::mem::take(&mut agent.replace) {
                        agent.generation += 1;
                        self.replaced += 1;
                    }
                    agent.incarnation += 1;
                    agent.seq = 0;
                    agent.needs_hello = true;
                    for slot in &mut agent.slots {
                        slot.free_from = round;
                    }
                    self.returned += 1;
                }
                None => {}
            }
            let mut msgs = Vec::new();
            if agent.needs_hello {
                agent.needs_hello = false;
                msgs.push(hello(a, agent.generation, agent.incarnation));
            }
            let mut windows = Vec::with_capacity(GPUS as usize);
            let mut hook = Vec::new();
            for s in 0..SLOTS {
                let slot = &mut agent.slots[s as usize];
                if let Some(job) = &slot.job {
                    if round >= job.start_round + self.job_rounds {
                        if job.probe {
                            events.probes_done.push(job.clone());
                        }
                        slot.job = None;
                        slot.free_from = round + 1;
                        self.ended += 1;
                    }
                }
                if slot.job.is_none() && round >= slot.free_from {
                    let probe = a == 0 && s == 0 && std::mem::take(&mut self.probe_pending);
                    slot.job = Some(Job {
                        n: self.next_job,
                        start_round: round,
                        probe,
                    });
                    self.next_job += 1;
                    self.started += 1;
                }
                for r in 0..RANKS {
                    let g = s * RANKS + r;
                    let running = slot.job.as_ref();
                    let gpu = gpu(a, agent.generation, g);
                    windows.push(window(gpu, end_ms, running.map(|j| (j, r, round))));
                    if let Some(job) = running {
                        hook.push(step(job, r, round, end_ms));
                    }
                }
            }
            agent.seq += 1;
            msgs.push(AgentMessage::V1(AgentMessageV1::Push(PushBatch {
                agent_id: agent_id(a, agent.generation),
                incarnation: agent.incarnation,
                seq: agent.seq,
                node: node(a, agent.generation),
                dropped_batches: 0,
                windows,
                hook,
                acks: Vec::new(),
            })));
            out.push((a, msgs));
        }
        (out, events)
    }
}

/// The id of the agent in place `a` after `generation` replacements.
pub fn agent_id(a: u32, generation: u32) -> String {
    format!("agent-{a}-g{}", generation % GENERATIONS)
}

/// The node of the agent in place `a` after `generation` replacements.
pub fn node(a: u32, generation: u32) -> String {
    format!("node-{a}-g{}", generation % GENERATIONS)
}

/// Every agent id and node name `agents` places may push as.
pub fn agent_names(agents: u32) -> Vec<String> {
    (0..agents)
        .flat_map(|a| (0..GENERATIONS).flat_map(move |g| [agent_id(a, g), node(a, g)]))
        .collect()
}

fn gpu(a: u32, generation: u32, g: u32) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-{a}-g{}-{g}", generation % GENERATIONS),
        index: g,
        name: "NVIDIA H100 80GB HBM3".into(),
        total_bytes: GPU_BYTES,
    }
}

fn hello(a: u32, generation: u32, incarnation: u64) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: agent_id(a, generation),
        incarnation,
        node: node(a, generation),
        agent_version: "soak".into(),
        source: "test".into(),
        gpus: (0..GPUS).map(|g| gpu(a, generation, g)).collect(),
    }))
}

/// GPU `gpu`'s window ending at `end_ms`, with the rank of `running` (job,
/// rank, round) when a job runs there.
fn window(gpu: GpuInfo, end_ms: u64, running: Option<(&Job, u32, u64)>) -> GpuWindow {
    let (used, procs) = match running {
        None => (BytesStat::single(IDLE_BYTES), Vec::new()),
        Some((job, rank, round)) => {
            let age_s = (round - job.start_round) * STEP_MS / 1000;
            let leak = if job.probe && rank == LEAK_RANK {
                age_s * LEAK_BYTES_PER_S
            } else {
                0
            };
            let peak = RANK_BYTES + u64::from(rank) * 64 * MIB + leak;
            let proc = BytesStat {
                min: peak - STEP_SWING,
                max: peak,
                last: peak - STEP_SWING / 4,
                mean: peak - STEP_SWING / 2,
            };
            let used = BytesStat {
                min: proc.min + OVERHEAD,
                max: proc.max + OVERHEAD,
                last: proc.last + OVERHEAD,
                mean: proc.mean + OVERHEAD,
            };
            let proc = ProcWindow {
                // Unique per job and rank, as a new process's pid would be.
                pid: 100_000 + (job.n as u32).wrapping_mul(RANKS) + rank,
                used_bytes: proc,
                rank: Some(RankInfo {
                    job: job.name(),
                    rank,
                    local_rank: rank,
                    world_size: RANKS,
                    master_addr: None,
                    master_port: None,
                }),
            };
            (used, vec![proc])
        }
    };
    GpuWindow {
        gpu,
        start_ms: end_ms - STEP_MS + 1,
        end_ms,
        samples: 4,
        used_bytes: used,
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs,
    }
}

/// Rank `rank`'s step record of `round`: one 2 s step per round.
fn step(job: &Job, rank: u32, round: u64, end_ms: u64) -> HookRecord {
    let step = round - job.start_round + 1;
    let slow = if job.probe && rank == SLOW_RANK {
        SLOW_FACTOR
    } else {
        1.0
    };
    let key = job.n << 8 | u64::from(rank);
    HookRecord::Step(StepRecord {
        t_ms: end_ms - 100,
        job: job.name(),
        rank,
        step,
        duration_ms: STEP_MS as f64,
        sections: vec![
            ("data".into(), DATA_MS * jitter(key, step, 0)),
            ("forward".into(), FORWARD_MS * slow * jitter(key, step, 1)),
            ("backward".into(), BACKWARD_MS * jitter(key, step, 2)),
        ],
        group: None,
        waits: Vec::new(),
        collectives: Vec::new(),
    })
}

/// Deterministic, independent noise of up to +-3 % (splitmix64).
fn jitter(key: u64, step: u64, section: u64) -> f64 {
    let mut z = (key << 24 ^ step << 2 ^ section).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    1.0 + 0.06 * ((z % 1000) as f64 / 1000.0 - 0.5)
}
