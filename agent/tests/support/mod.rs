//! Helpers for the hook endpoint tests: servers on real sockets, a raw
//! JSON-lines client, a fake coordinator, and bounded waits.

#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpumon_agent::hook_endpoint::{HookAddr, HookHub, HookServer, HookServerOptions};
use gpumon_proto::{
    wire, AgentMessage, AgentMessageV1, AgentMessageV2, CoordinatorReply, CoordinatorReplyV2,
    HookRecord, NodeAlert, PendingAction, PushBatchV2, PushOutcome, StallRecord,
};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, watch};

/// How long any awaited condition may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Awaits `f`, failing the test past [`LIMIT`].
#[track_caller]
pub fn bounded<F: Future>(f: F) -> impl Future<Output = F::Output> {
    let caller = std::panic::Location::caller();
    async move {
        tokio::time::timeout(LIMIT, f)
            .await
            .unwrap_or_else(|_| panic!("timed out at {caller}"))
    }
}

/// Seconds since the epoch, as the hook writes `t`.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A hook server running in this process.
pub struct Server {
    pub hub: Arc<HookHub>,
    pub addr: HookAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The empty `/proc` of [`Server::unix`] and [`Server::tcp`].
    _proc_root: Option<tempfile::TempDir>,
}

impl Server {
    /// Binds `addr` with `proc_root` (the real `/proc` when `None`) and serves.
    pub async fn start(addr: &str, proc_root: Option<&Path>) -> Server {
        let addr: HookAddr = addr.parse().unwrap();
        let hub = Arc::new(HookHub::new("agent-t", "node-t"));
        let mut options = HookServerOptions::default();
        if let Some(root) = proc_root {
            options.proc_root = root.to_owned();
        }
        let server = HookServer::bind_with(&addr, hub.clone(), options)
            .await
            .unwrap();
        let addr = server.local_addr().clone();
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(server.serve(async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        Server {
            hub,
            addr,
            stop,
            task,
            _proc_root: None,
        }
    }

    /// A server on a Unix socket in `dir` that cannot read any process's
    /// environment (see [`Server::unreadable_proc`]).
    pub async fn unix(dir: &Path) -> Server {
        Self::unreadable_proc(&format!("unix:{}", dir.join("hook.sock").display())).await
    }

    /// A server on loopback TCP that cannot read any process's environment.
    pub async fn tcp() -> Server {
        Self::unreadable_proc("127.0.0.1:0").await
    }

    /// A server whose `/proc` is an empty directory: every claim about job
    /// and rank stands, as for a process whose environment the agent cannot
    /// read. The protocol tests register many ranks from this one process;
    /// the identity rules have tests of their own (over the real `/proc`
    /// too: `Server::start(addr, None)` and [`own_claim`]).
    async fn unreadable_proc(addr: &str) -> Server {
        let root = tempfile::tempdir().unwrap();
        let mut server = Self::start(addr, Some(root.path())).await;
        server._proc_root = Some(root);
        server
    }

    /// A raw client of this server.
    pub async fn connect(&self) -> Client {
        Client::connect(&self.addr).await
    }

    /// Awaits `cond` on the hub, re-checking on every hub change.
    pub async fn until(&self, mut cond: impl FnMut(&HookHub) -> bool) {
        let mut changes = self.hub.subscribe();
        bounded(async {
            while !cond(&self.hub) {
                changes.changed().await.unwrap();
            }
        })
        .await;
    }

    /// Awaits the agent's word that a hooked process exited: the
    /// `process_exit` stall records queued for the coordinator, at least one.
    pub async fn process_exits(&self) -> Vec<StallRecord> {
        let mut exits = Vec::new();
        self.until(|hub| {
            let (records, _) = hub.take_outgoing();
            exits.extend(records.into_iter().filter_map(|r| match r {
                HookRecord::Stall(s) if s.source == "process_exit" => Some(s),
                _ => None,
            }));
            !exits.is_empty()
        })
        .await;
        exits
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.stop.send(true).unwrap();
        bounded(self.task).await.unwrap();
    }
}

/// A raw JSON-lines client.
pub struct Client {
    reader: BufReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
}

impl Client {
    pub async fn connect(addr: &HookAddr) -> Client {
        if let Some(path) = addr.unix_path() {
            let (r, w) = UnixStream::connect(path).await.unwrap().into_split();
            Client {
                reader: BufReader::new(Box::new(r)),
                writer: Box::new(w),
            }
        } else {
            let (r, w) = TcpStream::connect(addr.tcp_addr().unwrap())
                .await
                .unwrap()
                .into_split();
            Client {
                reader: BufReader::new(Box::new(r)),
                writer: Box::new(w),
            }
        }
    }

    /// Writes raw bytes.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    /// Reads one answer line; `None` at end of stream.
    pub async fn read(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = bounded(self.reader.read_line(&mut line)).await.unwrap();
        (n > 0).then(|| serde_json::from_str(&line).unwrap())
    }

    /// Sends one request and returns its answer.
    pub async fn call(&mut self, request: Value) -> Value {
        let mut line = serde_json::to_vec(&request).unwrap();
        line.push(b'\n');
        self.write(&line).await;
        self.read().await.expect("an answer")
    }

    /// Registers as `rank` of `job` with this process's pid.
    pub async fn register(&mut self, job: &str, rank: u32) -> Value {
        self.call(register(std::process::id(), job, rank, None))
            .await
    }

    /// Registers as what this process's real environment says it is.
    pub async fn register_as_myself(&mut self) -> Value {
        self.call(own_claim().register(None)).await
    }
}

/// Who this process is by its real `/proc/self/environ`, read with the
/// agent's own rule: a launcher's rank when the test runs under one (or
/// with `GPUMON_JOB`), else the only claim a plain process may make.
pub struct OwnClaim {
    pub job: String,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
}

pub fn own_claim() -> OwnClaim {
    let environ = std::fs::read("/proc/self/environ").unwrap();
    match gpumon_agent::discovery::parse_environ(&environ) {
        Some(r) => OwnClaim {
            job: r.job,
            rank: r.rank,
            local_rank: r.local_rank,
            world_size: r.world_size,
        },
        None => OwnClaim {
            job: gpumon_agent::discovery::standalone_job(std::process::id()),
            rank: 0,
            local_rank: 0,
            world_size: 1,
        },
    }
}

impl OwnClaim {
    /// The `register` request making this claim.
    pub fn register(&self, device: Option<Value>) -> Value {
        json!({"v": 1, "op": "register", "pid": std::process::id(), "job": self.job,
               "rank": self.rank, "local_rank": self.local_rank,
               "world_size": self.world_size, "hook_version": "test", "device": device})
    }
}

/// A `register` request.
pub fn register(pid: u32, job: &str, rank: u32, device: Option<Value>) -> Value {
    json!({"v": 1, "op": "register", "pid": pid, "job": job, "rank": rank,
           "local_rank": rank % 8, "world_size": 16, "hook_version": "test",
           "device": device})
}

/// An `alloc` record at `t` seconds.
pub fn alloc(t: f64, allocated: u64, reserved: u64) -> Value {
    json!({"type": "alloc", "t": t, "allocated": allocated, "reserved": reserved})
}

/// A `report` request.
pub fn report(records: Vec<Value>) -> Value {
    json!({"v": 1, "op": "report", "records": records})
}

#[track_caller]
pub fn assert_ok(answer: &Value) {
    assert_eq!(answer["ok"], json!(true), "{answer}");
}

/// Asserts a refusal whose error contains `needle`.
#[track_caller]
pub fn assert_refused(answer: &Value, needle: &str) {
    assert_eq!(answer["ok"], json!(false), "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains(needle), "{error:?} lacks {needle:?}");
}

/// A push of either protocol version, as version 2 lays it out; `None`
/// for a hello.
pub fn pushed(msg: &AgentMessage) -> Option<PushBatchV2> {
    match msg {
        AgentMessage::V1(AgentMessageV1::Push(b)) => Some(PushBatchV2::from(b.clone())),
        AgentMessage::V2(AgentMessageV2::Push(p))
        | AgentMessage::V3(AgentMessageV2::Push(p))
        | AgentMessage::V4(AgentMessageV2::Push(p))
        | AgentMessage::V5(AgentMessageV2::Push(p))
        | AgentMessage::V6(AgentMessageV2::Push(p))
        | AgentMessage::V7(AgentMessageV2::Push(p)) => Some(p.clone()),
        _ => None,
    }
}

/// A fake coordinator: answers every ingest with `Committed` plus the
/// actions and alerts `reply` returns for the message, in the message's
/// protocol version (version 1 drops the alerts), and forwards each message.
pub async fn fake_coordinator<F>(mut reply: F) -> (String, mpsc::UnboundedReceiver<AgentMessage>)
where
    F: FnMut(&AgentMessage) -> (Vec<PendingAction>, Vec<NodeAlert>) + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    let (req_tx, mut req_rx) =
        mpsc::unbounded_channel::<(AgentMessage, tokio::sync::oneshot::Sender<Vec<u8>>)>();
    // One task decides the replies, in arrival order, so `reply` needs no lock.
    tokio::spawn(async move {
        while let Some((msg, answer)) = req_rx.recv().await {
            let (actions, alerts) = reply(&msg);
            let version = msg.version();
            let _ = tx.send(msg);
            let reply = CoordinatorReplyV2 {
                outcome: PushOutcome::Committed {
                    acked_seq: 0,
                    duplicate: false,
                },
                actions,
                alerts,
            };
            let body = wire::encode(&CoordinatorReply::in_version(version, reply));
            let _ = answer.send(body);
        }
    });
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let req_tx = req_tx.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let msg: AgentMessage = wire::decode(&body, 16 << 20).unwrap();
                    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
                    if req_tx.send((msg, answer_tx)).is_err() {
                        return;
                    }
                    let Ok(reply) = answer_rx.await else { return };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    let out = stream.get_mut();
                    if out.write_all(head.as_bytes()).await.is_err()
                        || out.write_all(&reply).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (url, rx)
}
