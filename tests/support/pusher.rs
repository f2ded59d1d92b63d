//! Simulated agents for fault tests: K tokio tasks, each pushing its batches
//! one at a time in seq order (a hello first) through the real agent's push
//! client ([`gpumon_agent::push`]: follow `NotLeader` hints, move to the next
//! replica on a 5xx, a transport error or a timeout), and moving to the next
//! seq only once the current one is committed. Every acknowledgement is
//! recorded.
//!
//! The windows are a pure function of `(agent, seq)`: G GPUs per agent, each
//! with one process of job [`JOB`] (rank `agent * G + gpu`), data time
//! `base_ms + seq * 1000`, and memory rising 40 MiB per data-second from about
//! 40 GiB on an 80 GiB GPU, so the engine forecasts an OOM after its warm-up.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpumon_agent::push::{Attempt, Pusher as PushClient, Route};
use gpumon_proto::wire;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, EventRecord, GpuInfo, GpuWindow, Hello, HookRecord,
    ProcWindow, PushBatch, RankInfo,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The job every simulated rank belongs to.
pub const JOB: &str = "fault-job";

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Capacity of every simulated GPU.
const GPU_BYTES: u64 = 80 * GIB;
/// Time allowed for one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause before trying the next replica.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Time allowed to commit one message before an agent gives up.
const COMMIT_WITHIN: Duration = Duration::from_secs(30);

/// What the agents push.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Agents (K).
    pub agents: u32,
    /// GPUs per agent (G), one rank each.
    pub gpus: u32,
    /// Batches each agent pushes, seq 1 to this.
    pub batches: u64,
    /// Time between the starts of two pushes of one agent.
    pub every: Duration,
    /// Data time of seq 0, ms since the epoch.
    pub base_ms: u64,
    /// Marker records of 1 KiB each that every batch also carries, to make
    /// pushes large.
    pub padding_records: usize,
}

impl Plan {
    /// K agents with G GPUs pushing `batches` each, every `every`.
    pub fn new(agents: u32, gpus: u32, batches: u64, every: Duration) -> Self {
        Self {
            agents,
            gpus,
            batches,
            every,
            base_ms: 1_700_000_000_000,
            padding_records: 0,
        }
    }

    /// The end time (what history points carry) of every window of `seq`.
    pub fn window_end_ms(&self, seq: u64) -> u64 {
        self.base_ms + seq * 1000
    }

    /// Ranks in the job (K × G).
    pub fn world_size(&self) -> u32 {
        self.agents * self.gpus
    }

    /// The agent's id.
    pub fn agent_id(agent: u32) -> String {
        format!("agent-{agent}")
    }

    /// The agent's incarnation (fixed: the agents never restart).
    pub fn incarnation(agent: u32) -> u64 {
        7_000 + u64::from(agent)
    }

    fn gpu(&self, agent: u32, gpu: u32) -> GpuInfo {
        GpuInfo {
            uuid: format!("GPU-{agent}-{gpu}"),
            index: gpu,
            name: "NVIDIA H100 80GB HBM3".into(),
            total_bytes: GPU_BYTES,
        }
    }

    /// The agent's hello.
    pub fn hello(&self, agent: u32) -> AgentMessage {
        AgentMessage::V1(AgentMessageV1::Hello(Hello {
            agent_id: Self::agent_id(agent),
            incarnation: Self::incarnation(agent),
            node: format!("node-{agent}"),
            agent_version: "fault-test".into(),
            source: "test".into(),
            gpus: (0..self.gpus).map(|g| self.gpu(agent, g)).collect(),
        }))
    }

    /// Batch `seq` of `agent`: one window per GPU.
    pub fn batch(&self, agent: u32, seq: u64) -> AgentMessage {
        let end_ms = self.window_end_ms(seq);
        let windows = (0..self.gpus)
            .map(|g| {
                let rank = agent * self.gpus + g;
                // The peak rises 40 MiB per data-second; the trough stays a
                // little below it, as a training step's allocations do.
                let peak = 40 * GIB + u64::from(rank) * 64 * MIB + seq * 40 * MIB;
                let proc = BytesStat {
                    min: peak - 512 * MIB,
                    max: peak,
                    last: peak - 128 * MIB,
                    mean: peak - 256 * MIB,
                };
                let overhead = GIB;
                GpuWindow {
                    gpu: self.gpu(agent, g),
                    start_ms: end_ms - 900,
                    end_ms,
                    samples: 4,
                    used_bytes: BytesStat {
                        min: proc.min + overhead,
                        max: proc.max + overhead,
                        last: proc.last + overhead,
                        mean: proc.mean + overhead,
                    },
                    reserved_bytes: None,
                    util_pct: None,
                    sm_clock_mhz: None,
                    power_w: None,
                    procs: vec![ProcWindow {
                        pid: 10_000 + rank,
                        used_bytes: proc,
                        rank: Some(RankInfo {
                            job: JOB.into(),
                            rank,
                            local_rank: g,
                            world_size: self.world_size(),
                            master_addr: None,
                            master_port: None,
                        }),
                    }],
                }
            })
            .collect();
        AgentMessage::V1(AgentMessageV1::Push(PushBatch {
            agent_id: Self::agent_id(agent),
            incarnation: Self::incarnation(agent),
            seq,
            node: format!("node-{agent}"),
            dropped_batches: 0,
            windows,
            hook: self.padding(agent, end_ms),
            acks: Vec::new(),
        }))
    }

    /// The batch's padding: markers of rank `agent * G` with a 1 KiB detail.
    fn padding(&self, agent: u32, end_ms: u64) -> Vec<HookRecord> {
        (0..self.padding_records)
            .map(|i| {
                HookRecord::Event(EventRecord {
                    t_ms: end_ms,
                    job: JOB.into(),
                    rank: agent * self.gpus,
                    name: format!("pad-{}", i % 8),
                    detail: Some("p".repeat(1000)),
                    snapshot: None,
                })
            })
            .collect()
    }
}

/// One acknowledged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// Its seq.
    pub seq: u64,
    /// When the commit answer came back.
    pub at: Instant,
    /// The coordinator had applied it before (an earlier attempt committed
    /// without its answer reaching the agent).
    pub duplicate: bool,
    /// Index in the replica URLs of the one that committed it.
    pub by: usize,
    /// When the agent started sending it.
    pub started: Instant,
}

#[derive(Debug)]
struct Shared {
    plan: Plan,
    client: PushClient,
    stop: AtomicBool,
    paused: watch::Sender<bool>,
    /// Per agent, in seq order.
    acks: Mutex<Vec<Vec<Ack>>>,
}

/// The running agents; see the module docs.
#[derive(Debug)]
pub struct Pusher {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<Result<(), String>>>,
}

impl Pusher {
    /// Starts `plan.agents` agents pushing to the replicas at `urls`.
    pub fn start(urls: Vec<String>, plan: Plan) -> Self {
        let shared = Arc::new(Shared {
            acks: Mutex::new(vec![Vec::new(); plan.agents as usize]),
            plan,
            client: PushClient::new(
                gpumon_net::plain_client_builder()
                    .timeout(REQUEST_TIMEOUT)
                    .build()
                    .expect("reqwest client builds"),
                urls,
            ),
            stop: AtomicBool::new(false),
            paused: watch::channel(false).0,
        });
        let tasks = (0..shared.plan.agents)
            .map(|a| tokio::spawn(run_agent(shared.clone(), a)))
            .collect();
        Self { shared, tasks }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.shared.plan
    }

    /// Windows acknowledged so far, all agents.
    pub fn windows_acked(&self) -> u64 {
        let acks = self.shared.acks.lock().unwrap();
        acks.iter().map(|a| a.len() as u64).sum::<u64>() * u64::from(self.shared.plan.gpus)
    }

    /// Batches acknowledged so far, all agents.
    pub fn batches_acked(&self) -> u64 {
        let acks = self.shared.acks.lock().unwrap();
        acks.iter().map(|a| a.len() as u64).sum()
    }

    /// Batches acknowledged by `agent` so far (its last acked seq).
    pub fn last_acked(&self, agent: u32) -> u64 {
        self.shared.acks.lock().unwrap()[agent as usize].len() as u64
    }

    /// Every acknowledgement of `agent`, in seq order.
    pub fn acks(&self, agent: u32) -> Vec<Ack> {
        self.shared.acks.lock().unwrap()[agent as usize].clone()
    }

    /// Acknowledgements received after `t`, all agents, earliest first.
    pub fn acked_after(&self, t: Instant) -> Vec<Ack> {
        let acks = self.shared.acks.lock().unwrap();
        let mut after: Vec<Ack> = acks
            .iter()
            .flatten()
            .filter(|a| a.at > t)
            .copied()
            .collect();
        after.sort_by_key(|a| a.at);
        after
    }

    /// Acknowledgements that said the batch had been applied before.
    pub fn duplicates(&self) -> usize {
        let acks = self.shared.acks.lock().unwrap();
        acks.iter().flatten().filter(|a| a.duplicate).count()
    }

    /// Agents finish the batch in flight and send no more.
    pub fn stop(&self) {
        self.shared.stop.store(true, Relaxed);
        self.shared.paused.send_replace(false);
    }

    /// Agents finish the batch in flight and wait for [`Self::resume`].
    pub fn pause(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Paused agents go on.
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Waits up to `within` for every agent to end (its plan done, or
    /// stopped); panics on an agent's failure or the deadline.
    pub async fn join(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        for (a, task) in std::mem::take(&mut self.tasks).into_iter().enumerate() {
            let acked = self.shared.acks.lock().unwrap()[a].len();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => panic!("agent {a} failed after {acked} batches: {e}"),
                Ok(Err(e)) => panic!("agent {a} panicked: {e}"),
                Err(_) => panic!(
                    "agent {a} still pushing after {within:?} ({acked} of {} batches acked)",
                    self.shared.plan.batches
                ),
            }
        }
    }

    /// Sends batch `seq` of `agent` (again, or for the first time) until it is
    /// committed, and says whether it was a duplicate. Not recorded.
    pub async fn send(&self, agent: u32, seq: u64) -> Result<bool, String> {
        let msg = wire::encode(&self.shared.plan.batch(agent, seq));
        let mut at = 0;
        deliver(&self.shared, &mut at, msg).await
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn run_agent(shared: Arc<Shared>, agent: u32) -> Result<(), String> {
    let plan = &shared.plan;
    // Agents start at different replicas, as a real fleet would.
    let mut at = agent as usize % shared.client.urls().len();
    deliver(&shared, &mut at, wire::encode(&plan.hello(agent)))
        .await
        .map_err(|e| format!("hello: {e}"))?;
    let mut paused = shared.paused.subscribe();
    for seq in 1..=plan.batches {
        // Wait while paused; a closed channel cannot happen (we hold the sender).
        let _ = paused.wait_for(|p| !*p).await;
        if shared.stop.load(Relaxed) {
            return Ok(());
        }
        let started = Instant::now();
        let duplicate = deliver(&shared, &mut at, wire::encode(&plan.batch(agent, seq)))
            .await
            .map_err(|e| format!("seq {seq}: {e}"))?;
        shared.acks.lock().unwrap()[agent as usize].push(Ack {
            seq,
            at: Instant::now(),
            duplicate,
            by: at,
            started,
        });
        tokio::time::sleep_until(started + plan.every).await;
    }
    Ok(())
}

/// Posts `body` until a replica commits it; `at` is the replica tried
/// first (an index into the URLs) and, after, the one that committed. Gives
/// `duplicate`; a refusal (4xx) is an error at once.
async fn deliver(shared: &Shared, at: &mut usize, body: Vec<u8>) -> Result<bool, String> {
    let urls = shared.client.urls();
    let deadline = Instant::now() + COMMIT_WITHIN;
    let mut route = Route::new(*at);
    let mut last = String::new();
    while Instant::now() < deadline {
        match shared.client.attempt(&mut route, &body, |_| {}).await {
            Attempt::Committed { duplicate, .. } => {
                // A leader hint is one of the replicas' own URLs.
                let by = route.target(urls);
                *at = urls
                    .iter()
                    .position(|u| u == by)
                    .ok_or_else(|| format!("committed by {by}, not one of {urls:?}"))?;
                return Ok(duplicate);
            }
            Attempt::Rejected(why) => return Err(format!("refused: {why}")),
            Attempt::Failed(why) => last = why,
            Attempt::Busy(wait) => {
                last = format!("busy: retry after {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(format!(
        "not committed within {COMMIT_WITHIN:?}; last: {last}"
    ))
}
