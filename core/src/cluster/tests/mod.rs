mod bounds;
mod expiry;
mod placement;

use gpumon_proto::{BytesStat, GpuInfo, GpuWindow, Hello, ProcWindow, PushBatch, RankInfo};

use super::*;

const GIB: u64 = 1 << 30;

fn gpu(index: u32) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-n0-{index}"),
        index,
        name: "H100".into(),
        total_bytes: 80 * GIB,
    }
}

pub(super) fn rank(job: &str, r: u32) -> RankInfo {
    RankInfo {
        job: job.into(),
        rank: r,
        local_rank: r,
        world_size: 2,
        master_addr: None,
        master_port: None,
    }
}

pub(super) fn window(
    index: u32,
    end_ms: u64,
    procs: Vec<(u32, u64, Option<RankInfo>)>,
) -> GpuWindow {
    let used: u64 = procs.iter().map(|p| p.1).sum::<u64>() + GIB / 2;
    GpuWindow {
        gpu: gpu(index),
        start_ms: end_ms - 1500,
        end_ms,
        samples: 4,
        used_bytes: BytesStat {
            min: used - GIB / 4,
            max: used + GIB / 4,
            last: used,
            mean: used,
        },
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: procs
            .into_iter()
            .map(|(pid, used, rank)| ProcWindow {
                pid,
                used_bytes: BytesStat::single(used),
                rank,
            })
            .collect(),
    }
}

pub(super) fn batch(seq: u64, incarnation: u64, windows: Vec<GpuWindow>) -> PushBatch {
    PushBatch {
        agent_id: "agent-0".into(),
        incarnation,
        seq,
        node: "node-0".into(),
        dropped_batches: 0,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    }
}

pub(super) fn two_ranks(seq: u64, end_ms: u64, used: u64) -> PushBatch {
    batch(
        seq,
        1,
        vec![
            window(0, end_ms, vec![(100, used, Some(rank("job-a", 0)))]),
            window(1, end_ms, vec![(101, used, Some(rank("job-a", 1)))]),
        ],
    )
}

#[test]
fn shows_every_rank_with_its_gpu_and_memory() {
    let mut s = Cluster::new(Limits::default());
    let applied = s.apply_push(&two_ranks(1, 10_000, 20 * GIB));
    assert_eq!((applied.windows_applied, applied.windows_skipped), (2, 0));
    let jobs = s.jobs_view();
    assert_eq!(jobs.jobs.len(), 1);
    let job = &jobs.jobs[0];
    assert!(job.live);
    assert_eq!(job.world_size, 2);
    assert_eq!(
        job.ranks
            .iter()
            .map(|r| (r.rank, r.gpu, r.pid))
            .collect::<Vec<_>>(),
        vec![(0, 0, 100), (1, 1, 101)]
    );
    assert!(job
        .ranks
        .iter()
        .all(|r| r.used_bytes == 20 * GIB && r.total_bytes == 80 * GIB));
    assert!(applied.events.iter().any(|e| matches!(
        e,
        ClusterEvent::RankStarted {
            rank: 1,
            gpu: 1,
            ..
        }
    )));
}

#[test]
fn applies_a_batch_once_per_agent_incarnation_and_seq() {
    let mut s = Cluster::new(Limits::default());
    assert!(!s.apply_push(&two_ranks(1, 10_000, GIB)).duplicate);
    let again = s.apply_push(&two_ranks(1, 10_000, 9 * GIB));
    assert!(again.duplicate);
    assert_eq!(
        s.jobs_view().jobs[0].ranks[0].used_bytes,
        GIB,
        "a duplicate changes nothing"
    );
    assert_eq!(s.counters().batches_duplicate, 1);
    assert_eq!(s.counters().batches_applied, 1);

    // A restarted agent starts its seq at 1 again under a new incarnation.
    let restarted = batch(
        1,
        2,
        vec![window(
            0,
            12_000,
            vec![(100, 3 * GIB, Some(rank("job-a", 0)))],
        )],
    );
    let applied = s.apply_push(&restarted);
    assert!(!applied.duplicate);
    assert!(applied.events.contains(&ClusterEvent::AgentJoined {
        agent_id: "agent-0".into(),
        node: "node-0".into(),
        restarted: true
    }));
    assert_eq!(s.jobs_view().jobs[0].ranks[0].used_bytes, 3 * GIB);
}

#[test]
fn ends_a_rank_whose_process_left_its_gpu_and_keeps_its_history() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push(&two_ranks(1, 10_000, GIB));
    let gone = batch(
        2,
        1,
        vec![
            window(0, 12_000, vec![(100, 2 * GIB, Some(rank("job-a", 0)))]),
            window(1, 12_000, vec![]),
        ],
    );
    let applied = s.apply_push(&gone);
    assert!(applied.events.contains(&ClusterEvent::RankEnded {
        job: "job-a".into(),
        rank: 1,
        t_ms: 12_000
    }));
    let detail = s.job_detail("job-a").unwrap();
    assert!(detail.live);
    assert_eq!(detail.ranks[1].view.ended_ms, Some(12_000));
    assert_eq!(
        detail.ranks[1].history.len(),
        1,
        "an ended rank keeps its history"
    );
    assert_eq!(detail.ranks[0].history.len(), 2);

    let all_gone = batch(3, 1, vec![window(0, 14_000, vec![])]);
    let applied = s.apply_push(&all_gone);
    assert!(applied.events.contains(&ClusterEvent::JobEnded {
        job: "job-a".into(),
        t_ms: 14_000
    }));
    assert!(!s.job_detail("job-a").unwrap().live);
    assert_eq!(s.cluster_view().live_ranks, 0);
}

#[test]
fn an_older_window_updates_peaks_but_not_the_present() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push(&two_ranks(1, 10_000, GIB));
    s.apply_push(&two_ranks(2, 8_000, 30 * GIB));
    let r = &s.jobs_view().jobs[0].ranks[0];
    assert_eq!(r.used_bytes, GIB);
    assert_eq!(r.peak_used_bytes, 30 * GIB);
    assert_eq!(s.now_ms(), 10_000);
}

#[test]
fn skips_and_counts_absurd_windows() {
    let mut s = Cluster::new(Limits::default());
    let mut over = window(0, 10_000, vec![]);
    over.used_bytes.max = 81 * GIB;
    let mut zero = window(1, 10_000, vec![]);
    zero.gpu.total_bytes = 0;
    let mut bad_rank = window(2, 10_000, vec![(5, GIB, Some(rank("job-a", 7)))]);
    bad_rank.procs[0].rank.as_mut().unwrap().world_size = 2;
    let mut backwards = window(3, 10_000, vec![]);
    backwards.start_ms = 20_000;
    let applied = s.apply_push(&batch(
        1,
        1,
        vec![over, zero, bad_rank, backwards, window(4, 10_000, vec![])],
    ));
    assert_eq!((applied.windows_applied, applied.windows_skipped), (1, 4));
    assert_eq!(s.counters().windows_skipped, 4);
    assert_eq!(s.cluster_view().gpus, 1);
}

#[test]
fn history_and_ended_jobs_stay_bounded() {
    let limits = Limits {
        history_windows: 8,
        max_ended_jobs: 2,
        ..Limits::default()
    };
    let mut s = Cluster::new(limits);
    let mut seq = 0;
    for j in 0..5u64 {
        let job = format!("job-{j}");
        for k in 0..20u64 {
            seq += 1;
            let t = 1_000_000 * (j + 1) + 2000 * k;
            s.apply_push(&batch(
                seq,
                1,
                vec![window(0, t, vec![(7, GIB, Some(rank(&job, 0)))])],
            ));
        }
        seq += 1;
        s.apply_push(&batch(
            seq,
            1,
            vec![window(0, 1_000_000 * (j + 1) + 50_000, vec![])],
        ));
    }
    let jobs: Vec<String> = s.jobs_view().jobs.into_iter().map(|j| j.job).collect();
    assert_eq!(
        jobs,
        vec!["job-3", "job-4"],
        "only the newest ended jobs are kept"
    );
    assert_eq!(s.job_detail("job-4").unwrap().ranks[0].history.len(), 8);
}

#[test]
fn hello_registers_gpus_and_is_idempotent() {
    let mut s = Cluster::new(Limits::default());
    let hello = Hello {
        agent_id: "agent-0".into(),
        incarnation: 5,
        node: "node-0".into(),
        agent_version: "0.1.0".into(),
        source: "sim".into(),
        gpus: vec![gpu(0), gpu(1)],
    };
    let first = s.apply_hello(&hello);
    assert_eq!(
        first
            .iter()
            .filter(|e| matches!(e, ClusterEvent::GpuAdded { .. }))
            .count(),
        2
    );
    let before = s.clone();
    assert!(s.apply_hello(&hello).is_empty());
    assert_eq!(s, before);
    let nodes = s.nodes_view();
    assert_eq!(nodes.nodes.len(), 1);
    assert_eq!(nodes.nodes[0].gpus.len(), 2);
    assert_eq!(s.cluster_view().agents[0].source, "sim");
}

#[test]
fn same_messages_give_the_same_state() {
    let msgs: Vec<PushBatch> = (1..50)
        .map(|i| two_ranks(i, 2000 * i, i * GIB / 10))
        .collect();
    let mut a = Cluster::new(Limits::default());
    let mut b = Cluster::new(Limits::default());
    for m in &msgs {
        a.apply_push(m);
        b.apply_push(m);
        b.apply_push(m);
    }
    assert_eq!(a.jobs_view(), b.jobs_view());
    assert_eq!(a.nodes_view(), b.nodes_view());
}

#[test]
fn the_ranks_of_a_node_whose_agent_went_quiet_are_lost_not_live() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push(&two_ranks(1, 10_000, GIB));
    let lost = |s: &Cluster| -> Vec<bool> {
        s.job_detail("job-a")
            .unwrap()
            .ranks
            .iter()
            .map(|r| r.view.lost)
            .collect()
    };
    assert_eq!(lost(&s), vec![false, false]);
    // Another node's agent moves the clock on; node-0's agent says nothing.
    let other = |seq: u64, end_ms: u64| {
        let mut w = window(7, end_ms, Vec::new());
        w.gpu.uuid = "GPU-n1-7".into();
        PushBatch {
            agent_id: "agent-1".into(),
            node: "node-1".into(),
            ..batch(seq, 1, vec![w])
        }
    };
    s.apply_push(&other(1, 10_000 + AGENT_STALE_MS));
    assert_eq!(lost(&s), vec![false, false], "quiet for exactly the bound");
    s.apply_push(&other(2, 10_000 + AGENT_STALE_MS + 2_000));
    assert_eq!(lost(&s), vec![true, true]);
    assert!(s.jobs_view().jobs[0].ranks.iter().all(|r| r.lost));
    // node-0's agent is back: its ranks are live again.
    s.apply_push(&two_ranks(2, 10_000 + AGENT_STALE_MS + 4_000, GIB));
    assert_eq!(lost(&s), vec![false, false]);
}
