//! Engine tests on small synthetic clusters: one job, `world` ranks on one
//! node, one sample per second, driven through the public `observe_*` API.

use super::*;
use crate::records::ProcRecord;

const GIB: f64 = (1u64 << 30) as f64;
const TOTAL: u64 = 40 * (1 << 30);

/// Per-second memory (bytes) of each rank, and section times (ms) per step.
struct Scenario {
    world: u32,
    seconds: u32,
    memory: Box<dyn Fn(u32, f64) -> f64>,
    forward_ms: Box<dyn Fn(u32, u64) -> f64>,
    alloc: bool,
}

impl Scenario {
    fn steady(world: u32, seconds: u32) -> Self {
        Self {
            world,
            seconds,
            memory: Box::new(|rank, t| 20.0 * GIB + rank as f64 * 0.05 * GIB + wobble(rank, t)),
            forward_ms: Box::new(|_, _| 300.0),
            alloc: false,
        }
    }

    fn run(&self) -> Engine {
        let mut e = Engine::new(EngineConfig::default());
        self.feed(&mut e, 0, self.seconds);
        e
    }

    fn feed(&self, e: &mut Engine, from: u32, to: u32) {
        if from == 0 {
            for rank in 0..self.world {
                e.observe_rank(&RankObs {
                    t: 0.5,
                    job: "job",
                    rank,
                    local_rank: rank,
                    world_size: self.world,
                    node: "node-0",
                    gpu: rank,
                    pid: 1000 + rank,
                });
            }
        }
        for s in from..to {
            let t = s as f64;
            for rank in 0..self.world {
                let used = if s < 3 {
                    0.0
                } else {
                    (self.memory)(rank, t).min(TOTAL as f64)
                } as u64;
                let procs = [ProcRecord {
                    pid: 1000 + rank,
                    used,
                }];
                e.observe_gpu(&GpuObs {
                    t,
                    node: "node-0",
                    gpu: rank,
                    uuid: "GPU-x",
                    name: "test",
                    total: TOTAL,
                    used_low: used,
                    used_high: used,
                    used,
                    util: Some(95.0),
                    sm_clock_mhz: Some(1980.0),
                    power_w: Some(600.0),
                    procs: if used > 0 { &procs } else { &[] },
                });
                if self.alloc && s >= 3 {
                    e.observe_alloc(&AllocObs {
                        t: t + 0.001,
                        job: "job".into(),
                        rank,
                        allocated: (used as f64 * 0.9) as u64,
                        reserved: (used as f64 * 0.97) as u64,
                        peak_allocated: None,
                        inactive_split: Some(0),
                        alloc_retries: Some(0),
                        ooms: Some(0),
                        device_total: None,
                        cap: None,
                        cap_source: None,
                    });
                }
                if s >= 3 {
                    let step = u64::from(s - 3);
                    let fwd = (self.forward_ms)(rank, step) * jitter(rank, step);
                    let sections = [
                        ("data", 20.0),
                        ("forward", fwd),
                        ("backward", 2.0 * 300.0 * jitter(rank + 7, step)),
                    ];
                    e.observe_step(t + 0.9, "job", rank, step, 1000.0, sections, None);
                }
            }
        }
    }
}

/// Deterministic, independent noise of up to +-3 % per step (splitmix64).
fn jitter(rank: u32, step: u64) -> f64 {
    let mut z = (u64::from(rank) << 32 | step).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    1.0 + 0.06 * ((z % 1000) as f64 / 1000.0 - 0.5)
}

/// A small staircase wobble, like the caching allocator's segments.
fn wobble(rank: u32, t: f64) -> f64 {
    if (t as u64 + u64::from(rank)) % 7 == 0 {
        0.02 * GIB
    } else {
        0.0
    }
}

fn kinds(e: &Engine) -> Vec<(AlertKind, Option<u32>)> {
    e.alerts().map(|a| (a.kind, a.rank)).collect()
}

/// The detectors' verdicts: every alert but the fixed memory levels, which
/// state where memory is rather than judge it.
fn verdicts(e: &Engine) -> Vec<(AlertKind, Option<u32>)> {
    kinds(e)
        .into_iter()
        .filter(|(k, _)| *k != AlertKind::MemoryLevel)
        .collect()
}

#[test]
fn a_steady_job_raises_nothing() {
    let e = Scenario::steady(8, 900).run();
    assert!(kinds(&e).is_empty(), "{:?}", kinds(&e));
    let job = e.job("job").unwrap();
    assert_eq!(job.ranks.len(), 8);
    assert!(job.forecast.is_none());
}

#[test]
fn a_leaking_rank_gets_an_early_oom_forecast_and_a_leak_alert() {
    let rate = 20.0 * 1024.0 * 1024.0;
    let mut sc = Scenario::steady(8, 900);
    sc.memory = Box::new(move |rank, t| {
        let base = 20.0 * GIB + wobble(rank, t);
        if rank == 2 {
            base + rate * t
        } else {
            base
        }
    });
    let e = sc.run();
    let oom_at = 20.0 * GIB / rate;
    let oom = e
        .alerts()
        .find(|a| a.kind == AlertKind::OomPredicted)
        .expect("an OOM forecast");
    assert_eq!(oom.rank, Some(2));
    assert!(
        oom_at - oom.t >= 600.0,
        "only {:.0} s of warning",
        oom_at - oom.t
    );
    let predicted = oom.predicted_oom_t.unwrap();
    assert!(
        (predicted - oom_at).abs() < 60.0,
        "predicted {predicted:.0}, real {oom_at:.0}"
    );
    let [lo, hi] = oom.predicted_oom_interval.unwrap();
    assert!(lo <= predicted && predicted <= hi);
    assert!(e
        .alerts()
        .any(|a| a.kind == AlertKind::Leak && a.rank == Some(2)));
    assert!(e.alerts().all(|a| a.rank == Some(2)), "{:?}", kinds(&e));
    let job = e.job("job").unwrap();
    assert_eq!(job.forecast.as_ref().map(|f| f.rank), Some(2));
}

#[test]
fn an_eval_level_shift_is_no_oom() {
    let mut sc = Scenario::steady(4, 900);
    sc.memory = Box::new(|rank, t| {
        let base = 30.0 * GIB + wobble(rank, t);
        if t >= 300.0 {
            base + 3.0 * GIB
        } else {
            base
        }
    });
    let e = sc.run();
    assert!(verdicts(&e).is_empty(), "{:?}", verdicts(&e));
}

#[test]
fn a_single_spike_is_no_oom() {
    let mut sc = Scenario::steady(4, 600);
    sc.memory = Box::new(|rank, t| {
        let base = 34.0 * GIB + wobble(rank, t);
        if (200.0..204.0).contains(&t) {
            base + 5.0 * GIB
        } else {
            base
        }
    });
    let e = sc.run();
    assert!(verdicts(&e).is_empty(), "{:?}", verdicts(&e));
    // 39 of 40 GiB for four seconds is past the critical level all the same.
    assert!(kinds(&e).iter().all(|(k, _)| *k == AlertKind::MemoryLevel));
    assert_eq!(
        kinds(&e).len(),
        4,
        "one level episode per rank: {:?}",
        kinds(&e)
    );
}

#[test]
fn a_heavy_rank_is_imbalanced_with_its_excess() {
    let mut sc = Scenario::steady(8, 400);
    sc.memory = Box::new(|rank, t| {
        let base = 20.0 * GIB + wobble(rank, t);
        if rank == 5 {
            base + 5.0 * GIB
        } else {
            base
        }
    });
    let e = sc.run();
    let a: Vec<_> = e.alerts().collect();
    assert_eq!(a.len(), 1, "{:?}", kinds(&e));
    assert_eq!((a[0].kind, a[0].rank), (AlertKind::Imbalance, Some(5)));
    let excess = a[0].excess_bytes.unwrap();
    assert!((excess / GIB - 5.0).abs() < 0.2, "{excess}");
    let job = e.job("job").unwrap();
    for r in &job.ranks {
        let shown = r
            .imbalance_excess_bytes
            .expect("every steady rank is compared")
            / GIB;
        let expected = if r.rank == 5 { 5.0 } else { 0.0 };
        assert!((shown - expected).abs() < 0.2, "rank {}: {shown}", r.rank);
    }
}

#[test]
fn a_slow_rank_is_a_straggler_naming_its_section() {
    let e = slow_rank_six().run();
    let a: Vec<_> = e.alerts().collect();
    assert_eq!(a.len(), 1, "{:?}", kinds(&e));
    assert_eq!((a[0].kind, a[0].rank), (AlertKind::Straggler, Some(6)));
    assert_eq!(a[0].section.as_deref(), Some("forward"), "{}", a[0].message);
    let slowdown = a[0].slowdown.unwrap();
    assert!(
        (1.2..1.4).contains(&slowdown),
        "{slowdown} at {}: {}",
        a[0].t,
        a[0].message
    );
    let job = e.job("job").unwrap();
    for r in &job.ranks {
        // Over its own work: `data` and `forward` (`backward` carries the wait).
        let shown = r.slowdown.expect("every rank is scored");
        let expected = if r.rank == 6 {
            (20.0 + 390.0) / (20.0 + 300.0)
        } else {
            1.0
        };
        assert!((shown - expected).abs() < 0.02, "rank {}: {shown}", r.rank);
    }
    assert!(
        a[0].t - 153.0 <= 30.0,
        "raised {:.0} s after the slowdown",
        a[0].t - 153.0
    );
}

#[test]
fn a_dead_rank_resolves_its_alerts() {
    let rate = 40.0 * 1024.0 * 1024.0;
    let mut sc = Scenario::steady(4, 700);
    sc.memory = Box::new(move |rank, t| {
        let used = 20.0 * GIB + if rank == 1 { rate * t } else { 0.0 };
        if used >= TOTAL as f64 {
            0.0
        } else {
            used
        }
    });
    let e = sc.run();
    let oom = e
        .alerts()
        .find(|a| a.kind == AlertKind::OomPredicted)
        .unwrap();
    assert!(oom.resolved_t.is_some(), "{oom:?}");
    let job = e.job("job").unwrap();
    assert!(job.ranks[1].ended_t.is_some());
    assert!(job.ranks[0].ended_t.is_none());
}

#[test]
fn state_survives_a_snapshot_round_trip_and_continues_identically() {
    let rate = 20.0 * 1024.0 * 1024.0;
    let mut sc = Scenario::steady(4, 800);
    sc.alloc = true;
    sc.memory = Box::new(move |rank, t| 20.0 * GIB + if rank == 3 { rate * t } else { 0.0 });
    let mut straight = Engine::new(EngineConfig::default());
    sc.feed(&mut straight, 0, 800);

    let mut first = Engine::new(EngineConfig::default());
    sc.feed(&mut first, 0, 333);
    let bytes = postcard::to_allocvec(&first).unwrap();
    let mut restored: Engine = postcard::from_bytes(&bytes).unwrap();
    assert!(restored == first, "the round trip changed the state");
    sc.feed(&mut restored, 333, 800);
    assert!(restored == straight, "the restored engine diverged");
    assert!(straight
        .alerts()
        .any(|a| a.kind == AlertKind::Leak && a.rank == Some(3)));
}

#[test]
fn bounds_hold_and_are_counted() {
    let cfg = EngineConfig {
        max_gpus: 2,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg);
    for gpu in 0..5 {
        e.observe_gpu(&GpuObs {
            t: 1.0,
            node: "n",
            gpu,
            uuid: "u",
            name: "m",
            total: TOTAL,
            used_low: 1,
            used_high: 1,
            used: 1,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: &[],
        });
    }
    assert_eq!(e.devices().len(), 2);
    assert_eq!(e.counters().over_limit, 3);
}

/// A firing alert says what is true now: when the leak speeds up, the one
/// active leak alert carries the new rate and text, and still says when it
/// first fired; the OOM alert follows the latest forecast the same way.
#[test]
fn a_firing_alert_follows_the_latest_evidence_and_keeps_when_it_first_fired() {
    let (slow, fast) = (8.0 * 1024.0 * 1024.0, 24.0 * 1024.0 * 1024.0);
    let mut sc = Scenario::steady(4, 900);
    sc.memory = Box::new(move |rank, t| {
        let base = 10.0 * GIB + wobble(rank, t);
        if rank != 1 {
            return base;
        }
        if t < 450.0 {
            base + slow * t
        } else {
            base + slow * 450.0 + fast * (t - 450.0)
        }
    });
    let e = sc.run();
    let leaks: Vec<_> = e
        .alerts()
        .filter(|a| a.kind == AlertKind::Leak && a.rank == Some(1))
        .collect();
    assert_eq!(leaks.len(), 1, "one episode: {:?}", kinds(&e));
    let leak = leaks[0];
    assert!(leak.resolved_t.is_none(), "still firing");
    assert!(
        leak.t < 450.0,
        "first fired on the slow leak, at {}",
        leak.t
    );
    let rate = leak.rate_bytes_per_s.unwrap();
    assert!(
        rate > 1.5 * slow,
        "the rate is the latest fit's: {rate:.0} B/s"
    );
    assert!(leak.message.contains("leaks about"), "{}", leak.message);
    let oom = e
        .alerts()
        .find(|a| a.kind == AlertKind::OomPredicted && a.rank == Some(1))
        .cloned();
    if let Some(oom) = oom {
        assert!(oom.updated_t > oom.t, "the forecast was refreshed");
    }
}

/// 1,030 hook-only jobs (more than `max_jobs`) report for 30 s and go
/// silent, as when their nodes stop reporting; five minutes later a job
/// that leaks to its OOM starts. Jobs never seen to end must not keep it
/// from being tracked.
fn after_silent_jobs(cfg: EngineConfig) -> Engine {
    let mut e = Engine::new(cfg);
    for i in 0..1030u32 {
        for k in 0..3 {
            e.observe_alloc(&AllocObs {
                t: -400.0 + 10.0 * f64::from(k),
                job: format!("gone-{i}").into(),
                rank: 0,
                allocated: 1 << 30,
                reserved: 1 << 30,
                peak_allocated: None,
                inactive_split: None,
                alloc_retries: None,
                ooms: None,
                device_total: None,
                cap: None,
                cap_source: None,
            });
        }
    }
    let rate = 20.0 * 1024.0 * 1024.0;
    let mut sc = Scenario::steady(8, 900);
    sc.memory = Box::new(move |rank, t| {
        let base = 20.0 * GIB + wobble(rank, t);
        base + if rank == 2 { rate * t } else { 0.0 }
    });
    sc.feed(&mut e, 0, sc.seconds);
    e
}

#[test]
fn jobs_that_go_silent_are_forgotten_and_leave_room_for_new_ones() {
    let e = after_silent_jobs(EngineConfig::default());
    assert!(e.tracks_job("job"));
    assert!(!e.tracks_job("gone-0"));
    assert!(e
        .alerts()
        .any(|a| a.kind == AlertKind::Leak && a.rank == Some(2)));
    let job = e.job("job").unwrap();
    assert_eq!(job.forecast.as_ref().map(|f| f.rank), Some(2));
    // The same data with forgetting turned off: the engine is full, and
    // the leaking job is never tracked.
    let never = after_silent_jobs(EngineConfig {
        silent_s: 0.0,
        ..EngineConfig::default()
    });
    assert!(!never.tracks_job("job"));
    assert!(never.alerts().all(|a| a.kind != AlertKind::Leak));
}

#[test]
fn a_quiet_job_is_kept_until_silent_s_and_a_silent_gpu_goes_with_its_alerts() {
    let mut e = Engine::new(EngineConfig::default());
    let gpu = |e: &mut Engine, t: f64, node: &str| {
        e.observe_gpu(&GpuObs {
            t,
            node,
            gpu: 0,
            uuid: "GPU-x",
            name: "test",
            total: TOTAL,
            used_low: TOTAL - 1,
            used_high: TOTAL - 1,
            used: TOTAL - 1,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: &[],
        })
    };
    let step = |e: &mut Engine, t: f64, job: &str| {
        e.observe_step(t, job, 0, t as u64, 1000.0, [("forward", 10.0)], None);
    };
    for s in 0..60 {
        gpu(&mut e, f64::from(s), "gone");
        step(&mut e, f64::from(s), "quiet");
    }
    assert_eq!(e.devices().len(), 1);
    let level = |e: &Engine| {
        e.alerts()
            .find(|a| a.kind == AlertKind::MemoryLevel)
            .map(|a| a.resolved_t)
    };
    assert_eq!(level(&e), Some(None), "a full GPU has an open level alert");
    // Another node keeps data time going; "quiet" speaks once at 250 s.
    let silent_s = e.config().silent_s;
    for s in 60..540 {
        gpu(&mut e, f64::from(s), "live");
        if s == 250 {
            step(&mut e, 250.0, "quiet");
        }
        assert!(e.tracks_job("quiet"), "at {s} s");
    }
    assert!(250.0 + silent_s > 540.0);
    assert_eq!(e.devices().len(), 1, "the silent node's GPU is forgotten");
    assert!(level(&e).is_some_and(|resolved| resolved.is_some()));
    for s in 540..700 {
        gpu(&mut e, f64::from(s), "live");
    }
    assert!(!e.tracks_job("quiet"), "silent since 250 s");
    // A forgotten job that speaks again starts afresh.
    step(&mut e, 1000.0, "quiet");
    assert!(e.tracks_job("quiet"));
}

#[test]
fn the_configuration_survives_a_snapshot_with_only_what_differs_from_the_defaults() {
    let default_bytes = postcard::to_allocvec(&Engine::new(EngineConfig::default())).unwrap();
    let mut cfg = EngineConfig::default();
    cfg.straggler.min_duration_s = 30.0;
    cfg.forecast.horizon_s = f64::INFINITY;
    cfg.silent_s = 0.0;
    let bytes = postcard::to_allocvec(&Engine::new(cfg.clone())).unwrap();
    let back: Engine = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back.config(), &cfg);
    // Three changed values take a few dozen bytes; the defaults none.
    assert!(bytes.len() > default_bytes.len());
    assert!(
        bytes.len() < default_bytes.len() + 120,
        "{} bytes",
        bytes.len()
    );
    let plain: Engine = postcard::from_bytes(&default_bytes).unwrap();
    assert_eq!(plain.config(), &EngineConfig::default());
}

fn job_setting(key: &str, value: &str) -> crate::settings::SettingsChange {
    crate::settings::SettingsChange {
        job: Some("job".into()),
        set: vec![(key.into(), value.into())],
        ..Default::default()
    }
}

/// Rank 6's forward is 30 % longer from step 150: its peers wait 90 ms of
/// each 1 s step for it (9 %).
fn slow_rank_six() -> Scenario {
    let mut sc = Scenario::steady(8, 400);
    sc.forward_ms = Box::new(|rank, step| {
        if rank == 6 && step >= 150 {
            390.0
        } else {
            300.0
        }
    });
    sc
}

#[test]
fn a_jobs_own_loss_floor_holds_its_straggler_back_and_a_reset_applies_from_then_on() {
    let sc = slow_rank_six();
    let mut e = Engine::new(EngineConfig::default());
    e.change_settings(&job_setting("straggler.min_loss_frac", "0.2"))
        .unwrap();
    sc.feed(&mut e, 0, 250);
    assert!(
        !kinds(&e).contains(&(AlertKind::Straggler, Some(6))),
        "a 9 % loss is under the job's 20 % floor: {:?}",
        kinds(&e)
    );
    assert_eq!(
        e.settings().for_job("other-job").straggler.min_loss_frac,
        EngineConfig::default().straggler.min_loss_frac,
        "another job keeps the cluster's floor"
    );
    e.change_settings(&crate::settings::SettingsChange {
        job: Some("job".into()),
        reset_all: true,
        ..Default::default()
    })
    .unwrap();
    sc.feed(&mut e, 250, 400);
    let raised: Vec<f64> = e
        .alerts()
        .filter(|a| a.kind == AlertKind::Straggler && a.rank == Some(6))
        .map(|a| a.t)
        .collect();
    assert!(
        matches!(raised.as_slice(), [t] if *t >= 250.0 && *t - 250.0 <= 60.0),
        "named once, after the reset: {raised:?}"
    );
}

/// `max_ranks_per_job` holds in all jobs together, not only per job: hook
/// records alone (no window to bound them) for more jobs than it allows
/// leave no more tracks; a job that ended makes room (its snapshots and
/// step times go with it), a live one does not.
#[test]
fn ranks_in_all_jobs_stay_within_the_limit_and_ended_jobs_make_room() {
    let mut e = Engine::new(EngineConfig {
        max_ranks_per_job: 4,
        ..EngineConfig::default()
    });
    let alloc = |e: &mut Engine, t: f64, job: &str, rank: u32| {
        e.observe_alloc(&AllocObs {
            t,
            job: job.into(),
            rank,
            allocated: 1 << 30,
            reserved: 1 << 30,
            peak_allocated: None,
            inactive_split: None,
            alloc_retries: None,
            ooms: None,
            device_total: None,
            cap: None,
            cap_source: None,
        });
    };
    for rank in 0..4 {
        alloc(&mut e, 1.0, "a", rank);
    }
    alloc(&mut e, 2.0, "b", 0);
    assert_eq!(e.ranks_tracked(), 4);
    assert!(
        !e.tracks_job("b"),
        "no job made for a rank that cannot be kept"
    );
    assert_eq!(e.counters().over_limit, 1);
    for rank in 0..4 {
        e.end_rank(3.0, "a", rank);
    }
    for rank in 0..4 {
        alloc(&mut e, 4.0, "b", rank);
    }
    assert!(!e.tracks_job("a"), "the ended job made room");
    assert!(e.take_forgot_jobs());
    assert_eq!(e.ranks_tracked(), 4);
    alloc(&mut e, 5.0, "c", 0);
    assert!(!e.tracks_job("c") && e.tracks_rank("b", 3));
    assert_eq!(e.counters().over_limit, 2);
}
