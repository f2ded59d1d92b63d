//! `gpumon status`: the cluster by job and rank, from a coordinator's API.

use std::time::Duration;

use anyhow::{anyhow, Context};
use gpumon_common::units::{fmt_bytes, fmt_duration_ms};
use gpumon_proto::api::{ClusterView, JobsView};
use serde::de::DeserializeOwned;

use crate::args::StatusArgs;
use crate::Failure;

async fn get<T: DeserializeOwned>(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> anyhow::Result<T> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let resp = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(anyhow!("{url} answered {status}: {body}"));
    }
    resp.json()
        .await
        .with_context(|| format!("{url} did not answer with the expected JSON"))
}

pub async fn run(args: StatusArgs) -> Result<(), Failure> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let cluster: ClusterView = get(&client, &args.coordinator, "/api/v1/cluster").await?;
    let jobs: JobsView = get(&client, &args.coordinator, "/api/v1/jobs").await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "cluster": cluster, "jobs": jobs }))?
        );
    } else {
        print!("{}", render(&args.coordinator, &cluster, &jobs));
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

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
