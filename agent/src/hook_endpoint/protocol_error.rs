//! Why a line of the hook protocol is refused before it reaches a session:
//! not UTF-8, not JSON, another protocol version, an unknown operation, or
//! a `register` or `ack` whose fields do not hold together. The text goes
//! back to the hook in its answer.

use thiserror::Error;

use super::field_error::FieldError;
use super::protocol::HOOK_PROTOCOL_VERSION;
use crate::discovery::MAX_WORLD_SIZE;

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
        "hook protocol version {got} is not supported: this agent speaks version {HOOK_PROTOCOL_VERSION} (\"v\": {HOOK_PROTOCOL_VERSION}); upgrade the gpumon package or the agent so they match"
    )]
    Version {
        /// The version named, shown short.
        got: String,
    },
    /// `v` is absent.
    #[error(
        "missing field v: this agent speaks hook protocol version {HOOK_PROTOCOL_VERSION} (\"v\": {HOOK_PROTOCOL_VERSION})"
    )]
    NoVersion,
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
    #[error("world_size {world_size} is outside 1..={MAX_WORLD_SIZE}")]
    WorldSize {
        /// The size given.
        world_size: u32,
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
