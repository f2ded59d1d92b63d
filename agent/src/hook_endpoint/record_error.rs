//! Why a hook's `report` is refused whole ([`ReportError`]), or one of its
//! records skipped ([`RecordError`]). The text goes back to the hook in its
//! answer (a skipped record's as `record N: ...`).

use gpumon_core::engine::hang::PROCESS_EXIT;
use gpumon_core::hook_records::InvalidRecord;
use gpumon_core::limits::MAX_WAIT_GROUPS;
use gpumon_proto::MAX_STEP_COLLECTIVES;
use thiserror::Error;

use super::field_error::FieldError;

/// A report refused whole.
#[derive(Debug, Clone, PartialEq, Error)]
pub(crate) enum ReportError {
    /// Its `records` field is missing or not an array.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// More records than one report may hold.
    #[error(
        "a report holds at most {max} records; this one has {count}: send them in several reports"
    )]
    TooMany {
        /// The records it holds.
        count: usize,
        /// The most one may hold.
        max: usize,
    },
    /// A record names another job or rank than the session's.
    #[error(
        "record {index} is for another job ({claim}); this session is rank {rank} of job {job:?}: register a session per process"
    )]
    Foreign {
        /// The record's position, from 0.
        index: usize,
        /// The job and rank it names, shown short.
        claim: String,
        /// The session's rank.
        rank: u32,
        /// The session's job.
        job: String,
    },
}

/// A record skipped.
#[derive(Debug, PartialEq, Error)]
pub(crate) enum RecordError {
    /// A field cannot be read.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The record is not a JSON object.
    #[error("must be an object, not {got}")]
    NotObject {
        /// The JSON type it is.
        got: &'static str,
    },
    /// `type` names no record type.
    #[error("unknown type {got}: alloc, step, event, snapshot or stall")]
    UnknownType {
        /// The type, shown short.
        got: String,
    },
    /// `t` is too far from the agent's clock.
    #[error(
        "t {t} is more than {} s from the agent's clock ({:.3})",
        .max_ms / 1000,
        seconds(.now_ms)
    )]
    Skew {
        /// The record's time, seconds.
        t: f64,
        /// The agent's clock, ms.
        now_ms: u64,
        /// The most a record's time may be off, ms.
        max_ms: u64,
    },
    /// An `alloc` record's device has more used than it holds.
    #[error("device_used ({used}) > device_total ({total})")]
    DeviceOverTotal {
        /// `device_used`.
        used: u64,
        /// `device_total`.
        total: u64,
    },
    /// An `alloc` record's `cap_source` names no source.
    #[error("cap_source {got} is not memory_fraction, alloc_conf or allocator")]
    UnknownCapSource {
        /// The name sent, quoted and cut short.
        got: String,
    },
    /// An `alloc` record has `cap` without `cap_source`, or the reverse.
    #[error("cap and cap_source come together")]
    CapWithoutSource,
    /// A step's peer group is above its own rank.
    #[error("group {group} is above the rank {rank}: a group is the lowest rank of its ranks")]
    GroupAboveRank {
        /// The group named.
        group: u64,
        /// The session's rank.
        rank: u32,
    },
    /// A step lists more process groups in `waits` than it may.
    #[error("{count} process groups in waits; the limit is {MAX_WAIT_GROUPS}")]
    TooManyWaits {
        /// The groups listed.
        count: usize,
    },
    /// A step lists more collectives than it may.
    #[error("{count} collectives listed; the limit is {MAX_STEP_COLLECTIVES}")]
    TooManyCollectives {
        /// The collectives listed.
        count: usize,
    },
    /// A stall record claims the agent's own source.
    #[error("source {PROCESS_EXIT:?} is the agent's own word; a hook cannot send it")]
    AgentsSource,
    /// The record fails the check every record passes.
    #[error(transparent)]
    Invalid(#[from] InvalidRecord),
}

/// `ms` in seconds, for the skew's message.
fn seconds(ms: &u64) -> f64 {
    *ms as f64 / 1000.0
}
