use super::super::{AllocObs, EngineConfig, GpuObs, RankObs};
use super::*;
use crate::records::ProcRecord;

const GIB: u64 = 1 << 30;
const TOTAL: u64 = 80 * GIB;

/// One rank on GPU 0, a window and an allocator record every second for
/// `seconds`: `reserved(t)` by the allocator, `outside(t)` more by NVML.
fn run(seconds: u32, reserved: impl Fn(f64) -> u64, outside: impl Fn(f64) -> u64) -> Engine {
    let mut e = Engine::new(EngineConfig::default());
    e.observe_rank(&RankObs {
        t: 0.0,
        job: "job",
        rank: 0,
        local_rank: 0,
        world_size: 1,
        node: "node-0",
        gpu: 0,
        pid: 1000,
    });
    for s in 1..=seconds {
        let t = f64::from(s);
        let held = reserved(t);
        e.observe_alloc(&AllocObs {
            t: t - 0.5,
            job: "job".into(),
            rank: 0,
            allocated: held / 2,
            reserved: held,
            peak_allocated: None,
            inactive_split: None,
            alloc_retries: None,
            ooms: None,
            device_total: None,
            cap: None,
            cap_source: None,
        });
        let used = held + outside(t);
        let procs = [ProcRecord { pid: 1000, used }];
        e.observe_gpu(&GpuObs {
            t,
            node: "node-0",
            gpu: 0,
            uuid: "GPU-0",
            name: "test",
            total: TOTAL,
            used_low: used,
            used_high: used,
            used,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: &procs,
        });
    }
    e
}

fn outside_alerts(e: &Engine) -> Vec<&crate::engine::Alert> {
    e.alerts()
        .filter(|a| a.kind == AlertKind::OutsideMemory)
        .collect()
}

#[test]
fn a_steady_context_and_a_growing_cache_raise_nothing() {
    // The allocator grows 20 MiB a second; what lies outside it stays.
    let e = run(
        300,
        |t| 10 * GIB + (t * 20.0) as u64 * (1 << 20),
        |_| 3 * GIB / 2,
    );
    assert!(outside_alerts(&e).is_empty(), "{:?}", outside_alerts(&e));
    let track = e.outside_of("job", 0).expect("measured");
    assert_eq!(
        (track.baseline(), track.level()),
        (Some(3 * GIB / 2), Some(3 * GIB / 2))
    );
}

#[test]
fn buffers_of_a_new_process_group_are_named_and_clear_when_freed() {
    // At 200 s, 2 GiB more outside the allocator (a new communicator's
    // buffers); freed at 260 s.
    let extra = |t: f64| {
        if (200.0..260.0).contains(&t) {
            2 * GIB
        } else {
            0
        }
    };
    let e = run(300, |_| 10 * GIB, |t| 3 * GIB / 2 + extra(t));
    let alerts = outside_alerts(&e);
    let [a] = alerts.as_slice() else {
        panic!("one episode: {alerts:?}")
    };
    assert_eq!((a.job.as_deref(), a.rank), (Some("job"), Some(0)));
    assert!(
        (200.0..=215.0).contains(&a.t),
        "raised {} s after the growth",
        a.t - 200.0
    );
    assert!(
        a.message.contains("from 1.5 GiB to 3.5 GiB") && a.message.contains("+133 %"),
        "{}",
        a.message
    );
    assert!(a.resolved_t.is_some_and(|t| t >= 260.0), "{a:?}");
}

#[test]
fn a_spike_while_the_allocator_is_read_late_is_not_growth() {
    // Every 30 s NVML sees 3 GiB the allocator reports only a second later.
    let lag = |t: f64| if t as u64 % 30 == 0 { 3 * GIB } else { 0 };
    let e = run(300, |_| 10 * GIB, |t| GIB + lag(t));
    assert!(outside_alerts(&e).is_empty(), "{:?}", outside_alerts(&e));
}

#[test]
fn a_small_context_must_grow_by_the_floor_not_only_the_share() {
    // 300 MiB to 600 MiB is +100 %, but only 300 MiB: under the 512 MiB floor.
    let e = run(
        300,
        |_| 10 * GIB,
        |t| if t < 200.0 { 300 << 20 } else { 600 << 20 },
    );
    assert!(outside_alerts(&e).is_empty(), "{:?}", outside_alerts(&e));
}

#[test]
fn an_ended_rank_leaves_no_figures() {
    let mut e = run(60, |_| 10 * GIB, |_| GIB);
    assert!(e.outside_of("job", 0).is_some());
    e.end_rank(61.0, "job", 0);
    assert!(e.outside_of("job", 0).is_none());
}
