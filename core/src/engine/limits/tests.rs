//! One rank on one 80 GiB GPU, one sample a second, with and without the
//! limits its hook can report.

use gpumon_proto::{CapSource, DeviceLimit, MemoryCap};

use super::super::{AlertKind, AllocObs, Engine, EngineConfig, GpuObs, RankObs, Severity};
use crate::records::ProcRecord;

const GIB: u64 = 1 << 30;
const MIB: f64 = (1u64 << 20) as f64;
const TOTAL: u64 = 80 * GIB;
/// What the rank holds outside its allocator (context, NCCL).
const OUTSIDE: u64 = GIB;
const PID: u32 = 1000;

/// The rank's device limit, as its hook reports it.
fn capped(bytes: u64) -> DeviceLimit {
    DeviceLimit {
        device_total: Some(TOTAL),
        cap: Some(MemoryCap {
            bytes,
            source: CapSource::MemoryFraction,
        }),
    }
}

struct Run {
    /// Allocator `reserved` at second `t`.
    reserved: Box<dyn Fn(f64) -> u64>,
    limit: Option<DeviceLimit>,
    /// Another process on the GPU and what it holds.
    other: Option<u64>,
    seconds: u32,
}

impl Run {
    fn new(reserved: impl Fn(f64) -> u64 + 'static, seconds: u32) -> Self {
        Self {
            reserved: Box::new(reserved),
            limit: None,
            other: None,
            seconds,
        }
    }

    fn engine(&self) -> Engine {
        let mut e = Engine::new(EngineConfig::default());
        e.observe_rank(&RankObs {
            t: 0.5,
            job: "job",
            rank: 0,
            local_rank: 0,
            world_size: 1,
            node: "node-0",
            gpu: 0,
            pid: PID,
        });
        for s in 1..self.seconds {
            let t = f64::from(s);
            let reserved = (self.reserved)(t);
            let own = reserved + OUTSIDE;
            let mut procs = vec![ProcRecord {
                pid: PID,
                used: own,
            }];
            procs.extend(self.other.map(|used| ProcRecord { pid: 2000, used }));
            let used = procs.iter().map(|p| p.used).sum::<u64>().min(TOTAL);
            let (device_total, cap, cap_source) = match self.limit {
                Some(l) => (
                    l.device_total,
                    l.cap.map(|c| c.bytes),
                    l.cap.map(|c| c.source),
                ),
                None => (None, None, None),
            };
            e.observe_alloc(&AllocObs {
                t: t - 0.5,
                job: "job".into(),
                rank: 0,
                allocated: reserved / 10 * 9,
                reserved,
                peak_allocated: None,
                inactive_split: Some(0),
                alloc_retries: Some(0),
                ooms: Some(0),
                device_total,
                cap,
                cap_source,
            });
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
                util: Some(90.0),
                sm_clock_mhz: None,
                power_w: None,
                procs: &procs,
            });
        }
        e
    }
}

fn alert(e: &Engine, kind: AlertKind) -> Option<crate::engine::Alert> {
    e.alerts().find(|a| a.kind == kind).cloned()
}

#[test]
fn a_cap_brings_the_forecast_forward_and_the_alert_names_it() {
    // 10 GiB reserved, +10 MiB/s: the GPU's 80 GiB is two hours away, a
    // 24 GiB cap about 24 minutes.
    let rate = 10.0 * MIB;
    let grow = move |t: f64| 10 * GIB + (rate * t) as u64;
    let free = Run::new(grow, 900).engine();
    let capped_at = 24 * GIB;
    let mut run = Run::new(grow, 900);
    run.limit = Some(capped(capped_at));
    let capped_run = run.engine();

    assert!(
        alert(&free, AlertKind::OomPredicted).is_none(),
        "two hours away is no alert"
    );
    let oom = alert(&capped_run, AlertKind::OomPredicted).expect("the cap is forecast");
    let expected = (capped_at as f64 * 0.995 - 10.0 * GIB as f64) / rate;
    let predicted = oom.predicted_oom_t.unwrap();
    assert!(
        (predicted - expected).abs() < 90.0,
        "predicted {predicted:.0} s, the cap is met at {expected:.0} s"
    );
    assert!(
        oom.message.contains("24.0 GiB cap")
            && oom.message.contains("set_per_process_memory_fraction"),
        "{}",
        oom.message
    );
    let advice = oom.recommendation.unwrap();
    assert!(advice.contains("raise it"), "{advice}");

    let job = capped_run.job("job").unwrap();
    let limit = job.ranks[0].memory_limit.as_ref().unwrap();
    assert_eq!(limit.kind, gpumon_proto::api::LimitKind::Cap);
    assert_eq!(limit.limit_bytes, capped_at);
    assert_eq!(limit.cap_source, Some(CapSource::MemoryFraction));
    assert!(free.job("job").unwrap().ranks[0].memory_limit.is_none());
}

#[test]
fn the_levels_read_the_share_of_the_cap() {
    // 21 GiB reserved: 27.5 % of the GPU, 87.5 % of a 24 GiB cap.
    let flat = |_| 21 * GIB;
    let free = Run::new(flat, 120).engine();
    assert!(alert(&free, AlertKind::MemoryLevel).is_none());

    let mut run = Run::new(flat, 120);
    run.limit = Some(capped(24 * GIB));
    let level = alert(&run.engine(), AlertKind::MemoryLevel).expect("a level");
    assert_eq!(level.severity, Severity::Warning);
    assert!(
        level.message.contains("87.5 % of the 24.0 GiB cap"),
        "{}",
        level.message
    );
}

#[test]
fn a_mig_slice_is_the_limit_of_the_process_memory_in_it() {
    // 8 GiB reserved + 1 GiB outside = 9 GiB of a 10 GiB slice.
    let mut run = Run::new(|_| 8 * GIB, 120);
    run.limit = Some(DeviceLimit {
        device_total: Some(10 * GIB),
        cap: None,
    });
    let e = run.engine();
    let level = alert(&e, AlertKind::MemoryLevel).expect("a level");
    assert!(
        level.message.contains("90.0 % of the 10.0 GiB MIG slice"),
        "{}",
        level.message
    );
    let limit = e.job("job").unwrap().ranks[0].memory_limit.clone().unwrap();
    assert_eq!(limit.kind, gpumon_proto::api::LimitKind::MigSlice);
    assert_eq!(limit.used_bytes, 9 * GIB);
}

#[test]
fn a_device_the_size_of_its_gpu_is_no_slice() {
    let mut run = Run::new(|_| 8 * GIB, 60);
    run.limit = Some(DeviceLimit {
        device_total: Some(TOTAL - 300 * (1 << 20)),
        cap: None,
    });
    let e = run.engine();
    let limit = e.job("job").unwrap().ranks[0].memory_limit.clone().unwrap();
    assert_eq!(limit.kind, gpumon_proto::api::LimitKind::Gpu);
    assert!(alert(&e, AlertKind::MemoryLevel).is_none());
}

#[test]
fn other_processes_on_the_gpu_are_named_with_what_they_hold() {
    // 39 GiB of the rank's and 30 GiB of another process: 86 % of the GPU.
    let mut run = Run::new(|_| 38 * GIB, 60);
    run.other = Some(30 * GIB);
    let level = alert(&run.engine(), AlertKind::MemoryLevel).expect("a level");
    assert!(
        level
            .message
            .contains("30.0 GiB of it held by 1 other process"),
        "{}",
        level.message
    );
    assert!(
        level
            .recommendation
            .as_deref()
            .is_some_and(|r| r.contains("move it elsewhere")),
        "{:?}",
        level.recommendation
    );
}

#[test]
fn a_rank_s_limit_goes_when_it_ends() {
    let mut run = Run::new(|_| 8 * GIB, 30);
    run.limit = Some(capped(24 * GIB));
    let mut e = run.engine();
    assert!(e.limit_of("job", 0).is_some());
    e.end_rank(40.0, "job", 0);
    assert!(e.limit_of("job", 0).is_none());
}

#[test]
fn an_untracked_rank_s_limit_is_not_kept() {
    let mut e = Engine::new(EngineConfig::default());
    e.observe_limit("nobody", 3, capped(GIB));
    assert!(e.limit_of("nobody", 3).is_none());
    assert!(e.limits.is_empty());
}
