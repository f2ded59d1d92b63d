//! `gpumon demo`: a three-replica coordinator cluster and two simulated
//! agents (2 nodes x 4 GPUs, one 8-rank job) on loopback, in one process.
//! It prints the API URL first, then a line for each thing that happens, and
//! stops on Ctrl-C or after `--duration`. With `--chaos` the leader is
//! stopped every so often and comes back later; each failover is printed
//! while the agents keep pushing.

mod chaos;
mod engine;
mod replicas;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpumon_agent::{AgentConfig, AgentError, SimPlacement, SourceSpec};
use gpumon_core::cluster::ClusterEvent;
use gpumon_core::units::fmt_bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, watch, Mutex};
use tokio::task::JoinHandle;

use crate::args::DemoArgs;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::shutdown;
use replicas::Replicas;

const NODES: u32 = 2;
const GPUS_PER_NODE: u32 = 4;
/// How often the demo looks for new alerts.
const ALERT_POLL_EVERY: Duration = Duration::from_secs(2);
/// How often the demo prints a summary of the job.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

pub async fn run(args: DemoArgs) -> Result<(), Failure> {
    let source: SourceSpec = format!("sim:{}", args.scenario).parse().map_err(usage)?;
    check_durations(&args)?;
    let data_dir = std::env::temp_dir().join(format!("gpumon-demo-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(data_dir.clone());
    let addrs = replicas::pick_addrs(args.listen.as_deref()).map_err(usage)?;
    let notify = crate::cmd_coordinator::notify_config(&args.notify, &Default::default());
    notify.validate().map_err(usage)?;
    let replicas = Replicas::start(&addrs, &data_dir, &notify)
        .await
        .map_err(|e| {
            Failure::Runtime(anyhow::Error::new(e).context("demo cluster failed to start"))
        })?;
    let urls = replicas.urls();
    print_banner(&args, &urls);

    let (observed, events) = observe(&replicas).expect("every replica runs at start");
    let replicas = Arc::new(Mutex::new(replicas));
    let (stop, stopped) = watch::channel(false);
    let agents = spawn_agents(&urls, source, args.seed, &stopped);
    let (chaos_lines, mut chaos_rx) = mpsc::unbounded_channel();
    let chaos = args.chaos.then(|| {
        tokio::spawn(chaos::run(
            replicas.clone(),
            Duration::from_secs_f64(args.chaos_every),
            chaos_lines,
            stopped.clone(),
        ))
    });

    narrate(&replicas, observed, events, &mut chaos_rx, args.duration).await;
    println!("stopping");
    let _ = stop.send(true);
    if let Some(c) = chaos {
        let _ = c.await;
    }
    for a in agents {
        let _ = a.await;
    }
    let replicas =
        Arc::try_unwrap(replicas).map_err(|_| anyhow::anyhow!("replicas still shared"))?;
    replicas.into_inner().shutdown().await;
    Ok(())
}

/// `--duration` and `--chaos-every` must be positive numbers of seconds.
fn check_durations(args: &DemoArgs) -> Result<(), Failure> {
    for (flag, v) in [
        ("--duration", args.duration),
        ("--chaos-every", Some(args.chaos_every)),
    ] {
        if let Some(d) = v {
            if !(d.is_finite() && d > 0.0) {
                return Err(usage(format!(
                    "{flag} {d} must be a positive number of seconds"
                )));
            }
        }
    }
    Ok(())
}

/// The banner: where the API is, what is simulated and planted, what to try.
fn print_banner(args: &DemoArgs, urls: &[String]) {
    let url = urls[0].clone();
    println!(
        "gpumon demo: coordinator API at {url} (replicas {})",
        urls.join(" ")
    );
    println!("  simulating job \"demo-job\" ({} ranks on {NODES} nodes x {GPUS_PER_NODE} GPUs), scenario {}", NODES * GPUS_PER_NODE, args.scenario);
    println!("  planted: {}", planted(&args.scenario));
    println!(
        "  watch: dashboard {url}/   alerts {url}/api/v1/alerts (planted problems alert within about {} s)",
        engine::PROMISED_ALERT_S
    );
    println!("  try: gpumon top --coordinator {url}   or   curl {url}/metrics   or   gpumon cluster status --coordinators {url}");
    if args.chaos {
        println!(
            "  chaos: the leader is stopped every {} s and restarted 5 s later",
            args.chaos_every
        );
    }
}

/// One simulated agent per node, each pushing its share of the demo job's
/// ranks to every replica, until `stopped` turns true.
fn spawn_agents(
    urls: &[String],
    source: SourceSpec,
    seed: u64,
    stopped: &watch::Receiver<bool>,
) -> Vec<JoinHandle<Result<(), AgentError>>> {
    let mut agents = Vec::new();
    for node in 0..NODES {
        let mut config = AgentConfig::new(&format!("node-{node}"));
        config.coordinators = urls.to_vec();
        config.source = source;
        config.sample_interval = Duration::from_millis(250);
        config.window = Duration::from_millis(1000);
        // Simulated nodes in one process: the coordinators' /metrics covers them.
        config.metrics_listen = None;
        config.sim = SimPlacement {
            nodes: NODES,
            node_index: node,
            gpus_per_node: GPUS_PER_NODE,
            seed,
            job: "demo-job".into(),
            hook: true,
        };
        agents.push(tokio::spawn(gpumon_agent::run(config, stopped.clone())));
    }
    agents
}

/// Prints, each behind the time since it began, what the observed replica
/// applies (switching to another when it is stopped), the chaos task's
/// lines, new alerts and a summary every [`SUMMARY_EVERY`]; until
/// `duration` seconds have passed or Ctrl-C.
async fn narrate(
    replicas: &Mutex<Replicas>,
    mut observed: u64,
    mut events: broadcast::Receiver<ClusterEvent>,
    chaos_rx: &mut mpsc::UnboundedReceiver<String>,
    duration: Option<f64>,
) {
    let started = Instant::now();
    let stamp = move || format!("[{:>6.1}s]", started.elapsed().as_secs_f64());
    let until = async {
        match duration {
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
                Ok(e) => println!("{} {}", stamp(), describe(&e)),
                Err(RecvError::Lagged(n)) => println!("{} ({n} events skipped)", stamp()),
                // The replica we listened to was stopped: listen to another.
                Err(RecvError::Closed) => match observe(&*replicas.lock().await) {
                    Some((id, rx)) => {
                        observed = id;
                        events = rx;
                    }
                    None => tokio::time::sleep(Duration::from_millis(100)).await,
                },
            },
            Some(line) = chaos_rx.recv() => println!("{} {line}", stamp()),
            _ = summary.tick() => {
                let url = live_url(replicas, observed).await;
                if let Ok(line) = summarize(&url).await {
                    println!("{} {line}", stamp());
                }
            }
            _ = alert_poll.tick() => {
                let url = live_url(replicas, observed).await;
                for line in new_alerts(&url, &mut alerts_seen).await.unwrap_or_default() {
                    println!("{} {line}", stamp());
                }
            }
            _ = &mut until => break,
            _ = &mut ctrl_c => break,
        }
    }
}

/// What the scenario plants, and on which rank, for the banner.
fn planted(scenario: &str) -> &'static str {
    use gpumon_agent::source::sim::Scenario;
    match scenario.parse::<Scenario>() {
        Ok(Scenario::Steady) => "nothing: a healthy job (no alert should fire)",
        Ok(Scenario::Leak) => {
            "a leak on rank 2 (it heads for an OOM: a forecast follows, the process dies after some minutes)"
        }
        Ok(Scenario::Fragmentation) => {
            "allocator fragmentation on rank 1 (reserved grows, allocated does not)"
        }
        Ok(Scenario::Imbalance) => "imbalance on rank 0 (about 9 GiB above its peers)",
        Ok(Scenario::Straggler) => {
            "a straggler on rank 5 (throttled GPU: forward and backward 25 % slower)"
        }
        Ok(Scenario::Mixed) => {
            "a leak on rank 2 (then an OOM forecast), imbalance on rank 0, a straggler on rank 5"
        }
        Err(_) => "unknown",
    }
}

/// Events of some running replica (every replica applies the same entries).
fn observe(replicas: &Replicas) -> Option<(u64, broadcast::Receiver<ClusterEvent>)> {
    replicas.running().next().map(|c| (c.id(), c.subscribe()))
}

/// The API of replica `preferred` if it runs, else of any running one.
async fn live_url(replicas: &Mutex<Replicas>, preferred: u64) -> String {
    let r = replicas.lock().await;
    r.get(preferred)
        .or_else(|| r.running().next())
        .map(|c| c.api_url())
        .unwrap_or_default()
}

fn describe(e: &ClusterEvent) -> String {
    match e {
        ClusterEvent::AgentJoined {
            agent_id,
            node,
            restarted: false,
        } => format!("agent {agent_id} joined from {node}"),
        ClusterEvent::AgentJoined {
            agent_id,
            node,
            restarted: true,
        } => format!("agent {agent_id} on {node} restarted"),
        ClusterEvent::GpuAdded { node, gpu } => {
            format!(
                "{node} GPU {}: {} ({})",
                gpu.index,
                gpu.name,
                fmt_bytes(gpu.total_bytes)
            )
        }
        ClusterEvent::RankStarted {
            job,
            rank,
            world_size,
            node,
            gpu,
            pid,
        } => {
            format!("job {job} rank {rank}/{world_size} on {node} GPU {gpu} (pid {pid})")
        }
        ClusterEvent::RankEnded { job, rank, .. } => {
            format!("job {job} rank {rank} left its GPU (process ended)")
        }
        ClusterEvent::JobEnded { job, .. } => format!("job {job} ended: no rank left"),
    }
}

/// Lines for alerts that fired since the last call (episodes by id).
async fn new_alerts(
    url: &str,
    seen: &mut std::collections::BTreeSet<u64>,
) -> anyhow::Result<Vec<String>> {
    let body: serde_json::Value = gpumon_net::plain_client_builder()
        .build()?
        .get(format!("{url}/api/v1/alerts"))
        .send()
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
    let jobs: gpumon_proto::api::JobsView = gpumon_net::plain_client_builder()
        .build()?
        .get(format!("{url}/api/v1/jobs"))
        .send()
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
    let cluster: gpumon_proto::api::ClusterView = gpumon_net::plain_client_builder()
        .build()?
        .get(format!("{url}/api/v1/cluster"))
        .send()
        .await?
        .json()
        .await?;
    Ok(format!(
        "job {}: {} live ranks; highest: {}; {} windows committed",
        job.job,
        ranks.len(),
        top.join(", "),
        cluster.ingest.windows_applied
    ))
}

/// Removes the demo's data directory when the demo ends.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
