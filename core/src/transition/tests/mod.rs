//! The transition as a replica and a replay both rely on it.

mod bounds;
mod settings;

use std::borrow::Cow;

use gpumon_proto::{
    AllocRecord, AllocStats, BytesStat, GpuInfo, GpuWindow, HookRecord, ProcWindow, PushBatch,
    RankInfo,
};

use super::*;
use crate::cluster::Limits;
use crate::engine::EngineConfig;
use crate::records::{AllocRef, GpuRef, ProcRecord, RankRef, RecordRef};

const GIB: u64 = 1 << 30;

pub(super) fn fresh() -> Replicated {
    Replicated::new(Limits::default(), &EngineConfig::default())
}

fn rank_info(rank: u32) -> RankInfo {
    RankInfo {
        job: "job-1".into(),
        rank,
        local_rank: rank,
        world_size: 2,
        master_addr: None,
        master_port: None,
    }
}

pub(super) fn window(index: u32, end_ms: u64, used: u64) -> GpuWindow {
    GpuWindow {
        gpu: GpuInfo {
            uuid: format!("GPU-{index}"),
            index,
            name: "H100".into(),
            total_bytes: 80 * GIB,
        },
        start_ms: end_ms,
        end_ms,
        samples: 1,
        used_bytes: BytesStat::single(used),
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: vec![ProcWindow {
            pid: 100 + index,
            used_bytes: BytesStat::single(used),
            rank: Some(rank_info(index)),
        }],
    }
}

pub(super) fn alloc(t_ms: u64, rank: u32, allocated: u64) -> HookRecord {
    HookRecord::Alloc(AllocRecord {
        limit: None,
        t_ms,
        job: "job-1".into(),
        rank,
        stats: AllocStats {
            allocated,
            reserved: allocated + GIB,
            ..AllocStats::default()
        },
    })
}

pub(super) fn push(seq: u64, windows: Vec<GpuWindow>, hook: Vec<HookRecord>) -> Command {
    Command::V1(CommandV1::Push(PushBatch {
        agent_id: "node-a".into(),
        incarnation: 1,
        seq,
        node: "node-a".into(),
        dropped_batches: 0,
        windows,
        hook,
        acks: Vec::new(),
    }))
}

#[test]
fn a_push_applies_once_and_its_resend_changes_nothing() {
    let mut r = fresh();
    let command = push(1, vec![window(0, 1_000, GIB)], vec![alloc(1_000, 0, GIB)]);
    let first = r.apply(command.clone(), false);
    assert_eq!(first.result.windows_applied, 1);
    assert!(!first.result.duplicate);
    assert_eq!(r.hook.counters().records_applied, 1);

    let again = r.apply(command, false);
    assert!(again.result.duplicate);
    assert_eq!(again.result.windows_applied, 0);
    assert_eq!(r.hook.counters().records_applied, 1, "records apply once");
    assert_eq!(r.cluster.counters().batches_duplicate, 1);
}

#[test]
fn a_push_with_placements_applies_like_a_push_and_places_its_ranks() {
    let Command::V1(CommandV1::Push(batch)) = push(1, vec![window(1, 1_000, GIB)], Vec::new())
    else {
        unreachable!()
    };
    let placement = gpumon_proto::PodPlacement {
        namespace: Some("ml".into()),
        pod_name: Some("trainer-1".into()),
        ..Default::default()
    };
    let command = Command::V1(CommandV1::PushPlaced(gpumon_proto::PushBatchV2 {
        batch: batch.clone(),
        placements: vec![gpumon_proto::ProcPlacement {
            pid: 101,
            placement: placement.clone(),
        }],
        host: None,
    }));
    let mut placed = fresh();
    let effects = placed.apply(command.clone(), true);
    assert_eq!(effects.result.windows_applied, 1);
    let [applied] = effects.applied.as_slice() else {
        panic!("one applied batch: {:?}", effects.applied)
    };
    assert_eq!(applied.windows, batch.windows);
    let job = placed.cluster.job_detail("job-1").unwrap();
    assert_eq!(job.ranks[0].view.placement, Some(placement));
    assert!(placed.apply(command, false).result.duplicate);

    // The engine saw the same window as without placements.
    let mut plain = fresh();
    plain.apply(Command::V1(CommandV1::Push(batch)), false);
    assert_eq!(
        postcard::to_allocvec(&placed.engine).unwrap(),
        postcard::to_allocvec(&plain.engine).unwrap()
    );
}

#[test]
fn a_push_is_proposed_as_the_newer_command_only_when_it_carries_something_of_it() {
    let Command::V1(CommandV1::Push(batch)) = push(1, Vec::new(), Vec::new()) else {
        unreachable!()
    };
    let plain = gpumon_proto::PushBatchV2::from(batch.clone());
    assert_eq!(CommandV1::for_push(plain.clone()), CommandV1::Push(batch));
    let host = gpumon_proto::PushBatchV2 {
        host: Some(gpumon_proto::HostMemory {
            t_ms: 1,
            total_bytes: 2,
            used_max_bytes: 1,
        }),
        ..plain.clone()
    };
    assert_eq!(
        CommandV1::for_push(host.clone()),
        CommandV1::PushPlaced(host)
    );
    let placed = gpumon_proto::PushBatchV2 {
        placements: vec![gpumon_proto::ProcPlacement {
            pid: 1,
            placement: Default::default(),
        }],
        ..plain
    };
    assert_eq!(
        CommandV1::for_push(placed.clone()),
        CommandV1::PushPlaced(placed)
    );
}

/// [`push`] with `used` of 100 GiB of host RAM at `t_ms`.
fn host_push(seq: u64, t_ms: u64, used_gib: u64) -> Command {
    let Command::V1(CommandV1::Push(batch)) = push(seq, Vec::new(), Vec::new()) else {
        unreachable!()
    };
    Command::V1(CommandV1::PushPlaced(gpumon_proto::PushBatchV2 {
        batch,
        placements: Vec::new(),
        host: Some(gpumon_proto::HostMemory {
            t_ms,
            total_bytes: 100 * GIB,
            used_max_bytes: used_gib * GIB,
        }),
    }))
}

#[test]
fn host_memory_is_kept_raises_the_host_level_once_and_resolves_when_the_node_expires() {
    use crate::engine::{AlertKind, Severity};
    let mut r = fresh();
    let host_alerts = |r: &Replicated| -> Vec<(Severity, Option<f64>)> {
        r.engine
            .alerts()
            .filter(|a| a.kind == AlertKind::MemoryLevel && a.gpu.is_none())
            .map(|a| (a.severity, a.resolved_t))
            .collect()
    };
    r.apply(host_push(1, 1_000_000, 50), false);
    assert_eq!(
        r.cluster.host("node-a").map(|h| h.used_max_bytes),
        Some(50 * GIB)
    );
    assert!(host_alerts(&r).is_empty());
    let command = host_push(2, 1_002_000, 92);
    assert!(!r.apply(command.clone(), false).result.duplicate);
    assert_eq!(host_alerts(&r), vec![(Severity::Critical, None)]);
    // A re-send changes nothing, however its reading reads.
    assert!(r.apply(command, false).result.duplicate);
    assert_eq!(r.cluster.host("node-a").map(|h| h.t_ms), Some(1_002_000));
    // An invalid reading is skipped and counted; the host keeps its level.
    let skipped = r.cluster.counters().windows_skipped;
    r.apply(host_push(3, 1_004_000, 101), false);
    assert_eq!(r.cluster.counters().windows_skipped, skipped + 1);
    assert_eq!(host_alerts(&r), vec![(Severity::Critical, None)]);
    // The agent goes quiet past the expiry: its host and its alert go.
    r.apply(push(4, vec![], vec![]), false);
    let other = Command::V1(CommandV1::Push(PushBatch {
        agent_id: "node-b".into(),
        node: "node-b".into(),
        ..match push(1, vec![window(1, 1_500_000, GIB)], vec![]) {
            Command::V1(CommandV1::Push(b)) => b,
            _ => unreachable!(),
        }
    }));
    r.apply(other, false);
    r.apply(
        Command::V1(CommandV1::Expire {
            stale_after_ms: 60_000,
        }),
        false,
    );
    assert_eq!(r.cluster.host("node-a"), None);
    assert_eq!(host_alerts(&r), vec![(Severity::Critical, Some(r.now_t()))]);
}

#[test]
fn applied_windows_and_records_come_back_only_when_asked_and_only_the_valid_ones() {
    let mut bad_window = window(1, 1_000, GIB);
    bad_window.used_bytes.max = 100 * GIB;
    let bad_record = HookRecord::Alloc(AllocRecord {
        job: String::new(),
        ..match alloc(1_000, 0, GIB) {
            HookRecord::Alloc(a) => a,
            _ => unreachable!(),
        }
    });
    let windows = vec![window(0, 1_000, GIB), bad_window];
    let hook = vec![alloc(1_000, 0, GIB), bad_record];

    let mut quiet = fresh();
    let effects = quiet.apply(push(1, windows.clone(), hook.clone()), false);
    assert!(effects.applied.is_empty());
    assert_eq!(effects.result.windows_skipped, 1);

    let mut streaming = fresh();
    let effects = streaming.apply(push(1, windows.clone(), hook.clone()), true);
    let [applied] = effects.applied.as_slice() else {
        panic!("one applied batch: {:?}", effects.applied)
    };
    assert_eq!(applied.node, "node-a");
    assert_eq!(applied.windows, vec![windows[0].clone()]);
    assert_eq!(applied.hook, vec![hook[0].clone()]);
    assert!(
        effects.events.len() >= 2,
        "an agent joined and a GPU was added: {:?}",
        effects.events
    );
}

#[test]
fn issued_actions_are_answered_in_request_order() {
    let mut r = fresh();
    r.apply(push(1, vec![window(0, 1_000, GIB)], Vec::new()), false);
    let request = |rank| crate::actions::ActionRequest {
        kind: gpumon_proto::ActionKind::ReleaseCache,
        job: "job-1".into(),
        rank,
        reason: "test".into(),
        origin: crate::actions::ActionOrigin::Admin,
    };
    let effects = r.apply(
        Command::V1(CommandV1::IssueActions {
            requests: vec![request(0), request(1)],
            rules: crate::actions::IssueRules {
                ttl_s: 60.0,
                min_interval_s: 0.0,
            },
        }),
        false,
    );
    assert_eq!(effects.result.issued.len(), 2);
    assert_eq!(
        r.actions.entries().count(),
        1,
        "rank 0 is placed, rank 1 is unknown: {:?}",
        effects.result.issued
    );
}

/// A rank record, then samples of its GPU and its allocator: replayed,
/// they build what the live windows and hook records they stand for build.
#[test]
fn a_trace_builds_the_state_its_live_pushes_build() {
    let mut live = fresh();
    let mut replayed = fresh();
    let mut commands = TraceCommands::default();
    let rank = RecordRef::Rank(RankRef {
        t: 0.5,
        job: Cow::Borrowed("job-1"),
        rank: 0,
        local_rank: 0,
        world_size: 2,
        node: Cow::Borrowed("node-a"),
        gpu: 0,
        pid: 100,
    });
    assert!(commands.add(&rank).is_none(), "a rank record only places");
    for (seq, t) in [(1u64, 1.0f64), (2, 2.0), (3, 3.0)] {
        let used = seq * 10 * GIB;
        let t_ms = (t * 1000.0) as u64;
        live.apply(
            push(seq * 2 - 1, vec![window(0, t_ms, used)], Vec::new()),
            false,
        );
        live.apply(push(seq * 2, Vec::new(), vec![alloc(t_ms, 0, used)]), false);

        let procs = [ProcRecord { pid: 100, used }];
        let gpu = RecordRef::Gpu(GpuRef {
            t,
            node: Cow::Borrowed("node-a"),
            gpu: 0,
            uuid: Cow::Borrowed("GPU-0"),
            name: Cow::Borrowed("H100"),
            total: 80 * GIB,
            used,
            used_min: None,
            used_last: None,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: Cow::Borrowed(&procs),
        });
        let alloc = RecordRef::Alloc(AllocRef {
            device_total: None,
            cap: None,
            cap_source: None,
            t,
            job: Cow::Borrowed("job-1"),
            rank: 0,
            allocated: used,
            reserved: used + GIB,
            peak_allocated: None,
            inactive_split: None,
            alloc_retries: None,
            ooms: None,
        });
        for record in [gpu, alloc] {
            if let Some(command) = commands.add(&record) {
                replayed.apply(command, false);
            }
        }
    }
    replayed.apply(commands.finish().expect("the last push"), false);
    assert_eq!(replayed.engine.jobs(), live.engine.jobs());
    assert_eq!(replayed.engine.devices(), live.engine.devices());
    assert_eq!(replayed.cluster.jobs_view(), live.cluster.jobs_view());
    assert_eq!(replayed.cluster.counters(), live.cluster.counters());
}

#[test]
fn hook_records_of_a_rank_no_record_placed_come_from_a_node_of_their_own() {
    let mut commands = TraceCommands::default();
    let record = RecordRef::Alloc(AllocRef {
        device_total: None,
        cap: None,
        cap_source: None,
        t: 1.2345,
        job: Cow::Borrowed("job-9"),
        rank: 3,
        allocated: GIB,
        reserved: GIB,
        peak_allocated: None,
        inactive_split: None,
        alloc_retries: None,
        ooms: None,
    });
    assert!(commands.add(&record).is_none(), "the push stays open");
    let Some(Command::V1(CommandV1::Push(batch))) = commands.finish() else {
        panic!("an alloc record is a push");
    };
    assert_eq!(batch.node, from_trace::UNPLACED_NODE);
    assert_eq!(
        batch.hook[0].t_ms(),
        1_235,
        "seconds round to the nearest ms"
    );
}

#[test]
fn consecutive_records_of_one_node_and_kind_share_a_push_and_keep_their_order() {
    let mut commands = TraceCommands::default();
    let procs: [ProcRecord; 0] = [];
    let gpu = |index: u32, node: &'static str| {
        RecordRef::Gpu(GpuRef {
            t: 1.0,
            node: Cow::Borrowed(node),
            gpu: index,
            uuid: Cow::Owned(format!("GPU-{node}-{index}")),
            name: Cow::Borrowed("H100"),
            total: 80 * GIB,
            used: GIB,
            used_min: None,
            used_last: None,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: Cow::Borrowed(&procs),
        })
    };
    let alloc = RecordRef::Alloc(AllocRef {
        device_total: None,
        cap: None,
        cap_source: None,
        t: 1.0,
        job: Cow::Borrowed("job-1"),
        rank: 0,
        allocated: GIB,
        reserved: GIB,
        peak_allocated: None,
        inactive_split: None,
        alloc_retries: None,
        ooms: None,
    });
    let records = [gpu(0, "a"), gpu(1, "a"), gpu(0, "b"), alloc.clone(), alloc];
    let mut commands_out: Vec<Command> = records.iter().filter_map(|r| commands.add(r)).collect();
    commands_out.extend(commands.finish());
    let mut pushes: Vec<PushBatch> = commands_out
        .into_iter()
        .map(|Command::V1(c)| match c {
            CommandV1::Push(p) => p,
            other => panic!("not a push: {other:?}"),
        })
        .collect();
    let shape: Vec<(String, u64, usize, usize)> = pushes
        .iter()
        .map(|p| (p.node.clone(), p.seq, p.windows.len(), p.hook.len()))
        .collect();
    assert_eq!(
        shape,
        vec![
            ("a".into(), 1, 2, 0),
            ("b".into(), 1, 1, 0),
            (from_trace::UNPLACED_NODE.into(), 1, 0, 2),
        ]
    );
    let first = pushes.remove(0);
    assert_eq!(first.windows[0].gpu.index, 0);
    assert_eq!(first.windows[1].gpu.index, 1);
}

/// A push of `agent` (its node has the same name) with windows of GPUs
/// `first..first + 2`.
fn push_of(agent: &str, seq: u64, first: u32, end_ms: u64) -> Command {
    let windows = (first..first + 2)
        .map(|i| {
            let mut w = window(i, end_ms, 10 * GIB);
            for p in &mut w.procs {
                if let Some(r) = &mut p.rank {
                    r.world_size = 4;
                }
            }
            w
        })
        .collect();
    let Command::V1(CommandV1::Push(mut batch)) = push(seq, windows, Vec::new()) else {
        unreachable!("push makes a push")
    };
    batch.agent_id = agent.into();
    batch.node = agent.into();
    Command::V1(CommandV1::Push(batch))
}

#[test]
fn a_clone_for_a_snapshot_shares_every_entry_and_a_push_copies_only_its_own() {
    let mut live = fresh();
    let t0 = 1_750_000_000_000;
    for seq in 1..=3 {
        live.apply(push_of("node-a", seq, 0, t0 + seq * 2000), false);
        live.apply(push_of("node-b", seq, 2, t0 + seq * 2000), false);
    }
    let held = live.clone();
    assert_eq!(live.cluster.gpus_shared_with(&held.cluster).len(), 4);
    assert_eq!(live.engine.gpu_tracks_shared_with(&held.engine).len(), 4);

    live.apply(push_of("node-a", 4, 0, t0 + 8000), false);
    // node-a's two GPUs were copied on write; node-b's are still shared,
    // and the held copy kept what it had.
    assert_eq!(
        live.cluster.gpus_shared_with(&held.cluster),
        vec!["GPU-2", "GPU-3"]
    );
    let tracks = live.engine.gpu_tracks_shared_with(&held.engine);
    assert_eq!(
        tracks,
        vec![("node-b".to_owned(), 2), ("node-b".to_owned(), 3)]
    );
    assert_eq!(held.cluster.cluster_view().now_ms, t0 + 6000);
    assert_eq!(live.cluster.cluster_view().now_ms, t0 + 8000);
}

#[test]
fn a_batch_applies_exactly_as_its_pushes_one_entry_each_and_answers_each() {
    let v1 = |c: Command| {
        let Command::V1(c) = c;
        c
    };
    // Two agents, a resend (a duplicate), and a push from the past of its
    // agent's seq; then a second round.
    let rounds = [
        vec![
            push_of("node-a", 1, 0, 10_000),
            push_of("node-b", 1, 2, 10_000),
            push_of("node-a", 1, 0, 10_000),
        ],
        vec![
            push_of("node-b", 2, 2, 12_000),
            push_of("node-a", 2, 0, 12_000),
        ],
    ];
    let mut one_by_one = fresh();
    let mut batched = fresh();
    for round in rounds {
        let expected: Vec<Effects> = round
            .iter()
            .map(|c| one_by_one.apply(c.clone(), true))
            .collect();
        let batch = Command::V1(CommandV1::Batch(round.into_iter().map(v1).collect()));
        let got = batched.apply(batch, true);
        let results: Vec<CommandResult> = expected.iter().map(|e| e.result.clone()).collect();
        assert_eq!(got.result.each, results);
        let applied: Vec<AppliedBatch> = expected.iter().flat_map(|e| e.applied.clone()).collect();
        assert_eq!(got.applied, applied);
        let events: Vec<_> = expected.iter().flat_map(|e| e.events.clone()).collect();
        assert_eq!(got.events, events);
    }
    assert_eq!(
        postcard::to_allocvec(&batched).unwrap(),
        postcard::to_allocvec(&one_by_one).unwrap(),
        "the same state, byte for byte"
    );
    assert_eq!(batched.cluster.counters().batches_duplicate, 1);
}

#[test]
fn a_batch_applies_only_pushes() {
    let mut r = fresh();
    let expire = CommandV1::Expire { stale_after_ms: 0 };
    let Command::V1(a_push) = push_of("node-a", 1, 0, 10_000);
    let got = r.apply(Command::V1(CommandV1::Batch(vec![expire, a_push])), false);
    assert_eq!(got.result.each.len(), 2);
    assert_eq!(got.result.each[0], CommandResult::default(), "not applied");
    assert_eq!(got.result.each[1].windows_applied, 2);
    assert_eq!(r.cluster.cluster_view().gpus, 2);
}

/// A push from `agent` at `t_ms`: one window of its GPU 0 (a process of job
/// `job`, rank 0) and `hook`.
fn push_from(agent: &str, seq: u64, t_ms: u64, job: &str, hook: Vec<HookRecord>) -> Command {
    let mut w = window(0, t_ms, GIB);
    w.gpu.uuid = format!("GPU-{agent}");
    if let Some(rank) = w.procs[0].rank.as_mut() {
        rank.job = job.into();
        rank.world_size = 1;
    }
    Command::V1(CommandV1::Push(PushBatch {
        agent_id: agent.into(),
        incarnation: 1,
        seq,
        node: agent.into(),
        dropped_batches: 0,
        windows: vec![w],
        hook,
        acks: Vec::new(),
    }))
}

#[test]
fn a_job_the_engine_forgets_takes_its_named_snapshots_and_step_times_with_it() {
    use gpumon_proto::{EventRecord, StepRecord};
    let snapshot = |t_ms: u64, job: &str| {
        HookRecord::Event(EventRecord {
            t_ms,
            job: job.into(),
            rank: 0,
            name: "before_training".into(),
            detail: None,
            snapshot: Some(AllocStats {
                allocated: GIB,
                reserved: 2 * GIB,
                ..AllocStats::default()
            }),
        })
    };
    let step = |t_ms: u64, job: &str| {
        HookRecord::Step(StepRecord {
            t_ms,
            job: job.into(),
            rank: 0,
            step: t_ms / 1000,
            duration_ms: 1000.0,
            sections: vec![("forward".into(), 400.0)],
            group: None,
            waits: Default::default(),
            collectives: Vec::new(),
        })
    };
    let mut r = fresh();
    // Node "gone" reports its job once, then never again (its agent died);
    // node "live" keeps data time going and its job speaking.
    let first = vec![snapshot(1_000, "silent"), step(1_000, "silent")];
    r.apply(push_from("gone", 1, 1_000, "silent", first), false);
    let silent_s = EngineConfig::default().silent_s;
    let end_s = (silent_s as u64) + 2 * 60;
    for (seq, s) in (1..=end_s).step_by(10).enumerate() {
        let t_ms = s * 1000;
        let hook = if seq == 0 {
            vec![snapshot(t_ms, "alive"), step(t_ms, "alive")]
        } else {
            vec![step(t_ms, "alive")]
        };
        r.apply(
            push_from("live", seq as u64 + 1, t_ms, "alive", hook),
            false,
        );
        if s < 60 {
            assert!(r.hook.snapshots().job("silent").is_some(), "at {s} s");
            assert!(r.steps.job("silent").is_some(), "at {s} s");
        }
    }
    assert!(!r.engine.tracks_job("silent"));
    assert!(
        r.hook.snapshots().job("silent").is_none(),
        "its snapshots went with it"
    );
    assert!(
        r.steps.job("silent").is_none(),
        "its step times went with it"
    );
    assert!(r.hook.snapshots().get("alive", "before_training").is_some());
    assert!(r.steps.job("alive").is_some());
    // The same data with forgetting off keeps both, as before.
    let mut kept = Replicated::new(
        Limits::default(),
        &EngineConfig {
            silent_s: 0.0,
            ..EngineConfig::default()
        },
    );
    let first = vec![snapshot(1_000, "silent"), step(1_000, "silent")];
    kept.apply(push_from("gone", 1, 1_000, "silent", first), false);
    for (seq, s) in (1..=end_s).step_by(10).enumerate() {
        let hook = vec![step(s * 1000, "alive")];
        kept.apply(
            push_from("live", seq as u64 + 1, s * 1000, "alive", hook),
            false,
        );
    }
    assert!(kept.hook.snapshots().job("silent").is_some());
}

#[test]
fn collectives_listed_live_and_in_a_trace_name_the_same_late_rank_the_same_way() {
    use gpumon_proto::{CollectiveArrival, GroupWait, StepRecord};
    // Four ranks; from step 40 rank 2's work takes 130 ms instead of 100,
    // and the others wait for it at each of group 1's four all-gathers.
    let records = |step: u64| -> Vec<HookRecord> {
        let work = |rank: u32| {
            if rank == 2 && step >= 40 {
                130.0
            } else {
                100.0
            }
        };
        let enters = |rank: u32, k: u64| work(rank) * (k + 1) as f64 / 4.0;
        (0..4u32)
            .map(|rank| {
                let collectives: Vec<CollectiveArrival> = (0..4u64)
                    .map(|k| {
                        let end = (0..4).map(|r| enters(r, k)).fold(0.0, f64::max) + 2.0;
                        CollectiveArrival {
                            group: "1".into(),
                            seq: step * 4 + k + 1,
                            op: "all_gather_into_tensor".into(),
                            entered_ms: enters(rank, k),
                            left_ms: end,
                            wait_ms: end - enters(rank, k),
                        }
                    })
                    .collect();
                let wait: f64 = collectives.iter().map(|c| c.wait_ms).sum();
                HookRecord::Step(StepRecord {
                    t_ms: 10_000 + step * 150 + u64::from(rank),
                    job: "fsdp".into(),
                    rank,
                    step,
                    duration_ms: 150.0,
                    sections: vec![("forward".into(), work(rank)), ("comm_wait".into(), wait)],
                    group: None,
                    waits: vec![GroupWait {
                        group: "1".into(),
                        calls: 4,
                        wait_ms: wait,
                    }],
                    collectives,
                })
            })
            .collect()
    };
    let mut live = fresh();
    let mut trace = b"{\"gpumon_trace\": 1, \"source\": \"test\"}\n".to_vec();
    for step in 1..=400u64 {
        let hook = records(step);
        for r in &hook {
            let record =
                crate::records::from_window::hook_record(r).expect("a step has a trace form");
            trace.extend(serde_json::to_vec(&record).unwrap());
            trace.push(b'\n');
        }
        live.apply(
            Command::V1(CommandV1::Push(PushBatch {
                agent_id: "node-a".into(),
                incarnation: 1,
                seq: step,
                node: "node-a".into(),
                dropped_batches: 0,
                windows: Vec::new(),
                hook,
                acks: Vec::new(),
            })),
            false,
        );
    }
    let mut replayed = fresh();
    let mut commands = TraceCommands::default();
    for line in trace
        .split(|&b| b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
    {
        let record: crate::records::TraceRecord = serde_json::from_slice(line).unwrap();
        if let Some(command) = commands.add(&crate::records::RecordRef::from(&record)) {
            replayed.apply(command, false);
        }
    }
    if let Some(command) = commands.finish() {
        replayed.apply(command, false);
    }
    let straggler = |r: &Replicated| -> Vec<String> {
        r.engine
            .alerts()
            .filter(|a| a.kind == crate::engine::AlertKind::Straggler)
            .map(|a| a.message.clone())
            .collect()
    };
    let said = straggler(&live);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("rank 2 of fsdp"), "{}", said[0]);
    assert!(
        said[0].contains("it was that member in ") && said[0].contains("100 % of all the lateness"),
        "{}",
        said[0]
    );
    assert_eq!(
        straggler(&replayed),
        said,
        "the trace decides as the pushes did"
    );
}
