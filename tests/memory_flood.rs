//! Issue 28, item 2: every piece of replicated state stays within the
//! cluster's configured limits whatever one agent token pushes, and so
//! does each replica's resident memory.
//!
//! Three real replicas with small limits (8 agents, 16 GPUs, 64 ranks, 8
//! jobs) and one agent token that may speak for any agent id (a token alone
//! on its line: the worst one can hold) are flooded, round after round,
//! with the worst pushes that token can make: hellos for more agents than
//! the limit, windows with a GPU or a rank past the limits, and hook
//! records naming fresh jobs (more than `max_jobs`) with more ranks than
//! `max_ranks`, each rank with allocator statistics, a step of 32 new
//! section names, a marker, 3 new named snapshots and a stall report. What
//! a limit forbids must be refused before it is proposed (429 naming the
//! limit, counted) or skipped and counted in the transition; nothing past
//! a bound may be stored.
//!
//! Checked on every replica, through the API only: the counts of what is
//! kept (agents, GPUs, live ranks, the engine's ranks of the jobs, step
//! times and sections, markers, named snapshots per job and name), the
//! refusal and skip counters, and `VmRSS`/`VmHWM` from `/proc`: after a
//! warm-up, after four times as much flood of new names, and on a follower
//! killed and restarted from its data directory once it has caught up. The
//! bound on memory is RELIABILITY.md's: the replica's own resident memory
//! before any push plus [`STATE_BOUND`]. The counts are what fails when a
//! bound is lifted (RELIABILITY.md names which); resident memory at these
//! limits is mostly the Raft log and the pushes in flight, and varies by
//! tens of MiB from run to run, so a comparison between the two phases
//! would be flaky rather than telling.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use gpumon_agent::push::{Attempt, Pusher, Route};
use gpumon_proto::api::{ClusterView, JobWithAnalysis, MemorySnapshotsAnswer};
use gpumon_proto::{
    wire, AgentMessage, AgentMessageV1, AllocRecord, AllocStats, BytesStat, CollectiveWait,
    EventRecord, GpuInfo, GpuWindow, Hello, HookRecord, ProcWindow, PushBatch, RankInfo,
    StallRecord, StepRecord,
};
use gpumon_runtime::clock::wall_ms;
use gpumon_runtime::secrets::Secret;
use support::cluster::Cluster;

const TOKEN: &str = "the-one-agent-token-of-the-memory-flood";
const MAX_AGENTS: u32 = 8;
const GPUS_PER_AGENT: u32 = 2;
const MAX_GPUS: u32 = MAX_AGENTS * GPUS_PER_AGENT;
const PROCS_PER_GPU: u32 = 4;
const MAX_RANKS: u32 = MAX_AGENTS * GPUS_PER_AGENT * PROCS_PER_GPU;
const MAX_JOBS: u32 = 8;
/// Jobs the windows hold (each with 16 live ranks: 64 in all).
const HELD_JOBS: u32 = 4;
/// New job names per hook push (more than `MAX_JOBS` in one round).
const FLOOD_JOBS: u32 = 2;
/// Ranks per job in a hook push (more than `MAX_RANKS`).
const FLOOD_RANKS: u32 = 72;
/// New snapshot names per rank and push.
const NAMES: u32 = 3;
/// Section names per step record of the first [`WIDE_RANKS`] ranks: the
/// most a record may carry (2 for the other ranks: pushes stay small enough
/// for a debug build's follower to take an AppendEntries of 16 of them
/// within openraft's 100 ms; see RELIABILITY.md).
const SECTIONS: u32 = 32;
/// Ranks per job whose steps carry [`SECTIONS`] names and whose stall
/// reports name 16 process groups.
const WIDE_RANKS: u32 = 4;
/// Section names kept per rank, markers kept per job, names kept per job
/// (RELIABILITY.md, docs: the per-entry caps).
const SECTIONS_KEPT: usize = 16;
const MARKERS_KEPT: usize = 64;
const NAMES_KEPT: usize = 64;
const WARM_ROUNDS: u32 = 6;
const FLOOD_ROUNDS: u32 = 24;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// What the replicated state and the flood's own buffers may add to a
/// replica's resident memory at these limits (RELIABILITY.md).
const STATE_BOUND: u64 = 160 * MIB;
const WITHIN: Duration = Duration::from_secs(60);

fn limits() -> Vec<String> {
    [
        ("--max-agents", MAX_AGENTS),
        ("--max-gpus", MAX_GPUS),
        ("--max-ranks", MAX_RANKS),
        ("--max-jobs", MAX_JOBS),
        ("--history-windows", 32),
        ("--snapshot-every-entries", 64),
    ]
    .iter()
    .flat_map(|(flag, v)| [(*flag).to_owned(), v.to_string()])
    .collect()
}

fn agent_id(a: u32) -> String {
    format!("agent-{a}")
}

fn gpu(a: u32, g: u32) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-{a}-{g}"),
        index: g,
        name: "NVIDIA H100 80GB HBM3".into(),
        total_bytes: 80 * GIB,
    }
}

fn hello(a: u32) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: agent_id(a),
        incarnation: 1,
        node: format!("node-{a}"),
        agent_version: "flood".into(),
        source: "test".into(),
        gpus: (0..GPUS_PER_AGENT).map(|g| gpu(a, g)).collect(),
    }))
}

fn push(a: u32, seq: u64, windows: Vec<GpuWindow>, hook: Vec<HookRecord>) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: agent_id(a),
        incarnation: 1,
        seq,
        node: format!("node-{a}"),
        dropped_batches: 0,
        windows,
        hook,
        acks: Vec::new(),
    }))
}

/// Held job `k`.
fn held(k: u32) -> String {
    format!("held-{k}")
}

/// Agent `a`'s window of its GPU `info`, with `procs` as (job, rank).
fn window(info: GpuInfo, end_ms: u64, procs: &[(String, u32)]) -> GpuWindow {
    let each = GIB;
    let used = BytesStat::single(each * procs.len() as u64 + GIB);
    GpuWindow {
        gpu: info,
        start_ms: end_ms - 900,
        end_ms,
        samples: 4,
        used_bytes: used,
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: procs
            .iter()
            .map(|(job, rank)| ProcWindow {
                pid: 10_000 + rank,
                used_bytes: BytesStat::single(each),
                rank: Some(RankInfo {
                    job: job.clone(),
                    rank: *rank,
                    local_rank: rank % PROCS_PER_GPU,
                    world_size: MAX_RANKS / HELD_JOBS,
                    master_addr: None,
                    master_port: None,
                }),
            })
            .collect(),
    }
}

/// Agent `a`'s windows: its two GPUs, four ranks of a held job on each.
fn held_windows(a: u32, end_ms: u64) -> Vec<GpuWindow> {
    let job = held(a % HELD_JOBS);
    (0..GPUS_PER_AGENT)
        .map(|g| {
            let first = (a / HELD_JOBS) * GPUS_PER_AGENT * PROCS_PER_GPU + g * PROCS_PER_GPU;
            let procs: Vec<(String, u32)> = (first..first + PROCS_PER_GPU)
                .map(|r| (job.clone(), r))
                .collect();
            window(gpu(a, g), end_ms, &procs)
        })
        .collect()
}

/// The worst hook records of agent `a` in `round`: the held jobs and
/// [`FLOOD_JOBS`] new ones, [`FLOOD_RANKS`] ranks each.
fn flood_records(a: u32, round: u32, t_ms: u64) -> Vec<HookRecord> {
    let stats = AllocStats {
        allocated: GIB,
        reserved: 2 * GIB,
        ..AllocStats::default()
    };
    let fresh = format!("r{round}-a{a}");
    let jobs = (0..HELD_JOBS)
        .map(held)
        .chain((0..FLOOD_JOBS).map(|j| format!("flood-{fresh}-{j}")));
    let mut out = Vec::new();
    for job in jobs {
        for rank in 0..FLOOD_RANKS {
            out.push(HookRecord::Alloc(AllocRecord {
                limit: None,
                t_ms,
                job: job.clone(),
                rank,
                stats,
            }));
            out.push(HookRecord::Step(StepRecord {
                group: None,
                waits: Vec::new(),
                collectives: Vec::new(),
                t_ms,
                job: job.clone(),
                rank,
                step: u64::from(round) * u64::from(MAX_AGENTS) + u64::from(a) + 1,
                duration_ms: 100.0,
                sections: (0..if rank < WIDE_RANKS { SECTIONS } else { 2 })
                    .map(|s| (format!("{fresh}-section-{s}"), 1.0))
                    .collect(),
            }));
            out.push(HookRecord::Event(EventRecord {
                t_ms,
                job: job.clone(),
                rank,
                name: format!("{fresh}-mark-{rank}"),
                detail: None,
                snapshot: None,
            }));
            for n in 0..NAMES {
                out.push(HookRecord::Event(EventRecord {
                    t_ms,
                    job: job.clone(),
                    rank,
                    name: format!("{fresh}-snapshot-{n}"),
                    detail: None,
                    snapshot: Some(stats),
                }));
            }
            out.push(HookRecord::Stall(StallRecord {
                t_ms,
                job: job.clone(),
                rank,
                step: 1,
                quiet_ms: 60_000,
                source: "wrappers".into(),
                waiting: Some(CollectiveWait {
                    group: format!("{fresh}-group"),
                    desc: "default_pg".into(),
                    seq: 7,
                    op: "allreduce".into(),
                    numel: 1,
                    waited_ms: 60_000,
                    timeout_ms: None,
                }),
                entered: (0..if rank < WIDE_RANKS { 16 } else { 1 })
                    .map(|g| (format!("{fresh}-pg-{g}"), 7))
                    .collect(),
                marker: Some(format!("{fresh}-marker")),
            }));
        }
    }
    out
}

/// Every job name the flood used, held ones first.
fn every_job() -> Vec<String> {
    let mut jobs: Vec<String> = (0..HELD_JOBS).map(held).collect();
    for round in 0..WARM_ROUNDS + FLOOD_ROUNDS {
        for a in 0..MAX_AGENTS {
            jobs.extend((0..FLOOD_JOBS).map(|j| format!("flood-r{round}-a{a}-{j}")));
        }
    }
    jobs
}

struct Flood {
    pusher: Pusher,
    route: Route,
    raw: reqwest::Client,
}

impl Flood {
    fn new(urls: Vec<String>) -> Self {
        let client = gpumon_net::plain_client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let token = Secret::new(TOKEN).unwrap();
        Self {
            pusher: Pusher::new(client.clone(), urls).with_token(Some(token)),
            route: Route::new(0),
            raw: client,
        }
    }

    /// Sends `msg` until it is committed (within a minute).
    async fn commit(&mut self, msg: &AgentMessage) {
        let body = wire::encode(msg);
        let deadline = tokio::time::Instant::now() + WITHIN;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            match self.pusher.attempt(&mut self.route, &body, |_| {}).await {
                Attempt::Committed { .. } => return,
                Attempt::Rejected(why) => panic!("a push that fits was refused: {why}"),
                Attempt::Busy(wait) if wait > Duration::from_secs(5) => {
                    panic!("a push that fits was refused at a limit (retry after {wait:?})")
                }
                Attempt::Busy(_) => last = "busy".into(),
                Attempt::Failed(why) => last = why,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("not committed within {WITHIN:?}: {last}");
    }

    /// Posts `msg` once to the replica the route points at (the leader
    /// after a commit): its status and body.
    async fn post(&self, msg: &AgentMessage) -> (u16, String) {
        let url = format!("{}/api/v1/ingest", self.route.target(self.pusher.urls()));
        let resp = self
            .raw
            .post(url)
            .bearer_auth(TOKEN)
            .body(wire::encode(msg))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    /// `msg` is refused with a 429 naming `limit`.
    async fn refused_at(&self, msg: &AgentMessage, limit: &str) {
        let (status, body) = self.post(msg).await;
        assert_eq!(status, 429, "a push past the {limit} limit: {body}");
        assert!(body.contains(limit), "the refusal names {limit:?}: {body}");
    }
}

async fn metric(cluster: &Cluster, id: u64, series: &str) -> u64 {
    let text = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .get(format!("{}/metrics", cluster.url(id)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| {
            let family = series.split(['{', ' ']).next().unwrap_or(series);
            let near: Vec<&str> = text.lines().filter(|l| l.contains(family)).collect();
            panic!("no {series} in replica {id}'s /metrics; {near:?}")
        }) as u64
}

/// What replica `id` keeps, read through its API, checked against the
/// limits; what it skipped is counted.
async fn check_what_is_kept(cluster: &Cluster, id: u64) {
    let view: ClusterView = cluster.get(id, "/api/v1/cluster").await;
    assert_eq!(view.agents.len(), MAX_AGENTS as usize, "replica {id}");
    assert_eq!(view.gpus, MAX_GPUS as usize, "replica {id}");
    assert_eq!(view.live_ranks, MAX_RANKS as usize, "replica {id}");

    // The engine's ranks in all jobs stay within max_ranks (each held job
    // alone may have 64: without the bound in all jobs, 4 x 64 here).
    let (mut engine_ranks, mut step_ranks) = (0, 0);
    for k in 0..HELD_JOBS {
        let job: JobWithAnalysis = cluster.get(id, &format!("/api/v1/jobs/{}", held(k))).await;
        if let Some(analysis) = job.analysis {
            engine_ranks += analysis.ranks.len();
            assert!(analysis.markers.len() <= MARKERS_KEPT, "replica {id}");
        }
        step_ranks += job.steps.len();
        for steps in job.steps.values() {
            assert!(steps.sections.len() <= SECTIONS_KEPT, "replica {id}");
        }
    }
    assert!(
        (1..=MAX_RANKS as usize).contains(&engine_ranks),
        "replica {id}: the engine tracks {engine_ranks} ranks of the held jobs"
    );
    assert!(
        step_ranks <= MAX_RANKS as usize,
        "replica {id}: {step_ranks}"
    );

    // Named snapshots: at most max_jobs jobs, 64 names each, max_ranks
    // ranks per name, whatever the names pushed.
    let (mut jobs, mut entries) = (0, 0);
    for job in every_job() {
        let got = cluster
            .get_from::<MemorySnapshotsAnswer>(id, &format!("/api/v1/jobs/{job}/snapshots"))
            .await;
        let list = match got {
            Ok((MemorySnapshotsAnswer::List(list), _)) => list,
            Ok(other) => panic!("a list, not {other:?}"),
            Err(e) if e.contains("404") => continue,
            Err(e) => panic!("{e}"),
        };
        if list.snapshots.is_empty() {
            continue;
        }
        jobs += 1;
        assert!(list.snapshots.len() <= NAMES_KEPT, "replica {id}: {job}");
        for s in &list.snapshots {
            assert!(s.ranks.len() <= MAX_RANKS as usize, "replica {id}: {job}");
            entries += s.ranks.len();
        }
    }
    assert!(
        (1..=MAX_JOBS).contains(&jobs),
        "replica {id}: named snapshots of {jobs} jobs"
    );
    assert!(
        entries <= (MAX_RANKS as usize) * NAMES_KEPT,
        "replica {id}: {entries} snapshot entries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_flooding_past_every_limit_leaves_state_and_memory_within_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("agents");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut flags = limits();
    flags.extend(["--agent-token-file".into(), tokens.display().to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(3, &flags).await;
    let leader = cluster.wait_leader(WITHIN).await;
    let ids = cluster.ids();
    let idle: Vec<u64> = ids
        .iter()
        .map(|&id| support::resident(cluster.pid(id).unwrap()).0)
        .collect();

    let mut flood = Flood::new(cluster.urls());
    for a in 0..MAX_AGENTS {
        flood.commit(&hello(a)).await;
    }
    let mut seq = vec![0u64; MAX_AGENTS as usize];
    let started = std::time::Instant::now();
    let mut warm = Vec::new();
    for round in 0..WARM_ROUNDS + FLOOD_ROUNDS {
        let t = wall_ms();
        for a in 0..MAX_AGENTS {
            let s = &mut seq[a as usize];
            *s += 1;
            flood.commit(&push(a, *s, held_windows(a, t), vec![])).await;
            *s += 1;
            let hook = flood_records(a, round, t);
            flood.commit(&push(a, *s, vec![], hook)).await;
        }
        // Past the limits, now full: refused before they are proposed,
        // naming them.
        flood.refused_at(&hello(MAX_AGENTS + round), "agents").await;
        let a0 = 0;
        let mut extra_gpu = held_windows(a0, t);
        extra_gpu.push(window(gpu(100 + round, 0), t, &[]));
        flood
            .refused_at(&push(a0, seq[0] + 1, extra_gpu, vec![]), "GPUs")
            .await;
        let mut extra_rank = held_windows(a0, t);
        extra_rank[0]
            .procs
            .extend(window(gpu(a0, 0), t, &[(format!("extra-{round}"), 0)]).procs);
        flood
            .refused_at(&push(a0, seq[0] + 1, extra_rank, vec![]), "live ranks")
            .await;
        if round + 1 == WARM_ROUNDS {
            let at = cluster.status(leader).await.applied_index.unwrap();
            cluster.wait_converged(&ids, at, WITHIN).await;
            warm = ids
                .iter()
                .map(|&id| support::resident(cluster.pid(id).unwrap()).0)
                .collect();
        }
    }
    let flood_s = started.elapsed().as_secs_f64();
    let at = cluster.status(leader).await.applied_index.unwrap();
    cluster.wait_converged(&ids, at, WITHIN).await;

    // Refused at a limit before Raft, counted by the leader that refused
    // them; skipped in the transition and counted in the replicated
    // counters, which the leader exports.
    let leader_view: ClusterView = cluster.get(leader, "/api/v1/cluster").await;
    let rejected = leader_view.coordinator.unwrap().rejected_pushes;
    assert!(rejected.full >= u64::from(3 * (WARM_ROUNDS + FLOOD_ROUNDS)));
    let over_limit = "gpumon_engine_observations_ignored_total{reason=\"over_limit\"} ";
    assert!(metric(&cluster, leader, over_limit).await > 0);
    let skipped = "gpumon_hook_records_skipped_total ";
    assert!(
        metric(&cluster, leader, skipped).await > 0,
        "snapshots past a bound are counted"
    );

    let mut figures = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        check_what_is_kept(&cluster, id).await;
        let (rss, peak) = support::resident(cluster.pid(id).unwrap());
        figures.push(format!(
            "replica {id}: idle {} MiB, warm {} MiB, flooded {} MiB, peak {} MiB",
            idle[i] / MIB,
            warm[i] / MIB,
            rss / MIB,
            peak / MIB
        ));
        eprintln!("{}", figures.last().unwrap());
        assert!(
            peak <= idle[i] + STATE_BOUND,
            "replica {id} peaked at {} MiB, past its idle {} MiB + {} MiB",
            peak / MIB,
            idle[i] / MIB,
            STATE_BOUND / MIB
        );
        assert!(
            warm[i] <= idle[i] + STATE_BOUND,
            "replica {id} held {} MiB after the warm-up",
            warm[i] / MIB
        );
    }

    // A follower restarted from its data directory catches up, keeps the
    // same, and stays within the bound.
    let follower = ids.iter().copied().find(|&id| id != leader).unwrap();
    cluster.kill9(follower).await;
    cluster.restart(follower).await;
    let restarted_idle = idle[(follower - 1) as usize];
    cluster.wait_converged(&ids, at, WITHIN).await;
    check_what_is_kept(&cluster, follower).await;
    let (rss, peak) = support::resident(cluster.pid(follower).unwrap());
    figures.push(format!(
        "replica {follower} restarted: {} MiB, peak {} MiB",
        rss / MIB,
        peak / MIB
    ));
    assert!(peak <= restarted_idle + STATE_BOUND, "{figures:?}");
    eprintln!("flood of {flood_s:.1} s; {}", figures.join("; "));
}
