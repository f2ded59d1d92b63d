//! Agent messages through Raft: the bounds a push must keep, the commit,
//! and the actions and alerts handed to the pushing agent in the reply.
//!
//! The alerts (active ones about the agent's node, for its hooks; see
//! `gpumon_core::transition::node_alerts`) are read from the leader's
//! applied state after the commit and recorded nowhere: delivery to the
//! hooks is best effort, repeated with every reply while the alert is
//! active, and the agent posts each once per severity.

use gpumon_proto::{
    AgentMessage, AgentMessageV1, AgentMessageV2, CoordinatorReplyV2, NodeAlert, PushBatch,
    PushBatchV2, PushOutcome, MAX_NODE_ALERTS,
};
use gpumon_runtime::clock::wall_ms;

use super::push_bounds::{
    check_host, check_placements, check_seq, check_sizes, check_times, PushRefused, Refusal,
};
use super::{Service, ServiceError};
use crate::raft::{Command, CommandV1};

impl Service {
    /// Commits an agent's message (`wire_bytes` long as it came) and
    /// answers it: `NotLeader` with the leader's URL from a follower, the
    /// actions for the agent's node after a committed push and, to a
    /// version 2 push, the active alerts about the node (the caller answers
    /// a version 1 message without them).
    ///
    /// A version 2 push is proposed as [`CommandV1::for_push`] makes it.
    pub async fn push(
        &self,
        message: AgentMessage,
        wire_bytes: usize,
    ) -> Result<CoordinatorReplyV2, PushError> {
        let wants_alerts = message.version() >= 2;
        let Some(_slot) = self.admission.admit(wire_bytes) else {
            return Err(PushError::Busy);
        };
        let (acked_seq, node, command) = match message {
            AgentMessage::V1(AgentMessageV1::Hello(hello))
            | AgentMessage::V2(AgentMessageV2::Hello(hello))
            | AgentMessage::V3(AgentMessageV2::Hello(hello))
            | AgentMessage::V4(AgentMessageV2::Hello(hello))
            | AgentMessage::V5(AgentMessageV2::Hello(hello))
            | AgentMessage::V6(AgentMessageV2::Hello(hello))
            | AgentMessage::V7(AgentMessageV2::Hello(hello)) => {
                self.state_machine
                    .read()
                    .cluster
                    .admits_hello(&hello)
                    .map_err(|e| PushError::Full(e.to_string()))?;
                (0, None, CommandV1::Hello(hello))
            }
            AgentMessage::V1(AgentMessageV1::Push(batch)) => {
                self.check_push(&batch)?;
                (batch.seq, Some(batch.node.clone()), CommandV1::Push(batch))
            }
            AgentMessage::V2(AgentMessageV2::Push(pushed))
            | AgentMessage::V3(AgentMessageV2::Push(pushed))
            | AgentMessage::V4(AgentMessageV2::Push(pushed))
            | AgentMessage::V5(AgentMessageV2::Push(pushed))
            | AgentMessage::V6(AgentMessageV2::Push(pushed))
            | AgentMessage::V7(AgentMessageV2::Push(pushed)) => {
                let PushBatchV2 {
                    batch,
                    placements,
                    host,
                } = &pushed;
                check_placements(batch, placements).map_err(PushError::Refused)?;
                self.check_push(batch)?;
                if let Some(host) = host {
                    check_host(batch, host, wall_ms()).map_err(PushError::Refused)?;
                }
                let (seq, node) = (batch.seq, Some(batch.node.clone()));
                (seq, node, CommandV1::for_push(pushed))
            }
        };
        // Pushes go through the batcher, which proposes those that arrive
        // together as one entry; a hello on its own.
        let committed = match command {
            CommandV1::Hello(_) => self.write(Command::V1(command), "the push").await,
            command => self.batcher.propose(command, wire_bytes).await,
        };
        let outcome = match committed {
            Ok(result) if result.refused => {
                return Err(PushError::Refused(PushRefused::new(
                    Refusal::OutOfBounds,
                    format!("seq {acked_seq} ran too far ahead of its incarnation's last applied seq; nothing was applied"),
                )))
            }
            Ok(result) => PushOutcome::Committed {
                acked_seq,
                duplicate: result.duplicate,
            },
            Err(ServiceError::NotLeader(leader_url)) => PushOutcome::NotLeader { leader_url },
            Err(e) => return Err(PushError::Service(e)),
        };
        let (actions, alerts) = match (&outcome, node) {
            (PushOutcome::Committed { .. }, Some(node)) => {
                let actions = self.hand_out_actions(&node).await;
                let alerts = if wants_alerts {
                    self.node_alerts(&node)
                } else {
                    Vec::new()
                };
                (actions, alerts)
            }
            _ => (Vec::new(), Vec::new()),
        };
        Ok(CoordinatorReplyV2 {
            outcome,
            actions,
            alerts,
        })
    }

    /// The active alerts about `node`, most severe first, at most
    /// [`MAX_NODE_ALERTS`], from this replica's applied state.
    fn node_alerts(&self, node: &str) -> Vec<NodeAlert> {
        self.state_machine.read().node_alerts(node, MAX_NODE_ALERTS)
    }
}

impl Service {
    /// The bounds of [`crate::service::push_bounds`], then the limits, from
    /// one read of the state; a re-sent batch (its seq already applied)
    /// passes, to be acknowledged as a duplicate.
    fn check_push(&self, batch: &PushBatch) -> Result<(), PushError> {
        check_sizes(batch).map_err(PushError::Refused)?;
        let applied = self.state_machine.read();
        let last = applied.cluster.last_seq(&batch.agent_id, batch.incarnation);
        self.agent_ids.check(
            &batch.agent_id,
            applied.cluster.current_incarnation(&batch.agent_id),
            batch.incarnation,
            last.is_some(),
        );
        if batch.seq != 0 && last.is_some_and(|last| batch.seq <= last) {
            return Ok(());
        }
        check_seq(batch, last).map_err(PushError::Refused)?;
        check_times(batch, wall_ms()).map_err(PushError::Refused)?;
        applied
            .cluster
            .admits(&batch.agent_id, &batch.windows)
            .map_err(|e| PushError::Full(e.to_string()))
    }
}

/// Why a push was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// It broke a bound; it never reached the log.
    #[error(transparent)]
    Refused(PushRefused),
    /// It would add agents, GPUs or live ranks past the cluster's limits
    /// (the reason says which); retry after
    /// [`FULL_RETRY_AFTER`](super::FULL_RETRY_AFTER), when entries may have
    /// expired.
    #[error("{0}")]
    Full(String),
    /// Too many pushes are in flight; retry after
    /// [`RETRY_AFTER`](super::RETRY_AFTER).
    #[error("too many pushes in flight; retry shortly")]
    Busy,
    /// The cluster could not commit it.
    #[error(transparent)]
    Service(ServiceError),
}
