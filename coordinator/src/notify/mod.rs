//! The leader's notifier: generic webhooks, Slack incoming webhooks and
//! Alertmanager v2, fed by the engine's alert episodes.
//!
//! Every `interval_ms`, on the leader only, the loop computes what is due
//! with the pure [`gpumon_core::notify::due`] over the applied state (the
//! replicated notify book and the engine's alerts) and the leader's wall
//! clock, and hands each notification to its receiver's worker through a
//! bounded queue with `try_send`: a full queue counts a drop and the
//! notification is simply due again next round. Workers POST with a timeout,
//! retry with backoff, and record what a receiver accepted through Raft
//! (`CommandV1::Notified`), so a failover neither loses nor (beyond the
//! at-least-once window described in `gpumon_core::notify`) repeats one.
//! Keys queued, in flight or resting after failing every attempt are held
//! on this leader so a slow receiver is not sent the same thing twice.
//! Followers never send, and a new leader starts only once it has applied
//! an entry of its own term (so every notification its predecessors
//! recorded is in its book). The apply path and ingest never wait on any of it.
//!
//! Files: [`config`] (receivers, validation), `worker` (sending, retries,
//! recording), [`payload`] (one file per receiver kind), [`counters`]
//! (counters for `/metrics`). Requests go out through the coordinator's
//! one outbound HTTP client (`crate::outbound`), which remote write uses too.

pub mod config;
mod config_error;
pub mod counters;
pub mod payload;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gpumon_core::engine::Severity;
use gpumon_core::notify::{due, Notice, ReceiverId, ReceiverRule};
use gpumon_runtime::clock::wall_ms;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::raft::state_machine::StateMachine;
use crate::service::Proposer;
pub use config::{NotifyConfig, Receiver};
pub use config_error::NotifyConfigError;
pub use counters::{NotifyCounts, NotifyStats};
use payload::Message;
use worker::{Hold, Holds, Worker};

/// A running notifier: its tasks and counters.
#[derive(Debug)]
pub struct Notifier {
    tasks: Vec<JoinHandle<()>>,
    stats: NotifyStats,
}

impl Notifier {
    /// Starts the leader loop and one worker per receiver (nothing at all
    /// without receivers); they end when `stop` turns true. `dashboard_url`
    /// is the default base of links (this replica's API URL).
    pub fn spawn(
        proposer: Proposer,
        state_machine: StateMachine,
        config: NotifyConfig,
        dashboard_url: String,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let stats = NotifyStats::default();
        if config.receivers.is_empty() {
            return Self {
                tasks: Vec::new(),
                stats,
            };
        }
        let config = Arc::new(config);
        let holds: Holds = Arc::default();
        let tls = gpumon_net::ClientTls {
            ca_file: config.ca_file.clone(),
            identity: None,
        };
        let client = match crate::outbound::OutboundClient::new(
            Duration::from_millis(config.timeout_ms),
            &tls,
        ) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "notifications are off: cannot set up their HTTP client");
                return Self {
                    tasks: Vec::new(),
                    stats,
                };
            }
        };
        let proxy_vars = crate::outbound::ignored_proxy_vars();
        if !proxy_vars.is_empty() {
            tracing::warn!(
                set = ?proxy_vars,
                "notifications reach their receivers directly: the notifier does not use proxies"
            );
        }
        let mut tasks = Vec::new();
        let mut queues = HashMap::new();
        for receiver in &config.receivers {
            let (tx, rx) = mpsc::channel(config.queue_capacity);
            queues.insert(receiver.id(), (receiver.kind, tx));
            let worker = Worker {
                receiver: receiver.clone(),
                config: config.clone(),
                client: client.clone(),
                proposer: proposer.clone(),
                holds: holds.clone(),
                stats: stats.clone(),
            };
            tasks.push(tokio::spawn(worker.run(rx, stop.clone())));
        }
        let dashboard_url = config
            .dashboard_url
            .clone()
            .unwrap_or(dashboard_url)
            .trim_end_matches('/')
            .to_owned();
        let leader = Leader {
            proposer,
            state_machine,
            config,
            queues,
            holds,
            stats: stats.clone(),
            dashboard_url,
        };
        tasks.push(tokio::spawn(leader.run(stop)));
        Self { tasks, stats }
    }

    /// The counters (a shared handle: it keeps counting).
    pub fn stats(&self) -> NotifyStats {
        self.stats.clone()
    }

    /// Waits for every task to end (after `stop`).
    pub async fn join(self) {
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The leader loop's state.
struct Leader {
    proposer: Proposer,
    state_machine: StateMachine,
    config: Arc<NotifyConfig>,
    queues: HashMap<ReceiverId, (gpumon_core::notify::ReceiverKind, mpsc::Sender<Message>)>,
    holds: Holds,
    stats: NotifyStats,
    dashboard_url: String,
}

impl Leader {
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let every = Duration::from_millis(self.config.interval_ms);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if self.ready() {
                self.round();
            }
        }
    }

    /// Leader, and caught up: it has applied an entry of its own term, so
    /// every notification an earlier leader recorded is in its book (a new
    /// leader that read its book sooner could repeat one); and its disk has
    /// room to record what it sends.
    fn ready(&self) -> bool {
        self.proposer.leads_caught_up() && self.proposer.can_write()
    }

    /// The receivers' repeat intervals, the live setting's where one is set.
    fn rules(&self, repeat_override_ms: Option<u64>) -> Vec<ReceiverRule> {
        let interval = repeat_override_ms.unwrap_or(self.config.repeat_interval_ms);
        self.config
            .receivers
            .iter()
            .map(|r| ReceiverRule {
                id: r.id(),
                repeat_interval_ms: self.config.repeat_ms_with(r.kind, interval),
            })
            .collect()
    }

    /// Queues everything due now that is not held. New episodes are
    /// announced from the smallest severity that applies to their job (the
    /// live settings', else the configured one).
    fn round(&self) {
        let (dues, data_now_t) = {
            let applied = self.state_machine.read();
            let live = applied.engine.settings().notify();
            let mut dues = due(
                &applied.notify,
                applied.engine.alerts(),
                wall_ms(),
                &self.rules(live.repeat_interval_ms),
                Severity::Warning,
            );
            let configured = self.config.min_severity;
            dues.retain(|d| {
                d.notice != Notice::New
                    || d.alert.severity >= live.min_severity_for(d.alert.job.as_deref(), configured)
            });
            (dues, applied.now_t())
        };
        if dues.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        holds.retain(|_, h| !matches!(h, Hold::RestUntil(t) if *t <= now));
        for d in dues {
            if holds.contains_key(&d.key) {
                continue;
            }
            let Some((kind, queue)) = self.queues.get(&d.key.receiver) else {
                continue;
            };
            let key = d.key.clone();
            let message = Message {
                due: d,
                data_now_t,
                dashboard_url: self.dashboard_url.clone(),
            };
            match queue.try_send(message) {
                Ok(()) => {
                    holds.insert(key, Hold::Busy);
                }
                Err(_) => self.stats.add(*kind, counters::Count::Dropped),
            }
        }
    }
}
