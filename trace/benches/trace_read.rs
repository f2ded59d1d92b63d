//! Trace reading throughput, records per second, from a trace held in memory:
//! `cargo bench -p gpumon-trace --bench trace_read`.
//!
//! - `gunzip_only`: gzip decoding alone, the floor under every reader;
//! - `gzip_ref`: gzip + [`TraceReader::next_ref`] (borrowed records), what
//!   `gpumon replay` does;
//! - `gzip_owned`: gzip + `next_record` (owned records, one allocation per string);
//! - `plain_ref`: the uncompressed trace, parsing alone.
//!
//! [`TraceReader::next_ref`]: gpumon_trace::TraceReader::next_ref

use std::hint::black_box;
use std::io::Read;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

mod support;

fn trace_read(c: &mut Criterion) {
    let gz = support::fixture_gz();
    let plain = support::gunzip(&gz);
    let records = support::count_refs(support::reader(&gz));
    assert_eq!(records, support::count_owned(support::reader(&plain)));

    let mut group = c.benchmark_group("trace_read");
    group.throughput(Throughput::Elements(records));
    group.bench_function("gunzip_only", |b| {
        let mut out = Vec::with_capacity(plain.len());
        b.iter(|| {
            out.clear();
            flate2::read::MultiGzDecoder::new(black_box(&gz[..]))
                .read_to_end(&mut out)
                .unwrap()
        })
    });
    group.bench_function("gzip_ref", |b| {
        b.iter(|| support::count_refs(support::reader(black_box(&gz))))
    });
    group.bench_function("gzip_owned", |b| {
        b.iter(|| support::count_owned(support::reader(black_box(&gz))))
    });
    group.bench_function("plain_ref", |b| {
        b.iter(|| support::count_refs(support::reader(black_box(&plain))))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = trace_read
}
criterion_main!(benches);
