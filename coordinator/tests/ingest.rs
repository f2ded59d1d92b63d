//! The coordinator over real HTTP on loopback: ingest through Raft, dedup,
//! refusals of bad input, and recovery from the redb log and snapshots.

use std::time::Duration;

mod support;
use support::{push, start, T0_MS};

use gpumon_coordinator::{Coordinator, CoordinatorConfig};
use gpumon_proto::api::{ApiErrorBody, ClusterView, JobDetail, JobsView};
use gpumon_proto::wire;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GpuInfo, GpuWindow, Hello, ProcWindow, PushBatch,
    PushOutcome, RankInfo,
};

const GIB: u64 = 1 << 30;

fn batch(seq: u64, used: u64) -> AgentMessage {
    let windows = (0..4)
        .map(|g| GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{g}"),
                index: g,
                name: "H100".into(),
                total_bytes: 80 * GIB,
            },
            start_ms: T0_MS + 1_000 * seq,
            end_ms: T0_MS + 1_000 * seq + 1_500,
            samples: 4,
            used_bytes: BytesStat::single(used + GIB),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: vec![ProcWindow {
                pid: 100 + g,
                used_bytes: BytesStat::single(used),
                rank: Some(RankInfo {
                    job: "job-x".into(),
                    rank: g,
                    local_rank: g,
                    world_size: 4,
                    master_addr: None,
                    master_port: None,
                }),
            }],
        })
        .collect();
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: "agent-a".into(),
        incarnation: 77,
        seq,
        node: "node-a".into(),
        dropped_batches: 0,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    }))
}

async fn post(url: &str, body: Vec<u8>) -> reqwest::Response {
    gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/ingest"))
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn get<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> T {
    support::get_json(format!("{url}{path}")).await
}

#[tokio::test]
async fn pushes_become_the_job_view_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    let hello = AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: "agent-a".into(),
        incarnation: 77,
        node: "node-a".into(),
        agent_version: "test".into(),
        source: "test".into(),
        gpus: vec![],
    }));
    push(&url, &hello).await;
    assert_eq!(
        push(&url, &batch(1, 10 * GIB)).await,
        PushOutcome::Committed {
            acked_seq: 1,
            duplicate: false
        }
    );
    assert_eq!(
        push(&url, &batch(1, 99 * GIB)).await,
        PushOutcome::Committed {
            acked_seq: 1,
            duplicate: true
        }
    );

    let jobs: JobsView = get(&url, "/api/v1/jobs").await;
    assert_eq!(jobs.jobs.len(), 1);
    let ranks = &jobs.jobs[0].ranks;
    assert_eq!(
        ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(ranks
        .iter()
        .all(|r| r.used_bytes == 10 * GIB && r.node == "node-a"));

    let detail: JobDetail = get(&url, "/api/v1/jobs/job-x").await;
    assert_eq!(detail.ranks[2].history.len(), 1);
    let cluster: ClusterView = get(&url, "/api/v1/cluster").await;
    assert_eq!(
        (
            cluster.ingest.batches_applied,
            cluster.ingest.batches_duplicate
        ),
        (1, 1)
    );
    assert_eq!(cluster.coordinator.unwrap().leader, Some(1));

    let missing = support::http()
        .get(format!("{url}/api/v1/jobs/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: ApiErrorBody = missing.json().await.unwrap();
    assert!(body.message.contains("nope"), "{}", body.message);
    c.shutdown().await;
}

#[tokio::test]
async fn refuses_bad_pushes_with_a_reason_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = CoordinatorConfig::new(1, dir.path().to_owned());
    config.listen = "127.0.0.1:0".into();
    config.max_push_bytes = 4096;
    let c = Coordinator::start(config).await.unwrap();
    let url = c.api_url();
    push(&url, &batch(1, GIB)).await;

    // Variant 7 is protocol version 8, which no build speaks yet.
    let mut v8 = wire::encode(&batch(2, GIB));
    v8[0] = 7;
    let resp = post(&url, v8).await;
    assert_eq!(resp.status(), 400);
    let body: ApiErrorBody = resp.json().await.unwrap();
    assert!(
        body.message.contains("protocol version 8"),
        "{}",
        body.message
    );

    let resp = post(&url, vec![0, 0xff, 0xff, 0xff]).await;
    assert_eq!(resp.status(), 400);

    let resp = post(&url, vec![0; 10_000]).await;
    assert_eq!(resp.status(), 413);
    let body: ApiErrorBody = resp.json().await.unwrap();
    assert!(
        body.message.contains("max_push_bytes (4096 bytes)"),
        "{}",
        body.message
    );

    let cluster: ClusterView = get(&url, "/api/v1/cluster").await;
    let rejected = cluster.coordinator.unwrap().rejected_pushes;
    assert_eq!(
        (rejected.bad_version, rejected.malformed, rejected.too_large),
        (1, 1, 1)
    );
    assert_eq!(
        cluster.ingest.batches_applied, 1,
        "refused pushes change nothing"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn a_restarted_coordinator_recovers_from_its_log_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    for seq in 1..=12 {
        push(&url, &batch(seq, seq * GIB)).await;
    }
    let before: JobDetail = get(&url, "/api/v1/jobs/job-x").await;
    // The snapshot schedule looks every 200 ms: 12 entries are past 5.
    let mut metrics = c.raft().metrics();
    tokio::time::timeout(
        Duration::from_secs(10),
        metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= 5)),
    )
    .await
    .expect("a snapshot within 10 s")
    .unwrap();
    c.shutdown().await;
    assert!(
        dir.path().join("snapshot.bin").exists(),
        "the snapshot is on disk"
    );

    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    // Wait until the log tail after the snapshot is applied again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now: JobDetail = get(&url, "/api/v1/jobs/job-x").await;
        if now == before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "state not recovered: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A re-sent batch is still recognized as a duplicate after the restart.
    assert_eq!(
        push(&url, &batch(12, GIB)).await,
        PushOutcome::Committed {
            acked_seq: 12,
            duplicate: true
        }
    );
    c.shutdown().await;
}

/// Two agent processes under one id (two nodes with one host name): the
/// older incarnation keeps pushing after the newer joined. Its data is
/// applied, and the conflict is counted where an operator looks.
#[tokio::test]
async fn two_agents_under_one_id_are_counted_not_silently_merged() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1_000).await;
    let url = c.api_url();
    let with_incarnation = |seq: u64, incarnation: u64| {
        let AgentMessage::V1(AgentMessageV1::Push(mut b)) = batch(seq, GIB) else {
            unreachable!("batch makes a push")
        };
        b.incarnation = incarnation;
        AgentMessage::V1(AgentMessageV1::Push(b))
    };
    let conflicts = || async {
        let text = support::get_text(format!("{url}/metrics")).await;
        text.lines()
            .find_map(|l| l.strip_prefix("gpumon_ingest_agent_id_conflicts_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("the conflict counter is on /metrics")
    };
    push(&url, &with_incarnation(1, 77)).await;
    // A restart: a new incarnation is no conflict.
    push(&url, &with_incarnation(1, 78)).await;
    assert_eq!(conflicts().await, 0.0);
    // The first process is alive after all.
    push(&url, &with_incarnation(2, 77)).await;
    push(&url, &with_incarnation(2, 78)).await;
    push(&url, &with_incarnation(3, 77)).await;
    assert_eq!(conflicts().await, 2.0);
    c.shutdown().await;
}

/// `batch`'s push from agent `a` of many (its own id, node and GPUs).
fn agent_push(a: u32, seq: u64) -> AgentMessage {
    let AgentMessage::V1(AgentMessageV1::Push(mut b)) = batch(seq, GIB) else {
        unreachable!("batch makes a push")
    };
    b.agent_id = format!("agent-{a}");
    b.node = format!("node-{a}");
    for w in &mut b.windows {
        w.gpu.uuid = format!("GPU-{a}-{}", w.gpu.index);
        for p in &mut w.procs {
            if let Some(r) = &mut p.rank {
                r.job = format!("job-{a}");
            }
        }
    }
    AgentMessage::V1(AgentMessageV1::Push(b))
}

/// Under load the leader proposes the pushes that arrive together as one
/// Raft entry; each agent must still get the answer for its own push (a
/// re-send as a duplicate) and the view must hold every window once.
#[tokio::test]
async fn pushes_arriving_together_are_each_answered_for_themselves() {
    const AGENTS: u32 = 64;
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 100_000).await;
    let url = c.api_url();
    let agents = (0..AGENTS).map(|a| {
        let url = url.clone();
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for seq in [1, 2, 3, 2] {
                outcomes.push(push(&url, &agent_push(a, seq)).await);
            }
            outcomes
        })
    });
    let committed = |acked_seq, duplicate| PushOutcome::Committed {
        acked_seq,
        duplicate,
    };
    for agent in agents.collect::<Vec<_>>() {
        let outcomes = agent.await.unwrap();
        assert_eq!(
            outcomes,
            [
                committed(1, false),
                committed(2, false),
                committed(3, false),
                committed(2, true)
            ]
        );
    }
    let cluster: ClusterView = get(&url, "/api/v1/cluster").await;
    assert_eq!(
        (
            cluster.ingest.batches_applied,
            cluster.ingest.batches_duplicate
        ),
        (u64::from(AGENTS) * 3, u64::from(AGENTS))
    );
    assert_eq!(cluster.gpus, AGENTS as usize * 4);
    let detail: JobDetail = get(&url, "/api/v1/jobs/job-7").await;
    assert!(detail.ranks.iter().all(|r| r.history.len() == 3));
    c.shutdown().await;
}
