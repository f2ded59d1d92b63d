//! Helpers shared by the coordinator's integration tests: an in-process
//! single-replica coordinator on a loopback port, and a push that waits for
//! the commit.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub mod openapi_schema;
pub mod prometheus;
pub mod trio;

use std::time::Duration;

use gpumon_coordinator::{Coordinator, CoordinatorConfig};
use gpumon_proto::wire;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, CoordinatorReply, CoordinatorReplyV2, GpuInfo,
    GpuWindow, ProcWindow, PushBatch, PushOutcome, RankInfo,
};

/// Bound on waiting for a fresh cluster to elect itself.
const ELECTION_WITHIN: Duration = Duration::from_secs(10);

/// Starts a coordinator on `dir`, listening on a free loopback port.
pub async fn start(dir: &std::path::Path, snapshot_every: u64) -> Coordinator {
    start_with(dir, |c| c.snapshot_every_entries = snapshot_every).await
}

/// Starts a coordinator on `dir` with defaults changed by `tune`.
pub async fn start_with(
    dir: &std::path::Path,
    tune: impl FnOnce(&mut CoordinatorConfig),
) -> Coordinator {
    let mut config = CoordinatorConfig::new(1, dir.to_owned());
    config.listen = "127.0.0.1:0".into();
    tune(&mut config);
    Coordinator::start(config)
        .await
        .expect("coordinator starts")
}

/// Pushes until committed: a fresh single-node cluster needs a moment to
/// elect itself. Any answer but success or 503 fails the test.
pub async fn push(url: &str, msg: &AgentMessage) -> PushOutcome {
    push_reply(url, msg).await.outcome
}

/// Like [`push`], with the whole reply (the actions handed out included),
/// as version 2 lays it out; the reply's version must be the message's.
/// A replica that is not (or no longer) the leader names the leader, which
/// the push follows, as an agent does.
pub async fn push_reply(url: &str, msg: &AgentMessage) -> CoordinatorReplyV2 {
    let deadline = tokio::time::Instant::now() + ELECTION_WITHIN;
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let mut url = url.to_owned();
    loop {
        let resp = client
            .post(format!("{url}/api/v1/ingest"))
            .body(wire::encode(msg))
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().is_success() || resp.status().as_u16() == 503,
            "{}",
            resp.status()
        );
        if resp.status().is_success() {
            let reply: CoordinatorReply =
                wire::decode(&resp.bytes().await.unwrap(), 1 << 20).unwrap();
            let version = match reply {
                CoordinatorReply::V1(_) => 1,
                CoordinatorReply::V2(_) => 2,
            };
            assert_eq!(
                version,
                msg.version(),
                "the reply is in the message's version"
            );
            let reply = reply.into_v2();
            match reply.outcome {
                PushOutcome::Committed { .. } => return reply,
                PushOutcome::NotLeader {
                    leader_url: Some(ref leader),
                } => url = leader.clone(),
                _ => {}
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader within {ELECTION_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `GET {url}{path}` until `pick` of the document equals `expected`
/// (a restarted replica replays its log in the background), bounded.
pub async fn wait_for_same(
    url: &str,
    path: &str,
    pick: impl Fn(&serde_json::Value) -> serde_json::Value,
    expected: &serde_json::Value,
) {
    let deadline = tokio::time::Instant::now() + ELECTION_WITHIN;
    loop {
        let now: serde_json::Value = gpumon_net::plain_client_builder()
            .build()
            .unwrap()
            .get(format!("{url}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pick(&now) == *expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} after restart differs: {now} vs {expected}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub const GIB: u64 = 1 << 30;
pub const T0_MS: u64 = 1_700_000_000_000;
/// Rank 2 leaks this many bytes per second.
pub const LEAK: u64 = 20 << 20;
pub const WINDOW_MS: u64 = 2_000;
pub const WINDOWS_PER_BATCH: u64 = 15;

pub fn used(rank: u32, t_s: u64) -> u64 {
    let base = 20 * GIB + u64::from(rank) * (GIB / 20);
    if rank == 2 {
        base + LEAK * t_s
    } else {
        base
    }
}

/// Batch `seq` (from 1) of job `job-x` on node `node-a`: `WINDOWS_PER_BATCH`
/// windows of each of 4 GPUs, rank 2 leaking `LEAK` bytes per second.
pub fn leak_batch(seq: u64) -> AgentMessage {
    leak_batch_with(seq, false)
}

/// Like [`leak_batch`]; with `rank2_gone`, rank 2's process has left its GPU.
pub fn leak_batch_with(seq: u64, rank2_gone: bool) -> AgentMessage {
    let mut windows = Vec::new();
    for i in 0..WINDOWS_PER_BATCH {
        let start_ms = T0_MS + ((seq - 1) * WINDOWS_PER_BATCH + i) * WINDOW_MS;
        let t_s = (start_ms - T0_MS) / 1000;
        for g in 0..4u32 {
            let here = !(rank2_gone && g == 2);
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
                used_bytes: BytesStat::single(if here { u } else { GIB / 2 }),
                reserved_bytes: None,
                util_pct: None,
                sm_clock_mhz: None,
                power_w: None,
                procs: here
                    .then(|| ProcWindow {
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
                    })
                    .into_iter()
                    .collect(),
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

/// A plain HTTP client with the defaults (every reqwest client in the
/// workspace comes from `gpumon_net`).
pub fn http() -> reqwest::Client {
    gpumon_net::plain_client_builder()
        .build()
        .expect("the default client builds")
}

/// `GET url` as text (e.g. `/metrics`); panics on a transport error.
pub async fn get_text(url: impl reqwest::IntoUrl) -> String {
    let resp = http().get(url).send().await.expect("the GET is answered");
    resp.text().await.expect("the answer is text")
}

/// `GET url` as JSON; panics on a transport or decoding error.
pub async fn get_json<T: serde::de::DeserializeOwned>(url: impl reqwest::IntoUrl) -> T {
    let resp = http().get(url).send().await.expect("the GET is answered");
    resp.json().await.expect("the answer is the JSON expected")
}
