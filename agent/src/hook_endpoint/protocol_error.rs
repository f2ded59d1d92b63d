//! Why a line of the hook protocol is refused before it reaches a session:
//! not UTF-8, not JSON, another protocol version, an unknown operation, or
//! a `register` or `ack` whose fields do not hold together. The text goes
//! back to the hook in its answer.

use thiserror::Error;

use super::field_error::FieldError;

/// A refused request.
#[derive(Debug, Error)]
pub(crate) enum ProtocolError {
    /// A field cannot be read.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The line is not UTF-8.
    #[error("the line is not UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// The line is not JSON.
    #[error("the line is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// `v` names another protocol version.
    #[error(
        "hook protocol version {got} is not supported: this agent speaks version {speaks} (\"v\": {speaks}); upgrade the gpumon package or the agent so they match"
    )]
    Version {
        /// The version named, shown short.
        got: String,
        /// The version this agent speaks.
        speaks: u64,
    },
    /// `v` is absent.
    #[error("missing field v: this agent speaks hook protocol version {speaks} (\"v\": {speaks})")]
    NoVersion {
        /// The version this agent speaks.
        speaks: u64,
    },
    /// `op` names no operation.
    #[error("unknown op {got}: register, report, poll or ack")]
    UnknownOp {
        /// The operation named, shown short.
        got: String,
    },
    /// `job` is the empty string.
    #[error("job is empty")]
    EmptyJob,
    /// `world_size` is 0 or above the bound.
    #[error("world_size {world_size} is outside 1..={max}")]
    WorldSize {
        /// The size given.
        world_size: u32,
        /// The largest taken.
        max: u32,
    },
    /// A rank (`rank` or `local_rank`) is not below `world_size`.
    #[error("{key} {rank} is not below world_size {world_size}")]
    RankOutside {
        /// `rank` or `local_rank`.
        key: &'static str,
        /// Its value.
        rank: u32,
        /// `world_size`.
        world_size: u32,
    },
    /// An `ack` of a done action without `freed_bytes`.
    #[error("freed_bytes is required when state is done")]
    NoFreedBytes,
}
