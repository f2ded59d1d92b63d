//! What one step of a large job costs the straggler detector: every rank's
//! step record through `StragglerTracker::add_step`, in a shuffled order, as
//! pushes from many agents interleave. Each record finds its rank's row in
//! the step's open rows; the cost of a step must grow as n log n, not n².
//!
//! `cargo bench -p gpumon-core --bench straggler_step`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use gpumon_core::engine::straggler::{StragglerParams, StragglerTracker};

/// `0..n` in a fixed scrambled order (sorted by a multiplicative hash, so no RNG is needed).
fn shuffled(n: u32) -> Vec<u32> {
    let mut ranks: Vec<u32> = (0..n).collect();
    ranks.sort_by_key(|&r| u64::from(r).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    ranks
}

fn step_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("straggler_step");
    group.sample_size(10);
    let p = StragglerParams::default();
    for world in [1_024u32, 4_096, 16_384] {
        let order = shuffled(world);
        // A tracker that has seen some steps already, so scoring is warm.
        let mut warm = StragglerTracker::default();
        for step in 1..=10 {
            for &rank in &order {
                let sections = [("data", 2.0), ("forward", 20.0), ("backward", 30.0)];
                warm.add_step(world, rank, 0, step, step as f64, 55.0, sections, &p);
            }
        }
        group.bench_function(format!("one_step/{world}_ranks"), |b| {
            b.iter_batched(
                || warm.clone(),
                |mut tr| {
                    for &rank in &order {
                        let sections = [("data", 2.0), ("forward", 20.0), ("backward", 30.0)];
                        black_box(tr.add_step(world, rank, 0, 11, 11.0, 55.0, sections, &p));
                    }
                    tr
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, step_bench);
criterion_main!(benches);
