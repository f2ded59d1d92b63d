//! A capped rank in a recorded trace: `gpumon replay` reads the `alloc`
//! record's `device_total`, `cap` and `cap_source`, and forecasts the OOM
//! against the cap as the live engine does (the same transition).

use std::io::Cursor;

use gpumon_core::engine::{AlertKind, EngineConfig};
use gpumon_trace::replay::Replay;
use gpumon_trace::TraceReader;
use serde_json::json;

const GIB: u64 = 1 << 30;
const MIB: f64 = (1u64 << 20) as f64;

/// One rank on an 80 GiB GPU for 900 s, `reserved` from 10 GiB growing
/// 10 MiB/s, 1 GiB outside the allocator; `cap` on every `alloc` record.
fn trace(cap: Option<(u64, &str)>) -> String {
    let mut text = String::from("{\"gpumon_trace\": 1, \"source\": \"cap\"}\n");
    let mut push = |v: serde_json::Value| {
        text.push_str(&v.to_string());
        text.push('\n');
    };
    push(
        json!({"type": "rank", "t": 0.5, "job": "j", "rank": 0, "local_rank": 0,
                "world_size": 1, "node": "n0", "gpu": 0, "pid": 7}),
    );
    for s in 1..900u32 {
        let t = f64::from(s);
        let reserved = 10 * GIB + (10.0 * MIB * t) as u64;
        let mut alloc = json!({"type": "alloc", "t": t - 0.5, "job": "j", "rank": 0,
                               "allocated": reserved / 10 * 9, "reserved": reserved,
                               "device_total": 80 * GIB});
        if let Some((bytes, source)) = cap {
            alloc["cap"] = json!(bytes);
            alloc["cap_source"] = json!(source);
        }
        push(alloc);
        let used = reserved + GIB;
        push(
            json!({"type": "gpu", "t": t, "node": "n0", "gpu": 0, "uuid": "GPU-0",
                    "name": "test", "total": 80 * GIB, "used": used,
                    "procs": [{"pid": 7, "used": used}]}),
        );
    }
    text
}

fn replay(text: String) -> Replay {
    let mut reader = TraceReader::new(Cursor::new(text.into_bytes())).unwrap();
    let mut replay = Replay::new(&EngineConfig::default());
    replay.run(&mut reader, u64::MAX, |_| {}).unwrap();
    replay
}

#[test]
fn a_recorded_cap_moves_the_forecast_as_it_did_live() {
    let free = replay(trace(None));
    assert!(
        free.state()
            .engine
            .alerts()
            .all(|a| a.kind != AlertKind::OomPredicted),
        "the GPU's 80 GiB is two hours away"
    );

    let capped = replay(trace(Some((24 * GIB, "alloc_conf"))));
    let engine = &capped.state().engine;
    let oom = engine
        .alerts()
        .find(|a| a.kind == AlertKind::OomPredicted)
        .expect("the cap is forecast");
    let expected = (24.0 * 0.995 - 10.0) * GIB as f64 / (10.0 * MIB);
    let predicted = oom.predicted_oom_t.unwrap();
    assert!(
        (predicted - expected).abs() < 90.0,
        "predicted {predicted:.0} s, the cap is met at {expected:.0} s"
    );
    assert!(
        oom.message.contains("PYTORCH_CUDA_ALLOC_CONF"),
        "{}",
        oom.message
    );
    let limit = engine.job("j").unwrap().ranks[0].memory_limit.clone();
    assert_eq!(limit.map(|l| l.limit_bytes), Some(24 * GIB));
}

#[test]
fn an_impossible_cap_is_dropped_and_the_record_kept() {
    // A cap above the device the process sees: the record's statistics
    // count, its cap does not.
    let text = trace(Some((90 * GIB, "memory_fraction")));
    let replayed = replay(text);
    let engine = &replayed.state().engine;
    let rank = &engine.job("j").unwrap().ranks[0];
    assert!(rank.reserved_bytes.is_some());
    let limit = rank.memory_limit.as_ref().expect("its device is known");
    assert_eq!(limit.kind, gpumon_proto::api::LimitKind::Gpu);
}
