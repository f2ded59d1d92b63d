//! What a snapshot or a digest costs the writers: the time to clone the
//! replicated state, which happens under the state lock (pushes wait for
//! it), and the time of the first push applied after it (which copies the
//! entries it touches while the clone still shares them).
//!
//! The state is a synthetic fleet (`support/fleet.rs`) with `WINDOWS`
//! windows per GPU.
//!
//! `cargo bench -p gpumon-core --bench state_clone`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

use gpumon_testkit::fleet;

/// Windows applied per GPU before measuring.
const WINDOWS: u64 = 32;

fn clone_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("state_clone");
    group.sample_size(10);
    for gpus in [1_024, 16_384] {
        let state = fleet::filled(gpus, WINDOWS);
        assert_eq!(state.cluster.cluster_view().gpus, gpus as usize);
        group.bench_function(format!("clone/{gpus}_gpus"), |b| {
            b.iter(|| black_box(state.clone()))
        });
        // The first push after a snapshot's clone, while the clone is alive.
        group.bench_function(format!("push_after_clone/{gpus}_gpus"), |b| {
            b.iter_batched(
                || (state.clone(), state.clone()),
                |(mut live, held)| {
                    live.apply(fleet::push(0, WINDOWS), false);
                    black_box((live, held))
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, clone_bench);
criterion_main!(benches);
