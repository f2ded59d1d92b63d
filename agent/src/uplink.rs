//! The uplink: a bounded buffer of unacknowledged batches and their delivery.
//!
//! Batches are stamped `(agent_id, incarnation, seq)` when they enter the
//! buffer and leave it only when a coordinator has committed them through
//! Raft (or refused them for good with a 4xx). Delivery is in order, one
//! batch at a time, so the state machine's "seq already applied" check is
//! enough for exactly-once effect. When the coordinators are unreachable the
//! buffer fills; past `max_buffered_batches` the oldest unsent batch is
//! dropped and counted, and the count travels in every later batch.
//!
//! Sequence numbers count what was sent, so they never run far ahead of
//! what the coordinators applied (they refuse a seq more than
//! `gpumon_core::limits::MAX_SEQ_GAP` past it): a batch once sent keeps
//! its seq until it is acknowledged (it may have been committed), so a full
//! buffer drops the oldest batch not yet sent and the later ones close the
//! gap it leaves; a refused batch never reached the log, so the next batch
//! takes its seq.
//!
//! Any coordinator URL will do: each delivery is one [`Pusher::attempt`],
//! which follows a follower's leader hint and, when it fails, moves on to the
//! next URL; the uplink tries again after an exponential backoff (100 ms
//! doubling to 5 s, with jitter).
//!
//! A batch carries windows and, when the agent serves hooks, the hook
//! records and action acks gathered since the last one ([`Outgoing`]), the
//! Kubernetes placement of its windows' ranks where the agent found one,
//! and the window's host RAM where the agent reads it. A batch with
//! placements or host memory is sent as protocol version 2, one with
//! neither as version 1 ([`AgentMessage::push`]); coordinators must be
//! upgraded before agents that send version 2. The actions in every
//! committed reply go to the [`HookHub`] (see [`Uplink::with_hook_hub`]),
//! which hands them to the training processes; their acks come back in a
//! later batch. A version 2 reply also carries the active alerts about this
//! node, which the hub posts to the hooks once per severity
//! ([`HookHub::relay_alerts`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use gpumon_proto::wire;
use gpumon_proto::{
    ActionAck, AgentMessage, AgentMessageV1, GpuWindow, Hello, HookRecord, HostMemory, NodeAlert,
    PendingAction, ProcPlacement, PushBatch, PushBatchV2,
};
use gpumon_runtime::secrets::Secret;
use thiserror::Error;
use tokio::sync::mpsc;

use crate::hook_endpoint::HookHub;
use crate::push::{Attempt, Pusher, Route};
use gpumon_runtime::clock::wall_ms;

/// Time allowed for one push.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed to flush the buffer at shutdown.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// Delivery counters, shared with whoever wants to show them.
#[derive(Debug, Default)]
pub struct UplinkStats {
    /// Batches committed by a coordinator.
    pub acked: AtomicU64,
    /// Batches dropped because the buffer was full.
    pub dropped: AtomicU64,
    /// Batches refused by a coordinator (4xx) and not retried.
    pub rejected: AtomicU64,
    /// Failed delivery attempts.
    pub failures: AtomicU64,
    /// Attempts a coordinator answered busy (429): kept and retried after
    /// its `Retry-After`.
    pub busy: AtomicU64,
    /// Batches waiting in the buffer.
    pub buffered: AtomicU64,
    /// Hook records lost: in a dropped batch, or alone over `max_batch_bytes`.
    pub dropped_hook_records: AtomicU64,
    /// Action acks lost: in a dropped batch, or alone over `max_batch_bytes`.
    pub dropped_acks: AtomicU64,
    /// When a coordinator last committed a batch, ms since the Unix epoch (0: never).
    pub last_acked_ms: AtomicU64,
}

/// What the agent hands the uplink each window: the windows, plus the hook
/// records and action acks gathered since the last hand-over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outgoing {
    /// Windows of samples.
    pub windows: Vec<GpuWindow>,
    /// Hook records, oldest first.
    pub hook: Vec<HookRecord>,
    /// Action acks, oldest first.
    pub acks: Vec<ActionAck>,
    /// Where in Kubernetes the windows' processes run, by pid.
    pub placements: Vec<ProcPlacement>,
    /// Host RAM over the window, when the agent reads it.
    pub host: Option<HostMemory>,
}

impl Outgoing {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
            && self.hook.is_empty()
            && self.acks.is_empty()
            && self.host.is_none()
    }

    fn len(&self) -> usize {
        self.windows.len() + self.hook.len() + self.acks.len()
    }

    fn encoded_len(&self) -> usize {
        let parts = (&self.windows, &self.hook, &self.acks, &self.placements);
        wire::encode(&(parts, &self.host)).len()
    }

    /// Keeps the first `n` items (windows, then records, then acks) and
    /// the host memory, and returns the rest, order kept; each part keeps
    /// the placements of its windows' processes.
    fn split_off(&mut self, n: usize) -> Outgoing {
        let w = n.min(self.windows.len());
        let windows = self.windows.split_off(w);
        let h = (n - w).min(self.hook.len());
        let hook = self.hook.split_off(h);
        let a = (n - w - h).min(self.acks.len());
        let acks = self.acks.split_off(a);
        let placements = placements_in(&windows, &self.placements);
        self.placements = placements_in(&self.windows, &self.placements);
        Outgoing {
            windows,
            hook,
            acks,
            placements,
            host: None,
        }
    }
}

/// A part carrying only `host`, when there is one: what is left of a part
/// whose lone item was too large to send.
fn host_alone(host: Option<HostMemory>) -> Option<Outgoing> {
    host.map(|host| Outgoing {
        host: Some(host),
        ..Outgoing::default()
    })
}

/// The placements of processes in `windows`.
fn placements_in(windows: &[GpuWindow], placements: &[ProcPlacement]) -> Vec<ProcPlacement> {
    placements
        .iter()
        .filter(|p| {
            windows
                .iter()
                .any(|w| w.procs.iter().any(|q| q.pid == p.pid))
        })
        .cloned()
        .collect()
}

#[derive(Debug, Error)]
enum DeliveryError {
    /// Worth retrying: [`Attempt::Failed`].
    #[error("{0}")]
    Failed(String),
    /// The coordinator is too busy; wait this long: [`Attempt::Busy`].
    #[error("coordinator busy; retrying after {0:?}")]
    Busy(Duration),
    /// Refused for good: [`Attempt::Rejected`].
    #[error("refused: {0}")]
    Refused(String),
}

/// The uplink's state; see the module docs.
#[derive(Debug)]
pub struct Uplink {
    pusher: Pusher,
    route: Route,
    hello: Hello,
    hello_sent_to: Option<String>,
    /// Batches with the placements of their processes.
    buffer: VecDeque<PushBatchV2>,
    max_buffered: usize,
    max_batch_bytes: usize,
    next_seq: u64,
    /// The front batch was sent at least once: its seq is spent.
    front_sent: bool,
    attempt: u32,
    jitter: u64,
    stats: Arc<UplinkStats>,
    hub: Option<Arc<HookHub>>,
}

/// The push client: each post bounded by [`PUSH_TIMEOUT`].
fn push_client(builder: reqwest::ClientBuilder) -> reqwest::Client {
    builder
        .timeout(PUSH_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("a client on a checked TLS config builds")
}

impl Uplink {
    /// Sends `token`, this agent's token, with every push.
    pub fn with_token(mut self, token: Option<Secret>) -> Self {
        self.pusher = self.pusher.with_token(token);
        self
    }

    /// An uplink for an agent introduced by `hello`.
    pub fn new(
        coordinators: Vec<String>,
        hello: Hello,
        max_buffered: usize,
        max_batch_bytes: usize,
    ) -> Self {
        let client = push_client(gpumon_net::plain_client_builder());
        Self {
            pusher: Pusher::new(client, coordinators),
            route: Route::new(0),
            jitter: hello.incarnation | 1,
            hello,
            hello_sent_to: None,
            buffer: VecDeque::new(),
            max_buffered,
            max_batch_bytes,
            next_seq: 1,
            front_sent: false,
            attempt: 0,
            stats: Arc::default(),
            hub: None,
        }
    }

    /// Reaches the coordinators with `tls` (trust and, for mutual TLS, a
    /// client certificate), built and checked by `gpumon_net::ClientTls`.
    pub fn with_tls(mut self, tls: rustls::ClientConfig) -> Self {
        self.pusher = self
            .pusher
            .with_client(push_client(gpumon_net::client_builder_with(tls)));
        self
    }

    /// Hands the actions and alerts of every committed reply to `hub`.
    pub fn with_hook_hub(mut self, hub: Arc<HookHub>) -> Self {
        self.hub = Some(hub);
        self
    }

    /// The delivery counters.
    pub fn stats(&self) -> Arc<UplinkStats> {
        self.stats.clone()
    }

    /// Stamps windows, hook records and acks into batches of at most
    /// `max_batch_bytes` and buffers them, dropping the oldest unsent batches past
    /// `max_buffered` (and counting what they held). Nothing to send: no batch.
    pub fn enqueue(
        &mut self,
        windows: Vec<GpuWindow>,
        hook: Vec<HookRecord>,
        acks: Vec<ActionAck>,
    ) {
        self.enqueue_outgoing(Outgoing {
            windows,
            hook,
            acks,
            ..Outgoing::default()
        });
    }

    /// [`Self::enqueue`] of a hand-over, with its placements.
    pub fn enqueue_outgoing(&mut self, out: Outgoing) {
        if out.is_empty() {
            return;
        }
        for Outgoing {
            windows,
            hook,
            acks,
            placements,
            host,
        } in self.split(out)
        {
            while self.buffer.len() >= self.max_buffered {
                let oldest_unsent = usize::from(self.front_sent && self.buffer.len() > 1);
                let seq_spent = self.front_sent && oldest_unsent == 0;
                if let Some(old) = self.take_out(oldest_unsent, seq_spent) {
                    self.stats.dropped.fetch_add(1, Relaxed);
                    self.count_lost(&old.batch.hook, &old.batch.acks);
                }
            }
            let batch = PushBatch {
                agent_id: self.hello.agent_id.clone(),
                incarnation: self.hello.incarnation,
                seq: self.next_seq,
                node: self.hello.node.clone(),
                dropped_batches: self.stats.dropped.load(Relaxed),
                windows,
                hook,
                acks,
            };
            self.next_seq += 1;
            self.buffer.push_back(PushBatchV2 {
                batch,
                placements,
                host,
            });
        }
        self.stats.buffered.store(self.buffer.len() as u64, Relaxed);
    }

    /// Takes the batch at `at` out of the buffer. Unless its seq is spent
    /// (sent, maybe committed), the batches after it move down one seq so
    /// that none is skipped.
    fn take_out(&mut self, at: usize, seq_spent: bool) -> Option<PushBatchV2> {
        let batch = self.buffer.remove(at)?;
        if at == 0 {
            self.front_sent = false;
        }
        if !seq_spent {
            for later in self.buffer.range_mut(at..) {
                later.batch.seq -= 1;
            }
            self.next_seq -= 1;
        }
        Some(batch)
    }

    fn count_lost(&self, hook: &[HookRecord], acks: &[ActionAck]) {
        self.stats
            .dropped_hook_records
            .fetch_add(hook.len() as u64, Relaxed);
        self.stats
            .dropped_acks
            .fetch_add(acks.len() as u64, Relaxed);
    }

    /// Splits in halves (by item count, order kept) until each part encodes
    /// within `max_batch_bytes`; a single item over the limit is dropped and
    /// counted.
    fn split(&self, out: Outgoing) -> Vec<Outgoing> {
        let mut done = Vec::new();
        let mut todo = vec![out];
        while let Some(mut part) = todo.pop() {
            // Envelope overhead (ids, seq) is small; 256 bytes of slack covers it.
            if part.encoded_len() + 256 <= self.max_batch_bytes {
                done.push(part);
            } else if part.len() > 1 {
                let back = part.split_off(part.len() / 2);
                todo.push(back);
                todo.push(part);
            } else if let Some(w) = part.windows.first() {
                tracing::error!(gpu = %w.gpu.uuid, "dropped a window larger than max_batch_bytes");
                self.stats.dropped.fetch_add(1, Relaxed);
                done.extend(host_alone(part.host));
            } else {
                tracing::error!(
                    records = part.hook.len(),
                    acks = part.acks.len(),
                    "dropped a hook record or action ack larger than max_batch_bytes"
                );
                self.count_lost(&part.hook, &part.acks);
                done.extend(host_alone(part.host));
            }
        }
        done
    }

    /// Batches waiting.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    fn target(&self) -> String {
        self.route.target(self.pusher.urls()).to_owned()
    }

    /// Sends one message: one attempt, following leader hints.
    async fn deliver(&mut self, msg: &AgentMessage) -> Result<(), DeliveryError> {
        let body = wire::encode(msg);
        let follow = |leader: &str| tracing::info!(%leader, "following the leader hint");
        match self.pusher.attempt(&mut self.route, &body, follow).await {
            Attempt::Committed {
                actions, alerts, ..
            } => {
                self.offer(actions);
                self.relay(&alerts);
                Ok(())
            }
            Attempt::Failed(why) => Err(DeliveryError::Failed(why)),
            Attempt::Rejected(why) => Err(DeliveryError::Refused(why)),
            Attempt::Busy(wait) => Err(DeliveryError::Busy(wait)),
        }
    }

    /// Hands a committed reply's actions to the hook hub; without one (no
    /// hook endpoint) there is nobody to run them: they are logged and left
    /// for the coordinator to time out.
    fn offer(&self, actions: Vec<PendingAction>) {
        if actions.is_empty() {
            return;
        }
        match &self.hub {
            Some(hub) => hub.offer_actions(actions, wall_ms()),
            None => {
                tracing::debug!(
                    actions = actions.len(),
                    "the coordinator sent actions but this agent serves no hooks"
                )
            }
        }
    }

    /// Hands a committed reply's alerts to the hook hub, which posts the
    /// new ones; without one there is no hook to tell.
    fn relay(&self, alerts: &[NodeAlert]) {
        if let (Some(hub), false) = (&self.hub, alerts.is_empty()) {
            let news = hub.relay_alerts(alerts);
            if news > 0 {
                tracing::debug!(news, "posted the coordinator's alerts to the hooks");
            }
        }
    }

    /// Sends the hello where the current target has not had it.
    async fn greet(&mut self) -> Result<(), DeliveryError> {
        if self.hello_sent_to.as_deref() != Some(self.target().as_str()) {
            let hello = AgentMessage::V1(AgentMessageV1::Hello(self.hello.clone()));
            match self.deliver(&hello).await {
                Ok(()) | Err(DeliveryError::Refused(_)) => self.hello_sent_to = Some(self.target()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Tries to deliver the oldest batch (after a hello where the target has
    /// not had one). `Ok(true)` when a batch left the buffer.
    async fn deliver_front(&mut self) -> Result<bool, DeliveryError> {
        self.greet().await?;
        let Some(front) = self.buffer.front() else {
            return Ok(false);
        };
        let msg = AgentMessage::push(front.clone());
        self.front_sent = true;
        match self.deliver(&msg).await {
            Ok(()) => {
                self.take_out(0, true);
                self.stats.acked.fetch_add(1, Relaxed);
                self.stats.last_acked_ms.store(wall_ms(), Relaxed);
            }
            Err(DeliveryError::Refused(why)) => {
                let seq = self.take_out(0, false).map_or(0, |b| b.batch.seq);
                self.stats.rejected.fetch_add(1, Relaxed);
                tracing::error!(seq, %why, "a coordinator refused a batch; dropped it");
            }
            Err(e) => return Err(e),
        }
        self.stats.buffered.store(self.buffer.len() as u64, Relaxed);
        Ok(true)
    }

    fn backoff(&mut self) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        let base = 100u64.saturating_mul(1 << self.attempt.min(6)).min(5_000);
        self.jitter ^= self.jitter << 13;
        self.jitter ^= self.jitter >> 7;
        self.jitter ^= self.jitter << 17;
        Duration::from_millis(base * 4 / 5 + self.jitter % (base * 2 / 5 + 1))
    }

    /// Runs until the channel closes (the sampler stopped), then tries to
    /// flush what is left for a short while.
    pub async fn run(mut self, mut windows: mpsc::Receiver<Outgoing>) {
        let mut failing = false;
        let mut open = true;
        // Say hello right away, so an agent with nothing to push yet (no GPU,
        // waiting for hook data) still shows in the cluster view.
        if let Err(e) = self.greet().await {
            tracing::warn!(error = %e, "cannot reach a coordinator yet; will keep trying");
            failing = true;
        }
        while open {
            while let Ok(w) = windows.try_recv() {
                self.enqueue_outgoing(w);
            }
            if self.buffer.is_empty() {
                match windows.recv().await {
                    Some(w) => self.enqueue_outgoing(w),
                    None => open = false,
                }
                continue;
            }
            match self.deliver_front().await {
                Ok(_) => {
                    if failing {
                        tracing::info!(url = %self.target(), buffered = self.buffer.len(), "coordinator reachable again");
                    }
                    failing = false;
                    self.attempt = 0;
                }
                Err(e) => {
                    let wait = match &e {
                        DeliveryError::Busy(asked) => {
                            self.stats.busy.fetch_add(1, Relaxed);
                            tracing::debug!(wait = ?asked, buffered = self.buffer.len(), "coordinator busy; keeping the batch");
                            (*asked).max(self.backoff())
                        }
                        _ => {
                            self.stats.failures.fetch_add(1, Relaxed);
                            if !failing {
                                tracing::warn!(error = %e, buffered = self.buffer.len(), "cannot reach a coordinator; buffering and retrying");
                            }
                            failing = true;
                            self.backoff()
                        }
                    };
                    let pause = tokio::time::sleep(wait);
                    tokio::pin!(pause);
                    loop {
                        tokio::select! {
                            _ = &mut pause => break,
                            w = windows.recv() => match w {
                                Some(w) => self.enqueue_outgoing(w),
                                None => {
                                    open = false;
                                    break;
                                }
                            },
                        }
                    }
                }
            }
        }
        let deadline = tokio::time::Instant::now() + SHUTDOWN_FLUSH;
        while !self.buffer.is_empty() && tokio::time::Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, self.deliver_front()).await {
                Ok(Ok(_)) => {}
                _ => break,
            }
        }
        if !self.buffer.is_empty() {
            tracing::warn!(
                unsent = self.buffer.len(),
                "shut down with batches not delivered"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::{BytesStat, GpuInfo};

    fn hello() -> Hello {
        Hello {
            agent_id: "a".into(),
            incarnation: 3,
            node: "n".into(),
            agent_version: "t".into(),
            source: "sim".into(),
            gpus: vec![],
        }
    }

    fn window(i: u32) -> GpuWindow {
        GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{i}"),
                index: i,
                name: "x".repeat(200),
                total_bytes: 1 << 30,
            },
            start_ms: 0,
            end_ms: 1,
            samples: 1,
            used_bytes: BytesStat::single(1),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: vec![],
        }
    }

    fn seqs_and_gpus(u: &Uplink) -> Vec<(u64, u32)> {
        let gpu = |b: &PushBatch| b.windows[0].gpu.index;
        batches(u).map(|b| (b.seq, gpu(b))).collect()
    }

    fn batches(u: &Uplink) -> impl Iterator<Item = &PushBatch> {
        u.buffer.iter().map(|b| &b.batch)
    }

    #[test]
    fn stamps_consecutive_seqs_and_drops_the_oldest_when_full() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 3, 1 << 20);
        for i in 0..5 {
            u.enqueue(vec![window(i)], vec![], vec![]);
        }
        assert_eq!(seqs_and_gpus(&u), vec![(1, 2), (2, 3), (3, 4)]);
        assert_eq!(u.stats().dropped.load(Relaxed), 2);
        assert_eq!(
            u.buffer.back().unwrap().batch.dropped_batches,
            2,
            "the drop count travels with later batches"
        );
    }

    #[test]
    fn a_sent_batch_keeps_its_seq_and_a_long_outage_skips_none() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 3, 1 << 20);
        for i in 0..3 {
            u.enqueue(vec![window(i)], vec![], vec![]);
        }
        u.front_sent = true;
        for i in 3..100 {
            u.enqueue(vec![window(i)], vec![], vec![]);
        }
        assert_eq!(seqs_and_gpus(&u), vec![(1, 0), (2, 98), (3, 99)]);
        assert_eq!(u.stats().dropped.load(Relaxed), 97);

        // Acknowledged, the front's seq is spent; refused, it is taken again.
        u.take_out(0, true);
        u.enqueue(vec![window(100)], vec![], vec![]);
        assert_eq!(seqs_and_gpus(&u), vec![(2, 98), (3, 99), (4, 100)]);
        u.take_out(0, false);
        u.enqueue(vec![window(101)], vec![], vec![]);
        assert_eq!(seqs_and_gpus(&u), vec![(2, 99), (3, 100), (4, 101)]);
    }

    #[test]
    fn splits_batches_over_the_byte_limit() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 100, 4096);
        u.enqueue((0..64).map(window).collect(), vec![], vec![]);
        assert!(u.buffered() > 1);
        let total: usize = batches(&u).map(|b| b.windows.len()).sum();
        assert_eq!(total, 64, "splitting loses no window");
        assert!(u.buffer.iter().all(|b| wire::encode(b).len() <= 4096));
    }

    fn record(i: u64) -> HookRecord {
        HookRecord::Event(gpumon_proto::EventRecord {
            t_ms: i,
            job: "j".into(),
            rank: 0,
            name: "n".repeat(100),
            detail: None,
            snapshot: None,
        })
    }

    fn ack(id: u64) -> ActionAck {
        ActionAck {
            id,
            t_ms: 1,
            outcome: gpumon_proto::ActionOutcome::Failed {
                reason: "r".repeat(100),
            },
            response: None,
        }
    }

    #[test]
    fn splitting_keeps_hook_records_and_acks_in_order() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 100, 4096);
        u.enqueue(
            (0..20).map(window).collect(),
            (0..100).map(record).collect(),
            (0..50).map(ack).collect(),
        );
        assert!(u.buffered() > 3);
        assert!(u.buffer.iter().all(|b| wire::encode(b).len() <= 4096));
        let seqs: Vec<u64> = batches(&u).map(|b| b.seq).collect();
        assert_eq!(seqs, (1..=u.buffered() as u64).collect::<Vec<_>>());
        let windows: Vec<u32> = batches(&u)
            .flat_map(|b| &b.windows)
            .map(|w| w.gpu.index)
            .collect();
        let records: Vec<u64> = batches(&u)
            .flat_map(|b| &b.hook)
            .map(HookRecord::t_ms)
            .collect();
        let acks: Vec<u64> = batches(&u).flat_map(|b| &b.acks).map(|a| a.id).collect();
        assert_eq!(windows, (0..20).collect::<Vec<_>>());
        assert_eq!(records, (0..100).collect::<Vec<_>>());
        assert_eq!(acks, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn records_and_acks_alone_make_a_batch_and_their_loss_is_counted() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 1, 1 << 20);
        u.enqueue(vec![], vec![], vec![]);
        assert_eq!(u.buffered(), 0, "nothing to send, no batch");
        u.enqueue(vec![], vec![record(1), record(2)], vec![ack(3)]);
        assert_eq!(u.buffered(), 1);
        u.enqueue(vec![], vec![], vec![ack(4)]);
        let stats = u.stats();
        assert_eq!(stats.dropped.load(Relaxed), 1);
        assert_eq!(stats.dropped_hook_records.load(Relaxed), 2);
        assert_eq!(stats.dropped_acks.load(Relaxed), 1);
        assert_eq!(u.buffer[0].batch.acks[0].id, 4);

        // A lone item over the byte limit is dropped and counted too.
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 10, 4096);
        let mut huge = ack(9);
        huge.response = Some("x".repeat(5000));
        u.enqueue(vec![], vec![record(1)], vec![huge]);
        assert_eq!(u.buffered(), 1);
        assert_eq!(u.buffer[0].batch.hook.len(), 1);
        assert_eq!(u.stats().dropped_acks.load(Relaxed), 1);
    }

    #[test]
    fn placements_travel_with_the_windows_of_their_processes() {
        let on = |i: u32, pids: &[u32]| {
            let mut w = window(i);
            w.procs = pids
                .iter()
                .map(|&pid| gpumon_proto::ProcWindow {
                    pid,
                    used_bytes: BytesStat::single(1),
                    rank: None,
                })
                .collect();
            w
        };
        let placed = |pid: u32| ProcPlacement {
            pid,
            placement: gpumon_proto::PodPlacement {
                pod_name: Some(format!("trainer-{pid}")),
                ..Default::default()
            },
        };
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 100, 800);
        // Pid 7 uses GPUs 0 and 9: its placement goes with both halves.
        let mut windows: Vec<GpuWindow> = (0..10).map(|i| on(i, &[100 + i])).collect();
        windows[0].procs.push(on(0, &[7]).procs.remove(0));
        windows[9].procs.push(on(9, &[7]).procs.remove(0));
        u.enqueue_outgoing(Outgoing {
            windows,
            placements: [7, 100, 109].map(placed).to_vec(),
            ..Outgoing::default()
        });
        assert!(u.buffered() > 1);
        for b in &u.buffer {
            let pids: Vec<u32> = b.placements.iter().map(|p| p.pid).collect();
            let has = |gpu: u32| b.batch.windows.iter().any(|w| w.gpu.index == gpu);
            let want: Vec<u32> = [(0, 7), (0, 100), (9, 7), (9, 109)]
                .into_iter()
                .filter(|(gpu, _)| has(*gpu))
                .map(|(_, pid)| pid)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut got = pids.clone();
            got.sort_unstable();
            assert_eq!(got, want, "batch {}", b.batch.seq);
            assert!(wire::encode(b).len() <= 800);
        }
        let sent = |b: &PushBatchV2| AgentMessage::push(b.clone());
        let versions: Vec<bool> = u
            .buffer
            .iter()
            .map(|b| matches!(sent(b), AgentMessage::V2(_)))
            .collect();
        assert_eq!(versions.first(), Some(&true), "GPU 0's batch is version 2");
        assert_eq!(versions.last(), Some(&true), "GPU 9's batch is version 2");
        assert!(
            versions.contains(&false),
            "batches without placements stay version 1"
        );
    }

    #[test]
    fn host_memory_makes_a_batch_version_2_and_stays_with_the_first_part() {
        let host = HostMemory {
            t_ms: 5,
            total_bytes: 100,
            used_max_bytes: 80,
        };
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 100, 4096);
        u.enqueue_outgoing(Outgoing {
            host: Some(host),
            ..Outgoing::default()
        });
        assert_eq!(u.buffered(), 1, "host memory alone is worth a push");
        let front = u.buffer.pop_front().unwrap();
        assert_eq!(front.host, Some(host));
        assert!(matches!(AgentMessage::push(front), AgentMessage::V2(_)));

        u.enqueue_outgoing(Outgoing {
            windows: (0..64).map(window).collect(),
            host: Some(host),
            ..Outgoing::default()
        });
        assert!(u.buffered() > 1);
        let hosts: Vec<Option<HostMemory>> = u.buffer.iter().map(|b| b.host).collect();
        assert_eq!(hosts[0], Some(host), "with the window's first part");
        assert!(hosts[1..].iter().all(Option::is_none), "and only there");
        assert!(matches!(
            AgentMessage::push(u.buffer[1].clone()),
            AgentMessage::V1(_)
        ));

        // A window too large to send is dropped; its host memory is not.
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 100, 4096);
        let mut huge = window(0);
        huge.gpu.name = "x".repeat(5000);
        u.enqueue_outgoing(Outgoing {
            windows: vec![huge],
            host: Some(host),
            ..Outgoing::default()
        });
        assert_eq!(u.stats().dropped.load(Relaxed), 1);
        assert_eq!(u.buffered(), 1);
        assert_eq!(
            (u.buffer[0].batch.windows.len(), u.buffer[0].host),
            (0, Some(host))
        );
    }

    #[test]
    fn backoff_grows_to_a_cap_with_jitter() {
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 1, 1 << 20);
        let delays: Vec<u128> = (0..10).map(|_| u.backoff().as_millis()).collect();
        assert!(delays[0] >= 160 && delays[0] <= 240, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= 6_000), "{delays:?}");
        assert!(delays[9] >= 4_000, "{delays:?}");
    }

    #[tokio::test]
    async fn keeps_batches_while_no_coordinator_answers() {
        // Port 1 on loopback: connection refused, quickly.
        let mut u = Uplink::new(vec!["http://127.0.0.1:1".into()], hello(), 10, 1 << 20);
        u.enqueue(vec![window(0)], vec![], vec![]);
        assert!(u.deliver_front().await.is_err());
        assert_eq!(u.buffered(), 1, "an undelivered batch stays buffered");
    }
}
