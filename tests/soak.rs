//! Issue 28, item 13: a soak. Three real replicas on loopback live through
//! a compressed month: a stream of short jobs starting and ending on a
//! fleet of simulated agents (`support::fleet`), agents that stop without a
//! word and come back as a new incarnation or are replaced by a new machine
//! (new agent id, node and GPUs), the Raft leader SIGKILLed and restarted
//! every `kill_every`, and from the side forged pushes (no token, a wrong
//! token, a token bound to other agents, an agent id the token is not bound
//! to, a malformed body, a seq far past the bound) and idle TCP connections
//! (silent, or half a request line) held open to every API port from
//! another source address. What a user relies on after a month is checked:
//!
//! - **State is flat.** Through each replica's API after the warm-up: the
//!   agents and GPUs in the view stay within the fleet's plus
//!   [`STALE_AGENTS`] replaced machines not yet expired, the jobs within the
//!   64 newest ended ones plus the live ones, the alert book within its
//!   [`MAX_ALERTS`]; at the end also the live ranks, and the replicated
//!   state on disk (`snapshot.bin`) within twice its warm size plus 1 MiB;
//!   the oldest jobs and their alerts are gone from every replica. These
//!   counts are what fails when expiry is off (`GPUMON_SOAK_FLAGS=
//!   "--expire-after-s 0"`: 25 agents, 111 jobs) or runs once a minute of
//!   wall time as it did before this test (25 agents after 47 s).
//! - **Memory is flat.** Each replica's peak resident memory stays under an
//!   absolute bound ([`RSS_BOUND`]); a debug build's RSS moves by tens of
//!   MiB from run to run, so growth is judged on the counts, and the RSS
//!   figures are printed for BENCHMARKS.md.
//! - **Detection is as fast at the end.** Every job of agent 0's first slot
//!   is a probe, with a leaking rank and a straggler; each probe's leak and
//!   straggler alerts, read when it ends, come within 1.5 times the first
//!   probe's data time after its start, plus [`DETECTION_SLACK_S`], the last
//!   one (started after the churn) included.
//! - **Nothing forged lands**, every kind is refused with its status (401,
//!   403 or 400) whenever a replica answers, the replicas close the idle
//!   connections, and all three converge to one digest at the end.
//!
//! Time: every window's data time steps [`fleet::STEP_MS`] per round,
//! starting a month before the wall clock, as fast as the cluster commits
//! (some 40 rounds, 80 data-seconds, per wall second on a debug build);
//! expiry and the engine's silence are [`EXPIRE_AFTER_S`] and [`SILENT_S`]
//! of data time, so the short form (45 s of churn, at least [`MIN_JOBS`]
//! jobs; about 50 s in all) holds some 100 expiry periods and 500-800 jobs,
//! and the long form, the same code for `GPUMON_SOAK_MINUTES` minutes of
//! churn, thousands of periods and over ten thousand jobs:
//!
//! ```sh
//! GPUMON_SOAK_MINUTES=15 cargo test -p gpumon --test soak soak_for_minutes -- --ignored --nocapture
//! ```

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpumon_agent::push::{Attempt, Pusher, Route};
use gpumon_core::cluster::DEFAULT_MAX_ENDED_JOBS;
use gpumon_proto::api::{AlertKind, AlertsBody, ClusterView, JobsView};
use gpumon_proto::{wire, AgentMessage, AgentMessageV1, PushBatch};
use gpumon_runtime::clock::wall_ms;
use gpumon_runtime::secrets::Secret;
use support::cluster::Cluster;
use support::fleet::{self, Fleet, Job};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

const TOKEN: &str = "the-soak-fleet-agent-token";
const OTHER_TOKEN: &str = "a-token-bound-to-another-agent";
const AGENTS: u32 = 8;
/// Rounds a job runs: 80 s of data, twice what the probes need.
const JOB_ROUNDS: u64 = 40;
/// Agents, GPUs and ended jobs quiet this long are forgotten, data seconds.
const EXPIRE_AFTER_S: u64 = 30;
/// The engine forgets jobs silent this long, data seconds.
const SILENT_S: u64 = 30;
/// The engine's jobs; above what the soak keeps, so that expiry, not this
/// cap, is what keeps the state flat.
const MAX_JOBS: u32 = 256;
/// Alert episodes the engine keeps (each probe raises three: leak, OOM
/// forecast, straggler), so that the book fills and forgets in a short run.
const MAX_ALERTS: usize = 32;
/// Every `DEATH_EVERY` rounds an agent stops without a word, in turn for
/// [`SHORT_SILENCE`] rounds (back as a new incarnation before it expires)
/// or [`LONG_SILENCE`] (forgotten, then replaced by a new machine).
const DEATH_EVERY: u64 = 50;
const SHORT_SILENCE: u64 = 10;
const LONG_SILENCE: u64 = 60;
/// A killed leader stays down this long before it is restarted.
const DOWN_FOR: Duration = Duration::from_secs(2);
/// Jobs kept are sampled every this many rounds.
const SAMPLE_EVERY: u64 = 10;
/// Idle connections held open to each replica from another source address.
const IDLE_PER_REPLICA: usize = 48;
/// Jobs the fleet must have started before the last probe: four times
/// what a replica may keep (64 ended jobs, 16 live ones).
const MIN_JOBS: u64 = 4 * (DEFAULT_MAX_ENDED_JOBS as u64 + (AGENTS * fleet::SLOTS) as u64);
/// Agents of machines replaced but not yet expired that the view may hold
/// beside the fleet's own.
const STALE_AGENTS: usize = 4;
const MIB: u64 = 1 << 20;
/// What a debug-build replica may hold resident at any time in the soak
/// (it idles at about 45 MiB and soaks at 60-75).
const RSS_BOUND: u64 = 256 * MIB;
/// Data seconds the last probe's alerts may take beyond 1.5 times the first's.
const DETECTION_SLACK_S: f64 = 10.0;
/// A line of figures this often (wall time), for the long form's record.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);
/// Time allowed to commit one message, failovers included.
const COMMIT_WITHIN: Duration = Duration::from_secs(30);
const WITHIN: Duration = Duration::from_secs(60);

/// How long and how hard.
#[derive(Debug, Clone, Copy)]
struct Scale {
    /// Wall time of churn before the last probe is planted.
    churn: Duration,
    /// The leader is killed this often (wall time).
    kill_every: Duration,
    /// The whole test ends within this, or fails.
    deadline: Duration,
}

impl Scale {
    fn short() -> Self {
        Self {
            churn: Duration::from_secs(45),
            kill_every: Duration::from_secs(12),
            deadline: Duration::from_secs(170),
        }
    }

    fn minutes(m: f64) -> Self {
        let churn = Duration::from_secs_f64(m * 60.0);
        Self {
            churn,
            kill_every: Duration::from_secs(90),
            deadline: churn + Duration::from_secs(600),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_month_leaves_state_memory_and_detection_as_they_were() {
    soak(Scale::short()).await;
}

/// The long form: `GPUMON_SOAK_MINUTES` (default 15) minutes of churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long; run with GPUMON_SOAK_MINUTES=N and --ignored"]
async fn soak_for_minutes() {
    let minutes = std::env::var("GPUMON_SOAK_MINUTES")
        .ok()
        .map(|m| m.parse::<f64>().expect("GPUMON_SOAK_MINUTES is a number"))
        .unwrap_or(15.0);
    soak(Scale::minutes(minutes)).await;
}

async fn soak(scale: Scale) {
    tokio::time::timeout(scale.deadline, run(scale))
        .await
        .unwrap_or_else(|_| panic!("the soak did not end within {:?}", scale.deadline));
}

fn secret_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// The replicas' flags: small limits, short expiry, the demo's quick
/// engine windows, frequent snapshots, tokens bound to their agents.
fn flags(dir: &std::path::Path) -> Vec<String> {
    let names = fleet::agent_names(AGENTS).join(" ");
    let tokens = secret_file(
        dir,
        "agents",
        &format!("{TOKEN} {names}\n{OTHER_TOKEN} other-agent other-node\n"),
    );
    let config = dir.join("soak.toml");
    std::fs::write(
        &config,
        format!(
            "[engine]\nwindow_s = 2.0\nwarmup_s = 6.0\nsilent_s = {SILENT_S}.0\n\
             max_alerts = {MAX_ALERTS}\n\
             [engine.leak]\nmin_points = 8\n\
             [engine.imbalance]\nlevel_points = 4\nraise_after = 3\n"
        ),
    )
    .unwrap();
    let mut out: Vec<String> = [
        ("--config", config.display().to_string()),
        ("--agent-token-file", tokens),
        ("--expire-after-s", EXPIRE_AFTER_S.to_string()),
        ("--max-agents", "64".into()),
        ("--max-gpus", "512".into()),
        ("--max-ranks", "2048".into()),
        ("--max-jobs", MAX_JOBS.to_string()),
        ("--history-windows", "64".into()),
        ("--snapshot-every-entries", "500".into()),
    ]
    .into_iter()
    .flat_map(|(f, v)| [f.to_owned(), v])
    .collect();
    if let Ok(extra) = std::env::var("GPUMON_SOAK_FLAGS") {
        // `--flag value` pairs that replace the soak's own, for trying it
        // against a weakened cluster (`--expire-after-s 0`): it must fail.
        let words: Vec<&str> = extra.split_whitespace().collect();
        for pair in words.chunks(2) {
            let [flag, value] = pair else {
                panic!("GPUMON_SOAK_FLAGS takes --flag value pairs: {extra:?}")
            };
            match out.iter().position(|f| f == flag) {
                Some(i) => out[i + 1] = (*value).to_owned(),
                None => out.extend([(*flag).to_owned(), (*value).to_owned()]),
            }
        }
    }
    out
}

/// Sends `body` along `route` until it is committed.
async fn commit(client: &Pusher, route: &mut Route, body: &[u8]) -> Result<(), String> {
    let deadline = Instant::now() + COMMIT_WITHIN;
    let mut last = String::new();
    while Instant::now() < deadline {
        match client.attempt(route, body, |_| {}).await {
            Attempt::Committed { .. } => return Ok(()),
            Attempt::Rejected(why) => return Err(format!("refused: {why}")),
            Attempt::Busy(wait) => {
                last = format!("busy for {wait:?}");
                tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            }
            Attempt::Failed(why) => {
                last = why;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    Err(format!("not committed within {COMMIT_WITHIN:?}: {last}"))
}

/// Commits one round: the agents at once, each agent's messages in order.
async fn push_round(
    client: &Arc<Pusher>,
    routes: &mut [Route],
    msgs: Vec<(u32, Vec<AgentMessage>)>,
) -> Result<(), String> {
    let mut set = JoinSet::new();
    for (a, list) in msgs {
        let client = client.clone();
        let mut route = routes[a as usize].clone();
        set.spawn(async move {
            for m in &list {
                commit(&client, &mut route, &wire::encode(m))
                    .await
                    .map_err(|e| format!("agent {a}: {e}"))?;
            }
            Ok::<_, String>((a, route))
        });
    }
    while let Some(done) = set.join_next().await {
        let (a, route) = done.expect("a pushing task")?;
        routes[a as usize] = route;
    }
    Ok(())
}

fn file_len(path: std::path::PathBuf) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// What a replica keeps, through its API, its data directory and `/proc`.
#[derive(Debug, Clone, Copy)]
struct Kept {
    agents: usize,
    gpus: usize,
    live_ranks: usize,
    jobs: usize,
    alerts: usize,
    snapshot_bytes: u64,
    log_bytes: u64,
    rss: u64,
    hwm: u64,
}

async fn kept(cluster: &Cluster, id: u64) -> Kept {
    let view: ClusterView = cluster.get(id, "/api/v1/cluster").await;
    let jobs: JobsView = cluster.get(id, "/api/v1/jobs").await;
    let alerts: AlertsBody = cluster.get(id, "/api/v1/alerts?limit=10000").await;
    let (rss, hwm) = support::resident(cluster.pid(id).expect("a running replica"));
    let dir = cluster.data_dir(id);
    Kept {
        agents: view.agents.len(),
        gpus: view.gpus,
        live_ranks: view.live_ranks,
        jobs: jobs.jobs.len(),
        alerts: alerts.alerts.len() + alerts.truncated,
        snapshot_bytes: file_len(dir.join("snapshot.bin")),
        log_bytes: file_len(dir.join("raft-log.redb")),
        rss,
        hwm,
    }
}

fn show(k: &Kept) -> String {
    format!(
        "{} agents, {} GPUs, {} live ranks, {} jobs, {} alerts, snapshot {} KiB, log {} KiB, RSS {} MiB (peak {} MiB)",
        k.agents,
        k.gpus,
        k.live_ranks,
        k.jobs,
        k.alerts,
        k.snapshot_bytes >> 10,
        k.log_bytes >> 10,
        k.rss / MIB,
        k.hwm / MIB
    )
}

/// Data seconds from a probe's first window to its leak and straggler
/// alerts, read (linearizably) from any replica that answers.
async fn detection(cluster: &Cluster, probe: &Job, start_ms: u64) -> (f64, f64) {
    let path = format!(
        "/api/v1/alerts?job={}&consistency=linearizable",
        probe.name()
    );
    let alerts: AlertsBody = cluster
        .wait(WITHIN, "the probe's alerts", || async {
            let mut last = String::from("no replica running");
            for id in cluster.live() {
                match cluster.get_from(id, &path).await {
                    Ok((body, _)) => return Ok(body),
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
        .await;
    let since = |kind: AlertKind, rank: u32| {
        alerts
            .alerts
            .iter()
            .filter(|a| a.kind == kind && a.rank == Some(rank))
            .map(|a| a.t - start_ms as f64 / 1000.0)
            .reduce(f64::min)
            .unwrap_or_else(|| {
                let seen: Vec<_> = alerts.alerts.iter().map(|a| (a.kind, a.rank)).collect();
                panic!(
                    "{}: no {kind:?} alert on rank {rank}; alerts: {seen:?}",
                    probe.name()
                )
            })
    };
    (
        since(AlertKind::Leak, fleet::LEAK_RANK),
        since(AlertKind::Straggler, fleet::SLOW_RANK),
    )
}

/// What the side traffic saw.
#[derive(Debug, Default)]
struct Side {
    /// Per kind of forged push: refused as expected, and not answered (a
    /// replica down or electing).
    refused: BTreeMap<&'static str, u64>,
    unanswered: BTreeMap<&'static str, u64>,
    /// Any other answer, with its kind: what must never happen.
    wrong: Vec<String>,
    /// Idle connections the replicas closed, and the most held at once.
    idle_closed: u64,
    idle_held_max: usize,
}

/// A forged push: its kind, the token sent, the body, the status expected.
fn forged(i: u64) -> (&'static str, Option<&'static str>, Vec<u8>, u16) {
    let push = |agent: &str, node: &str, incarnation: u64, seq: u64| {
        wire::encode(&AgentMessage::V1(AgentMessageV1::Push(PushBatch {
            agent_id: agent.into(),
            incarnation,
            seq,
            node: node.into(),
            dropped_batches: 0,
            windows: Vec::new(),
            hook: Vec::new(),
            acks: Vec::new(),
        })))
    };
    let real = push(&fleet::agent_id(0, 0), &fleet::node(0, 0), 1, 1);
    match i % 6 {
        0 => ("no token", None, real, 401),
        1 => (
            "a wrong token",
            Some("not-a-token-of-this-cluster"),
            real,
            401,
        ),
        2 => (
            "an agent id the token is not bound to",
            Some(TOKEN),
            push(&format!("intruder-{i}"), "intruder-node", 1, 1),
            403,
        ),
        3 => (
            "another agent's token",
            Some(OTHER_TOKEN),
            push(&fleet::agent_id(1, 0), &fleet::node(1, 0), 1, 1),
            403,
        ),
        4 => (
            "a malformed body",
            Some(TOKEN),
            b"\x01 this is no postcard message \xff\xff\xff\xff".to_vec(),
            400,
        ),
        _ => (
            "a seq far past the bound",
            Some(TOKEN),
            push(&fleet::agent_id(0, 0), &fleet::node(0, 0), 1, 1 << 40),
            400,
        ),
    }
}

/// Sends one forged push to `url`'s replica (following one leader hint for
/// the seq bound, which only the leader judges) and tallies the answer.
async fn send_forged(client: &reqwest::Client, urls: &[String], i: u64, side: &Mutex<Side>) {
    let (kind, token, body, expected) = forged(i);
    let mut url = urls[(i / 6) as usize % urls.len()].clone();
    for _hop in 0..2 {
        let mut req = client
            .post(format!("{url}/api/v1/ingest"))
            .body(body.clone());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let answer = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (status, resp.text().await.unwrap_or_default())
            }
            Err(_) => (0, String::new()),
        };
        let verdict = match answer {
            (s, _) if s == expected => Ok(true),
            (421, text) if expected == 400 && kind.starts_with("a seq") => {
                // A follower names the leader; ask it.
                let leader = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["leader_url"].as_str().map(str::to_owned));
                match leader {
                    Some(l) => {
                        url = l;
                        continue;
                    }
                    None => Ok(false),
                }
            }
            (0 | 421 | 503, _) => Ok(false),
            (s, text) => Err(format!("{kind}: {s} {text}")),
        };
        let mut side = side.lock().unwrap();
        match verdict {
            Ok(true) => *side.refused.entry(kind).or_default() += 1,
            Ok(false) => *side.unanswered.entry(kind).or_default() += 1,
            Err(wrong) => side.wrong.push(wrong),
        }
        return;
    }
}

/// A connection from 127.0.0.2 (another source than the agents) that
/// sends nothing, or half a request line.
async fn idle_connection(addr: &str, half: bool) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind("127.0.0.2:0".parse().unwrap()).ok()?;
    let connect = socket.connect(addr.parse().ok()?);
    let mut stream = tokio::time::timeout(Duration::from_millis(500), connect)
        .await
        .ok()?
        .ok()?;
    if half {
        stream
            .write_all(b"GET /api/v1/cluster HTTP/1.1\r\nHo")
            .await
            .ok()?;
    }
    Some(stream)
}

/// Whether the replica closed `stream` (or answered on it, then closes).
fn closed(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 256];
    !matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Forged pushes and idle connections from the side until `stop`.
async fn side_traffic(urls: Vec<String>, addrs: Vec<String>, stop: Arc<AtomicBool>) -> Side {
    let side = Mutex::new(Side::default());
    let client = gpumon_net::plain_client_builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut idle: Vec<Vec<Option<TcpStream>>> = addrs
        .iter()
        .map(|_| (0..IDLE_PER_REPLICA).map(|_| None).collect())
        .collect();
    let mut i = 0u64;
    while !stop.load(Relaxed) {
        send_forged(&client, &urls, i, &side).await;
        i += 1;
        let mut held = 0;
        for (r, conns) in idle.iter_mut().enumerate() {
            for (k, slot) in conns.iter_mut().enumerate() {
                if slot.as_ref().is_some_and(closed) {
                    *slot = None;
                    side.lock().unwrap().idle_closed += 1;
                }
                if slot.is_none() {
                    *slot = idle_connection(&addrs[r], k % 2 == 1).await;
                }
                held += usize::from(slot.is_some());
            }
        }
        {
            let mut s = side.lock().unwrap();
            s.idle_held_max = s.idle_held_max.max(held);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    side.into_inner().unwrap()
}

async fn run(scale: Scale) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(3, &flags).await;
    cluster.wait_leader(WITHIN).await;
    let ids = cluster.ids();
    let idle_rss: Vec<u64> = ids
        .iter()
        .map(|&id| support::resident(cluster.pid(id).unwrap()).0)
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<String> = ids.iter().map(|&id| cluster.addr(id).to_owned()).collect();
    let side = tokio::spawn(side_traffic(cluster.urls(), addrs, stop.clone()));

    let client = Arc::new(
        Pusher::new(
            gpumon_net::plain_client_builder()
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap(),
            cluster.urls(),
        )
        .with_token(Some(Secret::new(TOKEN).unwrap())),
    );
    let mut routes: Vec<Route> = (0..AGENTS as usize).map(|a| Route::new(a % 3)).collect();
    // A month before now, to the second: data time never catches the clock.
    let base_ms = (wall_ms() - 30 * 86_400_000) / 1000 * 1000;
    let mut fleet = Fleet::new(AGENTS, JOB_ROUNDS, base_ms);
    fleet.plant_probe();

    let churn_from = Instant::now();
    let mut next_kill = churn_from + scale.kill_every;
    let mut down: Option<(u64, Instant)> = None;
    // Replicas killed, in order.
    let mut kills: Vec<u64> = Vec::new();
    let mut deaths = 0u64;
    // Every probe's (job, leak, straggler) detection times; the soak ends
    // with the first probe started after the churn.
    let mut probes: Vec<(String, f64, f64)> = Vec::new();
    let mut last: Option<(f64, f64)> = None;
    let mut last_from: Option<u64> = None;
    let mut warm: Option<(u64, u64, Vec<Kept>)> = None;
    let mut most_after_warm = (0, 0, 0);
    let mut round = 0u64;
    let mut next_progress = churn_from + PROGRESS_EVERY;
    while last.is_none() {
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            let rss: Vec<u64> = cluster
                .live()
                .into_iter()
                .map(|id| support::resident(cluster.pid(id).unwrap()).0 / MIB)
                .collect();
            eprintln!(
                "{:.0} s: round {round}, {} jobs started, {} leaders killed, most kept after warm-up {most_after_warm:?}, RSS {rss:?} MiB",
                churn_from.elapsed().as_secs_f64(),
                fleet.started,
                kills.len()
            );
        }
        // Every job of agent 0's slot 0 is a probe.
        if !fleet.probe_pending() {
            fleet.plant_probe();
        }
        if last_from.is_none()
            && churn_from.elapsed() >= scale.churn
            && fleet.started >= MIN_JOBS
            && warm.is_some()
        {
            last_from = Some(round);
        }
        // The leader dies every `kill_every`, and comes back after `DOWN_FOR`.
        match down {
            Some((id, at)) if at.elapsed() >= DOWN_FOR => {
                cluster.restart(id).await;
                down = None;
            }
            None if Instant::now() >= next_kill => {
                let leader = cluster.wait_leader(WITHIN).await;
                cluster.kill9(leader).await;
                down = Some((leader, Instant::now()));
                kills.push(leader);
                next_kill = Instant::now() + scale.kill_every;
            }
            _ => {}
        }
        if round % DEATH_EVERY == DEATH_EVERY / 2 {
            let a = 1 + (deaths % u64::from(AGENTS - 1)) as u32;
            let replace = deaths % 2 == 1;
            let rounds = if replace { LONG_SILENCE } else { SHORT_SILENCE };
            fleet.silence(a, round, rounds, replace);
            deaths += 1;
        }
        let (msgs, events) = fleet.round(round);
        if let Err(e) = push_round(&client, &mut routes, msgs).await {
            cluster.refresh().await;
            panic!("round {round}: {e}\n{}", cluster.describe());
        }
        for probe in events.probes_done {
            let got = detection(&cluster, &probe, fleet.end_ms(probe.start_round)).await;
            probes.push((probe.name(), got.0, got.1));
            if last_from.is_some_and(|r| probe.start_round >= r) {
                last = Some(got);
            }
        }
        if round % SAMPLE_EVERY == 0 {
            let id = cluster.live()[(round / SAMPLE_EVERY) as usize % cluster.live().len()];
            let jobs = cluster.get_from::<JobsView>(id, "/api/v1/jobs").await;
            let view = cluster.get_from::<ClusterView>(id, "/api/v1/cluster").await;
            if let (Ok((jobs, _)), Ok((view, _)), Some(_)) = (jobs, view, &warm) {
                let (j, a, g) = &mut most_after_warm;
                *j = (*j).max(jobs.jobs.len());
                *a = (*a).max(view.agents.len());
                *g = (*g).max(view.gpus);
            }
        }
        // Warm: the first probe judged, three expiry periods of data and a
        // third of the churn behind.
        let expiry_rounds = EXPIRE_AFTER_S * 1000 / fleet::STEP_MS;
        if warm.is_none()
            && !probes.is_empty()
            && round >= 3 * expiry_rounds
            && churn_from.elapsed() >= scale.churn / 3
        {
            let mut at = Vec::new();
            for id in cluster.live() {
                at.push(kept(&cluster, id).await);
            }
            warm = Some((round, fleet.started, at));
        }
        round += 1;
    }
    let churn_s = churn_from.elapsed().as_secs_f64();
    stop.store(true, Relaxed);
    let side = side.await.expect("the side traffic task");
    if let Some((id, _)) = down {
        cluster.restart(id).await;
    }
    let leader = cluster.wait_leader(WITHIN).await;
    let at = cluster.status(leader).await.applied_index.unwrap();
    let converged = cluster.wait_converged(&ids, at, WITHIN).await;

    let (warm_round, warm_started, warm_kept) = warm.expect("the soak warmed up");
    let mut end = Vec::new();
    for &id in &ids {
        end.push(kept(&cluster, id).await);
    }
    let first = (probes[0].1, probes[0].2);
    let last = last.unwrap();
    let slowest = probes
        .iter()
        .map(|p| (p.1, p.2))
        .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
        .unwrap();
    let data_h = (fleet.end_ms(round) - base_ms) as f64 / 3_600_000.0;
    let report = format!(
        "soak: {churn_s:.0} s of pushing, {round} rounds ({data_h:.1} h of data, {:.0} expiry periods), \
         {} jobs started, {} ended, {} lost with {} silenced agents ({} back, {} replaced), \
         {} leaders killed ({kills:?}), applied index {at}\n  warm (round {warm_round}, {warm_started} jobs): {}\n  \
         end: {}\n  most jobs, agents, GPUs kept after warm-up: {most_after_warm:?}\n  \
         idle RSS: {:?} MiB\n  \
         detection (data s from the job's start) of {} probes: first leak {:.0} straggler {:.0}, \
         last leak {:.0} straggler {:.0}, slowest leak {:.0} straggler {:.0}\n  \
         side: {side:?}\n  total {:.0} s",
        data_h * 3600.0 / EXPIRE_AFTER_S as f64,
        fleet.started,
        fleet.ended,
        fleet.abandoned,
        fleet.silenced,
        fleet.returned,
        fleet.replaced,
        kills.len(),
        warm_kept.iter().map(show).collect::<Vec<_>>().join("; "),
        end.iter().map(show).collect::<Vec<_>>().join("; "),
        idle_rss.iter().map(|r| r / MIB).collect::<Vec<_>>(),
        probes.len(),
        first.0,
        first.1,
        last.0,
        last.1,
        slowest.0,
        slowest.1,
        started.elapsed().as_secs_f64(),
    );
    eprintln!("{report}");

    // The soak was a soak: failovers, deaths and returns, and many more
    // jobs than any replica may keep.
    assert!(kills.len() >= 2, "{report}");
    assert!(fleet.returned >= 2 && fleet.replaced >= 2, "{report}");
    assert!(fleet.started >= MIN_JOBS, "{report}");

    // Flat state: what is kept after the warm-up does not grow with the
    // jobs seen, on every replica; the oldest jobs and their alerts are
    // gone; replaced machines leave the view; nothing forged is in it.
    let agents_bound = AGENTS as usize + STALE_AGENTS;
    // The view keeps the newest 64 ended jobs (between expiries, which
    // come every 3 s of wall time here, up to 50 jobs end); the live ones
    // include those of silent machines until their GPUs expire.
    let jobs_bound = DEFAULT_MAX_ENDED_JOBS + agents_bound * fleet::SLOTS as usize;
    let gpus_bound = agents_bound * fleet::GPUS as usize;
    assert!(most_after_warm.0 <= jobs_bound, "{report}");
    assert!(most_after_warm.1 <= agents_bound, "{report}");
    assert!(most_after_warm.2 <= gpus_bound, "{report}");
    let warm_snapshot = warm_kept.iter().map(|k| k.snapshot_bytes).max().unwrap();
    for (i, k) in end.iter().enumerate() {
        let id = ids[i];
        assert!(
            k.jobs <= jobs_bound,
            "replica {id} keeps {} jobs: {report}",
            k.jobs
        );
        assert!(k.agents <= agents_bound, "replica {id}: {report}");
        assert!(k.gpus <= gpus_bound, "replica {id}: {report}");
        // One rank per GPU, those of silent machines included.
        assert!(k.live_ranks <= gpus_bound, "replica {id}: {report}");
        assert!(
            k.alerts <= MAX_ALERTS,
            "replica {id} keeps {} alert episodes: {report}",
            k.alerts
        );
        assert!(
            k.snapshot_bytes <= 2 * warm_snapshot + MIB,
            "replica {id}'s snapshot grew from {warm_snapshot} to {} bytes: {report}",
            k.snapshot_bytes
        );
        assert!(
            k.hwm <= RSS_BOUND,
            "replica {id} peaked at {} MiB: {report}",
            k.hwm / MIB
        );
        let view: ClusterView = cluster.get(id, "/api/v1/cluster").await;
        assert!(
            view.agents.iter().all(|a| a.agent_id.starts_with("agent-")),
            "a forged agent landed: {:?}",
            view.agents
        );
        for n in 0..8 {
            let job = fleet::job_name(n);
            let got = cluster
                .get_from::<serde_json::Value>(id, &format!("/api/v1/jobs/{job}"))
                .await;
            assert!(
                got.as_ref().is_err_and(|e| e.contains("404")),
                "replica {id} still keeps {job}: {got:?}"
            );
            let alerts: AlertsBody = cluster.get(id, &format!("/api/v1/alerts?job={job}")).await;
            assert!(alerts.alerts.is_empty(), "replica {id}: {alerts:?}");
        }
    }
    assert!(warm_kept.iter().all(|k| k.hwm <= RSS_BOUND), "{report}");

    // As fast at the end, and all along, as at the start.
    assert!(
        last.0 <= 1.5 * first.0 + DETECTION_SLACK_S,
        "the last leak took longer: {report}"
    );
    assert!(
        last.1 <= 1.5 * first.1 + DETECTION_SLACK_S,
        "the last straggler took longer: {report}"
    );
    for (job, leak, straggler) in &probes {
        assert!(
            *leak <= 1.5 * first.0 + DETECTION_SLACK_S
                && *straggler <= 1.5 * first.1 + DETECTION_SLACK_S,
            "{job}: leak after {leak:.0} s, straggler after {straggler:.0} s: {report}"
        );
    }

    // Every kind of forged push was refused with its status; none landed.
    assert!(side.wrong.is_empty(), "{report}");
    for i in 0..6 {
        let kind = forged(i).0;
        assert!(
            side.refused.get(kind).copied().unwrap_or(0) >= 1,
            "{kind} was never refused: {report}"
        );
    }
    assert!(
        side.idle_held_max >= IDLE_PER_REPLICA * 2,
        "idle connections were not held: {report}"
    );
    assert!(
        side.idle_closed >= 1,
        "no idle connection was closed by a replica: {report}"
    );
    assert_eq!(converged.applied_index, Some(at));
}
