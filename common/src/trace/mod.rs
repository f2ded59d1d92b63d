//! gpumon trace v1: JSON Lines, optionally gzip-compressed, as defined in
//! `shared/TRACE_FORMAT.md`.
//!
//! A trace is everything the coordinator learns about a cluster: NVML samples
//! (`gpu`), ranks found on GPUs (`rank`), allocator statistics (`alloc`),
//! finished steps (`step`) and user markers (`event`). `gpumon replay` reads
//! one with [`TraceReader`] and drives the same engine the coordinator runs.
//!
//! Tolerance, as the format asks:
//! - unknown fields are ignored, unknown record types skipped and counted;
//! - a line that is not JSON is an error naming its line number;
//! - a well-formed record with impossible values (negative or absurd bytes,
//!   non-finite time, used above total) is skipped and counted with the
//!   first few reasons kept, so one bad record does not end a long replay.
//!
//! Compression is decided by the gzip magic bytes, never by the file name.

mod reader;
mod record;
mod writer;

pub use reader::{open, ReadStats, TraceError, TraceReader, MAX_LINE_BYTES};
pub use record::{
    AllocRecord, EventRecord, GpuRecord, ProcRecord, RankRecord, StepRecord, TraceRecord,
};
pub use writer::TraceWriter;

/// The trace format version this build reads and writes.
pub const TRACE_VERSION: u64 = 1;

#[cfg(test)]
mod tests;
