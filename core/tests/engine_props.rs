//! Property test: whatever the engine is fed (NaN and infinite times, absurd
//! byte counts, times out of order, ranks beyond the world size, unknown
//! sections) it never panics, keeps its bounds, and counts what it set aside.

use gpumon_core::engine::{AllocObs, Engine, EngineConfig, GpuObs, RankObs};
use gpumon_core::records::ProcRecord;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Obs {
    Gpu {
        t: f64,
        gpu: u32,
        total: u64,
        low: u64,
        high: u64,
        pid: u32,
    },
    Rank {
        t: f64,
        rank: u32,
        world: u32,
        gpu: u32,
        pid: u32,
    },
    Alloc {
        t: f64,
        rank: u32,
        allocated: u64,
        reserved: u64,
        retries: u64,
    },
    Step {
        t: f64,
        rank: u32,
        step: u64,
        ms: f64,
        section: u8,
    },
}

fn time() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0..3000.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => -1e9..1e12f64,
    ]
}

fn bytes() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..(90u64 << 30), 1 => Just(u64::MAX), 1 => Just(0u64)]
}

fn obs() -> impl Strategy<Value = Obs> {
    prop_oneof![
        (time(), 0u32..4, bytes(), bytes(), bytes(), 0u32..6).prop_map(
            |(t, gpu, total, low, high, pid)| Obs::Gpu {
                t,
                gpu,
                total,
                low,
                high,
                pid
            }
        ),
        (time(), 0u32..10, 0u32..6, 0u32..4, 0u32..6).prop_map(|(t, rank, world, gpu, pid)| {
            Obs::Rank {
                t,
                rank,
                world,
                gpu,
                pid,
            }
        }),
        (time(), 0u32..6, bytes(), bytes(), 0u64..100).prop_map(
            |(t, rank, allocated, reserved, retries)| Obs::Alloc {
                t,
                rank,
                allocated,
                reserved,
                retries
            }
        ),
        (
            time(),
            0u32..6,
            0u64..50,
            prop_oneof![0.0..5000.0f64, Just(f64::NAN), Just(-1.0)],
            0u8..12
        )
            .prop_map(|(t, rank, step, ms, section)| Obs::Step {
                t,
                rank,
                step,
                ms,
                section
            }),
    ]
}

fn feed(e: &mut Engine, o: &Obs) {
    let sections = [
        "data", "forward", "backward", "a", "b", "c", "d", "e", "f", "g", "h", "i",
    ];
    match *o {
        Obs::Gpu {
            t,
            gpu,
            total,
            low,
            high,
            pid,
        } => {
            let procs = [ProcRecord { pid, used: high }];
            e.observe_gpu(&GpuObs {
                t,
                node: "n",
                gpu,
                uuid: "u",
                name: "m",
                total,
                used_low: low,
                used_high: high,
                used: low,
                util: Some(f64::NAN),
                sm_clock_mhz: Some(-5.0),
                power_w: None,
                procs: &procs,
            });
        }
        Obs::Rank {
            t,
            rank,
            world,
            gpu,
            pid,
        } => e.observe_rank(&RankObs {
            t,
            job: "j",
            rank,
            local_rank: rank,
            world_size: world,
            node: "n",
            gpu,
            pid,
        }),
        Obs::Alloc {
            t,
            rank,
            allocated,
            reserved,
            retries,
        } => e.observe_alloc(&AllocObs {
            t,
            job: "j".into(),
            rank,
            allocated,
            reserved,
            peak_allocated: Some(allocated),
            inactive_split: Some(reserved),
            alloc_retries: Some(retries),
            ooms: None,
            device_total: None,
            cap: None,
            cap_source: None,
        }),
        Obs::Step {
            t,
            rank,
            step,
            ms,
            section,
        } => {
            let name = sections[section as usize];
            e.observe_step(
                t,
                "j",
                rank,
                step,
                ms,
                [(name, ms), ("forward", ms / 2.0)],
                None,
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn never_panics_and_stays_bounded(stream in proptest::collection::vec(obs(), 0..600)) {
        let cfg = EngineConfig { max_alerts: 16, max_gpus: 3, ..EngineConfig::default() };
        let mut e = Engine::new(cfg);
        for o in &stream {
            feed(&mut e, o);
        }
        prop_assert!(e.alerts().len() <= 16);
        prop_assert!(e.devices().len() <= 3);
        let c = e.counters();
        prop_assert_eq!(c.gpu + c.rank + c.alloc + c.step, stream.len() as u64);
        let nonfinite = stream.iter().filter(|o| match o {
            Obs::Gpu { t, .. } | Obs::Rank { t, .. } | Obs::Alloc { t, .. } | Obs::Step { t, .. } => !t.is_finite(),
        }).count() as u64;
        prop_assert_eq!(c.invalid, nonfinite);
        // Views never panic either.
        let _ = e.jobs();
    }
}
