//! What one remote-write interval costs the leader per 1,024 GPUs: taking
//! the new windows from the view (under the state's read lock, which the
//! sender lets go every 1,024 GPUs, so pushes wait for one part at most)
//! and turning them into request bodies (normalize, split into requests of
//! 10,000 samples, protobuf, snappy; off the lock). At 16,384 GPUs the take
//! is measured whole, in one hold of the lock.
//!
//! The view is the synthetic fleet of `gpumon_testkit::fleet`
//! with [`WINDOWS`] windows per GPU, all new: one 15 s interval at 2 s
//! windows. Each GPU gives 8 used and 8 peak samples and its capacity
//! (the fleet reports no utilization): 17 samples.
//!
//! `cargo bench -p gpumon-coordinator --bench remote_write`

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use gpumon_coordinator::remote_write::collect::Cursors;
use gpumon_coordinator::remote_write::config::DEFAULT_MAX_SAMPLES_PER_REQUEST;
use gpumon_coordinator::remote_write::encode::bodies;

use gpumon_testkit::fleet;

/// New windows per GPU in one interval.
const WINDOWS: u64 = 8;

fn remote_write_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("remote_write");
    group.sample_size(10);
    let labels = BTreeMap::from([("cluster".to_owned(), "a".to_owned())]);
    for gpus in [1_024, 16_384] {
        let view = fleet::filled(gpus, WINDOWS).cluster;
        let taken = Cursors::default().take(&view, &labels, usize::MAX);
        let encoded = bodies(taken.series, DEFAULT_MAX_SAMPLES_PER_REQUEST).unwrap();
        let bytes: usize = encoded.iter().map(|b| b.bytes.len()).sum();
        let samples: usize = encoded.iter().map(|b| b.samples).sum();
        assert_eq!(samples, gpus as usize * (2 * WINDOWS as usize + 1));
        println!(
            "remote_write/{gpus}_gpus: {samples} samples, {} requests, {bytes} bytes compressed ({:.2} per sample)",
            encoded.len(),
            bytes as f64 / samples as f64
        );
        group.bench_function(format!("take/{gpus}_gpus"), |b| {
            b.iter(|| black_box(Cursors::default().take(&view, &labels, usize::MAX)))
        });
        group.bench_function(format!("encode/{gpus}_gpus"), |b| {
            b.iter_batched(
                || Cursors::default().take(&view, &labels, usize::MAX).series,
                |series| black_box(bodies(series, DEFAULT_MAX_SAMPLES_PER_REQUEST).unwrap()),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, remote_write_bench);
criterion_main!(benches);
