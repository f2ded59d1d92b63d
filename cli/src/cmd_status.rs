//! `gpumon status`: the cluster by job and rank, from a coordinator's API;
//! `--json` prints the cluster, the jobs, each job's analysis (forecasts and
//! flags per rank) and the active alerts as one document.

use gpumon_common::units::{fmt_bytes, fmt_duration_ms};
use gpumon_proto::api::{ClusterView, JobsView};
use std::path::Path;

use crate::api_client::ApiClient;
use crate::args::StatusArgs;
use crate::client_settings;
use crate::text::truncate;
use crate::{usage, Failure};

pub async fn run(args: StatusArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let settings = client_settings::resolve(args.coordinator.clone(), &args.tls, config_file)?;
    let client = ApiClient::new(&settings.coordinator, &settings.tls)
        .map_err(|e| usage(format!("{e:#}")))?;
    let snap = client.snapshot().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
    } else {
        print!("{}", render(client.base(), &snap.cluster, &snap.jobs));
    }
    Ok(())
}

/// The status table.
pub fn render(url: &str, cluster: &ClusterView, jobs: &JobsView) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let leader = cluster
        .coordinator
        .as_ref()
        .and_then(|c| c.leader)
        .map_or("none".into(), |l| l.to_string());
    let _ = writeln!(
        out,
        "coordinator {url}  leader {leader}  agents {}  nodes {}  GPUs {}  live jobs {}  live ranks {}",
        cluster.agents.len(),
        cluster.nodes,
        cluster.gpus,
        cluster.live_jobs,
        cluster.live_ranks
    );
    if jobs.jobs.is_empty() {
        let _ = writeln!(out, "no jobs seen yet");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<20} {:>5} {:<12} {:>3} {:>8} {:>10} {:>10} {:>10} {:>5}  STATE",
        "JOB", "RANK", "NODE", "GPU", "PID", "USED", "PEAK", "TOTAL", "USE%"
    );
    for job in &jobs.jobs {
        for r in &job.ranks {
            let pct = if r.total_bytes == 0 {
                0.0
            } else {
                100.0 * r.used_bytes as f64 / r.total_bytes as f64
            };
            let state = match r.ended_ms {
                None => "live".to_owned(),
                Some(t) => format!(
                    "ended {} ago",
                    fmt_duration_ms(cluster.now_ms.saturating_sub(t))
                ),
            };
            let _ = writeln!(
                out,
                "{:<20} {:>5} {:<12} {:>3} {:>8} {:>10} {:>10} {:>10} {:>4.0}%  {state}",
                truncate(&job.job, 20),
                r.rank,
                truncate(&r.node, 12),
                r.gpu,
                r.pid,
                fmt_bytes(r.used_bytes),
                fmt_bytes(r.peak_used_bytes),
                fmt_bytes(r.total_bytes),
                pct
            );
        }
    }
    out
}
