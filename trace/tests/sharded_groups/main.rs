//! Several Raft groups in one process against one group: the simulation of
//! docs/sharding.md.
//!
//! Eight labelled corpus traces (a leak, fast and early OOMs,
//! fragmentation, two stragglers, a combination, a stable job) become one
//! fleet: their GPUs dealt over five nodes of eight, so every node runs
//! ranks of several jobs and every agent's push carries windows of several
//! jobs. On one GPU, after its job ran out of memory, the GPU's first
//! empty window goes to that job's group (which sees the rank leave), not
//! the node's home; later a job pinned to a third group starts and ends
//! there. Each node pushes its host RAM too, one node's climbing past the
//! host levels. Every agent command goes, whole, to one reference group,
//! and, cut by the agent's `PushSplitter`, to four groups; each group is a
//! `Replicated` fed through `Replicated::apply`, as a replica would be.
//!
//! Then, for every job: the job's view (what `GET /api/v1/jobs/{job}` reads:
//! the cluster view's detail, the engine's summary, the step times, the
//! named snapshots) and its alert episodes are the same in its group as in
//! the reference (alert ids aside: they count per engine), and no other
//! group holds anything of it. Every alert episode and window of the
//! reference is in exactly one group; each host's alerts and RAM reading
//! are in the node's home group only. No part is refused or taken for a
//! duplicate, and parts sent again are all duplicates that change nothing.
//!
//! The traces are cut at 600 s, before the shortest ends: past its end a
//! trace's GPUs stop reporting while their agent goes on with other jobs'
//! GPUs, and a group holding only that job would see the agent fall silent
//! (docs/sharding.md, "What differs").

mod sharding;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::sharding::{GroupId, GroupMap, PushSplitter};
use gpumon_core::cluster::Limits;
use gpumon_core::engine::{Alert, AlertKind, EngineConfig};
use gpumon_core::transition::{Command, CommandV1, Replicated, TraceCommands};
use gpumon_proto::{GpuInfo, Hello, HostMemory, PushBatchV2};
use gpumon_trace::{ProcRecord, RankRecord, RecordRef, TraceRecord};

/// The corpus traces, each one job.
const TRACES: [&str; 8] = [
    "combo-1",
    "fragmentation-0",
    "leak_fast-1",
    "oom_early-0",
    "oom_early-1",
    "stable-1",
    "straggler_compute-1",
    "straggler_data-1",
];
const NODES: usize = 5;
const GROUPS: u32 = 4;
/// Trace seconds kept.
const END_T: f64 = 600.0;
/// Records of one node within this many ms share pushes, as an agent's
/// window would.
const PUSH_MS: u64 = 2_000;
const GIB: u64 = 1 << 30;
const HOST_TOTAL: u64 = 1 << 40;
/// The job that starts on a GPU freed by an OOM.
const HANDOVER_JOB: &str = "handover";
/// Its trace, and the trace's GPU it takes (node, index).
const HANDOVER_FROM: (&str, &str, u32) = ("oom_early-1", "node-0", 0);
const HANDOVER_PID: u32 = 777_777;
/// When the handover job's rank is found: after the OOM'd rank's last
/// window (96 s) and before the GPU's first empty one (97 s). From then the
/// GPU holds two placed ranks, so its empty windows stand for neither (the
/// replay gives a GPU's memory to its one placed rank when the GPU lists no
/// processes); they show the OOM'd process gone, as a live agent's would.
const HANDOVER_FOUND_T: f64 = 96.5;
const HANDOVER_START_T: f64 = 300.0;
const HANDOVER_END_T: f64 = 450.0;
/// The node whose host RAM climbs past the levels.
const HOT_HOST: &str = "node-3";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces")
        .join(format!("{name}.jsonl.gz"))
}

fn read(name: &str) -> Vec<TraceRecord> {
    let mut reader = gpumon_trace::open(&fixture(name)).unwrap();
    let mut out = Vec::new();
    while let Some(record) = reader.next_ref().unwrap() {
        if record.t() <= END_T {
            out.push(record.to_owned());
        }
    }
    out
}

/// A trace's job as the fleet names it (two traces share a job id).
fn job_name(trace: &str, job: &str) -> String {
    format!("{trace}.{job}")
}

/// The fleet's records in push order, and each node's GPUs.
struct Fleet {
    records: Vec<TraceRecord>,
    gpus: BTreeMap<String, Vec<GpuInfo>>,
}

/// Where a record goes in the stream: (`PUSH_MS` period, node, windows 0
/// or hook records 1, ms, trace, index). Records of one node and kind in
/// one period are adjacent, so they share pushes; time orders them within.
type PushOrder = (u64, String, u8, u64, usize, usize);

/// The traces' GPUs dealt over the fleet's nodes.
struct Deal {
    /// (trace, node, GPU index) to (fleet node, fleet index).
    slots: BTreeMap<(usize, String, u32), (String, u32)>,
    gpus: BTreeMap<String, Vec<GpuInfo>>,
}

impl Deal {
    /// Deals each trace's GPUs in turn, one trace after the other, so each
    /// node holds GPUs of several jobs.
    fn new(traces: &[Vec<TraceRecord>]) -> Self {
        let own: Vec<Vec<(String, u32)>> = traces
            .iter()
            .map(|records| {
                let gpus: BTreeSet<(String, u32)> = records
                    .iter()
                    .filter_map(|r| match r {
                        TraceRecord::Gpu(g) => Some((g.node.clone(), g.gpu)),
                        _ => None,
                    })
                    .collect();
                gpus.into_iter().collect()
            })
            .collect();
        let mut deal = Deal {
            slots: BTreeMap::new(),
            gpus: BTreeMap::new(),
        };
        let mut n = 0;
        for k in 0..own.iter().map(Vec::len).max().unwrap_or(0) {
            for (i, list) in own.iter().enumerate() {
                let Some((node, gpu)) = list.get(k) else {
                    continue;
                };
                let fleet_node = format!("node-{}", n % NODES);
                let index = (n / NODES) as u32;
                deal.gpus
                    .entry(fleet_node.clone())
                    .or_default()
                    .push(GpuInfo {
                        uuid: uuid(&fleet_node, index),
                        index,
                        name: "A100-40GB".into(),
                        total_bytes: 42_505_076_736,
                    });
                deal.slots
                    .insert((i, node.clone(), *gpu), (fleet_node, index));
                n += 1;
            }
        }
        deal
    }

    /// The fleet's node and index of trace `i`'s GPU.
    fn place(&self, i: usize, node: &str, gpu: u32) -> (String, u32) {
        self.slots[&(i, node.to_owned(), gpu)].clone()
    }
}

fn fleet() -> Fleet {
    let traces: Vec<Vec<TraceRecord>> = TRACES.iter().map(|t| read(t)).collect();
    let deal = Deal::new(&traces);
    let mut keyed: Vec<(PushOrder, TraceRecord)> = Vec::new();
    for (i, records) in traces.into_iter().enumerate() {
        let trace = TRACES[i];
        let mut rank_node: BTreeMap<(String, u32), String> = BTreeMap::new();
        for r in &records {
            if let TraceRecord::Rank(r) = r {
                let (node, _) = deal.place(i, &r.node, r.gpu);
                rank_node.insert((job_name(trace, &r.job), r.rank), node);
            }
        }
        let node_of = |job: &str, rank: u32| {
            let key = (job.to_owned(), rank);
            rank_node.get(&key).cloned().unwrap_or_default()
        };
        let mut extra: Vec<TraceRecord> = Vec::new();
        let mut records: Vec<TraceRecord> = records
            .into_iter()
            .map(|record| remap(&deal, i, record, &mut extra))
            .collect();
        records.extend(extra);
        for (j, record) in records.into_iter().enumerate() {
            let t_ms = (record.t() * 1000.0).round() as u64;
            let (node, kind) = match &record {
                TraceRecord::Gpu(g) => (g.node.clone(), 0),
                TraceRecord::Rank(r) => (r.node.clone(), 0),
                TraceRecord::Alloc(a) => (node_of(&a.job, a.rank), 1),
                TraceRecord::Step(s) => (node_of(&s.job, s.rank), 1),
                TraceRecord::Event(e) => (node_of(&e.job, e.rank), 1),
                TraceRecord::Stall(s) => (node_of(&s.job, s.rank), 1),
                // The public traces hold no settings changes.
                TraceRecord::Settings(_) => (String::new(), 1),
            };
            keyed.push(((t_ms / PUSH_MS, node, kind, t_ms, i, j), record));
        }
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Fleet {
        records: keyed.into_iter().map(|(_, r)| r).collect(),
        gpus: deal.gpus,
    }
}

/// Trace `i`'s record as the fleet sees it: its job renamed, its GPU
/// dealt, its pids made the fleet's own; the handover job's samples and
/// rank record (into `extra`) added.
fn remap(deal: &Deal, i: usize, record: TraceRecord, extra: &mut Vec<TraceRecord>) -> TraceRecord {
    let trace = TRACES[i];
    let pid = |p: u32| p + 100_000 * (i as u32 + 1);
    match record {
        TraceRecord::Gpu(mut g) => {
            let from = (trace, g.node.as_str(), g.gpu);
            let handover =
                from == HANDOVER_FROM && (HANDOVER_START_T..HANDOVER_END_T).contains(&g.t);
            for p in &mut g.procs {
                p.pid = pid(p.pid);
            }
            if handover {
                handover_sample(&mut g.procs, &mut g.used, g.t);
                g.used_min = None;
                g.used_last = None;
            }
            let (node, index) = deal.place(i, &g.node, g.gpu);
            g.uuid = uuid(&node, index);
            g.node = node;
            g.gpu = index;
            TraceRecord::Gpu(g)
        }
        TraceRecord::Rank(mut r) => {
            let from = (trace, r.node.as_str(), r.gpu);
            let (node, index) = deal.place(i, &r.node, r.gpu);
            if from == HANDOVER_FROM {
                extra.push(TraceRecord::Rank(RankRecord {
                    t: HANDOVER_FOUND_T,
                    job: HANDOVER_JOB.into(),
                    rank: 0,
                    local_rank: 0,
                    world_size: 1,
                    node: node.clone(),
                    gpu: index,
                    pid: HANDOVER_PID,
                }));
            }
            r.job = job_name(trace, &r.job);
            r.node = node;
            r.gpu = index;
            r.pid = pid(r.pid);
            TraceRecord::Rank(r)
        }
        TraceRecord::Alloc(mut a) => {
            a.job = job_name(trace, &a.job);
            TraceRecord::Alloc(a)
        }
        TraceRecord::Step(mut s) => {
            s.job = job_name(trace, &s.job);
            TraceRecord::Step(s)
        }
        TraceRecord::Event(mut e) => {
            e.job = job_name(trace, &e.job);
            TraceRecord::Event(e)
        }
        TraceRecord::Stall(mut s) => {
            s.job = job_name(trace, &s.job);
            TraceRecord::Stall(s)
        }
        TraceRecord::Settings(s) => TraceRecord::Settings(s),
    }
}

fn uuid(node: &str, index: u32) -> String {
    format!("GPU-{node}-{index}")
}

/// The handover job's process on its GPU: 8 GiB growing 20 MiB a second.
fn handover_sample(procs: &mut Vec<ProcRecord>, used: &mut u64, t: f64) {
    let bytes = 8 * GIB + ((t - HANDOVER_START_T) * 20.0 * (1 << 20) as f64) as u64;
    *used = bytes;
    *procs = vec![ProcRecord {
        pid: HANDOVER_PID,
        used: bytes,
    }];
}

/// A push with its node's host RAM: 40 % in use, but on [`HOT_HOST`]
/// climbing from 50 % to 95 % over the run.
fn with_host(command: Command) -> Command {
    let Command::V1(CommandV1::Push(batch)) = command else {
        return command;
    };
    let Some(t_ms) = batch.windows.iter().map(|w| w.end_ms).max() else {
        return Command::V1(CommandV1::Push(batch));
    };
    let share = if batch.node == HOT_HOST {
        0.50 + 0.45 * (t_ms as f64 / 1000.0 / END_T).min(1.0)
    } else {
        0.40
    };
    let host = HostMemory {
        t_ms,
        total_bytes: HOST_TOTAL,
        used_max_bytes: (HOST_TOTAL as f64 * share) as u64,
    };
    Command::V1(CommandV1::for_push(PushBatchV2 {
        batch,
        placements: Vec::new(),
        host: Some(host),
    }))
}

/// The agents' commands, in order: a hello per node, then the pushes.
fn commands(fleet: &Fleet) -> Vec<Command> {
    let mut out: Vec<Command> = fleet
        .gpus
        .iter()
        .map(|(node, gpus)| {
            Command::V1(CommandV1::Hello(Hello {
                agent_id: node.clone(),
                incarnation: 1,
                node: node.clone(),
                agent_version: "sim".into(),
                source: "trace".into(),
                gpus: gpus.clone(),
            }))
        })
        .collect();
    let mut trace_commands = TraceCommands::default();
    for record in &fleet.records {
        out.extend(trace_commands.add(&RecordRef::from(record)).map(with_host));
    }
    out.extend(trace_commands.finish().map(with_host));
    out
}

fn agent_of(command: &Command) -> &str {
    let Command::V1(c) = command;
    match c {
        CommandV1::Hello(h) => &h.agent_id,
        CommandV1::Push(b) => &b.agent_id,
        CommandV1::PushPlaced(p) => &p.batch.agent_id,
        _ => "",
    }
}

/// The map: four groups, the handover job pinned away from the group of
/// the job whose GPU it takes.
fn map() -> GroupMap {
    let mut map = GroupMap::new(GROUPS).unwrap();
    let (trace, ..) = HANDOVER_FROM;
    let oom_job = map.group_of_job(&job_name(trace, "job-988c2"));
    let away = GroupId((oom_job.0 + 1) % GROUPS);
    map.pin(HANDOVER_JOB, away).unwrap();
    assert_ne!(map.hashed_group(HANDOVER_JOB), away, "pick another pin");
    map
}

/// The run: the reference, the groups, and what the parts did.
struct Run {
    reference: Replicated,
    groups: Vec<Replicated>,
    map: GroupMap,
    /// Every tenth part sent, to send again.
    resend: Vec<(GroupId, Command)>,
    /// Pushes cut into parts for more than one group.
    split_pushes: usize,
    /// Parts per group.
    parts: BTreeMap<GroupId, usize>,
}

/// The run, once for every test.
fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(run_fleet)
}

fn run_fleet() -> Run {
    let fleet = fleet();
    let map = map();
    let new = || Replicated::new(Limits::default(), &EngineConfig::default());
    let mut reference = new();
    let mut groups: Vec<Replicated> = map.group_ids().map(|_| new()).collect();
    let mut splitters: BTreeMap<String, PushSplitter> = BTreeMap::new();
    let mut resend = Vec::new();
    let mut split_pushes = 0;
    let mut parts: BTreeMap<GroupId, usize> = BTreeMap::new();
    let mut sent = 0usize;
    for command in commands(&fleet) {
        let agent = agent_of(&command).to_owned();
        let whole = reference.apply(command.clone(), false).result;
        assert!(!whole.duplicate && !whole.refused, "{whole:?}");
        let routed = splitters
            .entry(agent)
            .or_default()
            .route(&map, command)
            .expect("an agent's command");
        split_pushes += usize::from(routed.len() > 1);
        for (group, part) in routed {
            sent += 1;
            if sent % 10 == 0 {
                resend.push((group, part.clone()));
            }
            *parts.entry(group).or_default() += 1;
            let result = groups[group.0 as usize].apply(part, false).result;
            assert!(!result.duplicate && !result.refused, "{group}: {result:?}");
        }
    }
    Run {
        reference,
        groups,
        map,
        resend,
        split_pushes,
        parts,
    }
}

/// A job's alert episodes, ids aside (they count per engine).
fn alerts_of(r: &Replicated, job: &str) -> Vec<Alert> {
    r.engine
        .alerts()
        .filter(|a| a.job.as_deref() == Some(job))
        .map(|a| Alert { id: 0, ..a.clone() })
        .collect()
}

/// Alert episodes about a node's host, ids aside.
fn host_alerts_of(r: &Replicated, node: &str) -> Vec<Alert> {
    r.engine
        .alerts()
        .filter(|a| a.job.is_none() && a.gpu.is_none() && a.node.as_deref() == Some(node))
        .map(|a| Alert { id: 0, ..a.clone() })
        .collect()
}

/// Every job the reference knows.
fn jobs(r: &Replicated) -> Vec<String> {
    r.cluster
        .jobs_view()
        .jobs
        .into_iter()
        .map(|j| j.job)
        .collect()
}

#[test]
fn each_job_reads_the_same_in_its_group_as_in_one_group() {
    let run = run();
    let jobs = jobs(&run.reference);
    assert_eq!(jobs.len(), TRACES.len() + 1, "{jobs:?}");

    // The stream is what it should be: pushes cut between groups, jobs in
    // several groups, and the detections the corpus labels.
    assert!(run.split_pushes > 100, "{} pushes split", run.split_pushes);
    let homes: BTreeSet<GroupId> = jobs.iter().map(|j| run.map.group_of_job(j)).collect();
    assert!(homes.len() >= 3, "jobs in {homes:?}");
    let kinds: BTreeSet<AlertKind> = run
        .reference
        .engine
        .alerts()
        .filter(|a| a.job.is_some())
        .map(|a| a.kind)
        .collect();
    // The corpus holds no pipeline job, no stall, no collective waits and no
    // memory outside an allocator that grows: no stage imbalance, no hang,
    // no slow link, no outside memory.
    let absent = [
        AlertKind::StageImbalance,
        AlertKind::Hang,
        AlertKind::SlowLink,
        AlertKind::OutsideMemory,
    ];
    for kind in AlertKind::ALL.into_iter().filter(|k| !absent.contains(k)) {
        assert!(kinds.contains(&kind), "no {kind:?} among {kinds:?}");
    }

    for job in &jobs {
        let group = run.map.group_of_job(job);
        let reference = &run.reference;
        let holder = &run.groups[group.0 as usize];
        let detail = reference.cluster.job_detail(job);
        assert!(detail.is_some(), "{job}");
        assert_eq!(holder.cluster.job_detail(job), detail, "{job} in {group}");
        assert_eq!(
            holder.cluster.job_lines(job),
            reference.cluster.job_lines(job),
            "{job} in {group}"
        );
        let summary = reference.engine.job(job);
        assert!(summary.is_some(), "{job}");
        assert_eq!(holder.engine.job(job), summary, "{job} in {group}");
        assert_eq!(holder.steps.job(job), reference.steps.job(job), "{job}");
        assert_eq!(
            holder.hook.snapshots().job(job),
            reference.hook.snapshots().job(job),
            "{job}"
        );
        assert_eq!(alerts_of(holder, job), alerts_of(reference, job), "{job}");
        for other in run.map.group_ids().filter(|g| *g != group) {
            let r = &run.groups[other.0 as usize];
            assert!(!r.cluster.has_job(job), "{job} in {other} too");
            assert!(!r.engine.tracks_job(job), "{job} in {other}'s engine");
            assert!(r.steps.job(job).is_none(), "{job} in {other}'s steps");
            assert!(alerts_of(r, job).is_empty(), "{job}'s alerts in {other}");
        }
    }
}

#[test]
fn a_rank_leaving_a_gpu_ends_in_its_group_and_the_pinned_job_lives_in_its_pin() {
    let run = run();
    let (trace, ..) = HANDOVER_FROM;
    let oom_job = job_name(trace, "job-988c2");
    let pinned = run.map.group_of_job(HANDOVER_JOB);
    assert_ne!(pinned, run.map.hashed_group(HANDOVER_JOB));
    assert_ne!(pinned, run.map.group_of_job(&oom_job));
    let holder = &run.groups[pinned.0 as usize];
    let job = holder.cluster.job_detail(HANDOVER_JOB).expect("in its pin");
    assert_eq!(job.ranks.len(), 1);
    let rank = &job.ranks[0].view;
    assert_eq!(rank.pid, HANDOVER_PID);
    // It ended when its process left the GPU, as one group saw it.
    let ended = rank.ended_ms.expect("ended");
    assert!(ended >= (HANDOVER_END_T * 1000.0) as u64, "{ended}");
    let reference = run.reference.cluster.job_detail(HANDOVER_JOB);
    assert_eq!(Some(&job), reference.as_ref());
    // The OOM'd rank on that GPU ended with the GPU's first empty window,
    // which went to the OOM job's group though the GPU is idle.
    let group = run.map.group_of_job(&oom_job);
    let detail = run.groups[group.0 as usize].cluster.job_detail(&oom_job);
    let detail = detail.expect("oom job in its group");
    let rank0 = detail
        .ranks
        .iter()
        .find(|r| r.view.rank == 0)
        .expect("rank 0");
    assert_eq!(rank0.view.ended_ms, Some(97_000));
    assert_eq!(Some(detail), run.reference.cluster.job_detail(&oom_job));
}

#[test]
fn node_data_lives_in_the_home_group() {
    let run = run();
    let hot = host_alerts_of(&run.reference, HOT_HOST);
    assert!(
        hot.iter().any(|a| a.kind == AlertKind::MemoryLevel),
        "no host alert: {hot:?}"
    );
    for node in (0..NODES).map(|n| format!("node-{n}")) {
        let home = run.map.home_of_node(&node);
        let want = host_alerts_of(&run.reference, &node);
        for group in run.map.group_ids() {
            let r = &run.groups[group.0 as usize];
            let host = r.cluster.host(&node);
            if group == home {
                assert_eq!(host_alerts_of(r, &node), want, "{node} in {group}");
                assert_eq!(host, run.reference.cluster.host(&node), "{node}");
            } else {
                assert!(host_alerts_of(r, &node).is_empty(), "{node} in {group}");
                assert_eq!(host, None, "{node}'s host RAM in {group}");
            }
        }
        // The hello (agent version, GPU inventory) went home.
        let agents = run.groups[home.0 as usize].cluster.cluster_view().agents;
        let agent = agents.iter().find(|a| a.agent_id == node).expect("agent");
        assert_eq!(agent.agent_version, "sim");
    }
}

#[test]
fn parts_sent_again_are_duplicates_everywhere() {
    let run = run();
    assert!(run.parts.len() >= 3, "{:?}", run.parts);
    assert!(run.resend.len() > 100, "{}", run.resend.len());
    let mut groups = run.groups.clone();
    for (group, part) in run.resend.iter().cloned() {
        let result = groups[group.0 as usize].apply(part, false).result;
        assert!(result.duplicate, "{group}: {result:?}");
        assert_eq!(result.windows_applied, 0);
    }
    // Nothing changed but the count of duplicates.
    for (i, (again, once)) in groups.iter().zip(&run.groups).enumerate() {
        let resent = run.resend.iter().filter(|(g, _)| g.0 as usize == i).count();
        let mut counters = once.cluster.counters();
        counters.batches_duplicate += resent as u64;
        assert_eq!(again.cluster.counters(), counters, "group {i}");
        assert!(
            again.cluster.jobs_view() == once.cluster.jobs_view(),
            "group {i}"
        );
        assert!(
            again.cluster.nodes_view() == once.cluster.nodes_view(),
            "group {i}"
        );
        assert!(again.engine == once.engine, "group {i}");
    }
}

#[test]
fn every_window_and_alert_of_one_group_is_in_one_of_the_groups() {
    let run = run();
    let reference = run.reference.cluster.counters();
    let applied: u64 = run
        .groups
        .iter()
        .map(|g| g.cluster.counters().windows_applied)
        .sum();
    // No window is lost; in this stream none goes to two groups either
    // (no GPU holds two groups' jobs at once, and a rank's last window
    // goes to its group only when the GPU is left idle).
    assert_eq!(applied, reference.windows_applied);
    let batches = |g: &Replicated| g.cluster.counters().batches_applied;
    for g in &run.groups {
        assert!(batches(g) <= batches(&run.reference));
    }
    let plain = |a: &Alert| Alert { id: 0, ..a.clone() };
    let mut found = 0;
    for alert in run.reference.engine.alerts().map(plain) {
        let holders = run
            .groups
            .iter()
            .filter(|g| g.engine.alerts().map(plain).any(|a| a == alert))
            .count();
        assert_eq!(holders, 1, "{alert:?}");
        found += 1;
    }
    let in_groups: usize = run.groups.iter().map(|g| g.engine.alerts().count()).sum();
    assert_eq!(in_groups, found);
}
