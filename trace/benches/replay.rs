//! Replay throughput, records per second, gzip decoding included: the
//! whole `gpumon replay` pipeline (reader, records turned into pushes on
//! one thread; the replicas' transition with the cluster view and every
//! detector on another) over public-corpus traces held in memory, on
//! mimalloc as the `gpumon` binary runs.
//!
//! `cargo bench -p gpumon-trace --bench replay`
//!
//! - `fragmentation-0`: 8 ranks with allocator stats and steps (9.4k records);
//! - `combo-1`: leak, imbalance, straggler and OOM in one job;
//! - `stable-1`: a quiet job, the common case.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumon_core::engine::EngineConfig;
use gpumon_trace::replay;

mod support;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn replay_once(gz: &[u8]) -> usize {
    let mut reader = support::reader(gz);
    let mut replay = replay::Replay::new(&EngineConfig::default());
    replay
        .run(&mut reader, u64::MAX, |_| {})
        .expect("the fixture is valid");
    let alerts = replay.state().engine.alerts().len();
    alerts
}

fn replay_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    for name in ["fragmentation-0", "combo-1", "stable-1"] {
        let gz = support::load(&format!("tests/fixtures/traces/{name}.jsonl.gz"));
        let records = support::count_refs(support::reader(&gz));
        group.throughput(Throughput::Elements(records));
        group.bench_function(name, |b| b.iter(|| replay_once(black_box(&gz))));
    }
    group.finish();
}

criterion_group!(benches, replay_bench);
criterion_main!(benches);
