//! Raft under faults: real `gpumon coordinator` replicas on loopback, fed by
//! simulated agents, while a test kills, restarts, freezes and thaws them.
//!
//! - killing the leader loses no committed window, writes resume within
//!   3 s, and the new leader's OOM forecasts carry on where the old one's
//!   stopped; the killed replica, restarted, converges to the same digest;
//! - a whole-cluster restart (a new term) keeps the state digest, the
//!   counters and the job views; a re-sent batch changes nothing but the
//!   replicated duplicate count, the next seq is applied;
//! - a follower that was down while the log was purged catches up by
//!   installing a snapshot sent in chunks;
//! - with the leader and one follower of five frozen, the other three elect
//!   a leader, commit every push and serve local and linearizable reads.
//!
//! One cluster runs at a time (the tests share a lock); every wait is bounded
//! and every test has an overall deadline.

mod support;

use std::future::Future;
use std::time::Duration;

use gpumon_proto::api::{ClusterView, IngestCounters, JobDetail, JobSummary, JobWithAnalysis};
use support::cluster::{brief, Cluster};
use support::pusher::{Plan, Pusher, JOB};
use tokio::time::Instant;

/// One cluster at a time: a CI box may have two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Overall bound of one test.
const TEST_WITHIN: Duration = Duration::from_secs(240);
/// Bound on electing a leader (first formation, or after a fault).
const ELECT_WITHIN: Duration = Duration::from_secs(15);
/// Bound on replicas agreeing on one applied index and digest.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);
/// Longest acceptable write outage after the leader dies.
const FAILOVER_WITHIN: Duration = Duration::from_secs(3);

async fn bounded(test: impl Future<Output = ()>) {
    let _one_at_a_time = SERIAL.lock().await;
    tokio::time::timeout(TEST_WITHIN, test)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {TEST_WITHIN:?}"));
}

fn job_path(linearizable: bool) -> String {
    let q = if linearizable {
        "?consistency=linearizable"
    } else {
        ""
    };
    format!("/api/v1/jobs/{JOB}{q}")
}

/// A linearizable read of `path` from replica `id`, retried while the
/// cluster answers 503 (no leader confirmed yet).
async fn linearizable<T: serde::de::DeserializeOwned>(c: &Cluster, id: u64, path: &str) -> T {
    let sep = if path.contains('?') { '&' } else { '?' };
    let path = format!("{path}{sep}consistency=linearizable");
    c.wait(
        Duration::from_secs(10),
        &format!("a linearizable read of {path} from replica {id}"),
        || async { c.get_from::<T>(id, &path).await.map(|(v, _)| v) },
    )
    .await
}

/// Every rank of the job holds each pushed window time exactly once, in order.
fn assert_history_exact(detail: &JobDetail, plan: &Plan, batches: u64, replica: u64) {
    assert_eq!(
        detail.ranks.len(),
        plan.world_size() as usize,
        "replica {replica}: every rank"
    );
    let expected: Vec<u64> = (1..=batches).map(|s| plan.window_end_ms(s)).collect();
    for r in &detail.ranks {
        let times: Vec<u64> = r.history.iter().map(|h| h.t_ms).collect();
        if times != expected {
            let missing = expected.iter().filter(|t| !times.contains(t)).count();
            let mut sorted = times.clone();
            sorted.sort_unstable();
            sorted.dedup();
            panic!(
                "replica {replica}, rank {}: {} history points for {} pushed windows \
                 ({missing} missing, {} repeated, in order: {})",
                r.view.rank,
                times.len(),
                expected.len(),
                times.len() - sorted.len(),
                times.windows(2).all(|w| w[0] < w[1]),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_loses_nothing_and_writes_resume_quickly() {
    bounded(leader_kill()).await;
}

async fn leader_kill() {
    let mut c = Cluster::start(3, &[]).await;
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let plan = Plan::new(4, 2, 200, Duration::from_millis(40));
    let world = plan.world_size() as usize;
    let mut pusher = Pusher::start(c.urls(), plan.clone());

    // Let the engine warm up and forecast every rank before the fault.
    let before: JobSummary = c
        .wait(
            Duration::from_secs(90),
            "an OOM forecast for every rank on the leader",
            || async {
                let job: JobWithAnalysis = c.get_from(leader, &job_path(false)).await?.0;
                let a = job.analysis.ok_or("no analysis yet")?;
                let n = a.ranks.iter().filter(|r| r.forecast.is_some()).count();
                if a.ranks.len() == world && n == world {
                    Ok(a)
                } else {
                    Err(format!(
                        "{n} of {} ranks forecast after {} batches",
                        a.ranks.len(),
                        pusher.batches_acked()
                    ))
                }
            },
        )
        .await;
    let acked_at_kill = pusher.batches_acked();
    let t_kill = Instant::now();
    c.kill9(leader).await;
    assert!(
        acked_at_kill < u64::from(plan.agents) * plan.batches,
        "the leader must die while the agents still push ({acked_at_kill} batches acked)"
    );

    let new_leader = c.wait_leader(ELECT_WITHIN).await;
    assert_ne!(new_leader, leader, "a surviving replica leads");
    let old_index = (leader - 1) as usize;
    let first = c
        .wait(
            Duration::from_secs(10),
            "a commit by a surviving replica after the kill",
            || async {
                pusher
                    .acked_after(t_kill)
                    .into_iter()
                    .find(|a| a.by != old_index)
                    .map(|a| a.at)
                    .ok_or_else(|| "none yet".to_owned())
            },
        )
        .await;
    let outage = first - t_kill;
    eprintln!("leader {leader} killed; replica {new_leader} leads; first commit after {outage:?}");
    assert!(
        outage <= FAILOVER_WITHIN,
        "writes resumed {outage:?} after the leader died (at most {FAILOVER_WITHIN:?})"
    );

    // The new leader goes on from the old one's analysis: same first
    // observation per rank, a forecast already, and no older one.
    let after: JobWithAnalysis = linearizable(&c, new_leader, &job_path(false)).await;
    let after = after
        .analysis
        .expect("the new leader has the job's analysis");
    assert_eq!(after.first_t, before.first_t, "the job did not start over");
    for old in &before.ranks {
        let new = after
            .ranks
            .iter()
            .find(|r| r.rank == old.rank)
            .unwrap_or_else(|| panic!("rank {} on the new leader", old.rank));
        assert_eq!(
            new.first_t, old.first_t,
            "rank {} did not start over",
            old.rank
        );
        let (old_f, new_f) = (old.forecast.unwrap(), new.forecast);
        let new_f =
            new_f.unwrap_or_else(|| panic!("rank {} has no forecast on the new leader", old.rank));
        assert!(
            new_f.t >= old_f.t,
            "rank {}: forecast at t={} on the new leader, t={} before the kill",
            old.rank,
            new_f.t,
            old_f.t
        );
    }

    pusher.join(Duration::from_secs(120)).await;
    let total_windows = u64::from(plan.agents) * plan.batches * u64::from(plan.gpus);
    assert_eq!(pusher.windows_acked(), total_windows, "every window acked");

    let leader = c.wait_leader(ELECT_WITHIN).await;
    let view: ClusterView = linearizable(&c, leader, "/api/v1/cluster").await;
    eprintln!(
        "ingest after failover: {:?}; duplicate acks seen by agents: {}",
        view.ingest,
        pusher.duplicates()
    );
    assert_eq!(
        view.ingest.windows_applied,
        pusher.windows_acked(),
        "every acked window applied once, none lost"
    );
    assert_eq!(view.ingest.windows_skipped, 0);
    assert_eq!(
        view.ingest.batches_applied,
        u64::from(plan.agents) * plan.batches
    );
    assert!(view.ingest.batches_duplicate >= pusher.duplicates() as u64);

    let applied = c.status(leader).await.applied_index.unwrap();
    let live = c.live();
    let converged = c.wait_converged(&live, applied, CONVERGE_WITHIN).await;
    for &id in &live {
        let v: ClusterView = c.get(id, "/api/v1/cluster").await;
        assert_eq!(v.ingest, view.ingest, "replica {id}'s counters");
        let job: JobWithAnalysis = c.get(id, &job_path(false)).await;
        assert_history_exact(&job.detail, &plan, plan.batches, id);
    }

    c.restart(old_index as u64 + 1).await;
    let all = c.ids();
    let back = c
        .wait_converged(&all, converged.applied_index.unwrap(), CONVERGE_WITHIN)
        .await;
    let v: ClusterView = c.get(old_index as u64 + 1, "/api/v1/cluster").await;
    assert_eq!(v.ingest, view.ingest, "the restarted replica's counters");
    eprintln!(
        "restarted replica converged at index {:?}, digest {}",
        back.applied_index, back.state_digest
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cluster_restart_keeps_the_same_digest_and_nothing_is_resent() {
    bounded(whole_cluster_restart()).await;
}

async fn whole_cluster_restart() {
    let mut c = Cluster::start(3, &[]).await;
    let all = c.ids();
    c.wait_leader(ELECT_WITHIN).await;
    let plan = Plan::new(2, 2, 30, Duration::from_millis(20));
    let mut pusher = Pusher::start(c.urls(), plan.clone());
    pusher.join(Duration::from_secs(60)).await;

    let leader = c.wait_leader(ELECT_WITHIN).await;
    let counters: IngestCounters = linearizable::<ClusterView>(&c, leader, "/api/v1/cluster")
        .await
        .ingest;
    assert_eq!(counters.windows_applied, pusher.windows_acked());
    let applied = c.status(leader).await.applied_index.unwrap();
    let before = c.wait_converged(&all, applied, CONVERGE_WITHIN).await;
    let job_before: serde_json::Value = c.get(leader, &job_path(false)).await;

    for &id in &all {
        c.kill9(id).await;
    }
    // The old leader comes back last: were it first, it could resume its own
    // committed term; this way the others elect a new leader in a new term,
    // whose blank entry moves the applied index but must not move the digest.
    let followers: Vec<u64> = all.iter().copied().filter(|&id| id != leader).collect();
    for &id in &followers {
        c.restart(id).await;
    }
    let new_leader = c.wait_leader(ELECT_WITHIN).await;
    assert_ne!(new_leader, leader);
    c.restart(leader).await;
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let after = c
        .wait_converged(&all, before.applied_index.unwrap(), CONVERGE_WITHIN)
        .await;
    for &id in &all {
        let v: ClusterView = c.get(id, "/api/v1/cluster").await;
        assert_eq!(
            v.ingest, counters,
            "replica {id}'s counters after the restart"
        );
        let job: serde_json::Value = c.get(id, &job_path(false)).await;
        assert!(
            job == job_before,
            "replica {id}'s job view and analysis after the restart differ from before"
        );
    }
    // Same counters and job views on every replica, so the data is the same:
    // the digest, which hashes only the replicated data, must be too.
    assert_eq!(
        after.state_digest,
        before.state_digest,
        "the digest of the replicated data survives a restart of every replica\n\
         before: {}\nafter:  {}",
        brief(&before),
        brief(&after)
    );

    // Re-sending the last acked batch changes nothing but the duplicate count.
    let last = pusher.last_acked(0);
    assert_eq!(
        pusher.send(0, last).await,
        Ok(true),
        "a re-send is a duplicate"
    );
    let v: ClusterView = linearizable(&c, leader, "/api/v1/cluster").await;
    assert_eq!(
        v.ingest,
        IngestCounters {
            batches_duplicate: counters.batches_duplicate + 1,
            ..counters
        }
    );
    let job: serde_json::Value = linearizable(&c, leader, &job_path(false)).await;
    assert!(job == job_before, "a duplicate changed the job's view");

    // The next seq is new and applied.
    assert_eq!(pusher.send(0, last + 1).await, Ok(false));
    let v: ClusterView = linearizable(&c, leader, "/api/v1/cluster").await;
    assert_eq!(
        v.ingest.windows_applied,
        counters.windows_applied + u64::from(plan.gpus)
    );
    assert_eq!(v.ingest.batches_applied, counters.batches_applied + 1);
    let applied = c.status(leader).await.applied_index.unwrap();
    c.wait_converged(&all, applied, CONVERGE_WITHIN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_of_several_mib_reach_every_replica() {
    bounded(large_pushes()).await;
}

/// Pushes of about 3 MiB from four agents at once: the leader gathers at
/// most 4 MiB into an entry and sends at most 4 MiB per AppendEntries, so
/// every follower takes each call within openraft's 100 ms and keeps up
/// (16 such entries in one call were retried without end on a slow
/// follower).
async fn large_pushes() {
    let c = Cluster::start(3, &[]).await;
    let all = c.ids();
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let mut plan = Plan::new(4, 1, 8, Duration::ZERO);
    plan.padding_records = 3_000;
    let mut pusher = Pusher::start(c.urls(), plan.clone());
    pusher.join(Duration::from_secs(120)).await;
    assert_eq!(pusher.batches_acked(), 32);
    let applied = c.status(leader).await.applied_index.unwrap();
    let s = c.wait_converged(&all, applied, CONVERGE_WITHIN).await;
    let v: ClusterView = c.get(leader, "/api/v1/cluster").await;
    eprintln!(
        "32 pushes of about 3 MiB: every replica at index {:?}",
        s.applied_index
    );
    assert_eq!(v.ingest.windows_applied, 32);
    for &id in &all {
        let v: ClusterView = c.get(id, "/api/v1/cluster").await;
        assert_eq!(v.ingest.windows_applied, 32, "replica {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_was_down_catches_up_by_snapshot() {
    bounded(follower_catches_up_by_snapshot()).await;
}

async fn follower_catches_up_by_snapshot() {
    let mut c = Cluster::start(
        3,
        &[
            "--snapshot-every-entries",
            "50",
            "--snapshot-chunk-bytes",
            "4096",
        ],
    )
    .await;
    let all = c.ids();
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let follower = *all.iter().find(|&&id| id != leader).unwrap();
    let plan = Plan::new(4, 4, 120, Duration::from_millis(5));
    let mut pusher = Pusher::start(c.urls(), plan.clone());

    // A little data on every replica, then the follower goes down.
    c.wait(Duration::from_secs(30), "the first batches", || async {
        let n = pusher.batches_acked();
        if n >= 20 {
            Ok(())
        } else {
            Err(format!("{n} batches acked"))
        }
    })
    .await;
    pusher.pause();
    let applied = c.status(leader).await.applied_index.unwrap();
    let down_at = c
        .wait_converged(&all, applied, CONVERGE_WITHIN)
        .await
        .applied_index
        .unwrap();
    c.kill9(follower).await;
    pusher.resume();
    pusher.join(Duration::from_secs(120)).await;

    // The leader snapshotted and purged the log past what the follower has.
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let purged = c
        .wait(
            Duration::from_secs(20),
            "the leader to purge its log past the follower's last index",
            || async {
                let s = c.try_status(leader).await?;
                match (s.snapshot_index, s.purged_index) {
                    (Some(_), Some(p)) if p > down_at => Ok(p),
                    (snap, purged) => Err(format!(
                        "snapshot {snap:?}, purged {purged:?}, follower stopped at {down_at}"
                    )),
                }
            },
        )
        .await;
    let snapshot_bytes = std::fs::metadata(c.data_dir(leader).join("snapshot.bin"))
        .expect("the leader's snapshot file")
        .len();
    assert!(
        snapshot_bytes > 8 * 4096,
        "the snapshot ({snapshot_bytes} bytes) takes several 4096-byte chunks"
    );

    c.restart(follower).await;
    let applied = c.status(leader).await.applied_index.unwrap();
    let caught_up = Instant::now();
    c.wait_converged(&all, applied, CONVERGE_WITHIN).await;
    let s = c.status(follower).await;
    eprintln!(
        "follower {follower} (down at {down_at}) caught up in {:?} past purged index {purged}: \
         snapshot {:?}, snapshot file {snapshot_bytes} bytes",
        caught_up.elapsed(),
        s.snapshot_index
    );
    assert!(
        s.snapshot_index.is_some_and(|i| i >= purged),
        "the follower installed a snapshot covering the purged log (snapshot {:?}, purged {purged})",
        s.snapshot_index
    );
    let from_leader: JobWithAnalysis = c.get(leader, &job_path(false)).await;
    let from_follower: JobWithAnalysis = c.get(follower, &job_path(false)).await;
    assert_history_exact(&from_follower.detail, &plan, plan.batches, follower);
    assert_eq!(from_follower.detail, from_leader.detail);
    let v: ClusterView = c.get(follower, "/api/v1/cluster").await;
    assert_eq!(v.ingest.windows_applied, pusher.windows_acked());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_minority_does_not_stop_the_majority() {
    bounded(frozen_minority()).await;
}

async fn frozen_minority() {
    let mut c = Cluster::start(5, &[]).await;
    let all = c.ids();
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let plan = Plan::new(3, 2, 80, Duration::from_millis(30));
    let mut pusher = Pusher::start(c.urls(), plan.clone());
    c.wait(Duration::from_secs(30), "the first batches", || async {
        let n = pusher.batches_acked();
        if n >= 15 {
            Ok(())
        } else {
            Err(format!("{n} batches acked"))
        }
    })
    .await;

    let follower = *all.iter().find(|&&id| id != leader).unwrap();
    let frozen_at = Instant::now();
    c.freeze(leader);
    c.freeze(follower);
    let new_leader = c.wait_leader(ELECT_WITHIN).await;
    assert!(
        ![leader, follower].contains(&new_leader),
        "a live replica leads"
    );
    pusher.join(Duration::from_secs(90)).await;
    let resumed = pusher
        .acked_after(frozen_at)
        .into_iter()
        .find(|a| a.by != (leader - 1) as usize)
        .map(|a| a.at - frozen_at);
    eprintln!(
        "froze {leader} and {follower}; {new_leader} leads; commits resumed after {resumed:?}"
    );
    let total = u64::from(plan.agents) * plan.batches * u64::from(plan.gpus);
    assert_eq!(pusher.windows_acked(), total);

    let reader = *c
        .live()
        .iter()
        .find(|&&id| id != new_leader)
        .expect("a live follower");
    for id in c.live() {
        eprintln!(
            "DEBUG {id}: {}",
            support::cluster::brief(&c.status(id).await)
        );
    }
    let local: ClusterView = c.get(reader, "/api/v1/cluster").await;
    let (lin, served_by) = c
        .wait(
            Duration::from_secs(10),
            "a linearizable read through a live follower",
            || async {
                c.get_from::<ClusterView>(reader, "/api/v1/cluster?consistency=linearizable")
                    .await
            },
        )
        .await;
    assert_eq!(
        lin.ingest.windows_applied, total,
        "the linearizable read shows every committed window"
    );
    assert!(local.ingest.windows_applied <= total);
    assert_eq!(
        served_by.as_deref(),
        Some(c.addr(new_leader)),
        "the follower forwarded the read to the leader"
    );

    c.thaw(leader);
    c.thaw(follower);
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let applied = c.status(leader).await.applied_index.unwrap();
    let done = c.wait_converged(&all, applied, CONVERGE_WITHIN).await;
    for &id in &all {
        let v: ClusterView = c.get(id, "/api/v1/cluster").await;
        assert_eq!(v.ingest.windows_applied, total, "replica {id}");
    }
    eprintln!(
        "all 5 converged at index {:?}, digest {}",
        done.applied_index, done.state_digest
    );
}
