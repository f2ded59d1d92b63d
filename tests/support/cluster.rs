//! A replicated coordinator cluster: N real `gpumon coordinator` processes on
//! loopback, each with its own data directory, and the faults a test injects
//! into it (SIGKILL and restart on the same data, SIGSTOP and SIGCONT).
//!
//! Replicas are named by their Raft id, 1 to N. Every wait polls
//! `GET /api/v1/raft` every 50 ms up to a deadline and, when it gives up,
//! panics with every replica's last status and the tail of its log.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use gpumon_proto::api::RaftStatus;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use super::{gpumon, Proc};

/// Poll period of every wait.
const POLL: Duration = Duration::from_millis(50);
/// Time allowed for one status or read request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Time allowed for a replica to print its serving line.
const START_WITHIN: Duration = Duration::from_secs(20);
/// Lines of each replica's log shown when a wait gives up.
const LOG_TAIL_LINES: usize = 8;

/// What a replica's process is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Running,
    Frozen,
    Killed,
}

/// N coordinator processes forming one Raft cluster; killed on drop.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT` of replica `i + 1`.
    addrs: Vec<String>,
    peers: String,
    extra: Vec<String>,
    /// Each replica's process, when it has one (behind a lock so that a
    /// failure message can ask whether it exited).
    procs: Mutex<Vec<Option<Proc>>>,
    life: Vec<Life>,
    /// `http`, or `https` for replicas that serve TLS.
    scheme: &'static str,
    client: reqwest::Client,
    /// Each replica's last status (or why it had none), for failure messages.
    last: Mutex<BTreeMap<u64, String>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("addrs", &self.addrs)
            .field("life", &self.life)
            .finish_non_exhaustive()
    }
}

/// Free loopback ports: bound together (so they differ), then released.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl Cluster {
    /// Starts `n` replicas that all list each other in `--peers`, with
    /// `extra` flags for every one, and waits for each serving line.
    pub async fn start(n: usize, extra: &[&str]) -> Self {
        let client = gpumon_net::plain_client_builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("reqwest client builds");
        Self::start_with(n, extra, "http", client).await
    }

    /// Like [`Self::start`], for replicas reached at `scheme` URLs through
    /// `client` (e.g. https with a test CA and a client certificate).
    pub async fn start_with(
        n: usize,
        extra: &[&str],
        scheme: &'static str,
        client: reqwest::Client,
    ) -> Self {
        let addrs: Vec<String> = free_ports(n)
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            addrs,
            peers,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            procs: Mutex::new((0..n).map(|_| None).collect()),
            life: vec![Life::Killed; n],
            scheme,
            client,
            last: Mutex::new(BTreeMap::new()),
        };
        // Spawn all first: a replica alone cannot elect anyone.
        let ids = cluster.ids();
        for &id in &ids {
            cluster.spawn(id);
        }
        for &id in &ids {
            cluster.await_serving(id).await;
        }
        cluster
    }

    /// Every replica id, 1 to N.
    pub fn ids(&self) -> Vec<u64> {
        (1..=self.addrs.len() as u64).collect()
    }

    /// Replicas running and not frozen.
    pub fn live(&self) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|&id| self.life[self.slot(id)] == Life::Running)
            .collect()
    }

    /// The process id of replica `id`, while it runs (for `/proc` figures
    /// such as its resident memory).
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.procs.lock().unwrap()[self.slot(id)]
            .as_ref()
            .and_then(|p| p.child.id())
    }

    /// Base URL of replica `id`'s API, e.g. `http://127.0.0.1:4242`.
    pub fn url(&self, id: u64) -> String {
        format!("{}://{}", self.scheme, self.addr(id))
    }

    /// `host:port` of replica `id` (what `x-gpumon-served-by` names).
    pub fn addr(&self, id: u64) -> &str {
        &self.addrs[self.slot(id)]
    }

    /// Every replica's base URL, by id.
    pub fn urls(&self) -> Vec<String> {
        self.ids().into_iter().map(|id| self.url(id)).collect()
    }

    /// Replica `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("replica-{id}"))
    }

    fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("replica-{id}.log"))
    }

    fn slot(&self, id: u64) -> usize {
        assert!(
            (1..=self.addrs.len() as u64).contains(&id),
            "no replica {id} in a cluster of {}",
            self.addrs.len()
        );
        (id - 1) as usize
    }

    /// Starts replica `id`'s process; its stderr goes to a log file that
    /// failure messages quote (appended across restarts).
    fn spawn(&mut self, id: u64) {
        let slot = self.slot(id);
        assert!(
            self.procs.lock().unwrap()[slot].is_none(),
            "replica {id} is already running"
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .expect("replica log file opens");
        let mut cmd = gpumon();
        cmd.arg("coordinator")
            .args(["--id", &id.to_string()])
            .args(["--listen", &self.addrs[slot]])
            .args(["--peers", &self.peers])
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("gpumon coordinator starts");
        let stdout = child.stdout.take().expect("piped stdout");
        self.procs.lock().unwrap()[slot] = Some(Proc {
            child,
            lines: BufReader::new(stdout).lines(),
        });
        self.life[slot] = Life::Running;
    }

    /// Waits for replica `id`'s serving line and checks its URL.
    async fn await_serving(&mut self, id: u64) {
        let expected = self.url(id);
        let slot = self.slot(id);
        // Out of the lock while waiting; back in before any failure message.
        let mut proc = self.procs.lock().unwrap()[slot].take().expect("spawned");
        let got = tokio::time::timeout(START_WITHIN, proc.lines.next_line()).await;
        self.procs.lock().unwrap()[slot] = Some(proc);
        let line = match got {
            Ok(Ok(Some(line))) => line,
            other => panic!(
                "replica {id} printed no serving line within {START_WITHIN:?} ({other:?})\n{}",
                self.describe()
            ),
        };
        assert!(
            line.contains("serving") && line.contains(&expected),
            "replica {id} should serve {expected}, said {line:?}"
        );
    }

    /// SIGKILL replica `id` and wait for it to exit.
    pub async fn kill9(&mut self, id: u64) {
        let slot = self.slot(id);
        let taken = self.procs.lock().unwrap()[slot].take();
        let mut proc = taken.unwrap_or_else(|| panic!("replica {id} is not running"));
        // SIGKILL ends a stopped process too; no SIGCONT needed first.
        proc.child.kill().await.expect("SIGKILL is delivered");
        self.life[slot] = Life::Killed;
    }

    /// Starts replica `id` again with the same flags and data directory, and
    /// waits for its serving line.
    pub async fn restart(&mut self, id: u64) {
        self.spawn(id);
        self.await_serving(id).await;
    }

    /// SIGSTOP replica `id`: it holds its sockets but answers nothing.
    pub fn freeze(&mut self, id: u64) {
        self.signal(id, "-STOP");
        let slot = self.slot(id);
        self.life[slot] = Life::Frozen;
    }

    /// SIGCONT a frozen replica.
    pub fn thaw(&mut self, id: u64) {
        self.signal(id, "-CONT");
        let slot = self.slot(id);
        self.life[slot] = Life::Running;
    }

    fn signal(&self, id: u64, sig: &str) {
        let pid = self.procs.lock().unwrap()[self.slot(id)]
            .as_ref()
            .and_then(|p| p.child.id())
            .unwrap_or_else(|| panic!("replica {id} is not running"))
            .to_string();
        let sent = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {sig} {pid} failed");
    }

    /// GET `path` (with its query) from replica `id`, as JSON, with the
    /// `x-gpumon-served-by` header when the answer was forwarded.
    pub async fn get_from<T: DeserializeOwned>(
        &self,
        id: u64,
        path: &str,
    ) -> Result<(T, Option<String>), String> {
        let url = format!("{}{path}", self.url(id));
        let resp = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {}", chain(&e)))?;
        let status = resp.status();
        let served_by = resp
            .headers()
            .get("x-gpumon-served-by")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(format!("GET {url}: {status}: {body}"));
        }
        let value = resp
            .json()
            .await
            .map_err(|e| format!("GET {url}: bad JSON: {}", chain(&e)))?;
        Ok((value, served_by))
    }

    /// Like [`Self::get_from`], panicking on failure.
    pub async fn get<T: DeserializeOwned>(&self, id: u64, path: &str) -> T {
        match self.get_from(id, path).await {
            Ok((v, _)) => v,
            Err(e) => panic!("{e}\n{}", self.describe()),
        }
    }

    /// Replica `id`'s `GET /api/v1/raft`, remembered for failure messages.
    pub async fn try_status(&self, id: u64) -> Result<RaftStatus, String> {
        let got = self
            .get_from::<RaftStatus>(id, "/api/v1/raft")
            .await
            .map(|(s, _)| s);
        let line = match &got {
            Ok(s) => brief(s),
            Err(e) => format!("no status: {e}"),
        };
        self.last.lock().unwrap().insert(id, line);
        got
    }

    /// Replica `id`'s status; panics when it does not answer.
    pub async fn status(&self, id: u64) -> RaftStatus {
        match self.try_status(id).await {
            Ok(s) => s,
            Err(e) => panic!("{e}\n{}", self.describe()),
        }
    }

    /// Polls `probe` every 50 ms until it gives `Some`; after `within`,
    /// panics with `what`, every replica's last status and log tail.
    pub async fn wait<T, F, Fut>(&self, within: Duration, what: &str, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + within;
        loop {
            let last = match probe().await {
                Ok(v) => return v,
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                self.refresh().await;
                panic!(
                    "timed out after {within:?} waiting for {what}; last: {last}\n{}",
                    self.describe()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The leader that every live replica names, itself live and leading;
    /// waits up to `within`.
    pub async fn wait_leader(&self, within: Duration) -> u64 {
        let live = self.live();
        self.wait(within, "a leader all live replicas agree on", || async {
            let mut named = BTreeMap::new();
            for &id in &live {
                let s = self.try_status(id).await?;
                named.insert(id, (s.leader, s.role));
            }
            let leaders: Vec<Option<u64>> = named.values().map(|(l, _)| *l).collect();
            match leaders[0] {
                Some(l)
                    if leaders.iter().all(|x| *x == Some(l))
                        && named.get(&l).is_some_and(|(_, role)| role == "leader") =>
                {
                    Ok(l)
                }
                _ => Err(format!("leaders named: {named:?}")),
            }
        })
        .await
    }

    /// Waits up to `within` until every replica in `ids` reports the same
    /// applied index, at least `at_least`, and the same state digest; gives
    /// one of their (equal) statuses.
    pub async fn wait_converged(&self, ids: &[u64], at_least: u64, within: Duration) -> RaftStatus {
        let what = format!("replicas {ids:?} to apply index >= {at_least} with one digest");
        self.wait(within, &what, || async {
            let mut seen = Vec::new();
            for &id in ids {
                seen.push(self.try_status(id).await?);
            }
            let first = &seen[0];
            let same = seen.iter().all(|s| {
                s.applied_index == first.applied_index
                    && s.state_digest_index == s.applied_index
                    && s.state_digest == first.state_digest
            });
            if same && first.applied_index.is_some_and(|i| i >= at_least) {
                Ok(first.clone())
            } else {
                Err(seen.iter().map(brief).collect::<Vec<_>>().join("; "))
            }
        })
        .await
    }

    /// Polls every live replica's status once (for a failure message).
    pub async fn refresh(&self) {
        for id in self.live() {
            let _ = self.try_status(id).await;
        }
    }

    /// Every replica: process state, last status seen, and its log's tail.
    pub fn describe(&self) -> String {
        let last = self.last.lock().unwrap();
        let mut procs = self.procs.lock().unwrap();
        let mut out = String::from("cluster:");
        for id in self.ids() {
            let life = self.life[self.slot(id)];
            let status = last.get(&id).map_or("never polled", String::as_str);
            let process = match procs[self.slot(id)].as_mut() {
                None => "no process".to_owned(),
                Some(p) => match p.child.try_wait() {
                    Ok(Some(exit)) => format!("exited: {exit}"),
                    _ => p
                        .child
                        .id()
                        .map_or_else(|| "no pid".to_owned(), process_state),
                },
            };
            let _ = write!(out, "\n  replica {id} ({life:?}, {process}): {status}");
            let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            for l in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
                let _ = write!(out, "\n    | {l}");
            }
        }
        out
    }
}

/// An error and its sources, one after the other.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let _ = write!(out, ": {s}");
        next = s.source();
    }
    out
}

/// `pid N state S` from `/proc` (R running, S sleeping, T stopped, Z exited).
fn process_state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesized command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    format!("pid {pid} state {state}")
}

/// One line of a status, for failure messages.
pub fn brief(s: &RaftStatus) -> String {
    format!(
        "id={} role={} leader={:?} term={} last_log={:?} commit={:?} applied={:?} \
         snapshot={:?} purged={:?} digest={}",
        s.id,
        s.role,
        s.leader,
        s.term,
        s.last_log_index,
        s.commit_index,
        s.applied_index,
        s.snapshot_index,
        s.purged_index,
        s.state_digest
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let procs = self.procs.get_mut().unwrap_or_else(|p| p.into_inner());
        for proc in procs.iter_mut().flatten() {
            // SIGKILL also ends a stopped process; kill_on_drop would too,
            // this just does it before the data directory goes.
            let _ = proc.child.start_kill();
        }
    }
}
