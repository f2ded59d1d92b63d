//! A rank's Kubernetes placement: kept from the push that carries it,
//! dropped with its process, refused and counted when malformed, and
//! absent from the older snapshot layout.

use gpumon_proto::{PodPlacement, ProcPlacement, PushBatch, RankInfo};

use super::super::*;
use super::{batch, window};

const T0: u64 = 1_700_000_000_000;
const GIB: u64 = 1 << 30;

fn rank(r: u32) -> Option<RankInfo> {
    Some(RankInfo {
        job: "job-k".into(),
        rank: r,
        local_rank: r,
        world_size: 2,
        master_addr: None,
        master_port: None,
    })
}

fn pod(name: &str) -> PodPlacement {
    PodPlacement {
        pod_uid: Some("6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b".into()),
        pod_name: Some(name.into()),
        namespace: Some("ml".into()),
        container_id: Some("c0ffee".repeat(10) + "c0ff"),
        container_name: Some("pytorch".into()),
    }
}

fn placed(pid: u32, placement: PodPlacement) -> ProcPlacement {
    ProcPlacement { pid, placement }
}

/// Rank 0 in process `pid0` on GPU 0, rank 1 in 101 on GPU 1.
fn push(seq: u64, pid0: u32) -> PushBatch {
    let end = T0 + seq * 2_000;
    batch(
        seq,
        1,
        vec![
            window(0, end, vec![(pid0, GIB, rank(0))]),
            window(1, end, vec![(101, GIB, rank(1))]),
        ],
    )
}

fn placements(s: &Cluster) -> Vec<Option<PodPlacement>> {
    let job = s.job_detail("job-k").expect("job seen");
    job.ranks.into_iter().map(|r| r.view.placement).collect()
}

#[test]
fn a_rank_keeps_the_placement_of_its_process_until_the_process_changes() {
    let mut s = Cluster::new(Limits::default());
    let out = s.apply_push_placed(&push(1, 100), &[placed(100, pod("trainer-0"))]);
    assert_eq!((out.windows_applied, out.windows_skipped), (2, 0));
    assert_eq!(placements(&s), [Some(pod("trainer-0")), None]);
    let jobs = s.jobs_view();
    assert_eq!(jobs.jobs[0].ranks[0].placement, Some(pod("trainer-0")));

    // A push without placements (protocol version 1) leaves it.
    s.apply_push(&push(2, 100));
    assert_eq!(placements(&s), [Some(pod("trainer-0")), None]);

    // A placement for a pid the windows do not hold changes nothing.
    s.apply_push_placed(&push(3, 100), &[placed(555, pod("elsewhere"))]);
    assert_eq!(placements(&s), [Some(pod("trainer-0")), None]);

    // The rank restarted in another process: the old pod is not its pod.
    s.apply_push(&push(4, 200));
    assert_eq!(placements(&s), [None, None]);
    s.apply_push_placed(&push(5, 200), &[placed(200, pod("trainer-0-retry"))]);
    assert_eq!(placements(&s), [Some(pod("trainer-0-retry")), None]);
}

#[test]
fn a_malformed_placement_is_skipped_and_counted_and_the_windows_still_apply() {
    let mut s = Cluster::new(Limits::default());
    let bad = PodPlacement {
        namespace: Some("Not A Label".into()),
        ..pod("trainer-0")
    };
    let empty = PodPlacement::default();
    let huge = PodPlacement {
        pod_name: Some("a".repeat(1 << 16)),
        ..PodPlacement::default()
    };
    let out = s.apply_push_placed(
        &push(1, 100),
        &[placed(100, bad), placed(101, empty), placed(101, huge)],
    );
    assert_eq!((out.windows_applied, out.windows_skipped), (2, 0));
    assert_eq!(s.counters().windows_skipped, 3);
    assert_eq!(placements(&s), [None, None]);

    // A re-sent batch is a duplicate: its placements are not counted again.
    let again = s.apply_push_placed(&push(1, 100), &[placed(100, PodPlacement::default())]);
    assert!(again.duplicate);
    assert_eq!(s.counters().windows_skipped, 3);
}

#[test]
fn where_a_pid_repeats_the_first_placement_wins() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push_placed(
        &push(1, 100),
        &[placed(100, pod("first")), placed(100, pod("second"))],
    );
    assert_eq!(placements(&s)[0], Some(pod("first")));
}

#[test]
fn the_older_snapshot_layout_reads_back_without_placements() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push_placed(&push(1, 100), &[placed(100, pod("trainer-0"))]);
    let old = postcard::to_allocvec(&ClusterV4::from(&s)).unwrap();
    let back: Cluster = postcard::from_bytes::<ClusterV4>(&old).unwrap().into();
    assert_eq!(placements(&back), [None, None]);
    assert_eq!(back.cluster_view(), s.cluster_view());

    // Without placements nothing is lost on the way.
    let mut plain = Cluster::new(Limits::default());
    plain.apply_push(&push(1, 100));
    let old = postcard::to_allocvec(&ClusterV4::from(&plain)).unwrap();
    let back: Cluster = postcard::from_bytes::<ClusterV4>(&old).unwrap().into();
    assert_eq!(back, plain);
    // And the current layout is not the older one.
    let current = postcard::to_allocvec(&plain).unwrap();
    assert_ne!(current, old);
}
