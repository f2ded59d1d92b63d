//! Why the hub refuses a session's request: its rank is taken, the agent
//! is full, the session has ended or changes rank, or an `ack` names an
//! action the session was not given. The text goes back to the hook.

use thiserror::Error;

/// A request the hub refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HubError {
    /// Another session holds the rank.
    #[error(
        "rank {rank} of job {job:?} is already registered by session {session}; one session per rank"
    )]
    RankTaken {
        /// The rank claimed.
        rank: u32,
        /// Its job.
        job: String,
        /// The session that holds it.
        session: u64,
    },
    /// The agent holds as many sessions as it may.
    #[error("this agent already holds its maximum of {max} sessions")]
    Full {
        /// The most it holds.
        max: usize,
    },
    /// The session is no longer open.
    #[error("session {session} has ended")]
    Ended {
        /// The session.
        session: u64,
    },
    /// A second `register` names another job or rank than the first.
    #[error(
        "this connection is registered as rank {rank} of job {job:?}; open another connection for another rank"
    )]
    OtherRank {
        /// The rank the connection holds.
        rank: u32,
        /// Its job.
        job: String,
    },
    /// The session was not given the action (or acknowledged it already).
    #[error("action {id} was not given to this session (or is already acknowledged)")]
    UnknownAction {
        /// The action named.
        id: u64,
    },
}
