//! A window recorded as trace lines and replayed gives the engine what it
//! saw live: the mapping of `gpumon_core::records::from_window`, through
//! the file format and back.
use gpumon_core::engine::{Engine, EngineConfig};
use gpumon_proto::{BytesStat, GaugeStat, GpuInfo, GpuWindow, ProcWindow, RankInfo};
use gpumon_trace::from_window::{gpu_record, rank_records};
use gpumon_trace::replay::Replay;
use gpumon_trace::{RecordRef, TraceRecord};

/// Window `i` of a GPU whose memory swings within each window: the peak,
/// the trough and the newest sample all differ.
fn window(i: u64) -> GpuWindow {
    const GIB: u64 = 1 << 30;
    let peak = 40 * GIB + i * (GIB / 8);
    GpuWindow {
        gpu: GpuInfo {
            uuid: "GPU-0".into(),
            index: 0,
            name: "H100".into(),
            total_bytes: 80 * GIB,
        },
        start_ms: 1_700_000_000_000 + i * 2_000,
        end_ms: 1_700_000_000_000 + i * 2_000 + 1_500,
        samples: 4,
        used_bytes: BytesStat {
            min: peak - 6 * GIB,
            max: peak,
            last: peak - 2 * GIB,
            mean: peak - 3 * GIB,
        },
        reserved_bytes: None,
        util_pct: Some(GaugeStat {
            min: 50.0,
            max: 100.0,
            last: 90.0,
            mean: 92.5,
        }),
        sm_clock_mhz: None,
        power_w: None,
        procs: vec![ProcWindow {
            pid: 42,
            used_bytes: BytesStat::single(peak - GIB),
            rank: Some(RankInfo {
                job: "job".into(),
                rank: 0,
                local_rank: 0,
                world_size: 1,
                master_addr: None,
                master_port: None,
            }),
        }],
    }
}

#[test]
fn a_recorded_window_replays_as_the_engine_saw_it_live() {
    let config = EngineConfig::default();
    let (mut live, mut replay) = (Engine::new(config.clone()), Replay::new(&config));
    for i in 0..200 {
        let w = window(i);
        live.observe_window("node-0", &w);
        let gpu = gpu_record("node-0", &w);
        assert_eq!(
            (gpu.used_min, gpu.used_last),
            (Some(w.used_bytes.min), Some(w.used_bytes.last))
        );
        let records = rank_records("node-0", &w)
            .map(TraceRecord::Rank)
            .chain([TraceRecord::Gpu(gpu)]);
        // Through the file format and back, as `gpumon record` and replay do.
        for r in records {
            let line = serde_json::to_string(&r).unwrap();
            let read: TraceRecord = serde_json::from_str(&line).unwrap();
            replay.feed(&RecordRef::from(&read));
        }
    }
    replay.finish();
    let seen = |e: &Engine| {
        let alerts: Vec<_> = e.alerts().collect();
        serde_json::to_value((e.devices(), e.jobs(), alerts)).unwrap()
    };
    assert_eq!(seen(&live), seen(&replay.state().engine));
}

#[test]
fn a_flat_window_writes_only_used() {
    let mut w = window(0);
    w.used_bytes = BytesStat::single(7);
    let line = serde_json::to_string(&TraceRecord::Gpu(gpu_record("n", &w))).unwrap();
    assert!(
        !line.contains("used_min") && !line.contains("used_last"),
        "{line}"
    );
}
