//! One worker per receiver: takes notifications from its bounded queue one
//! at a time, POSTs each with a timeout (through [`crate::outbound`]), retries with exponential backoff
//! (doubling from `backoff_initial_ms` to `backoff_max_ms`, ±20 % jitter so
//! that replicas and receivers do not retry in lockstep), and records a
//! delivered one through Raft. A worker on a replica that is no longer the
//! leader stops trying: the new leader's own workers take over from the
//! replicated book. Nothing here runs on the apply or the ingest path, so a
//! slow or dead receiver only slows its own queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpumon_core::notify::{NotifyKey, ReceiverKind};
use gpumon_runtime::clock::wall_ms;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::config::{NotifyConfig, Receiver};
use super::counters::{Count, NotifyStats};
use super::payload::{alertmanager, slack, webhook, Message};
use crate::outbound::{OutboundClient, SendError};
use crate::raft::{Command, CommandV1};
use crate::service::Proposer;

/// Where a key stands on this leader, outside the replicated book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// Queued or being sent: not due again until it is settled.
    Busy,
    /// Every attempt failed: rest until then before trying again.
    RestUntil(Instant),
}

/// Keys queued, in flight or resting, shared by the leader loop and workers.
pub(super) type Holds = Arc<Mutex<HashMap<NotifyKey, Hold>>>;

/// Everything a worker needs.
pub(super) struct Worker {
    pub receiver: Receiver,
    pub config: Arc<NotifyConfig>,
    pub client: OutboundClient,
    pub proposer: Proposer,
    pub holds: Holds,
    pub stats: NotifyStats,
}

/// Why one attempt failed.
enum Failure {
    /// Worth another attempt: network error, timeout, 5xx, 408, 429.
    Transient(String),
    /// Another attempt would get the same answer (other 4xx).
    Permanent(String),
}

impl Worker {
    /// The leader, with room on its disk to record what it sends.
    fn may_send(&self) -> bool {
        self.proposer.leads() && self.proposer.can_write()
    }

    /// Runs until `stop` turns true or the queue closes.
    pub async fn run(self, mut queue: mpsc::Receiver<Message>, mut stop: watch::Receiver<bool>) {
        loop {
            let message = tokio::select! {
                m = queue.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
                _ = stop.wait_for(|s| *s) => return,
            };
            let key = message.due.key.clone();
            let settled = tokio::select! {
                s = self.deliver(&message) => s,
                _ = stop.wait_for(|s| *s) => return,
            };
            let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
            match settled {
                Settled::Recorded | Settled::Abandoned => {
                    holds.remove(&key);
                }
                Settled::Failed => {
                    let until = Instant::now() + Duration::from_millis(self.config.backoff_max_ms);
                    holds.insert(key, Hold::RestUntil(until));
                }
            }
        }
    }

    /// Sends one notification with retries, then records it.
    async fn deliver(&self, m: &Message) -> Settled {
        let kind = self.receiver.kind;
        let mut wait = Duration::from_millis(self.config.backoff_initial_ms);
        let max_wait = Duration::from_millis(self.config.backoff_max_ms);
        let mut attempt = 1;
        loop {
            if !self.may_send() {
                return Settled::Abandoned;
            }
            let failure = match self.post(m).await {
                Ok(()) => break,
                Err(f) => f,
            };
            let (why, permanent) = match failure {
                Failure::Transient(why) => (why, false),
                Failure::Permanent(why) => (why, true),
            };
            if permanent || attempt >= self.config.max_attempts {
                self.stats.add(kind, Count::Failed);
                tracing::warn!(
                    receiver = %self.receiver.redacted(),
                    alert = m.due.alert.id,
                    notice = m.due.notice.as_str(),
                    attempts = attempt,
                    error = %why,
                    "notification failed; trying again in {} s",
                    self.config.backoff_max_ms / 1000
                );
                return Settled::Failed;
            }
            tracing::debug!(receiver = %self.receiver.redacted(), attempt, error = %why, "notification attempt failed; retrying");
            self.stats.add(kind, Count::Retried);
            tokio::time::sleep(jitter(wait)).await;
            wait = (wait * 2).min(max_wait);
            attempt += 1;
        }
        self.stats.add(kind, Count::Sent);
        let command = Command::V1(CommandV1::Notified {
            entries: vec![m.due.entry()],
            at_ms: wall_ms(),
        });
        match self
            .proposer
            .write(command, "the notification's record")
            .await
        {
            Ok(_) => {
                self.stats.add(kind, Count::Recorded);
                tracing::info!(
                    receiver = %self.receiver.redacted(),
                    alert = m.due.alert.id,
                    kind = m.due.alert.kind.as_str(),
                    notice = m.due.notice.as_str(),
                    "notified"
                );
                Settled::Recorded
            }
            Err(e) => {
                // Sent but not recorded: the next leader may send it again
                // (at least once, see gpumon_core::notify).
                self.stats.add(kind, Count::Unrecorded);
                tracing::warn!(receiver = %self.receiver.redacted(), error = %e, "notification sent but not recorded");
                Settled::Abandoned
            }
        }
    }

    /// One POST of the receiver's payload.
    async fn post(&self, m: &Message) -> Result<(), Failure> {
        let body: Value = match self.receiver.kind {
            ReceiverKind::Webhook => webhook::body(m),
            ReceiverKind::Slack => slack::body(m),
            ReceiverKind::Alertmanager => alertmanager::body(
                m,
                wall_ms() as f64 / 1000.0,
                self.config.alertmanager_ends_after().as_secs_f64(),
            ),
        };
        let body = serde_json::to_vec(&body)
            .map_err(|e| Failure::Permanent(format!("cannot encode the payload: {e}")))?;
        // SendError's messages never name the URL (its path is a secret).
        let status = self
            .client
            .post_json(&self.receiver.endpoint(), body)
            .await
            .map_err(|e| match e {
                SendError::BadUrl => Failure::Permanent(e.to_string()),
                _ => Failure::Transient(e.to_string()),
            })?;
        if status.is_success() {
            return Ok(());
        }
        let why = format!("answered {status}");
        if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
            Err(Failure::Transient(why))
        } else {
            Err(Failure::Permanent(why))
        }
    }
}

/// How one notification ended on this worker.
enum Settled {
    /// Sent and recorded.
    Recorded,
    /// Not ours to finish (leadership lost): forget the hold.
    Abandoned,
    /// Every attempt failed: rest, then due again.
    Failed,
}

/// `d` ±20 %, from the clock's nanoseconds (jitter needs no quality).
fn jitter(d: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let factor = 0.8 + 0.4 * f64::from(nanos % 1000) / 1000.0;
    d.mul_f64(factor)
}
