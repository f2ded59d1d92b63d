//! The sender's loop: it follows this replica's leadership, takes the new
//! windows every interval, queues the requests and POSTs them one at a
//! time, oldest first, retrying what may succeed later.
//!
//! Answers: 2xx sent; 429 and 5xx, and no answer at all (connection, TLS,
//! timeout), retried with a backoff from [`BACKOFF_INITIAL`] doubling to
//! [`BACKOFF_MAX`] while the request stays at the head of the queue (new
//! takes queue behind it and the queue bound drops the oldest); any other
//! answer (4xx: the receiver will refuse it again) counts its samples as
//! failed and is not retried. Failures are logged through [`ErrorLog`].

use std::time::Duration;

use gpumon_net::{ClientTls, TlsError};
use gpumon_runtime::clock::wall_ms;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE,
};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::collect::Cursors;
use super::error_log::{quote, ErrorLog};
use super::queue::Queue;
use super::stats::{RemoteWriteStats, NO_ANSWER};
use super::{encode, RemoteWriteConfig};
use crate::outbound::{Answer, OutboundClient};
use crate::raft::state_machine::StateMachine;
use crate::service::Proposer;

/// First wait before a request is tried again.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(250);
/// Longest wait between tries of one request.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// GPUs read per hold of the state's read lock during a take.
pub const GPUS_PER_STEP: usize = 1024;

/// The loop's state.
pub(super) struct Sender {
    config: RemoteWriteConfig,
    client: OutboundClient,
    headers: HeaderMap,
    proposer: Proposer,
    state_machine: StateMachine,
    stats: RemoteWriteStats,
    /// Where the next take starts; `Some` while this replica leads.
    cursors: Option<Cursors>,
    queue: Queue,
    errors: ErrorLog,
}

impl Sender {
    /// The sender of `config`; fails when the CA file cannot be used.
    pub(super) fn new(
        config: RemoteWriteConfig,
        proposer: Proposer,
        state_machine: StateMachine,
        stats: RemoteWriteStats,
    ) -> Result<Self, SenderError> {
        let tls = ClientTls {
            ca_file: config.ca_file.clone(),
            identity: None,
        };
        let client = OutboundClient::new(config.timeout, &tls)?;
        let headers = headers(&config)?;
        Ok(Self {
            queue: Queue::new(config.max_queued_samples),
            config,
            client,
            headers,
            proposer,
            state_machine,
            stats,
            cursors: None,
            errors: ErrorLog::default(),
        })
    }

    /// Runs until `stop` turns true; what is still queued then is dropped.
    pub(super) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut metrics = self.proposer.raft().metrics();
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut retry_at = Instant::now();
        let mut backoff = BACKOFF_INITIAL;
        loop {
            let queued = self.queue.front().is_some();
            tokio::select! {
                // Not the guard `wait_for` returns: it must not live across an await.
                _ = async { drop(stop.wait_for(|s| *s).await) } => break,
                changed = metrics.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.follow_leadership();
                }
                _ = tick.tick() => {
                    self.follow_leadership();
                    self.take().await;
                }
                _ = tokio::time::sleep_until(retry_at), if queued => {
                    if self.send_front().await {
                        backoff = BACKOFF_INITIAL;
                        retry_at = Instant::now();
                    } else {
                        retry_at = Instant::now() + backoff;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
        }
        self.stats.dropped(self.queue.clear());
        self.stats.set_queued(0);
        self.stats.set_sending(false);
    }

    /// Starts taking from the view as it is when this replica becomes the
    /// leader; stops when it no longer is (what is queued is still sent).
    fn follow_leadership(&mut self) {
        let leads = self.proposer.leads();
        match (leads, self.cursors.is_some()) {
            (true, false) => {
                let cursors = Cursors::at(&self.state_machine.read().cluster);
                self.cursors = Some(cursors);
                tracing::info!(url = %redacted(&self.config.url), "remote-write: leading, sending windows from now on");
            }
            (false, true) => {
                self.cursors = None;
                tracing::info!("remote-write: no longer leading, the new leader sends");
            }
            _ => return,
        }
        self.stats.set_sending(leads);
    }

    /// Takes the new windows, off the async workers, and queues their
    /// requests.
    async fn take(&mut self) {
        self.follow_leadership();
        let Some(mut cursors) = self.cursors.take() else {
            return;
        };
        let state_machine = self.state_machine.clone();
        let labels = self.config.labels.clone();
        let (budget, per_request) = (
            self.config.max_queued_samples,
            self.config.max_samples_per_request,
        );
        let work = tokio::task::spawn_blocking(move || {
            let mut take = cursors.begin(&labels, budget);
            // The read lock is let go between parts, so pushes wait for one
            // part at most, not for the whole fleet.
            while take.step(&state_machine.read().cluster, GPUS_PER_STEP) {}
            let taken = take.finish();
            let samples = taken.samples;
            let bodies = encode::bodies(taken.series, per_request);
            (cursors, samples, taken.skipped, bodies)
        });
        let Ok((cursors, samples, skipped, bodies)) = work.await else {
            tracing::error!("remote-write: the take failed; starting again from the view as it is");
            return;
        };
        self.cursors = Some(cursors);
        self.stats.dropped(skipped);
        match bodies {
            Ok(bodies) => {
                for body in bodies {
                    self.stats.dropped(self.queue.push(body));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, samples, "remote-write: cannot compress a request");
                self.stats.dropped(samples);
            }
        }
        self.stats.set_queued(self.queue.samples());
    }

    /// Tries the oldest request once; true when it is done with (sent or
    /// refused for good), false when it is to be tried again.
    async fn send_front(&mut self) -> bool {
        let Some(body) = self.queue.front() else {
            return true;
        };
        let (bytes, samples) = (body.bytes.clone(), body.samples);
        let answer = self
            .client
            .post(&self.config.url, self.headers.clone(), bytes)
            .await;
        let done = match answer {
            Ok(Answer { status, body }) => {
                self.stats.request(status.as_str());
                let retry = status.as_u16() == 429 || status.is_server_error();
                if status.is_success() {
                    self.stats.sent(samples, wall_ms());
                } else if !retry {
                    self.stats.failed(samples);
                }
                if !status.is_success() {
                    self.log(&format!("{}: {}", status.as_u16(), quote(&body)), retry);
                }
                !retry
            }
            Err(e) => {
                self.stats.request(NO_ANSWER);
                self.log(&e.to_string(), true);
                false
            }
        };
        if done {
            self.queue.pop();
        }
        self.stats.set_queued(self.queue.samples());
        done
    }

    fn log(&mut self, what: &str, retried: bool) {
        let Some(passed_over) = self.errors.note(what, std::time::Instant::now()) else {
            return;
        };
        let url = redacted(&self.config.url);
        if retried {
            tracing::warn!(%url, error = %what, passed_over, "remote-write: request failed, retrying");
        } else {
            tracing::error!(%url, error = %what, passed_over, "remote-write: the receiver refused a request; its samples are dropped");
        }
    }
}

/// The headers of every request (remote-write 1.0), with the bearer token.
fn headers(config: &RemoteWriteConfig) -> Result<HeaderMap, SenderError> {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    h.insert(
        HeaderName::from_static("x-prometheus-remote-write-version"),
        HeaderValue::from_static("0.1.0"),
    );
    if let Some(token) = &config.bearer_token {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| SenderError::Token)?;
        v.set_sensitive(true);
        h.insert(AUTHORIZATION, v);
    }
    Ok(h)
}

/// Why the sender cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    /// The CA file cannot be used.
    #[error("remote-write: {0}")]
    Tls(#[from] TlsError),
    /// The bearer token cannot go in a header.
    #[error("remote-write: the bearer token is not a valid header value")]
    Token,
}

/// The URL's origin, for logs: no credentials, path or query.
fn redacted(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| "(invalid URL)".to_owned())
}
