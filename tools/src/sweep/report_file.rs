//! Why a report file cannot be read: missing, too large, not JSON, of
//! another format or not a report at all. `gpumon sweep` records the text
//! as a point's reason; `gpumon compare` answers it as "not comparable".

use std::path::PathBuf;

use thiserror::Error;

use super::report::SWEEP_VERSION;
use crate::profile::report::PROFILE_VERSION;

/// Largest profile report read (its timelines are bounded to a few
/// thousand points per series; this leaves room for thousands of ranks).
pub const MAX_REPORT_BYTES: u64 = 256 << 20;

/// A report file that cannot be read.
#[derive(Debug, Error)]
pub enum ReportFileError {
    /// It cannot be found (or its metadata read).
    #[error("no {what} at {}: {source}", .path.display())]
    Missing {
        /// What it should be, e.g. `report`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is larger than [`MAX_REPORT_BYTES`].
    #[error(
        "the {what} {} holds {size} bytes, more than the {MAX_REPORT_BYTES} read",
        .path.display()
    )]
    TooLarge {
        /// What it should be.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size, bytes.
        size: u64,
    },
    /// It cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not JSON.
    #[error("the {what} {} is not JSON: {source}", .path.display())]
    NotJson {
        /// What it should be.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A profile report of another format version.
    #[error("the report {} is format {found:?}, not {PROFILE_VERSION}", .path.display())]
    ReportFormat {
        /// The file.
        path: PathBuf,
        /// The version it names, if any.
        found: Option<u64>,
    },
    /// A profile report whose fields do not read.
    #[error("the report {} is unreadable: {source}", .path.display())]
    ReportUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A sweep of another format version.
    #[error("the sweep {} is format {found}, not {SWEEP_VERSION}", .path.display())]
    SweepFormat {
        /// The file.
        path: PathBuf,
        /// The version it names.
        found: u64,
    },
    /// A sweep whose fields do not read.
    #[error("the sweep {} is unreadable: {source}", .path.display())]
    SweepUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// Neither a profile report nor a sweep.
    #[error(
        "{} is neither a profile report (gpumon profile --json) nor a sweep (gpumon sweep --json)",
        .path.display()
    )]
    Neither {
        /// The file.
        path: PathBuf,
    },
}
