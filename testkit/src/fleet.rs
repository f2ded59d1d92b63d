//! A synthetic fleet filled through `Replicated::apply` like a live
//! cluster: agents of 8 GPUs, jobs of 1,024 ranks (one per GPU), windows of
//! 2 s with a little movement in the memory used. Shared by the core's
//! `state_clone` and `state_memory` benches and memory-bound test, and the
//! coordinator's `remote_write` bench and `snapshot_memory` test.

use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_core::transition::{Command, CommandV1, Replicated};
use gpumon_proto::{BytesStat, GpuInfo, GpuWindow, ProcWindow, PushBatch, RankInfo};

const GIB: u64 = 1 << 30;
pub const GPUS_PER_AGENT: u32 = 8;
pub const RANKS_PER_JOB: u32 = 1024;
const WINDOW_MS: u64 = 2_000;
const T0_MS: u64 = 1_750_000_000_000;

pub fn window(agent: u32, index: u32, end_ms: u64, step: u64) -> GpuWindow {
    let global = agent * GPUS_PER_AGENT + index;
    let used = 20 * GIB + (step * 7 + u64::from(global) * 13) % 997 * (1 << 20);
    GpuWindow {
        gpu: GpuInfo {
            uuid: format!("GPU-{agent:05}-{index}"),
            index,
            name: "H100".into(),
            total_bytes: 80 * GIB,
        },
        start_ms: end_ms - WINDOW_MS,
        end_ms,
        samples: 4,
        used_bytes: BytesStat::single(used),
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: vec![ProcWindow {
            pid: 1000 + index,
            used_bytes: BytesStat::single(used - GIB),
            rank: Some(RankInfo {
                job: format!("job-{}", global / RANKS_PER_JOB),
                rank: global % RANKS_PER_JOB,
                local_rank: index,
                world_size: RANKS_PER_JOB,
                master_addr: None,
                master_port: None,
            }),
        }],
    }
}

pub fn push(agent: u32, step: u64) -> Command {
    let end_ms = T0_MS + (step + 1) * WINDOW_MS;
    Command::V1(CommandV1::Push(PushBatch {
        agent_id: format!("node-{agent:05}"),
        incarnation: 1,
        seq: step + 1,
        node: format!("node-{agent:05}"),
        dropped_batches: 0,
        windows: (0..GPUS_PER_AGENT)
            .map(|i| window(agent, i, end_ms, step))
            .collect(),
        hook: Vec::new(),
        acks: Vec::new(),
    }))
}

/// A state holding `gpus` GPUs with `windows` windows each.
pub fn filled(gpus: u32, windows: u64) -> Replicated {
    filled_with_progress(gpus, windows, |_| {})
}

/// [`filled`], calling `progress` with the windows applied per GPU so far
/// every 128 of them.
pub fn filled_with_progress(gpus: u32, windows: u64, mut progress: impl FnMut(u64)) -> Replicated {
    let limits = Limits {
        max_gpus: 65_536,
        max_ranks: 65_536,
        max_agents: 8_192,
        ..Limits::default()
    };
    let engine = EngineConfig {
        max_gpus: 65_536,
        ..EngineConfig::default()
    };
    let mut state = Replicated::new(limits, &engine);
    let agents = gpus / GPUS_PER_AGENT;
    for step in 0..windows {
        for agent in 0..agents {
            state.apply(push(agent, step), false);
        }
        if (step + 1) % 128 == 0 {
            progress(step + 1);
        }
    }
    state
}
