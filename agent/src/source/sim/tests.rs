//! What users of the simulator rely on: a consistent job across nodes,
//! determinism, NVML-like invariants, and each scenario's anomaly on its rank.

use super::*;
use gpumon_proto::StepRecord;

const GIB: u64 = 1 << 30;

fn sim(scenario: Scenario, nodes: u32, node_index: u32, gpus_per_node: u32) -> SimSource {
    SimSource::new(SimSettings::new(scenario, nodes, node_index, gpus_per_node)).unwrap()
}

/// The time `fraction` of the way through step `step`.
fn at(src: &SimSource, step: u64, fraction: f64) -> u64 {
    src.settings.start_ms + step * src.step_ms + (src.step_ms as f64 * fraction) as u64
}

/// Samples late in step `step` (after the peak, when the staircase is set).
fn sample_step(src: &mut SimSource, step: u64) -> Vec<GpuSample> {
    let t = at(src, step, 0.75);
    src.sample(t).unwrap()
}

/// NVML `used` of global rank `rank`'s process, if it is running.
fn proc_used(samples: &[GpuSample], rank: u32) -> Option<u64> {
    samples
        .iter()
        .flat_map(|s| &s.procs)
        .find(|p| p.rank.as_ref().map(|r| r.rank) == Some(rank))
        .map(|p| p.used_bytes)
}

/// Runs steps `0..steps` and returns each rank's process `used` per step.
fn used_per_step(src: &mut SimSource, steps: u64) -> Vec<Vec<Option<u64>>> {
    let ranks: Vec<u32> = src.ranks.iter().map(|r| r.info.rank).collect();
    (0..steps)
        .map(|k| {
            let s = sample_step(src, k);
            ranks.iter().map(|&r| proc_used(&s, r)).collect()
        })
        .collect()
}

#[test]
fn same_settings_and_times_give_equal_samples() {
    let mut a = sim(Scenario::Mixed, 2, 0, 8);
    let mut b = sim(Scenario::Mixed, 2, 0, 8);
    // Before the start, forwards, backwards, far ahead and back again.
    for t in [
        0,
        400,
        1_700,
        900,
        30_000,
        29_000,
        5_000_000,
        12,
        u64::MAX,
        7,
    ] {
        assert_eq!(a.sample(t).unwrap(), b.sample(t).unwrap(), "t = {t}");
    }
    assert_eq!(a.gpus(), b.gpus());
}

#[test]
fn different_seeds_give_different_jobs() {
    let mut settings = SimSettings::new(Scenario::Steady, 1, 0, 4);
    let mut a = SimSource::new(settings.clone()).unwrap();
    settings.seed = 2;
    let mut b = SimSource::new(settings).unwrap();
    let ua: Vec<_> = a.gpus().into_iter().map(|g| g.uuid).collect();
    let ub: Vec<_> = b.gpus().into_iter().map(|g| g.uuid).collect();
    assert!(ua.iter().all(|u| !ub.contains(u)));
    let (sa, sb) = (sample_step(&mut a, 20), sample_step(&mut b, 20));
    let used = |s: &[GpuSample]| s.iter().map(|g| g.used_bytes).collect::<Vec<_>>();
    assert_ne!(used(&sa), used(&sb));
}

#[test]
fn second_node_hosts_the_second_half_of_the_ranks() {
    let mut n0 = sim(Scenario::Steady, 2, 0, 4);
    let mut n1 = sim(Scenario::Steady, 2, 1, 4);
    let s = n1.sample(5_000).unwrap();
    assert_eq!(s.len(), 4);
    for (i, g) in s.iter().enumerate() {
        assert_eq!(g.gpu.index, i as u32);
        assert_eq!(g.gpu.name, GPU_NAME);
        assert_eq!(g.gpu.total_bytes, 85_899_345_920);
        assert_eq!(g.procs.len(), 1);
        let p = &g.procs[0];
        let r = p.rank.as_ref().unwrap();
        assert_eq!(r.rank, 4 + i as u32);
        assert_eq!(r.local_rank, i as u32);
        assert_eq!(r.world_size, 8);
        assert_eq!(r.job, "sim-job");
        assert_eq!(r.master_addr.as_deref(), Some("node-0"));
        assert_eq!(r.master_port, Some(29_500));
        assert_eq!(p.pid, 10_004 + i as u32);
    }
    let mut uuids: Vec<String> = n0.gpus().into_iter().map(|g| g.uuid).collect();
    uuids.extend(n1.gpus().into_iter().map(|g| g.uuid));
    assert!(uuids.iter().all(|u| u.starts_with("GPU-sim-")));
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
    // Stable: a new source with the same settings names the same GPUs.
    assert_eq!(sim(Scenario::Steady, 2, 1, 4).gpus(), n1.gpus());
    // Ranks of both nodes step together.
    assert_eq!(n0.step_ms, n1.step_ms);
    assert_eq!(n0.sample(5_000).unwrap()[0].procs[0].pid, 10_000);
}

#[test]
fn used_never_exceeds_total_and_covers_its_processes() {
    let mut src = sim(Scenario::Mixed, 1, 0, 8);
    for k in 0..1_500 {
        for g in sample_step(&mut src, k) {
            let procs: u64 = g.procs.iter().map(|p| p.used_bytes).sum();
            let reserved = g.reserved_bytes.unwrap();
            assert!(g.used_bytes + reserved <= g.gpu.total_bytes, "step {k}");
            assert!(g.used_bytes >= procs, "step {k}");
            assert!((400 << 20..=600 << 20).contains(&reserved));
            assert!(g.util_pct.is_some() && g.sm_clock_mhz.is_some() && g.power_w.is_some());
        }
    }
}

#[test]
fn steady_reserved_is_a_staircase_over_a_sawtooth() {
    let mut src = sim(Scenario::Steady, 1, 0, 4);
    let mut last = vec![0; 4];
    for k in 0..300 {
        for fraction in [0.05, 0.3, 0.5, 0.75, 0.95] {
            let t = at(&src, k, fraction);
            let s = src.sample(t).unwrap();
            for (i, g) in s.iter().enumerate() {
                let used = g.procs[0].used_bytes;
                assert!(used >= last[i], "rank {i} shrank at step {k}");
                last[i] = used;
            }
        }
        // Allocated drops by more than 10 GiB from the peak to the step's end.
        let rank = &src.ranks[0];
        let peak = rank.allocated_bytes(at(&src, k, 0.5));
        let end = rank.allocated_bytes(at(&src, k, 0.95));
        assert!(peak > end + 10 * GIB, "step {k}");
        assert!(rank.used_bytes() >= peak);
    }
    // Weights, optimizer and activations: a plausible footprint.
    assert!(
        last.iter().all(|&u| (45 * GIB..58 * GIB).contains(&u)),
        "{last:?}"
    );
}

#[test]
fn leak_grows_one_rank_until_it_dies_of_oom() {
    let mut src = sim(Scenario::Leak, 1, 0, 4);
    let used = used_per_step(&mut src, 2_400);
    let leaker = 2;
    // Over 300 steps the leaking rank grows; the others stay flat.
    let grown = used[300][leaker].unwrap() - used[5][leaker].unwrap();
    assert!(grown > 8 * GIB, "grew {grown}");
    for r in [0, 1, 3] {
        let drift = used[300][r].unwrap() - used[5][r].unwrap();
        assert!(drift < GIB, "rank {r} drifted {drift}");
    }
    // It runs out of memory after 5 minutes and before 2400 steps, and
    // stays gone; the others keep running.
    let died = used.iter().position(|u| u[leaker].is_none()).unwrap();
    assert!((300..2_400).contains(&died), "died at step {died}");
    assert!(used[died..].iter().all(|u| u[leaker].is_none()));
    assert!(used[died - 1][leaker].unwrap() > 70 * GIB);
    assert!(used.last().unwrap().iter().filter(|u| u.is_some()).count() == 3);
    // Its GPU idles, nearly empty.
    let g = &sample_step(&mut src, 2_400)[leaker];
    assert!(g.procs.is_empty());
    assert!(g.used_bytes < GIB);
    assert_eq!(g.util_pct, Some(0.0));
}

#[test]
fn leak_stays_off_nodes_that_do_not_host_rank_2() {
    let mut src = sim(Scenario::Leak, 2, 1, 2);
    assert_eq!(src.ranks[0].info.rank, 2);
    let mut other = sim(Scenario::Leak, 2, 0, 2);
    let used = used_per_step(&mut other, 300);
    for (late, early) in used[299].iter().zip(&used[5]) {
        assert!(late.unwrap() - early.unwrap() < GIB);
    }
    let used = used_per_step(&mut src, 300);
    assert!(used[299][0].unwrap() - used[5][0].unwrap() > 8 * GIB);
}

#[test]
fn fragmentation_grows_reserved_while_allocated_stays_flat() {
    let mut src = sim(Scenario::Fragmentation, 1, 0, 4);
    let used = used_per_step(&mut src, 300);
    let grown = used[299][1].unwrap() - used[5][1].unwrap();
    assert!(grown > 4 * GIB, "grew {grown}");
    for r in [0, 2, 3] {
        assert!(used[299][r].unwrap() - used[5][r].unwrap() < GIB);
    }
    // Allocated peaks of the fragmenting rank do not trend.
    let rank = &src.ranks[1];
    let peak = |k| rank.allocated_bytes(at(&src, k, 0.5));
    let (early, late) = (peak(5), peak(299));
    assert!(early.abs_diff(late) < GIB, "{early} vs {late}");
    // Near the device's capacity the allocator frees its cache and retries:
    // the fragmenting process never dies.
    let used = used_per_step(&mut src, 2_000);
    assert!(used.iter().all(|u| u[1].is_some()));
    assert!(used.windows(2).any(|w| w[1][1] < w[0][1]));
}

#[test]
fn imbalance_puts_rank_0_more_than_6_gib_above_the_rest() {
    let mut src = sim(Scenario::Imbalance, 1, 0, 8);
    let s = sample_step(&mut src, 50);
    let heavy = proc_used(&s, 0).unwrap();
    for r in 1..8 {
        let other = proc_used(&s, r).unwrap();
        assert!(heavy > other + 6 * GIB, "rank {r}: {heavy} vs {other}");
        assert!(heavy < other + 11 * GIB, "rank {r}: {heavy} vs {other}");
    }
}

#[test]
fn straggler_clocks_lower_with_normal_memory() {
    let mut src = sim(Scenario::Straggler, 1, 0, 8);
    for k in 0..50 {
        let s = sample_step(&mut src, k);
        let clock = |i: usize| s[i].sm_clock_mhz.unwrap();
        for i in (0..8).filter(|&i| i != 5) {
            assert!(clock(5) < clock(i) - 400.0, "step {k}");
            assert!(s[5].util_pct < s[i].util_pct);
            assert!(
                proc_used(&s, 5)
                    .unwrap()
                    .abs_diff(proc_used(&s, i as u32).unwrap())
                    < GIB
            );
        }
    }
    // A world of 4 makes its last rank the straggler.
    let mut small = sim(Scenario::Straggler, 1, 0, 4);
    let s = sample_step(&mut small, 3);
    assert!(s[3].sm_clock_mhz.unwrap() < 1500.0);
    assert!(s[2].sm_clock_mhz.unwrap() > 1900.0);
}

#[test]
fn mixed_plays_every_anomaly_on_its_own_rank() {
    let mut src = sim(Scenario::Mixed, 1, 0, 8);
    let used = used_per_step(&mut src, 300);
    let s = sample_step(&mut src, 300);
    assert!(used[299][2].unwrap() - used[5][2].unwrap() > 8 * GIB);
    assert!(used[299][0].unwrap() > used[299][1].unwrap() + 6 * GIB);
    assert!(s[5].sm_clock_mhz.unwrap() < 1500.0);
    assert!(s[1].sm_clock_mhz.unwrap() > 1900.0);
    assert_eq!(src.name(), "sim:mixed");
}

#[test]
fn bad_settings_are_rejected_with_a_reason() {
    let cases = [
        (
            SimSettings::new(Scenario::Steady, 0, 0, 8),
            "at least 1 node",
        ),
        (SimSettings::new(Scenario::Steady, 2, 2, 8), "node index 2"),
        (SimSettings::new(Scenario::Steady, 1, 0, 0), "got 0"),
        (SimSettings::new(Scenario::Steady, 1, 0, 17), "got 17"),
        (
            SimSettings {
                job: " ".into(),
                ..SimSettings::new(Scenario::Steady, 1, 0, 8)
            },
            "job id",
        ),
        (
            SimSettings::new(Scenario::Steady, u32::MAX, 0, 16),
            "too large",
        ),
    ];
    for (settings, expected) in cases {
        match SimSource::new(settings) {
            Err(SourceError::BadSimulation(msg)) => {
                assert!(msg.contains(expected), "{msg:?} lacks {expected:?}");
            }
            other => panic!("expected BadSimulation, got {other:?}"),
        }
    }
}

#[test]
fn times_before_the_start_show_the_loaded_job() {
    let settings = SimSettings {
        start_ms: 1_700_000_000_000,
        ..SimSettings::new(Scenario::Leak, 1, 0, 4)
    };
    let mut src = SimSource::new(settings).unwrap();
    let before = src.sample(0).unwrap();
    assert!(before.iter().all(|g| g.procs.len() == 1 && g.t_ms == 0));
    let base = before[0].procs[0].used_bytes;
    assert!((30 * GIB..40 * GIB).contains(&base), "{base}");
    let after = src.sample(1_700_000_010_000).unwrap();
    assert!(after[0].procs[0].used_bytes > base + 10 * GIB);
}

#[test]
fn name_says_sim_and_the_scenario() {
    for sc in Scenario::ALL {
        let src = sim(sc, 1, 0, 2);
        assert_eq!(src.name(), format!("sim:{}", sc.name()));
        assert_eq!(src.gpus().len(), 2);
    }
}

fn hooked(scenario: Scenario, seed: u64) -> SimSource {
    let settings = SimSettings {
        seed,
        hook: true,
        ..SimSettings::new(scenario, 1, 0, 8)
    };
    SimSource::new(settings).unwrap()
}

/// Samples every 250 ms for `seconds` and takes the hook records.
fn records(src: &mut SimSource, seconds: u64) -> Vec<HookRecord> {
    let mut out = Vec::new();
    for t in (0..=seconds * 1_000).step_by(250) {
        src.sample(t).unwrap();
        out.extend(src.take_hook_records());
    }
    out
}

#[test]
fn without_hook_the_simulator_reports_no_hook_records() {
    let mut src = sim(Scenario::Mixed, 1, 0, 8);
    for t in (0..20_000).step_by(250) {
        src.sample(t).unwrap();
    }
    assert!(src.take_hook_records().is_empty());
}

#[test]
fn hook_records_are_valid_deterministic_and_depend_on_the_seed() {
    let a = records(&mut hooked(Scenario::Mixed, 1), 30);
    let b = records(&mut hooked(Scenario::Mixed, 1), 30);
    assert_eq!(a, b);
    assert_ne!(a, records(&mut hooked(Scenario::Mixed, 2), 30));
    for r in &a {
        gpumon_core::hook_records::check_record(r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
        assert_eq!(r.subject().0, "sim-job");
    }
    // Each rank: one step record per step, numbered from 1, with sections.
    for rank in 0..8 {
        let steps: Vec<&StepRecord> = a
            .iter()
            .filter_map(|r| match r {
                HookRecord::Step(s) if s.rank == rank => Some(s),
                _ => None,
            })
            .collect();
        assert!(steps.len() >= 28, "rank {rank}: {} steps", steps.len());
        assert!(steps
            .iter()
            .enumerate()
            .all(|(i, s)| s.step == i as u64 + 1));
        assert!(steps.iter().all(|s| s.sections.len() == 4));
    }
    // One warm-up marker, from rank 0; every rank's "warm" snapshot.
    let markers: Vec<_> = a
        .iter()
        .filter_map(|r| match r {
            HookRecord::Event(e) if e.snapshot.is_none() => Some((e.rank, e.name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(markers, [(0, "warmup done")]);
    let mut snapshots: Vec<_> = a
        .iter()
        .filter_map(|r| match r {
            HookRecord::Event(e) if e.snapshot.is_some() => Some((e.rank, e.name.as_str())),
            _ => None,
        })
        .collect();
    snapshots.sort_unstable();
    assert_eq!(snapshots, (0..8).map(|r| (r, "warm")).collect::<Vec<_>>());
    // Time order across ranks, as one hand-over carries them.
    assert!(a.windows(2).all(|w| w[0].t_ms() <= w[1].t_ms()));
}

#[test]
fn the_straggler_computes_slower_and_its_peers_wait_for_it_in_backward() {
    let recs = records(&mut hooked(Scenario::Straggler, 1), 40);
    let mean = |rank: u32, section: &str| {
        let v: Vec<f64> = recs
            .iter()
            .filter_map(|r| match r {
                HookRecord::Step(s) if s.rank == rank => s
                    .sections
                    .iter()
                    .find(|(n, _)| n == section)
                    .map(|(_, ms)| *ms),
                _ => None,
            })
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    for peer in (0..8).filter(|&r| r != 5) {
        let ratio = mean(5, "forward") / mean(peer, "forward");
        assert!(
            (1.2..1.3).contains(&ratio),
            "forward vs rank {peer}: {ratio}"
        );
        // Lockstep: the peers' backward holds their wait for rank 5.
        let ratio = mean(5, "backward") / mean(peer, "backward");
        assert!(ratio < 0.95, "backward vs rank {peer}: {ratio}");
        let ratio = mean(5, "data") / mean(peer, "data");
        assert!(
            (0.97..1.03).contains(&ratio),
            "data vs rank {peer}: {ratio}"
        );
    }
}

#[test]
fn allocator_stats_match_the_memory_nvml_sees() {
    let mut src = hooked(Scenario::Mixed, 1);
    for t in (0..=60_000).step_by(250) {
        let samples = src.sample(t).unwrap();
        for r in src.take_hook_records() {
            let HookRecord::Alloc(a) = r else { continue };
            let s = &a.stats;
            assert!(s.allocated <= s.reserved, "{a:?}");
            assert!(
                s.inactive_split.unwrap() <= s.reserved - s.allocated,
                "{a:?}"
            );
            assert!(s.peak_allocated.unwrap() >= s.allocated);
            assert!(s.peak_reserved.unwrap() >= s.reserved);
            // NVML's per-process used is reserved plus a CUDA context; the
            // sample comes after the reading, when reserved may have grown
            // by a segment or two after the first steps (never, once the
            // staircase is set).
            let used = proc_used(&samples, a.rank).unwrap();
            let context = used - s.reserved;
            assert!(context >= 500 << 20, "{a:?}: {used}");
            if t > 30_000 && a.rank != 2 {
                assert!(context <= 516 << 20, "{a:?}: {used}");
            } else if t > 5_000 {
                assert!(context <= (516 << 20) + GIB, "{a:?}: {used}");
            }
        }
    }
}

#[test]
fn a_fragmenting_rank_reports_growing_inactive_splits() {
    let recs = records(&mut hooked(Scenario::Fragmentation, 1), 120);
    let split = |rank: u32, within: std::ops::Range<u64>| {
        recs.iter()
            .filter_map(|r| match r {
                HookRecord::Alloc(a) if a.rank == rank && within.contains(&a.t_ms) => {
                    a.stats.inactive_split
                }
                _ => None,
            })
            .max()
            .unwrap()
    };
    assert!(split(1, 110_000..120_001) > split(1, 0..10_000) + 2 * GIB);
    for healthy in [0, 2, 3] {
        assert_eq!(split(healthy, 0..120_001), 0);
    }
}

#[test]
fn hook_records_nobody_takes_are_bounded_and_counted() {
    let mut src = hooked(Scenario::Steady, 1);
    for t in (0..=120_000).step_by(250) {
        src.sample(t).unwrap();
    }
    let kept = src.take_hook_records();
    assert_eq!(kept.len(), MAX_QUEUED_HOOK_RECORDS);
    assert!(src.dropped_hook_records() > 0);
    // The newest are kept.
    assert!(kept.last().unwrap().t_ms() > 119_000);
}
