//! Why the reader skips a line: not a record it can type, or a record that
//! cannot be true. The text goes into the read's examples as
//! `line N: ...`; a skip is counted, never fatal.

use gpumon_core::limits::MAX_LABEL_BYTES;
use thiserror::Error;

/// Most keys one `settings` record sets and resets together.
pub(super) const MAX_SETTINGS_KEYS: usize = 256;

/// A skipped line.
#[derive(Debug, Error)]
pub(crate) enum Skip {
    /// The line has no `type`.
    #[error("a record without a \"type\"")]
    NoType,
    /// serde_json refuses the typed record.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// `t` is not a finite time after the first minute before the epoch.
    #[error("time {t} is not a plausible trace time")]
    Time {
        /// The record's time.
        t: f64,
    },
    /// A GPU of no memory, or more than 1 PiB.
    #[error("gpu total {total} bytes is zero or above 1 PiB")]
    GpuTotal {
        /// Its total memory, bytes.
        total: u64,
    },
    /// A GPU using more than it has.
    #[error("gpu used {used} bytes exceeds total {total}")]
    GpuUsed {
        /// Used memory, bytes.
        used: u64,
        /// Total memory, bytes.
        total: u64,
    },
    /// An allocator with more allocated than reserved (or reserved past 1 PiB).
    #[error("alloc allocated {allocated} above reserved {reserved}")]
    Alloc {
        /// Allocated bytes.
        allocated: u64,
        /// Reserved bytes.
        reserved: u64,
    },
    /// A step of a negative or non-finite duration.
    #[error("step duration {duration_ms} ms is impossible")]
    StepDuration {
        /// The duration, ms.
        duration_ms: f64,
    },
    /// A rank not below its world size.
    #[error("rank {rank} of world size {world_size}")]
    Rank {
        /// The rank.
        rank: u32,
        /// The world size.
        world_size: u32,
    },
    /// A settings record with too many keys or too long a key.
    #[error(
        "settings: {keys} keys (at most {MAX_SETTINGS_KEYS}) or a key name of {longest} bytes (at most {MAX_LABEL_BYTES})"
    )]
    Settings {
        /// Keys set and reset.
        keys: usize,
        /// The longest key name, bytes.
        longest: usize,
    },
    /// A stall of a negative or non-finite quiet or wait time.
    #[error("stall quiet_s {quiet_s} or waited_s {waited_s} is impossible")]
    Stall {
        /// `quiet_s`.
        quiet_s: f64,
        /// The wait's `waited_s`.
        waited_s: f64,
    },
}
