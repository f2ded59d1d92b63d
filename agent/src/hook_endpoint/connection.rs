//! One hook connection: read a line, answer it, in order, until the peer
//! goes or breaks the framing.
//!
//! A connection becomes a session with a successful `register`; the session
//! ends (and its pending actions fail) when the connection does, however it
//! does: a guard ends it on drop, so a cancelled or panicking task cannot
//! leave a rank held. Lines are read with a hard bound: a line over
//! [`MAX_LINE_BYTES`] is answered with an error and the connection closed,
//! since the framing can no longer be trusted.
//!
//! A connection must register within [`REGISTER_WITHIN`] and a session
//! must send a line within [`SESSION_IDLE`] (the hook reports every second
//! by default, at most every [`SESSION_IDLE`] / 5): otherwise it is closed,
//! so idle connections cannot hold the agent's connection slots and lock
//! every job on the node out.
//!
//! Refusals are counted in the hub and logged with their fields; the first
//! one of a connection at `warn` (at most one such line per
//! [`WARN_INTERVAL_MS`] across all connections, so a hook stuck in a
//! reconnect loop cannot flood the log), the rest at `debug`.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::exit;
use super::hub::HookHub;
use super::hub_error::HubError;
use super::identity::{self, IdentityError};
use super::protocol::{self, Op, Request, MAX_LINE_BYTES};
use super::protocol_error::ProtocolError;
use super::record_error::ReportError;
use super::records::check_report;
use super::tcp_owner::{self, PeerSocket};
use gpumon_runtime::clock::wall_ms;

/// Longest time from connecting to a successful `register`.
pub const REGISTER_WITHIN: Duration = Duration::from_secs(10);
/// Longest time a session may send nothing (the hook's report interval is
/// at most a fifth of it).
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// Least time between two `warn` lines about misbehaving hooks, ms.
pub const WARN_INTERVAL_MS: u64 = 10_000;

/// What every connection shares: the hub and the server's settings.
#[derive(Debug)]
pub(crate) struct Shared {
    pub hub: Arc<HookHub>,
    pub proc_root: PathBuf,
    /// When the last `warn` about a refusal was logged, ms.
    last_warn_ms: AtomicU64,
    /// Ended sessions whose process's exit is being watched.
    exit_watches: Arc<AtomicUsize>,
    /// One search of `/proc/*/fd` for a TCP peer's process at a time
    /// ([`tcp_owner::find_holder`]); the others wait their turn.
    pub holder_search: tokio::sync::Semaphore,
}

impl Shared {
    pub(crate) fn new(hub: Arc<HookHub>, proc_root: PathBuf) -> Self {
        Self {
            hub,
            proc_root,
            last_warn_ms: AtomicU64::new(0),
            exit_watches: Arc::new(AtomicUsize::new(0)),
            holder_search: tokio::sync::Semaphore::new(1),
        }
    }

    /// Whether a `warn` may be logged now (rate limit shared by all connections).
    fn may_warn(&self, now: u64) -> bool {
        let last = self.last_warn_ms.load(Relaxed);
        (last == 0 || now.saturating_sub(last) >= WARN_INTERVAL_MS)
            && self
                .last_warn_ms
                .compare_exchange(last, now.max(1), Relaxed, Relaxed)
                .is_ok()
    }
}

/// Who is on the other end, as the transport tells it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// The kernel's answer on a Unix socket; on loopback TCP the process
    /// holding the peer's socket ([`tcp_owner`]). `None` when unknown.
    pub pid: Option<u32>,
    /// The peer's user: the kernel's answer on a Unix socket, the socket's
    /// user on loopback TCP; `None` when unknown.
    pub uid: Option<u32>,
    /// A loopback TCP peer's socket, when found in `/proc/net/tcp*`.
    pub socket: Option<PeerSocket>,
    /// For logs: `pid 123`, `pid 123 (127.0.0.1:5555)` or `127.0.0.1:5555`.
    pub label: String,
}

impl Peer {
    /// The PID the kernel vouches for as the speaker of a claim for
    /// `claimed`: the peer's, or `claimed` itself when that process holds
    /// the peer's TCP socket too (it shares the connection, e.g. forked
    /// after connecting, so it may speak on it as well).
    fn vouched_pid(&self, proc_root: &std::path::Path, claimed: u32) -> Option<u32> {
        match self.socket {
            Some(s)
                if self.pid != Some(claimed) && tcp_owner::holds(proc_root, claimed, s.inode) =>
            {
                Some(claimed)
            }
            _ => self.pid,
        }
    }
}

/// The session of a registered connection.
#[derive(Debug)]
struct Registered {
    id: u64,
    job: String,
    rank: u32,
    /// Its process, where the kernel vouched for it (a Unix socket peer, or
    /// a TCP peer whose process was found).
    verified_pid: Option<u32>,
}

/// Ends the session when the connection task ends, however it ends, and
/// watches whether its process exits.
struct SessionGuard {
    shared: Arc<Shared>,
    session: Option<Registered>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let Some(s) = self.session.take() else {
            return;
        };
        let shared = &self.shared;
        let ended = shared.hub.end_session(s.id, wall_ms());
        tracing::debug!(session = s.id, job = %s.job, rank = s.rank, "hook session ended");
        if let (Some(ended), Some(pid)) = (ended, s.verified_pid) {
            let watches = shared.exit_watches.clone();
            exit::watch(
                shared.hub.clone(),
                shared.proc_root.clone(),
                watches,
                pid,
                ended,
            );
        }
    }
}

enum Line {
    Complete,
    Eof,
    TooLong,
}

/// Reads one `\n`-terminated line into `buf` (without the `\n`), refusing
/// to hold more than `max` bytes. A last line without `\n` still counts.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        if buf.len() + chunk.len() > max {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(found);
        reader.consume(used);
        if found {
            return Ok(Line::Complete);
        }
    }
}

/// Serves one connection until it closes.
pub(crate) async fn serve<S>(stream: S, peer: Peer, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let mut conn = Connection {
        guard: SessionGuard {
            shared: shared.clone(),
            session: None,
        },
        shared,
        peer,
        refused: 0,
        skipped_logged: false,
    };
    let mut line = Vec::new();
    loop {
        let deadline = match conn.guard.session {
            Some(_) => SESSION_IDLE,
            None => REGISTER_WITHIN,
        };
        let read =
            tokio::time::timeout(deadline, read_line(&mut reader, &mut line, MAX_LINE_BYTES));
        let Ok(read) = read.await else {
            let registered = conn.guard.session.is_some();
            tracing::debug!(peer = %conn.peer.label, registered, ?deadline, "hook connection idle past its deadline; closing it");
            conn.shared.hub.count_idle_closed();
            break;
        };
        let (answer, close) = match read {
            Ok(Line::Complete) => {
                let text = line.strip_suffix(b"\r").unwrap_or(&line);
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue; // a blank line is no request: nothing to answer
                }
                (conn.handle(text), false)
            }
            Ok(Line::TooLong) => {
                let reason = format!(
                    "a line may not exceed {MAX_LINE_BYTES} bytes (1 MiB); closing the connection"
                );
                (conn.refuse("?", reason), true)
            }
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(peer = %conn.peer.label, error = %e, "hook connection failed");
                break;
            }
        };
        if let Err(e) = write.write_all(&answer).await {
            tracing::debug!(peer = %conn.peer.label, error = %e, "cannot answer the hook");
            break;
        }
        if close {
            let _ = write.shutdown().await;
            break;
        }
    }
    if conn.refused > 1 {
        tracing::debug!(peer = %conn.peer.label, refused = conn.refused, "hook connection closed after refused requests");
    }
}

struct Connection {
    guard: SessionGuard,
    shared: Arc<Shared>,
    peer: Peer,
    refused: u64,
    skipped_logged: bool,
}

impl Connection {
    /// Answers one request line.
    fn handle(&mut self, line: &[u8]) -> Vec<u8> {
        let Request { op, body } = match protocol::parse_request(line) {
            Ok(request) => request,
            Err(reason) => return self.refuse("?", reason.to_string()),
        };
        let result = match (op, &self.guard.session) {
            (Op::Register, _) => self.register(&body),
            (_, None) => Err(Refusal::NotRegistered),
            (Op::Report, Some(s)) => {
                let (id, job, rank) = (s.id, s.job.clone(), s.rank);
                self.report(id, &job, rank, body.get("records"))
            }
            (Op::Poll, Some(s)) => {
                let hub = &self.shared.hub;
                let actions: Vec<Value> = hub
                    .poll(s.id)
                    .into_iter()
                    .map(|a| json!({"id": a.id, "kind": a.kind.name(), "reason": a.reason}))
                    .collect();
                let alerts: Vec<Value> =
                    hub.take_alerts(s.id).iter().map(|a| a.to_json()).collect();
                Ok(json!({ "actions": actions, "alerts": alerts }))
            }
            (Op::Ack, Some(s)) => {
                let id = s.id;
                protocol::parse_ack(&body)
                    .map_err(Refusal::from)
                    .and_then(|ack| Ok(self.shared.hub.ack(id, ack, wall_ms())?))
                    .map(|()| json!({}))
            }
        };
        match result {
            Ok(fields) => protocol::ok(fields),
            Err(reason) => self.refuse(op.name(), reason.to_string()),
        }
    }

    fn register(&mut self, body: &serde_json::Map<String, Value>) -> Result<Value, Refusal> {
        let mut claim = protocol::parse_registration(body)?;
        let peer_pid = self.peer.vouched_pid(&self.shared.proc_root, claim.pid);
        identity::verify(&self.shared.proc_root, peer_pid, &mut claim)?;
        let hub = &self.shared.hub;
        let (job, rank, pid) = (claim.job.clone(), claim.rank, claim.pid);
        let id = match &self.guard.session {
            // A second register on a live session updates it (e.g. the
            // device once CUDA is initialised); job and rank must stay.
            Some(s) => hub.update(s.id, claim).map(|()| s.id)?,
            None => {
                let verified = peer_pid.is_some_and(|p| p != 0);
                let id = hub.register(claim, verified, wall_ms())?;
                self.guard.session = Some(Registered {
                    id,
                    job: job.clone(),
                    rank,
                    verified_pid: verified.then_some(pid),
                });
                tracing::info!(session = id, pid, %job, rank, peer = %self.peer.label, "hook session registered");
                id
            }
        };
        Ok(json!({"session": id, "agent": hub.agent_id(), "node": hub.node()}))
    }

    fn report(
        &mut self,
        session: u64,
        job: &str,
        rank: u32,
        records: Option<&Value>,
    ) -> Result<Value, Refusal> {
        let now = wall_ms();
        let report = check_report(records, job, rank, now)?;
        let (accepted, skipped) = (report.records.len(), report.skipped);
        if skipped > 0 && !self.skipped_logged {
            self.skipped_logged = true;
            tracing::debug!(session, %job, rank, skipped, first = %report.reasons[0], "hook sent invalid records; skipping them (logged once per session)");
        }
        let reasons = report.reasons.clone();
        self.shared.hub.report(session, report, now);
        Ok(json!({"accepted": accepted, "skipped": skipped, "reasons": reasons}))
    }

    /// Counts and logs a refusal; returns the answer.
    fn refuse(&mut self, op: &str, reason: String) -> Vec<u8> {
        self.refused += 1;
        self.shared.hub.count_refused();
        let session = self.guard.session.as_ref().map(|s| s.id);
        let peer = &self.peer.label;
        if self.refused == 1 && self.shared.may_warn(wall_ms()) {
            tracing::warn!(%peer, ?session, op, %reason, "refused a hook request (further refusals on this connection are logged at debug)");
        } else {
            tracing::debug!(%peer, ?session, op, %reason, "refused a hook request");
        }
        protocol::refusal(&reason)
    }
}

/// Why a request is refused; its text is the `ok: false` answer's.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The request or its fields.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The process is not who it claims to be.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The hub's sessions and actions.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The report's records, whole.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// Anything but `register` before a session.
    #[error("register first")]
    NotRegistered,
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, &'static str>> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, &mut buf, max).await.unwrap() {
                Line::Complete => out.push(Ok(buf.clone())),
                Line::TooLong => {
                    out.push(Err("too long"));
                    return out;
                }
                Line::Eof => return out,
            }
        }
    }

    #[tokio::test]
    async fn reads_bounded_lines_across_buffer_refills() {
        let got = lines(b"abcdefgh\n\nxyz", 8).await;
        assert_eq!(
            got,
            [Ok(b"abcdefgh".to_vec()), Ok(vec![]), Ok(b"xyz".to_vec())]
        );
        let got = lines(b"abcdefghi\nnext\n", 8).await;
        assert_eq!(got, [Err("too long")]);
    }

    #[test]
    fn warnings_are_rate_limited_across_connections() {
        let shared = Shared::new(Arc::new(HookHub::new("a", "n")), PathBuf::from("/proc"));
        assert!(shared.may_warn(1_000));
        assert!(!shared.may_warn(1_000 + WARN_INTERVAL_MS - 1));
        assert!(shared.may_warn(1_000 + WARN_INTERVAL_MS));
    }
}
