//! The detection engine inside the replicated state machine: windows pushed
//! over HTTP become forecasts and alerts in the API, and a restart from
//! snapshot plus log brings back the same alerts. Time comes from the data,
//! so ten minutes of windows are pushed in well under a second.

mod support;
use support::start;

use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GpuInfo, GpuWindow, ProcWindow, PushBatch, RankInfo,
};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const T0_MS: u64 = 1_700_000_000_000;
/// Rank 2 leaks this many bytes per second.
const LEAK: u64 = 20 << 20;
const WINDOW_MS: u64 = 2_000;
const WINDOWS_PER_BATCH: u64 = 15;

fn used(rank: u32, t_s: u64) -> u64 {
    let base = 20 * GIB + u64::from(rank) * (GIB / 20);
    if rank == 2 {
        base + LEAK * t_s
    } else {
        base
    }
}

/// Batch `seq` (from 1): `WINDOWS_PER_BATCH` windows of each of 4 GPUs.
fn batch(seq: u64) -> AgentMessage {
    let mut windows = Vec::new();
    for i in 0..WINDOWS_PER_BATCH {
        let start_ms = T0_MS + ((seq - 1) * WINDOWS_PER_BATCH + i) * WINDOW_MS;
        let t_s = (start_ms - T0_MS) / 1000;
        for g in 0..4u32 {
            let u = used(g, t_s);
            windows.push(GpuWindow {
                gpu: GpuInfo {
                    uuid: format!("GPU-{g}"),
                    index: g,
                    name: "A100-40GB".into(),
                    total_bytes: 40 * GIB,
                },
                start_ms,
                end_ms: start_ms + WINDOW_MS - 500,
                samples: 4,
                used_bytes: BytesStat::single(u),
                reserved_bytes: None,
                util_pct: None,
                sm_clock_mhz: None,
                power_w: None,
                procs: vec![ProcWindow {
                    pid: 100 + g,
                    used_bytes: BytesStat::single(u - GIB / 2),
                    rank: Some(RankInfo {
                        job: "job-x".into(),
                        rank: g,
                        local_rank: g,
                        world_size: 4,
                        master_addr: None,
                        master_port: None,
                    }),
                }],
            });
        }
    }
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: "agent-a".into(),
        incarnation: 1,
        seq,
        node: "node-a".into(),
        dropped_batches: 0,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    }))
}

async fn get(url: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{url}{path}")).await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn a_leaking_rank_is_forecast_in_the_api_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    // 20 batches x 15 windows x 2 s = 600 s of data.
    for seq in 1..=20 {
        support::push(&url, &batch(seq)).await;
    }
    let (status, body) = get(&url, "/api/v1/alerts").await;
    assert_eq!(status, 200);
    let alerts = body["alerts"].as_array().unwrap();
    let kinds: Vec<(&str, u64)> = alerts
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["rank"].as_u64().unwrap()))
        .collect();
    assert!(kinds.contains(&("oom_predicted", 2)), "{kinds:?}");
    assert!(kinds.contains(&("leak", 2)), "{kinds:?}");
    assert!(
        kinds.iter().all(|k| k.1 == 2),
        "only rank 2 misbehaves: {kinds:?}"
    );

    // The forecast lands near the real OOM: 20 GiB of headroom at 20 MiB/s.
    let oom = alerts
        .iter()
        .find(|a| a["kind"] == "oom_predicted")
        .unwrap();
    let real_oom_s = (T0_MS / 1000) as f64 + (20 * GIB - GIB / 10) as f64 / LEAK as f64;
    let predicted = oom["predicted_oom_t"].as_f64().unwrap();
    assert!(
        (predicted - real_oom_s).abs() < 90.0,
        "predicted {predicted}, real {real_oom_s}"
    );

    let (_, job) = get(&url, "/api/v1/jobs/job-x").await;
    assert_eq!(job["analysis"]["forecast"]["rank"], 2);
    assert_eq!(job["analysis"]["ranks"][2]["leak"], true);
    assert_eq!(job["analysis"]["ranks"][0]["leak"], false);

    let (_, filtered) = get(&url, "/api/v1/alerts?active=true&job=nope").await;
    assert_eq!(filtered["alerts"].as_array().unwrap().len(), 0);
    let (_, limited) = get(&url, "/api/v1/alerts?limit=1").await;
    assert_eq!(limited["alerts"].as_array().unwrap().len(), 1);
    assert_eq!(
        limited["truncated"].as_u64().unwrap() as usize,
        alerts.len() - 1
    );

    let (status, err) = get(&url, "/api/v1/alerts?activ=true").await;
    assert_eq!(status, 400);
    assert!(err["message"].as_str().unwrap().contains("activ"), "{err}");
    let (status, _) = get(&url, "/api/v1/alerts?limit=999999").await;
    assert_eq!(status, 400);

    c.shutdown().await;
    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    support::wait_for_same(
        &url,
        "/api/v1/alerts",
        |v| v["alerts"].clone(),
        &body["alerts"],
    )
    .await;
    c.shutdown().await;
}
