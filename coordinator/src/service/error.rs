//! [`ServiceError`]: why the service refused or could not finish a request,
//! in words a client can act on; the API maps each to a status.

/// Why a request was refused or not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The request breaks a rule (a bound, a malformed name).
    #[error("{0}")]
    Invalid(String),
    /// It names something the cluster does not have.
    #[error("{0}")]
    NotFound(String),
    /// It contradicts the current state.
    #[error("{0}")]
    Conflict(String),
    /// Only the leader does this; its base URL when known.
    #[error("this replica is not the leader")]
    NotLeader(Option<String>),
    /// No leader, or the write could not be committed; retry.
    #[error("{0}")]
    Unavailable(String),
    /// The disk is too full to take the write; retry once space is freed.
    #[error("{0}")]
    InsufficientStorage(String),
}
