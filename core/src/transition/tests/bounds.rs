//! A refused push leaves nothing behind, and no value in a push, however
//! absurd, makes the transition overflow or panic.

use gpumon_proto::{ActionAck, ActionOutcome, HookRecord, PushBatch};

use super::super::*;
use super::{alloc, fresh, push, window};

const GIB: u64 = 1 << 30;
const T0: u64 = 1_700_000_000_000;

#[test]
fn a_refused_push_applies_none_of_its_records() {
    let mut r = fresh();
    r.apply(push(1, vec![window(0, T0, GIB)], vec![]), false);
    let forged = push(
        u64::MAX,
        vec![window(0, T0 + 1, GIB)],
        vec![alloc(T0, 0, GIB)],
    );
    let out = r.apply(forged, true);
    assert!(out.result.refused && !out.result.duplicate);
    assert_eq!(out.result.windows_skipped, 1);
    assert!(out.applied.is_empty());
    assert_eq!(r.hook.counters().records_applied, 0);
}

#[test]
fn extreme_values_neither_overflow_nor_panic() {
    let extremes = [0, 1, T0, u64::MAX - 1, u64::MAX];
    for &seq in &extremes {
        for &t in &extremes {
            for started in [false, true] {
                let mut r = fresh();
                if started {
                    r.apply(push(1, vec![window(0, T0, GIB)], vec![]), false);
                }
                let mut w = window(1, t, GIB);
                w.start_ms = 0;
                let Command::V1(CommandV1::Push(mut batch)) =
                    push(seq, vec![w, window(0, t, GIB)], vec![alloc(t, 0, GIB)])
                else {
                    unreachable!("push builds a push");
                };
                batch.incarnation = t;
                batch.dropped_batches = u64::MAX;
                batch.acks.push(ActionAck {
                    id: u64::MAX,
                    t_ms: t,
                    outcome: ActionOutcome::Failed { reason: "x".into() },
                    response: None,
                });
                apply_twice(&mut r, batch);
                assert!(r.cluster.now_ms() <= T0.max(t));
            }
        }
    }
}

fn apply_twice(r: &mut Replicated, batch: PushBatch) {
    let command = Command::V1(CommandV1::Push(batch));
    r.apply(command.clone(), true);
    r.apply(command, true);
    let _ = (r.cluster.cluster_view(), r.cluster.jobs_view(), r.now_t());
}

/// The worst hook records one push can carry, for `jobs` jobs of `ranks`
/// ranks each: allocator statistics, a step with `sections` new section
/// names, a marker and `names` named snapshots per rank.
fn worst_records(
    t_ms: u64,
    prefix: &str,
    jobs: u32,
    ranks: u32,
    names: u32,
    sections: u32,
) -> Vec<HookRecord> {
    use gpumon_proto::{AllocRecord, AllocStats, EventRecord, StepRecord};
    let stats = AllocStats {
        allocated: GIB,
        reserved: 2 * GIB,
        ..AllocStats::default()
    };
    let mut out = Vec::new();
    for j in 0..jobs {
        let job = format!("{prefix}-job-{j}");
        for rank in 0..ranks {
            out.push(HookRecord::Alloc(AllocRecord {
                limit: None,
                t_ms,
                job: job.clone(),
                rank,
                stats,
            }));
            out.push(HookRecord::Step(StepRecord {
                group: None,
                waits: Default::default(),
                collectives: Vec::new(),
                t_ms,
                job: job.clone(),
                rank,
                step: 1,
                duration_ms: 100.0,
                sections: (0..sections)
                    .map(|s| (format!("{prefix}-section-{s}"), 1.0))
                    .collect(),
            }));
            out.push(HookRecord::Event(EventRecord {
                t_ms,
                job: job.clone(),
                rank,
                name: format!("{prefix}-mark-{rank}"),
                detail: None,
                snapshot: None,
            }));
            for n in 0..names {
                out.push(HookRecord::Event(EventRecord {
                    t_ms,
                    job: job.clone(),
                    rank,
                    name: format!("{prefix}-snapshot-{n}"),
                    detail: None,
                    snapshot: Some(stats),
                }));
            }
        }
    }
    out
}

/// Hook records for many more jobs, ranks, snapshot names and sections
/// than the configured limits (4 jobs, 8 ranks) leave the engine, the step
/// times and the named snapshots within those limits, not within their
/// constants (1,024 jobs, 131,072 ranks), and count what they left out.
#[test]
fn hook_records_past_the_configured_limits_are_left_out_and_counted() {
    use crate::hook_records::{MAX_MEMORY_SNAPSHOTS_PER_JOB, MAX_SECTIONS_PER_RANK};
    let (max_jobs, max_ranks) = (4, 8);
    let limits = crate::cluster::Limits {
        max_ranks,
        ..crate::cluster::Limits::default()
    };
    let engine = crate::engine::EngineConfig {
        max_jobs,
        max_ranks_per_job: max_ranks,
        ..crate::engine::EngineConfig::default()
    };
    let mut r = Replicated::new(limits, &engine);
    for (seq, prefix) in [(1, "a"), (2, "b"), (3, "c")] {
        let hook = worst_records(T0 + seq * 1_000, prefix, 10, 20, 80, 32);
        r.apply(push(seq, vec![], hook), false);
    }
    assert!(r.engine.jobs_tracked() <= max_jobs);
    assert_eq!(r.engine.ranks_tracked(), max_ranks, "in all jobs together");
    assert!(r.engine.counters().over_limit > 0);
    assert!(r.steps.ranks() <= max_ranks);
    for (_, ranks) in r.steps.jobs() {
        for steps in ranks.values() {
            assert!(steps.sections.len() <= MAX_SECTIONS_PER_RANK);
        }
    }
    let book = r.hook.snapshots();
    let kept: Vec<_> = ["a", "b", "c"]
        .iter()
        .flat_map(|p| (0..10).map(move |j| format!("{p}-job-{j}")))
        .filter_map(|job| book.job(&job))
        .collect();
    assert!(!kept.is_empty() && kept.len() <= max_jobs);
    for sets in &kept {
        assert!(sets.len() <= MAX_MEMORY_SNAPSHOTS_PER_JOB);
        assert!(sets.values().all(|s| s.ranks.len() <= max_ranks));
    }
    assert!(book.entries() <= max_ranks * MAX_MEMORY_SNAPSHOTS_PER_JOB);
    assert!(
        r.hook.counters().records_skipped > 0,
        "refused snapshots counted"
    );
    // A restored copy counts the same.
    let back: Replicated = postcard::from_bytes(&postcard::to_allocvec(&r).unwrap()).unwrap();
    assert_eq!(back.engine.ranks_tracked(), max_ranks);
    assert_eq!(back.hook.snapshots().entries(), book.entries());
}
