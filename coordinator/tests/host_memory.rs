//! A node's host RAM through a real coordinator over loopback HTTP: a
//! version 2 push carrying host memory past the warning level raises a
//! `memory_level` alert about the host (in `/api/v1/alerts`, `/metrics` and
//! the reply to the agent's next push, beside the alerts about its ranks),
//! the node shows its host memory in `/api/v1/nodes` and
//! `gpumon_node_host_memory_*_bytes`, and the scrape passes `promtool check
//! metrics`. A version 1 push gets a version 1 reply, without alerts.
//!
//! Needs `/usr/bin/promtool` (Debian package `prometheus`).

mod support;
use support::prometheus::promtool;
use support::{push_reply, start, GIB, T0_MS};

use gpumon_proto::api::Severity;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GpuInfo, GpuWindow, HostMemory, ProcWindow, PushBatch,
    PushBatchV2, RankInfo,
};
use serde_json::Value;

const NODE: &str = "node-h";
/// Host RAM of the node.
const HOST_TOTAL: u64 = 256 * GIB;

/// Batch `seq` of the agent on [`NODE`]: one window of GPU 0, which rank 0
/// of `job-h` uses at `gpu_pct` % of 80 GiB.
fn batch(seq: u64, gpu_pct: u64) -> PushBatch {
    let end_ms = T0_MS + seq * 2_000;
    let used = gpu_pct * 80 * GIB / 100;
    PushBatch {
        agent_id: "agent-h".into(),
        incarnation: 1,
        seq,
        node: NODE.into(),
        dropped_batches: 0,
        windows: vec![GpuWindow {
            gpu: GpuInfo {
                uuid: "GPU-h0".into(),
                index: 0,
                name: "H100".into(),
                total_bytes: 80 * GIB,
            },
            start_ms: end_ms - 2_000,
            end_ms,
            samples: 4,
            used_bytes: BytesStat::single(used),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: vec![ProcWindow {
                pid: 100,
                used_bytes: BytesStat::single(used),
                rank: Some(RankInfo {
                    job: "job-h".into(),
                    rank: 0,
                    local_rank: 0,
                    world_size: 1,
                    master_addr: None,
                    master_port: None,
                }),
            }],
        }],
        hook: Vec::new(),
        acks: Vec::new(),
    }
}

/// [`batch`] as version 2, with `host_used` of [`HOST_TOTAL`] in use.
fn with_host(seq: u64, gpu_pct: u64, host_used: u64) -> AgentMessage {
    let batch = batch(seq, gpu_pct);
    let t_ms = batch.windows[0].end_ms;
    AgentMessage::push(PushBatchV2 {
        batch,
        placements: Vec::new(),
        host: Some(HostMemory {
            t_ms,
            total_bytes: HOST_TOTAL,
            used_max_bytes: host_used,
        }),
    })
}

async fn get(url: &str, path: &str) -> Value {
    support::get_json(format!("{url}{path}")).await
}

/// `/metrics` in the classic text format, which promtool reads.
async fn scrape(url: &str) -> String {
    let resp = support::http()
        .get(format!("{url}/metrics"))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

/// The value of the one line of `text` that starts with `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    let mut found = text
        .lines()
        .filter_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
    let v = found.next();
    assert!(found.next().is_none(), "{series} twice in the scrape");
    v
}

#[tokio::test]
async fn host_memory_past_its_level_alerts_in_the_api_metrics_and_the_agent_s_reply() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();

    // 200 of 256 GiB is 78 %: past the host's default warning level (75 %);
    // the GPU at 50 % is below its own.
    let host_used = 200 * GIB;
    let reply = push_reply(&url, &with_host(1, 50, host_used)).await;
    assert_eq!(reply.alerts.len(), 1, "{:?}", reply.alerts);
    let host = &reply.alerts[0];
    assert_eq!(
        (host.kind.as_str(), host.severity, &host.job, host.rank),
        ("memory_level", Severity::Warning, &None, None)
    );
    assert!(
        host.message.contains("host RAM on node-h is 78.1 % used"),
        "{}",
        host.message
    );
    assert_eq!(host.t_ms, T0_MS + 2_000, "data time");

    let alerts = get(&url, "/api/v1/alerts?active=true").await;
    let listed = alerts["alerts"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{alerts}");
    let a = &listed[0];
    assert_eq!(a["id"], host.id);
    assert_eq!(a["kind"], "memory_level");
    assert_eq!(a["severity"], "warning");
    assert_eq!(a["node"], NODE);
    assert!(
        a["job"].is_null() && a["rank"].is_null() && a["gpu"].is_null(),
        "about the host alone: {a}"
    );

    let nodes = get(&url, "/api/v1/nodes").await;
    let node = &nodes["nodes"][0];
    assert_eq!(node["node"], NODE);
    assert_eq!(node["host_total_bytes"], HOST_TOTAL);
    assert_eq!(node["host_used_bytes"], host_used);
    assert_eq!(node["gpus"].as_array().map(Vec::len), Some(1));

    let text = scrape(&url).await;
    let used = format!("gpumon_node_host_memory_used_bytes{{node=\"{NODE}\"}}");
    let total = format!("gpumon_node_host_memory_total_bytes{{node=\"{NODE}\"}}");
    assert_eq!(value(&text, &used), Some(host_used as f64), "{text}");
    assert_eq!(value(&text, &total), Some(HOST_TOTAL as f64));
    let alert = format!(
        "gpumon_alert_active{{kind=\"memory_level\",severity=\"warning\",node=\"{NODE}\"}}"
    );
    assert_eq!(value(&text, &alert), Some(1.0), "{text}");
    let (ok, report) = promtool(&["check", "metrics"], &text);
    assert!(ok, "promtool check metrics: {report}");

    // A version 1 push is answered in version 1: no alerts.
    let plain = AgentMessage::V1(AgentMessageV1::Push(batch(2, 50)));
    assert!(push_reply(&url, &plain).await.alerts.is_empty());

    // Host RAM at 95 % and the rank's GPU at 96 %: both critical, the same
    // host episode raised, and the rank's alert beside it in the reply.
    let reply = push_reply(&url, &with_host(3, 96, 243 * GIB)).await;
    let heard: Vec<_> = reply
        .alerts
        .iter()
        .map(|a| (a.severity, a.job.as_deref(), a.rank))
        .collect();
    assert_eq!(heard.len(), 2, "{:?}", reply.alerts);
    assert!(
        heard.contains(&(Severity::Critical, None, None)),
        "{heard:?}"
    );
    assert!(
        heard.contains(&(Severity::Critical, Some("job-h"), Some(0))),
        "{heard:?}"
    );
    let again = reply.alerts.iter().find(|a| a.job.is_none()).unwrap();
    assert_eq!(again.id, host.id, "one episode, raised to critical");
    let text = scrape(&url).await;
    assert_eq!(value(&text, &used), Some((243 * GIB) as f64));

    // Back under the warning level by more than the margin: it resolves.
    let reply = push_reply(&url, &with_host(4, 50, 100 * GIB)).await;
    assert!(
        reply.alerts.iter().all(|a| a.job.is_some()),
        "{:?}",
        reply.alerts
    );
    let alerts = get(&url, "/api/v1/alerts").await;
    let resolved = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == host.id)
        .cloned()
        .unwrap();
    assert_eq!(resolved["resolved_t"], (T0_MS + 8_000) as f64 / 1000.0);
    c.shutdown().await;
}
