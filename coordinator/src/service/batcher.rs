//! The pushes that reach the leader together go into Raft as one entry.
//!
//! openraft 0.9 runs its engine once per client write: each proposal is a
//! round of the Raft loop, an entry to store and replicate, and a response
//! to hand back, on the leader and on every follower. Profiled under load
//! that per-entry cost, not the windows, set the ceiling (about 2,000
//! pushes a second on the 2-core test box, with cores to spare). So the
//! leader's pushes queue here, and one task proposes them: while
//! [`MAX_BATCHES_IN_FLIGHT`] proposals wait for their commit, the pushes
//! that arrive meanwhile are gathered into the next one, a
//! [`CommandV1::Batch`] applied by every replica exactly as its pushes one
//! by one. A lone push is proposed as it is, so a quiet cluster's log and
//! latency are what they were.
//!
//! Each push still gets its own answer (duplicate, refused, committed) from
//! [`CommandResult::each`], and a failed proposal fails each of its pushes
//! with the same error, which the agents retry as before (a retried push is
//! recognized by its seq).

use gpumon_core::transition::MAX_PUSHES_PER_BATCH;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{Proposer, ServiceError};
use crate::raft::network::APPEND_BUDGET_BYTES;
use crate::raft::{Command, CommandResult, CommandV1};

/// Proposals waiting for their commit at once; pushes arriving meanwhile
/// wait for the next one.
pub const MAX_BATCHES_IN_FLIGHT: usize = 4;
/// Most windows, hook records and acks in one proposal, so an entry (and
/// an AppendEntries of a few of them) stays small enough to replicate
/// within a heartbeat period.
pub const MAX_ITEMS_PER_BATCH: usize = 2_048;

/// A push waiting to be proposed, its size on the wire, and where its
/// answer goes.
struct Queued {
    command: CommandV1,
    bytes: usize,
    done: oneshot::Sender<Result<CommandResult, ServiceError>>,
}

/// The queue of the leader's pushes; clones share it. The task behind it
/// ends when the last clone is gone.
#[derive(Debug, Clone)]
pub(super) struct Batcher(mpsc::UnboundedSender<Queued>);

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queued")
    }
}

impl Batcher {
    /// Starts the proposing task (the caller is inside the runtime).
    pub fn start(proposer: Proposer) -> Self {
        let (queue, pushes) = mpsc::unbounded_channel();
        tokio::spawn(run(pushes, proposer));
        Self(queue)
    }

    /// Proposes a push, with the others that come with it, and waits for
    /// its result. The queue is bounded by the pushes admitted in flight
    /// (`service::admission`).
    /// `bytes` is the push's size on the wire: an entry gathers at most
    /// [`APPEND_BUDGET_BYTES`] of them.
    pub async fn propose(
        &self,
        command: CommandV1,
        bytes: usize,
    ) -> Result<CommandResult, ServiceError> {
        let (done, answer) = oneshot::channel();
        let gone = || ServiceError::Unavailable("this replica is shutting down; retry".into());
        let queued = Queued {
            command,
            bytes,
            done,
        };
        self.0.send(queued).map_err(|_| gone())?;
        answer.await.unwrap_or_else(|_| Err(gone()))
    }
}

/// How much of a batch's bound a push takes.
fn weight(command: &CommandV1) -> usize {
    let batch = match command {
        CommandV1::Push(batch) => batch,
        CommandV1::PushPlaced(pushed) => &pushed.batch,
        _ => return 1,
    };
    1 + batch.windows.len() + batch.hook.len() + batch.acks.len()
}

async fn run(mut pushes: mpsc::UnboundedReceiver<Queued>, proposer: Proposer) {
    let slots = std::sync::Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT));
    let mut held: Option<Queued> = None;
    loop {
        let first = match held.take() {
            Some(first) => first,
            None => match pushes.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // While the slot was taken, others queued: they go in this batch.
        let batch;
        (batch, held) = gather(first, || pushes.try_recv().ok());
        let proposer = proposer.clone();
        tokio::spawn(async move {
            commit(&proposer, batch).await;
            drop(slot);
        });
    }
}

/// `first` and the pushes `next` yields after it, while they fit one entry
/// ([`MAX_PUSHES_PER_BATCH`] pushes, [`MAX_ITEMS_PER_BATCH`] items,
/// [`APPEND_BUDGET_BYTES`] bytes, which a lone push may exceed); the first
/// that does not fit is handed back.
fn gather(
    first: Queued,
    mut next: impl FnMut() -> Option<Queued>,
) -> (Vec<Queued>, Option<Queued>) {
    let mut weight_left = MAX_ITEMS_PER_BATCH.saturating_sub(weight(&first.command));
    let mut bytes_left = APPEND_BUDGET_BYTES.saturating_sub(first.bytes);
    let mut batch = vec![first];
    while batch.len() < MAX_PUSHES_PER_BATCH {
        let Some(queued) = next() else { break };
        let w = weight(&queued.command);
        if w > weight_left || queued.bytes > bytes_left {
            return (batch, Some(queued));
        }
        weight_left -= w;
        bytes_left -= queued.bytes;
        batch.push(queued);
    }
    (batch, None)
}

/// Proposes `batch` (a lone push as it is) and answers each push.
async fn commit(proposer: &Proposer, mut batch: Vec<Queued>) {
    if batch.len() == 1 {
        let Queued { command, done, .. } = batch.remove(0);
        let result = proposer.write(Command::V1(command), "the push").await;
        // A pusher that went away (its connection closed) needs no answer.
        let _ = done.send(result);
        return;
    }
    let (commands, dones): (Vec<CommandV1>, Vec<_>) =
        batch.into_iter().map(|q| (q.command, q.done)).unzip();
    let count = commands.len();
    let result = proposer
        .write(Command::V1(CommandV1::Batch(commands)), "the push")
        .await;
    match result {
        Ok(result) if result.each.len() == count => {
            for (done, each) in dones.into_iter().zip(result.each) {
                let _ = done.send(Ok(each));
            }
        }
        Ok(result) => {
            let why = ServiceError::Unavailable(format!(
                "a batch of {count} pushes was answered with {} results; retry",
                result.each.len()
            ));
            tracing::error!(%why, "a committed batch of pushes did not answer each push");
            for done in dones {
                let _ = done.send(Err(why.clone()));
            }
        }
        Err(e) => {
            for done in dones {
                let _ = done.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::PushBatch;

    fn queued(bytes: usize) -> Queued {
        let command = CommandV1::Push(PushBatch {
            agent_id: "a".into(),
            incarnation: 1,
            seq: 1,
            node: "n".into(),
            dropped_batches: 0,
            windows: Vec::new(),
            hook: Vec::new(),
            acks: Vec::new(),
        });
        let (done, _) = oneshot::channel();
        Queued {
            command,
            bytes,
            done,
        }
    }

    #[test]
    fn an_entry_gathers_pushes_up_to_its_bytes_and_hands_back_the_next() {
        // Pushes of 1 MiB: four fill an entry.
        let mut queue = (0..10).map(|_| queued(1 << 20));
        let (batch, held) = gather(queued(1 << 20), || queue.next());
        assert_eq!(batch.len(), APPEND_BUDGET_BYTES / (1 << 20));
        assert!(held.is_some(), "the fifth waits for the next entry");
        let total: usize = batch.iter().map(|q| q.bytes).sum();
        assert!(total <= APPEND_BUDGET_BYTES);

        // A push over the budget (max_push_bytes may be up to 16 MiB) goes alone.
        let mut after = (0..3).map(|_| queued(100));
        let (batch, held) = gather(queued(8 << 20), || after.next());
        assert_eq!((batch.len(), held.is_some()), (1, true));

        let mut small = (0..10).map(|_| queued(100));
        let (batch, held) = gather(queued(100), || small.next());
        assert_eq!((batch.len(), held.is_none()), (11, true));
    }
}
