//! What a gpumon trace v1 line holds, as data: the owned records
//! ([`TraceRecord`]), the borrowed views the reader hands out
//! ([`RecordRef`]), and [`from_window`], the one mapping from what agents
//! push to trace records. The format is `docs/trace-format.md`; reading and
//! writing files is the `gpumon-trace` crate's, so this module holds no I/O.
//! The transition takes a [`RecordRef`] as its input in replay.

pub mod from_window;
mod record;
mod record_ref;

pub use record::{
    AllocRecord, CapSource, CollectiveArrival, EventRecord, GpuRecord, GroupWait, ProcRecord,
    RankRecord, SettingValue, SettingsRecord, StallRecord, StepRecord, TraceRecord, WaitRecord,
};
pub use record_ref::{AllocRef, EventRef, GpuRef, RankRef, RecordRef, StepRef};

/// The trace format version this build reads and writes.
pub const TRACE_VERSION: u64 = 1;
