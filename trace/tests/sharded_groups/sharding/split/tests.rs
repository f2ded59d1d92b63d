//! The splitter's rules, one at a time, on hand-made pushes. The map pins
//! the jobs, so each test says which group a job is in.

use gpumon_proto::{
    ActionAck, ActionOutcome, BytesStat, GpuInfo, GpuWindow, HookRecord, HostMemory, PodPlacement,
    ProcPlacement, ProcWindow, PushBatch, PushBatchV2, RankInfo, StepRecord,
};

use super::*;
use gpumon_core::limits::MAX_SEQ_GAP;

const NODE: &str = "node-0";
const GIB: u64 = 1 << 30;

/// Four groups; job-a in 1, job-b in 2, job-c in 3.
fn map() -> GroupMap {
    let mut map = GroupMap::new(4).unwrap();
    map.pin("job-a", GroupId(1)).unwrap();
    map.pin("job-b", GroupId(2)).unwrap();
    map.pin("job-c", GroupId(3)).unwrap();
    map
}

fn home() -> GroupId {
    map().home_of_node(NODE)
}

fn proc(pid: u32, job: Option<&str>, rank: u32) -> ProcWindow {
    ProcWindow {
        pid,
        used_bytes: BytesStat::single(GIB),
        rank: job.map(|job| RankInfo {
            job: job.into(),
            rank,
            local_rank: rank,
            world_size: 8,
            master_addr: None,
            master_port: None,
        }),
    }
}

fn window(gpu: u32, end_ms: u64, procs: Vec<ProcWindow>) -> GpuWindow {
    GpuWindow {
        gpu: GpuInfo {
            uuid: format!("GPU-{gpu}"),
            index: gpu,
            name: "H100".into(),
            total_bytes: 80 * GIB,
        },
        start_ms: end_ms - 2_000,
        end_ms,
        samples: 4,
        used_bytes: BytesStat::single(2 * GIB),
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs,
    }
}

fn batch(seq: u64, windows: Vec<GpuWindow>) -> PushBatch {
    PushBatch {
        agent_id: NODE.into(),
        incarnation: 7,
        seq,
        node: NODE.into(),
        dropped_batches: 3,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    }
}

fn groups(parts: &[GroupPush]) -> Vec<GroupId> {
    parts.iter().map(|p| p.group).collect()
}

fn part(parts: &[GroupPush], group: GroupId) -> &PushBatchV2 {
    &parts
        .iter()
        .find(|p| p.group == group)
        .unwrap_or_else(|| panic!("no part for {group}"))
        .push
}

/// The (pid, job) of each process of each window of a part.
fn procs(push: &PushBatchV2) -> Vec<Vec<(u32, Option<String>)>> {
    let of = |p: &ProcWindow| (p.pid, p.rank.as_ref().map(|r| r.job.clone()));
    push.batch
        .windows
        .iter()
        .map(|w| w.procs.iter().map(of).collect())
        .collect()
}

fn ack(id: u64) -> ActionAck {
    ActionAck {
        id,
        t_ms: 1_000,
        outcome: ActionOutcome::Done {
            freed_bytes: GIB,
            at_step: None,
        },
        response: None,
    }
}

fn step(job: &str) -> HookRecord {
    HookRecord::Step(StepRecord {
        group: None,
        waits: Default::default(),
        collectives: Vec::new(),
        t_ms: 1_000,
        job: job.into(),
        rank: 0,
        step: 1,
        duration_ms: 100.0,
        sections: Vec::new(),
    })
}

fn pod(name: &str) -> PodPlacement {
    PodPlacement {
        pod_uid: Some("6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b".into()),
        pod_name: Some(name.into()),
        namespace: Some("ml".into()),
        container_id: None,
        container_name: None,
    }
}

#[test]
fn windows_go_to_the_groups_of_their_jobs_and_idle_ones_home() {
    let map = map();
    let mut s = PushSplitter::new();
    let pushed = batch(
        1,
        vec![
            window(0, 10_000, vec![proc(100, Some("job-a"), 0)]),
            window(1, 10_000, vec![proc(101, Some("job-b"), 0)]),
            window(2, 10_000, vec![proc(102, Some("job-a"), 1)]),
            window(3, 10_000, vec![]),
        ],
    );
    let parts = s.split(&map, pushed.into());
    let mut want = vec![GroupId(1), GroupId(2), home()];
    want.sort();
    want.dedup();
    assert_eq!(groups(&parts), want);
    let a = part(&parts, GroupId(1));
    assert_eq!(
        a.batch
            .windows
            .iter()
            .map(|w| w.gpu.index)
            .collect::<Vec<_>>(),
        [0, 2]
    );
    let b = part(&parts, GroupId(2));
    assert_eq!(procs(b), [vec![(101, Some("job-b".into()))]]);
    assert!(part(&parts, home())
        .batch
        .windows
        .iter()
        .any(|w| w.gpu.index == 3));
    // Every part keeps the agent's stamp.
    for p in &parts {
        let b = &p.push.batch;
        assert_eq!(
            (b.agent_id.as_str(), b.incarnation, b.seq, b.node.as_str()),
            (NODE, 7, 1, NODE)
        );
        assert_eq!(b.dropped_batches, 3);
    }
}

#[test]
fn a_gpu_shared_by_two_groups_jobs_shows_each_group_only_its_own_ranks() {
    let map = map();
    let mut s = PushSplitter::new();
    let shared = window(
        0,
        10_000,
        vec![
            proc(100, Some("job-a"), 0),
            proc(200, Some("job-b"), 0),
            proc(300, None, 0),
        ],
    );
    let parts = s.split(&map, batch(1, vec![shared]).into());
    assert_eq!(groups(&parts), [GroupId(1), GroupId(2)]);
    assert_eq!(
        procs(part(&parts, GroupId(1))),
        [vec![(100, Some("job-a".into())), (200, None), (300, None)]]
    );
    assert_eq!(
        procs(part(&parts, GroupId(2))),
        [vec![(100, None), (200, Some("job-b".into())), (300, None)]]
    );
}

#[test]
fn a_rank_that_leaves_its_gpu_is_seen_leaving_by_its_group() {
    let map = map();
    let mut s = PushSplitter::new();
    let w = |end, procs| batch(end / 2_000, vec![window(0, end, procs)]);
    let parts = s.split(&map, w(2_000, vec![proc(100, Some("job-a"), 0)]).into());
    assert_eq!(groups(&parts), [GroupId(1)]);
    // job-a's process is gone and job-b's came: job-a's group sees the
    // window (with job-b's process but not its rank), job-b's group too.
    let parts = s.split(&map, w(4_000, vec![proc(200, Some("job-b"), 0)]).into());
    assert_eq!(groups(&parts), [GroupId(1), GroupId(2)]);
    assert_eq!(procs(part(&parts, GroupId(1))), [vec![(200, None)]]);
    // Nothing on it now: job-b's group sees job-b leave; job-a's is done.
    let parts = s.split(&map, w(6_000, vec![]).into());
    assert_eq!(groups(&parts), [GroupId(2)]);
    // Idle: home.
    let parts = s.split(&map, w(8_000, vec![]).into());
    assert_eq!(groups(&parts), [home()]);
}

#[test]
fn a_pinned_job_goes_to_its_pin_and_a_moved_one_is_not_followed() {
    let mut map = map();
    let mut s = PushSplitter::new();
    let w = |seq| {
        batch(
            seq,
            vec![window(0, seq * 2_000, vec![proc(100, Some("job-a"), 0)])],
        )
    };
    assert_eq!(groups(&s.split(&map, w(1).into())), [GroupId(1)]);
    map.pin("job-a", GroupId(3)).unwrap();
    // The job is still on the GPU: its old group is not sent the window
    // (moving hands the job's slice over; the old group does not see the
    // rank end).
    assert_eq!(groups(&s.split(&map, w(2).into())), [GroupId(3)]);
    map.unpin("job-a");
    let hashed = map.hashed_group("job-a");
    assert_eq!(groups(&s.split(&map, w(3).into())), [hashed]);
}

#[test]
fn hook_records_follow_their_job_host_and_batch_acks_go_home() {
    let map = map();
    let mut s = PushSplitter::new();
    let mut b = batch(1, Vec::new());
    b.hook = vec![step("job-b"), step("job-a"), step("job-b")];
    b.acks = vec![ack(9)];
    let host = HostMemory {
        t_ms: 1_000,
        total_bytes: 512 * GIB,
        used_max_bytes: 100 * GIB,
    };
    s.queue_ack(GroupId(3), ack(4));
    let parts = s.split(
        &map,
        PushBatchV2 {
            batch: b,
            placements: Vec::new(),
            host: Some(host),
        },
    );
    let mut want = vec![GroupId(1), GroupId(2), GroupId(3), home()];
    want.sort();
    want.dedup();
    assert_eq!(groups(&parts), want);
    assert_eq!(
        part(&parts, GroupId(2)).batch.hook,
        [step("job-b"), step("job-b")]
    );
    assert_eq!(part(&parts, GroupId(1)).batch.hook, [step("job-a")]);
    assert_eq!(part(&parts, home()).host, Some(host));
    assert!(part(&parts, home()).batch.acks.contains(&ack(9)));
    assert_eq!(part(&parts, GroupId(3)).batch.acks, [ack(4)]);
    // A queued ack goes once.
    let parts = s.split(&map, batch(2, Vec::new()).into());
    assert!(parts.iter().all(|p| p.push.batch.acks.is_empty()));
}

#[test]
fn placements_follow_their_process_rank() {
    let map = map();
    let mut s = PushSplitter::new();
    let bad = PodPlacement {
        namespace: Some("Not A Label".into()),
        ..pod("bad")
    };
    let placed = |pid, placement| ProcPlacement { pid, placement };
    let parts = s.split(
        &map,
        PushBatchV2 {
            batch: batch(
                1,
                vec![
                    window(0, 10_000, vec![proc(100, Some("job-a"), 0)]),
                    window(
                        1,
                        10_000,
                        vec![proc(200, Some("job-b"), 0), proc(300, None, 0)],
                    ),
                ],
            ),
            placements: vec![
                placed(100, bad),
                placed(100, pod("a-0")),
                placed(100, pod("a-0-again")),
                placed(200, pod("b-0")),
                placed(300, pod("nobody")),
                placed(999, pod("no-such-process")),
            ],
            host: None,
        },
    );
    assert_eq!(groups(&parts), [GroupId(1), GroupId(2)]);
    assert_eq!(
        part(&parts, GroupId(1)).placements,
        [placed(100, pod("a-0"))]
    );
    assert_eq!(
        part(&parts, GroupId(2)).placements,
        [placed(200, pod("b-0"))]
    );
}

#[test]
fn quiet_groups_get_a_keep_alive_within_the_seq_gap() {
    let map = map();
    let mut s = PushSplitter::new();
    let busy = |seq: u64| {
        batch(
            seq,
            vec![window(0, 2_000 * seq, vec![proc(100, Some("job-a"), 0)])],
        )
    };
    let once = batch(1, vec![window(1, 2_000, vec![proc(200, Some("job-b"), 0)])]);
    assert_eq!(groups(&s.split(&map, once.into())), [GroupId(2)]);
    // job-b's GPU stops reporting (the agent no longer sees it); job-a
    // pushes on. job-b's group hears from the agent every KEEPALIVE_SEQS.
    let mut last_to_b = 1;
    for seq in 2..=3 * KEEPALIVE_SEQS + 5 {
        let parts = s.split(&map, busy(seq).into());
        assert!(parts.iter().any(|p| p.group == GroupId(1)));
        if let Some(p) = parts.iter().find(|p| p.group == GroupId(2)) {
            assert!(p.is_empty(), "seq {seq}: {p:?}");
            assert_eq!(seq - last_to_b, KEEPALIVE_SEQS);
            last_to_b = seq;
        }
        assert!(seq - last_to_b < KEEPALIVE_SEQS);
        assert!(seq - last_to_b < MAX_SEQ_GAP);
    }
    assert_eq!(last_to_b, 1 + 3 * KEEPALIVE_SEQS);
}

#[test]
fn a_new_incarnation_starts_the_seq_streams_again() {
    let map = map();
    let mut s = PushSplitter::new();
    let mut first = batch(
        5_000,
        vec![window(0, 2_000, vec![proc(100, Some("job-b"), 0)])],
    );
    s.split(&map, first.clone().into());
    first.incarnation = 8;
    first.seq = 1;
    first.windows = vec![window(1, 4_000, vec![proc(101, Some("job-a"), 0)])];
    // Seq 1 of the new incarnation is not 4,999 behind seq 5,000 of the
    // old one: no keep-alive to job-b's group is due.
    let parts = s.split(&map, first.into());
    assert_eq!(groups(&parts), [GroupId(1)]);
}

#[test]
fn route_sends_hellos_home_and_refuses_leader_commands() {
    let map = map();
    let mut s = PushSplitter::new();
    let hello = gpumon_proto::Hello {
        agent_id: NODE.into(),
        incarnation: 7,
        node: NODE.into(),
        agent_version: "test".into(),
        source: "sim".into(),
        gpus: Vec::new(),
    };
    let routed = s
        .route(&map, Command::V1(CommandV1::Hello(hello.clone())))
        .unwrap();
    assert_eq!(routed, [(home(), Command::V1(CommandV1::Hello(hello)))]);
    let expire = Command::V1(CommandV1::Expire {
        stale_after_ms: 1_000,
    });
    assert_eq!(s.route(&map, expire), None);
    let push = Command::V1(CommandV1::Push(batch(
        1,
        vec![window(0, 2_000, vec![proc(100, Some("job-c"), 0)])],
    )));
    let routed = s.route(&map, push).unwrap();
    assert_eq!(routed.len(), 1);
    assert_eq!(routed[0].0, GroupId(3));
    assert!(matches!(&routed[0].1, Command::V1(CommandV1::Push(b)) if b.windows.len() == 1));
}

#[test]
fn one_group_gets_the_push_whole() {
    let map = GroupMap::new(1).unwrap();
    let mut s = PushSplitter::new();
    let mut b = batch(
        1,
        vec![
            window(
                0,
                2_000,
                vec![proc(100, Some("job-a"), 0), proc(200, Some("job-b"), 0)],
            ),
            window(1, 2_000, vec![]),
        ],
    );
    b.hook = vec![step("job-a")];
    b.acks = vec![ack(1)];
    let parts = s.split(&map, b.clone().into());
    assert_eq!(
        parts,
        [GroupPush {
            group: GroupId(0),
            push: b.into()
        }]
    );
}

#[test]
fn an_older_seq_does_not_set_the_keep_alive_back() {
    let map = map();
    let mut s = PushSplitter::new();
    let on = |seq: u64, job: &str| {
        batch(
            seq,
            vec![window(0, 2_000 * seq, vec![proc(100, Some(job), 0)])],
        )
    };
    s.split(&map, on(5_000, "job-b").into());
    // An out-of-order push of job-a's (a caller's mistake: parts are what
    // is re-sent) leaves job-b's group's last seq at 5,000.
    s.split(&map, on(10, "job-a").into());
    let quiet = 5_000 + KEEPALIVE_SEQS - 1;
    assert_eq!(
        groups(&s.split(&map, on(quiet, "job-a").into())),
        [GroupId(1)]
    );
    let due = 5_000 + KEEPALIVE_SEQS;
    assert_eq!(
        groups(&s.split(&map, on(due, "job-a").into())),
        [GroupId(1), GroupId(2)]
    );
}
