//! Valid agent messages to mutate: the seeds of the fuzz targets that
//! decode the agent uplink (`gpumon-proto`) and the Raft log entries that
//! carry it (`gpumon-coordinator`). Every optional field is set in some
//! seed and every variant appears, so mutations start from every branch
//! of the decoder.

use gpumon_proto::{
    ActionAck, ActionKind, ActionOutcome, AllocRecord, AllocStats, BytesStat, CollectiveArrival,
    EventRecord, GaugeStat, GpuInfo, GpuWindow, GroupWait, Hello, HookRecord, HostMemory,
    NodeAlert, PendingAction, PodPlacement, ProcPlacement, ProcWindow, PushBatch, PushBatchV2,
    RankInfo, StepRecord,
};

pub fn gpu(index: u32) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-5c0a-{index}"),
        index,
        name: "NVIDIA H100 80GB HBM3".into(),
        total_bytes: 80 << 30,
    }
}

pub fn hello() -> Hello {
    Hello {
        agent_id: "node-7".into(),
        incarnation: 0x1234_5678_9abc,
        node: "node-7".into(),
        agent_version: "0.1.0".into(),
        source: "sim:leak".into(),
        gpus: vec![gpu(0), gpu(1)],
    }
}

fn gauge(v: f32) -> GaugeStat {
    GaugeStat {
        min: v / 2.0,
        max: v,
        last: v,
        mean: v * 0.75,
    }
}

fn window(index: u32, gauges: bool) -> GpuWindow {
    GpuWindow {
        gpu: gpu(index),
        start_ms: 1_700_000_000_000,
        end_ms: 1_700_000_002_000,
        samples: 4,
        used_bytes: BytesStat {
            min: 1 << 30,
            max: 9 << 30,
            last: 5 << 30,
            mean: 4 << 30,
        },
        reserved_bytes: gauges.then_some(512 << 20),
        util_pct: gauges.then(|| gauge(97.5)),
        sm_clock_mhz: gauges.then(|| gauge(1980.0)),
        power_w: gauges.then(|| gauge(650.0)),
        procs: vec![
            ProcWindow {
                pid: 4242,
                used_bytes: BytesStat::single(7 << 30),
                rank: Some(RankInfo {
                    job: "run-7".into(),
                    rank: 3,
                    local_rank: 3,
                    world_size: 8,
                    master_addr: Some("10.0.0.1".into()),
                    master_port: Some(29500),
                }),
            },
            ProcWindow {
                pid: 77,
                used_bytes: BytesStat::single(1 << 20),
                rank: None,
            },
        ],
    }
}

fn hook_records() -> Vec<HookRecord> {
    let stats = AllocStats {
        allocated: 5 << 30,
        reserved: 9 << 30,
        active: Some(6 << 30),
        inactive_split: Some(1 << 30),
        peak_allocated: Some(8 << 30),
        peak_reserved: Some(9 << 30),
        alloc_retries: Some(2),
        ooms: Some(0),
    };
    vec![
        HookRecord::Alloc(AllocRecord {
            limit: None,
            t_ms: 1_700_000_002_000,
            job: "run-7".into(),
            rank: 3,
            stats,
        }),
        HookRecord::Step(StepRecord {
            group: None,
            t_ms: 1_700_000_002_001,
            job: "run-7".into(),
            rank: 3,
            step: 120,
            duration_ms: 212.5,
            sections: vec![("data".into(), 12.1), ("forward".into(), 80.2)],
            waits: Vec::new(),
            collectives: Vec::new(),
        }),
        HookRecord::Step(StepRecord {
            group: Some(2),
            t_ms: 1_700_000_002_001,
            job: "run-7".into(),
            rank: 3,
            step: 121,
            duration_ms: 230.0,
            sections: vec![("forward".into(), 70.0), ("comm_wait".into(), 31.5)],
            waits: vec![
                GroupWait {
                    group: "1".into(),
                    calls: 12,
                    wait_ms: 24.0,
                },
                GroupWait {
                    group: "p2p".into(),
                    calls: 2,
                    wait_ms: 7.5,
                },
            ],
            collectives: vec![CollectiveArrival {
                group: "1".into(),
                seq: 77,
                op: "all_reduce".into(),
                entered_ms: 40.5,
                left_ms: 64.5,
                wait_ms: 24.0,
            }],
        }),
        HookRecord::Event(EventRecord {
            t_ms: 1_700_000_002_002,
            job: "run-7".into(),
            rank: 3,
            name: "before eval".into(),
            detail: Some("epoch 3".into()),
            snapshot: Some(stats),
        }),
    ]
}

fn acks() -> Vec<ActionAck> {
    vec![
        ActionAck {
            id: 4,
            t_ms: 1_700_000_002_003,
            outcome: ActionOutcome::Done {
                freed_bytes: 3 << 30,
                at_step: Some(121),
            },
            response: Some("batch size 32 -> 24".into()),
        },
        ActionAck {
            id: 5,
            t_ms: 1_700_000_002_004,
            outcome: ActionOutcome::Failed {
                reason: "no CUDA".into(),
            },
            response: None,
        },
    ]
}

/// A full batch: windows with and without gauges, every hook record kind,
/// both ack outcomes.
pub fn push() -> PushBatch {
    PushBatch {
        agent_id: "node-7".into(),
        incarnation: 0x1234_5678_9abc,
        seq: 300,
        node: "node-7".into(),
        dropped_batches: 2,
        windows: vec![window(0, true), window(1, false)],
        hook: hook_records(),
        acks: acks(),
    }
}

/// [`push`] with the placement of its rank (every field set) and of its
/// other process (one field), and the node's host memory.
pub fn placed_push() -> PushBatchV2 {
    PushBatchV2 {
        batch: push(),
        placements: vec![
            ProcPlacement {
                pid: 4242,
                placement: PodPlacement {
                    pod_uid: Some("1c3f2a4b-5d6e-4f70-8a9b-0c1d2e3f4a5b".into()),
                    pod_name: Some("run-7-worker-0".into()),
                    namespace: Some("ml".into()),
                    container_id: Some("0123456789abcdef".repeat(4)),
                    container_name: Some("pytorch".into()),
                },
            },
            ProcPlacement {
                pid: 77,
                placement: PodPlacement {
                    namespace: Some("default".into()),
                    ..PodPlacement::default()
                },
            },
        ],
        host: Some(HostMemory {
            t_ms: 1_700_000_002_000,
            total_bytes: 2 << 40,
            used_max_bytes: 1 << 40,
        }),
    }
}

/// Alerts as a coordinator hands them to an agent: one about a rank, one
/// about the host.
pub fn node_alerts() -> Vec<NodeAlert> {
    vec![
        NodeAlert {
            id: 41,
            kind: "memory_level".into(),
            severity: gpumon_proto::api::Severity::Critical,
            message: "GPU 3 on node-7 uses 96.0 % of its 80.0 GiB".into(),
            job: Some("run-7".into()),
            rank: Some(3),
            t_ms: 1_700_000_002_000,
        },
        NodeAlert {
            id: 42,
            kind: "memory_level".into(),
            severity: gpumon_proto::api::Severity::Warning,
            message: "host RAM on node-7 is 80.0 % used".into(),
            job: None,
            rank: None,
            t_ms: 1_700_000_002_000,
        },
    ]
}

/// A batch with nothing in it.
pub fn empty_push() -> PushBatch {
    PushBatch {
        agent_id: "a".into(),
        incarnation: 1,
        seq: 1,
        node: "n".into(),
        dropped_batches: 0,
        windows: vec![],
        hook: vec![],
        acks: vec![],
    }
}

/// An action as the coordinator hands it to an agent.
pub fn action() -> PendingAction {
    PendingAction {
        id: 9,
        job: "run-7".into(),
        rank: 3,
        kind: ActionKind::ReleaseCache,
        reason: "reclaimable cache 12 GiB while memory runs short".into(),
    }
}
