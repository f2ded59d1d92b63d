//! Fuzz target of the coordinator's own check of hook records,
//! `gpumon_core::hook_records::check_record`, and of `HookData::apply`, which
//! feeds the records that pass to the detection engine. A coordinator
//! trusts no agent, so any `HookRecord` postcard can decode may arrive.
//!
//! Inputs (proptest strategies): records of every kind with extreme values:
//! NaN, infinities, negative zero and subnormal durations, `u64::MAX` and
//! zero times and bytes, empty, huge and control-character names, huge
//! details, up to 64 sections, ranks across `u32`.
//!
//! Property: `check_record` never panics and refuses what cannot be true
//! (a non-finite or negative duration, allocated over reserved, an empty
//! job); `HookData::apply` never panics, applies exactly the records
//! `check_record` passes and counts the rest as skipped.
//!
//! Cases: `GPUMON_FUZZ_CASES` or `GPUMON_FUZZ_SCALE` (default below);
//! proptest's generator is seeded from `GPUMON_FUZZ_SEED` (fixed by
//! default, no persistence file); see docs/testing.md.

use gpumon_testkit::fuzz as kit;

use std::cell::RefCell;

use gpumon_core::engine::{Engine, EngineConfig};
use gpumon_core::hook_records::{check_record, HookData};
use gpumon_proto::{
    AllocRecord, AllocStats, CollectiveArrival, EventRecord, GroupWait, HookRecord, StepRecord,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Default cases of each property.
const CASES: u64 = 2_000;

/// A runner of the kit's case count, seeded from the kit's seed.
fn runner() -> TestRunner {
    let config = Config {
        cases: u32::try_from(kit::cases(CASES)).unwrap_or(u32::MAX),
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&kit::seed().to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

fn extreme_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MIN_POSITIVE / 2.0),
        Just(f64::MAX),
        Just(86_400_000.0),
        Just(86_400_000.000_001),
        any::<f64>(),
        0.0..1e5f64,
    ]
}

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(u64::MAX),
        Just(1 << 50),
        Just((1 << 50) + 1),
        any::<u64>(),
        0..1u64 << 40,
    ]
}

fn extreme_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{1,12}",
        "\\PC{0,8}",
        ".{0,4}[\u{0}-\u{1f}\u{7f}\u{85}].{0,4}",
        (120usize..140).prop_map(|n| "x".repeat(n)),
        (0usize..3).prop_map(|n| "\u{1F600}".repeat(30 + n)),
    ]
}

fn stats() -> impl Strategy<Value = AllocStats> {
    (
        (extreme_u64(), extreme_u64()),
        prop::array::uniform6(prop::option::of(extreme_u64())),
    )
        .prop_map(|((allocated, reserved), o)| AllocStats {
            allocated,
            reserved,
            active: o[0],
            inactive_split: o[1],
            peak_allocated: o[2],
            peak_reserved: o[3],
            alloc_retries: o[4],
            ooms: o[5],
        })
}

fn record() -> impl Strategy<Value = HookRecord> {
    // Mostly a few plausible subjects, so that records reach the engine.
    let subject = || {
        (
            extreme_u64(),
            prop_oneof![3 => "job-[0-3]", 1 => extreme_name()],
            prop_oneof![3 => 0u32..8, 1 => any::<u32>()],
        )
    };
    let sections = prop::collection::vec((extreme_name(), extreme_f64()), 0..64);
    let waits = prop::collection::vec(
        (
            prop_oneof![3 => "[0-3]|p2p", 1 => extreme_name()],
            any::<u32>(),
            extreme_f64(),
        )
            .prop_map(|(group, calls, wait_ms)| GroupWait {
                group,
                calls,
                wait_ms,
            }),
        0..12,
    );
    let collectives = prop::collection::vec(
        (
            prop_oneof![3 => "[0-3]", 1 => extreme_name()],
            prop_oneof![3 => 1u64..64, 1 => any::<u64>()],
            extreme_name(),
            extreme_f64(),
            extreme_f64(),
            extreme_f64(),
        )
            .prop_map(
                |(group, seq, op, entered_ms, left_ms, wait_ms)| CollectiveArrival {
                    group,
                    seq,
                    op,
                    entered_ms,
                    left_ms,
                    wait_ms,
                },
            ),
        0..40,
    );
    let detail = prop::option::of(prop_oneof![
        "\\PC{0,16}",
        (1020usize..1030).prop_map(|n| "d".repeat(n))
    ]);
    prop_oneof![
        (subject(), stats()).prop_map(|((t_ms, job, rank), stats)| {
            HookRecord::Alloc(AllocRecord {
                limit: None,
                t_ms,
                job,
                rank,
                stats,
            })
        }),
        (
            subject(),
            any::<u64>(),
            extreme_f64(),
            sections,
            (waits, collectives)
        )
            .prop_map(
                |((t_ms, job, rank), step, duration_ms, sections, (waits, collectives))| {
                    HookRecord::Step(StepRecord {
                        group: None,
                        t_ms,
                        job,
                        rank,
                        step,
                        duration_ms,
                        sections,
                        waits,
                        collectives,
                    })
                }
            ),
        (subject(), extreme_name(), detail, prop::option::of(stats())).prop_map(
            |((t_ms, job, rank), name, detail, snapshot)| {
                HookRecord::Event(EventRecord {
                    t_ms,
                    job,
                    rank,
                    name,
                    detail,
                    snapshot,
                })
            }
        ),
    ]
}

/// What `check_record` must refuse whatever else it does.
fn obviously_impossible(r: &HookRecord) -> bool {
    let bad_ms = |ms: f64| !ms.is_finite() || ms < 0.0;
    r.subject().0.is_empty()
        || match r {
            HookRecord::Alloc(a) => a.stats.allocated > a.stats.reserved,
            HookRecord::Step(s) => {
                bad_ms(s.duration_ms)
                    || s.sections.iter().any(|(_, ms)| bad_ms(*ms))
                    || s.collectives.len() > 32
                    || s.collectives
                        .iter()
                        .any(|c| c.seq == 0 || bad_ms(c.entered_ms) || c.left_ms < c.entered_ms)
            }
            HookRecord::Event(e) => e.snapshot.is_some_and(|s| s.allocated > s.reserved),
            HookRecord::Stall(s) => s.entered.len() > 16,
        }
}

#[test]
fn check_record_refuses_the_impossible_and_never_panics() {
    runner()
        .run(&record(), |r| {
            let verdict = check_record(&r);
            if obviously_impossible(&r) {
                prop_assert!(verdict.is_err(), "{r:?} passed");
            }
            if let Err(e) = verdict {
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn apply_feeds_exactly_the_records_that_pass() {
    let batches = prop::collection::vec(record(), 0..12);
    // One engine and hook state through all the batches, as on a replica.
    let state = RefCell::new((Engine::new(EngineConfig::default()), HookData::default()));
    let applied = std::cell::Cell::new(0u64);
    runner()
        .run(&batches, |records| {
            let (engine, hook) = &mut *state.borrow_mut();
            let before = hook.counters();
            let passing = records.iter().filter(|r| check_record(r).is_ok()).count() as u64;
            hook.apply(engine, &records);
            applied.set(applied.get() + passing);
            let after = hook.counters();
            prop_assert_eq!(after.records_applied - before.records_applied, passing);
            prop_assert_eq!(
                after.records_skipped - before.records_skipped,
                records.len() as u64 - passing
            );
            Ok(())
        })
        .unwrap();
    eprintln!("hook records: {} applied", applied.get());
    assert!(applied.get() > 0, "some records reach the engine");
}
