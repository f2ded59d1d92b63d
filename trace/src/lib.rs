//! gpumon trace v1: JSON Lines, optionally gzip-compressed, as defined in
//! `docs/trace-format.md`.
//!
//! A trace is everything the coordinator learns about a cluster: NVML samples
//! (`gpu`), ranks found on GPUs (`rank`), allocator statistics (`alloc`),
//! finished steps (`step`) and user markers (`event`). `gpumon replay` reads
//! one with [`TraceReader`] and drives the same engine the coordinator runs.
//! [`from_window`] is the one mapping from what agents push to trace records.
//!
//! Tolerance, as the format asks:
//! - unknown fields are ignored, unknown record types skipped and counted;
//! - a line that is not JSON is an error naming its line number;
//! - a well-formed record with impossible values (negative or absurd bytes,
//!   non-finite time, used above total) is skipped and counted with the
//!   first few reasons kept, so one bad record does not end a long replay.
//!
//! Compression is decided by the gzip magic bytes, never by the file name.
//!
//! Speed: [`TraceReader::next_ref`] hands out [`RecordRef`]s borrowed from
//! the line, parsed in one pass: a scanner for the canonical compact form
//! first (`scan.rs`), one serde_json pass for any other JSON (`parse.rs`),
//! and only for lines both give up on, the careful two-pass parse whose
//! verdicts and messages are the reference (`reader.rs`); unit tests check
//! that the three agree line for line. `cargo bench -p gpumon-trace --bench
//! trace_read` measures records per second.
//!
//! ```no_run
//! # fn main() -> Result<(), gpumon_trace::TraceError> {
//! use gpumon_trace::{open, RecordRef};
//! let mut reader = open(std::path::Path::new("trace.jsonl.gz"))?;
//! while let Some(record) = reader.next_ref()? {
//!     if let RecordRef::Gpu(gpu) = record {
//!         println!("{} {}: {} of {} bytes", gpu.node, gpu.gpu, gpu.used, gpu.total);
//!     }
//! }
//! println!("skipped {}", reader.stats().invalid);
//! # Ok(())
//! # }
//! ```
//!
//! [`replay`] drives a trace through the core's one transition and writes
//! the report `gpumon replay` prints. The record types are the core's
//! ([`gpumon_core::records`]), re-exported here so a reader of traces needs
//! one crate.
#![deny(missing_docs)]

mod fields;
mod parse;
mod reader;
pub mod replay;
mod scan;
mod skip;
mod writer;

pub use gpumon_core::records::{
    from_window, AllocRecord, AllocRef, CapSource, CollectiveArrival, EventRecord, EventRef,
    GpuRecord, GpuRef, GroupWait, ProcRecord, RankRecord, RankRef, RecordRef, SettingValue,
    SettingsRecord, StallRecord, StepRecord, StepRef, TraceRecord, WaitRecord, TRACE_VERSION,
};
pub use reader::{from_reader, open, ReadStats, TraceError, TraceReader, MAX_LINE_BYTES};
pub use writer::TraceWriter;

#[cfg(test)]
mod tests;
