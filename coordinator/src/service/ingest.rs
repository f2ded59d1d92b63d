//! Agent messages through Raft: the bounds a push must keep, the commit,
//! and the actions handed to the pushing agent in the reply.

use gpumon_proto::{AgentMessage, AgentMessageV1, CoordinatorReplyV1, PushOutcome};

use super::{Service, ServiceError};
use crate::config::{MAX_ACKS_PER_PUSH, MAX_HOOK_RECORDS_PER_PUSH, MAX_WINDOWS_PER_PUSH};
use crate::raft::{Command, CommandV1};

/// Why a decoded push was refused before it reached the log: the bound it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PushRefused(pub String);

impl Service {
    /// Commits an agent's message and answers it: `NotLeader` with the
    /// leader's URL from a follower, the actions for the agent's node after
    /// a committed push.
    pub async fn push(&self, message: AgentMessage) -> Result<CoordinatorReplyV1, PushError> {
        let AgentMessage::V1(message) = message;
        let Some(_slot) = self.admission.admit() else {
            return Err(PushError::Busy);
        };
        let (acked_seq, node, command) = match message {
            AgentMessageV1::Hello(hello) => (0, None, CommandV1::Hello(hello)),
            AgentMessageV1::Push(batch) => {
                check_bounds(&batch).map_err(PushError::Refused)?;
                (batch.seq, Some(batch.node.clone()), CommandV1::Push(batch))
            }
        };
        let outcome = match self.write(Command::V1(command), "the push").await {
            Ok(result) => PushOutcome::Committed {
                acked_seq,
                duplicate: result.duplicate,
            },
            Err(ServiceError::NotLeader(leader_url)) => PushOutcome::NotLeader { leader_url },
            Err(e) => return Err(PushError::Service(e)),
        };
        let actions = match (&outcome, node) {
            (PushOutcome::Committed { .. }, Some(node)) => self.hand_out_actions(&node).await,
            _ => Vec::new(),
        };
        Ok(CoordinatorReplyV1 { outcome, actions })
    }
}

/// Why a push was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// It broke a bound; it never reached the log.
    #[error(transparent)]
    Refused(PushRefused),
    /// Too many pushes are in flight; retry after
    /// [`RETRY_AFTER`](super::RETRY_AFTER).
    #[error("too many pushes in flight; retry shortly")]
    Busy,
    /// The cluster could not commit it.
    #[error(transparent)]
    Service(ServiceError),
}

fn check_bounds(batch: &gpumon_proto::PushBatch) -> Result<(), PushRefused> {
    if batch.windows.len() > MAX_WINDOWS_PER_PUSH {
        return Err(PushRefused(format!(
            "push has {} windows; at most {MAX_WINDOWS_PER_PUSH} are accepted in one batch",
            batch.windows.len()
        )));
    }
    if batch.hook.len() > MAX_HOOK_RECORDS_PER_PUSH || batch.acks.len() > MAX_ACKS_PER_PUSH {
        return Err(PushRefused(format!(
            "push has {} hook records and {} acks; at most {MAX_HOOK_RECORDS_PER_PUSH} and {MAX_ACKS_PER_PUSH} are accepted in one batch",
            batch.hook.len(),
            batch.acks.len()
        )));
    }
    Ok(())
}
