//! `gpumon status`: the cluster by job and rank, from a coordinator's API;
//! `--json` prints the cluster, the jobs, each job's analysis (forecasts and
//! flags per rank) and the active alerts as one document. A rank in
//! Kubernetes shows its pod (`NAMESPACE/POD (CONTAINER)`, the names known)
//! in a last column.

use gpumon_core::units::{fmt_bytes, fmt_duration_ms};
use gpumon_proto::api::{ClusterView, JobsView};
use gpumon_proto::PodPlacement;
use std::path::Path;

use crate::api_client::ApiClient;
use crate::args::StatusArgs;
use crate::client_settings;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::text::truncate;

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
    let any_pod = jobs
        .jobs
        .iter()
        .flat_map(|j| &j.ranks)
        .any(|r| r.placement.as_ref().and_then(pod_text).is_some());
    let _ = writeln!(
        out,
        "{:<20} {:>5} {:<12} {:>3} {:>8} {:>10} {:>10} {:>10} {:>5}  {}",
        "JOB",
        "RANK",
        "NODE",
        "GPU",
        "PID",
        "USED",
        "PEAK",
        "TOTAL",
        "USE%",
        if any_pod {
            format!("{:<STATE_WIDTH$}  POD", "STATE")
        } else {
            "STATE".to_owned()
        }
    );
    for job in &jobs.jobs {
        for r in &job.ranks {
            let pct = if r.total_bytes == 0 {
                0.0
            } else {
                100.0 * r.used_bytes as f64 / r.total_bytes as f64
            };
            let mut state = match r.ended_ms {
                None => "live".to_owned(),
                Some(t) => format!(
                    "ended {} ago",
                    fmt_duration_ms(cluster.now_ms.saturating_sub(t))
                ),
            };
            if let Some(pod) = r.placement.as_ref().and_then(pod_text) {
                state = format!("{state:<STATE_WIDTH$}  {pod}");
            }
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

/// Width the STATE column is padded to when a POD column follows.
const STATE_WIDTH: usize = 16;

/// `NAMESPACE/POD (CONTAINER)` with the parts known; the pod's UID where
/// its name is not known; `None` with neither.
fn pod_text(p: &PodPlacement) -> Option<String> {
    let pod = p.pod_name.as_deref().or(p.pod_uid.as_deref())?;
    let mut text = match &p.namespace {
        Some(ns) => format!("{ns}/{pod}"),
        None => pod.to_owned(),
    };
    if let Some(container) = &p.container_name {
        text.push_str(&format!(" ({container})"));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::api::{IngestCounters, JobView, RankView};

    fn rank(rank: u32, placement: Option<PodPlacement>) -> RankView {
        RankView {
            job: "llama".into(),
            rank,
            local_rank: rank,
            node: "gpu-node-7".into(),
            gpu: rank,
            gpu_uuid: format!("GPU-{rank}"),
            pid: 100 + rank,
            used_bytes: 10 << 30,
            peak_used_bytes: 12 << 30,
            total_bytes: 80 << 30,
            gpu_used_bytes: 11 << 30,
            first_seen_ms: 0,
            last_seen_ms: 1_000,
            ended_ms: None,
            lost: false,
            placement,
        }
    }

    fn table(ranks: Vec<RankView>) -> String {
        let cluster = ClusterView {
            now_ms: 1_000,
            agents: Vec::new(),
            nodes: 1,
            gpus: 2,
            live_jobs: 1,
            live_ranks: ranks.len(),
            ingest: IngestCounters::default(),
            coordinator: None,
        };
        let jobs = JobsView {
            jobs: vec![JobView {
                job: "llama".into(),
                world_size: 2,
                ranks,
                live: true,
            }],
        };
        render("http://127.0.0.1:7070", &cluster, &jobs)
    }

    #[test]
    fn ranks_in_pods_show_namespace_pod_and_container() {
        let in_pod = PodPlacement {
            pod_uid: Some("1c3f2a4b-5d6e-4f70-8a9b-0c1d2e3f4a5b".into()),
            pod_name: Some("llama-worker-0".into()),
            namespace: Some("ml".into()),
            container_id: None,
            container_name: Some("pytorch".into()),
        };
        let uid_only = PodPlacement {
            pod_uid: Some("0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0".into()),
            ..PodPlacement::default()
        };
        let text = table(vec![rank(0, Some(in_pod)), rank(1, Some(uid_only))]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].ends_with("STATE             POD"), "{text}");
        assert!(
            lines[2].ends_with("live              ml/llama-worker-0 (pytorch)"),
            "{text}"
        );
        assert!(
            lines[3].ends_with("live              0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"),
            "{text}"
        );
    }

    #[test]
    fn without_pods_there_is_no_pod_column() {
        let text = table(vec![rank(0, None), rank(1, None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].ends_with("USE%  STATE"), "{text}");
        assert!(lines[2..].iter().all(|l| l.ends_with("%  live")), "{text}");
    }
}
