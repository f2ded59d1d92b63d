//! `gpumon demo`: a coordinator and two simulated agents (2 nodes x 4 GPUs,
//! one 8-rank job) on loopback, in one process. It prints the API URL first,
//! then a line for each thing that happens, and stops on Ctrl-C or after
//! `--duration`.

use std::time::{Duration, Instant};

use gpumon_agent::{AgentConfig, SimPlacement, SourceSpec};
use gpumon_common::units::fmt_bytes;
use gpumon_common::view::ViewEvent;
use gpumon_coordinator::{Coordinator, CoordinatorConfig};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use crate::args::DemoArgs;
use crate::{shutdown, usage, Failure};

const NODES: u32 = 2;
const GPUS_PER_NODE: u32 = 4;
const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
/// How often the demo looks for new alerts.
const ALERT_POLL_EVERY: Duration = Duration::from_secs(2);
/// How often the demo prints a summary of the job.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

pub async fn run(args: DemoArgs) -> Result<(), Failure> {
    let source: SourceSpec = format!("sim:{}", args.scenario).parse().map_err(usage)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            return Err(usage(format!(
                "--duration {d} must be a positive number of seconds"
            )));
        }
    }
    let data_dir = std::env::temp_dir().join(format!("gpumon-demo-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(data_dir.clone());
    let coordinator = start_coordinator(&args, &data_dir).await?;
    let url = coordinator.api_url();
    println!("gpumon demo: coordinator API at {url}");
    println!("  simulating job \"demo-job\" ({} ranks on {NODES} nodes x {GPUS_PER_NODE} GPUs), scenario {}", NODES * GPUS_PER_NODE, args.scenario);
    println!("  try: curl {url}/api/v1/jobs   or   gpumon status --coordinator {url}");

    let mut events = coordinator.subscribe();
    let (stop, stopped) = watch::channel(false);
    let mut agents = Vec::new();
    for node in 0..NODES {
        let mut config = AgentConfig::new(&format!("node-{node}"));
        config.coordinators = vec![url.clone()];
        config.source = source;
        config.sample_interval = Duration::from_millis(250);
        config.window = Duration::from_millis(1000);
        config.sim = SimPlacement {
            nodes: NODES,
            node_index: node,
            gpus_per_node: GPUS_PER_NODE,
            seed: args.seed,
            job: "demo-job".into(),
        };
        agents.push(tokio::spawn(gpumon_agent::run(config, stopped.clone())));
    }

    let started = Instant::now();
    let until = async {
        match args.duration {
            Some(d) => tokio::time::sleep(Duration::from_secs_f64(d)).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until);
    let mut summary =
        tokio::time::interval_at(tokio::time::Instant::now() + SUMMARY_EVERY, SUMMARY_EVERY);
    let ctrl_c = shutdown::signal();
    tokio::pin!(ctrl_c);
    let mut alert_poll = tokio::time::interval(ALERT_POLL_EVERY);
    let mut alerts_seen = std::collections::BTreeSet::new();
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) => println!("[{:>6.1}s] {}", started.elapsed().as_secs_f64(), describe(&e)),
                Err(RecvError::Lagged(n)) => println!("[{:>6.1}s] ({n} events skipped)", started.elapsed().as_secs_f64()),
                Err(RecvError::Closed) => break,
            },
            _ = summary.tick() => {
                if let Ok(line) = summarize(&url).await {
                    println!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64());
                }
            }
            _ = alert_poll.tick() => {
                for line in new_alerts(&url, &mut alerts_seen).await.unwrap_or_default() {
                    println!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64());
                }
            }
            _ = &mut until => break,
            _ = &mut ctrl_c => break,
        }
    }
    println!("stopping");
    let _ = stop.send(true);
    for a in agents {
        let _ = a.await;
    }
    coordinator.shutdown().await;
    Ok(())
}

async fn start_coordinator(
    args: &DemoArgs,
    data_dir: &std::path::Path,
) -> Result<Coordinator, Failure> {
    let mut config = CoordinatorConfig::new(1, data_dir.to_owned());
    config.listen = args.listen.clone().unwrap_or_else(|| DEFAULT_LISTEN.into());
    match Coordinator::start(config.clone()).await {
        Ok(c) => Ok(c),
        // The default port is taken: any free port will do for a demo.
        Err(gpumon_coordinator::StartError::Listen { .. }) if args.listen.is_none() => {
            config.listen = "127.0.0.1:0".into();
            Ok(Coordinator::start(config)
                .await
                .map_err(anyhow::Error::new)?)
        }
        Err(e) => Err(Failure::Runtime(anyhow::Error::new(e))),
    }
}

fn describe(e: &ViewEvent) -> String {
    match e {
        ViewEvent::AgentJoined {
            agent_id,
            node,
            restarted: false,
        } => format!("agent {agent_id} joined from {node}"),
        ViewEvent::AgentJoined {
            agent_id,
            node,
            restarted: true,
        } => format!("agent {agent_id} on {node} restarted"),
        ViewEvent::GpuAdded { node, gpu } => {
            format!(
                "{node} GPU {}: {} ({})",
                gpu.index,
                gpu.name,
                fmt_bytes(gpu.total_bytes)
            )
        }
        ViewEvent::RankStarted {
            job,
            rank,
            world_size,
            node,
            gpu,
            pid,
        } => {
            format!("job {job} rank {rank}/{world_size} on {node} GPU {gpu} (pid {pid})")
        }
        ViewEvent::RankEnded { job, rank, .. } => {
            format!("job {job} rank {rank} left its GPU (process ended)")
        }
        ViewEvent::JobEnded { job, .. } => format!("job {job} ended: no rank left"),
    }
}

/// Lines for alerts that fired since the last call (episodes by id).
async fn new_alerts(
    url: &str,
    seen: &mut std::collections::BTreeSet<u64>,
) -> anyhow::Result<Vec<String>> {
    let body: serde_json::Value = reqwest::get(format!("{url}/api/v1/alerts"))
        .await?
        .json()
        .await?;
    let mut lines = Vec::new();
    for a in body["alerts"].as_array().into_iter().flatten() {
        let Some(id) = a["id"].as_u64() else { continue };
        if seen.insert(id) {
            lines.push(format!(
                "ALERT {} ({}): {}",
                a["kind"].as_str().unwrap_or("?"),
                a["severity"].as_str().unwrap_or("?"),
                a["message"].as_str().unwrap_or("")
            ));
        }
    }
    Ok(lines)
}

/// One line: the job's ranks by memory, highest first.
async fn summarize(url: &str) -> anyhow::Result<String> {
    let jobs: gpumon_proto::api::JobsView = reqwest::get(format!("{url}/api/v1/jobs"))
        .await?
        .json()
        .await?;
    let Some(job) = jobs.jobs.first() else {
        return Ok("no job yet".into());
    };
    let mut ranks: Vec<_> = job.ranks.iter().filter(|r| r.ended_ms.is_none()).collect();
    ranks.sort_by_key(|r| std::cmp::Reverse(r.used_bytes));
    let top: Vec<String> = ranks
        .iter()
        .take(3)
        .map(|r| {
            format!(
                "rank {} {} / {}",
                r.rank,
                fmt_bytes(r.used_bytes),
                fmt_bytes(r.total_bytes)
            )
        })
        .collect();
    Ok(format!(
        "job {}: {} live ranks; highest: {}",
        job.job,
        ranks.len(),
        top.join(", ")
    ))
}

/// Removes the demo's data directory when the demo ends.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
