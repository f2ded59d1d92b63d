//! Helpers shared by the trace benchmarks: corpus fixtures held in memory.
//!
//! A later benchmark reuses them with `mod support;` (this folder is not a
//! bench target of its own).

// Each bench uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use gpumon_trace::{TraceReader, TraceRecord};

/// The public-corpus trace checked in as a test fixture.
pub const FIXTURE: &str = "tests/fixtures/traces/fragmentation-0.jsonl.gz";

/// Reads a file below the `trace` crate into memory.
pub fn load(relative: &str) -> Vec<u8> {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The gzip fixture, compressed, as it is on disk.
pub fn fixture_gz() -> Vec<u8> {
    load(FIXTURE)
}

/// Decompresses a gzip trace held in memory.
pub fn gunzip(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    MultiGzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("the fixture is valid gzip");
    out
}

/// A reader over a trace held in memory, gzip or not, as `open` builds for a file.
pub fn reader(bytes: &[u8]) -> TraceReader<impl BufRead + '_> {
    gpumon_trace::from_reader(bytes).expect("the fixture has a header")
}

/// Reads every record borrowed ([`TraceReader::next_ref`], the replay's way);
/// returns how many.
pub fn count_refs<R: BufRead>(mut reader: TraceReader<R>) -> u64 {
    let mut n = 0;
    while let Some(record) = reader.next_ref().expect("the fixture is valid") {
        std::hint::black_box(&record);
        n += 1;
    }
    n
}

/// Reads every record as an owned [`TraceRecord`]; returns how many.
pub fn count_owned<R: BufRead>(mut reader: TraceReader<R>) -> u64 {
    let mut n = 0;
    while let Some(record) = reader.next_record().expect("the fixture is valid") {
        std::hint::black_box(&record as &TraceRecord);
        n += 1;
    }
    n
}
