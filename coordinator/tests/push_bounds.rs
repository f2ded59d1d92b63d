//! The attacks of issue 15 replayed over HTTP against one replica: a
//! forged seq that would shadow a real agent, windows and records from the
//! future or before any clock was set, host memory that cannot be, and the
//! agent restart that must still be taken. Each refusal is a 400 that names the field and the
//! bound, counted under `rejected_pushes.out_of_bounds`, and the real
//! agents' next pushes still apply with the clock and liveness right.

mod support;
use support::{push, start, GIB};

use gpumon_core::limits::MAX_SEQ_GAP;
use gpumon_proto::api::{ApiErrorBody, ClusterView};
use gpumon_proto::wire;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, AgentMessageV2, BytesStat, EventRecord, GpuInfo, GpuWindow,
    Hello, HookRecord, HostMemory, PodPlacement, ProcPlacement, ProcWindow, PushBatch, PushBatchV2,
    PushOutcome,
};
use gpumon_runtime::clock::wall_ms;

/// Up while the newest window ended at most this long before the
/// cluster's clock (the coordinator's `AGENT_STALE_MS`).
const AGENT_STALE_MS: u64 = 30_000;

/// One window of GPU-0 on `agent`'s node, ending at `end_ms`.
fn push_of(agent: &str, incarnation: u64, seq: u64, end_ms: u64) -> PushBatch {
    PushBatch {
        agent_id: agent.into(),
        incarnation,
        seq,
        node: format!("node-{agent}"),
        dropped_batches: 0,
        windows: vec![GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{agent}-0"),
                index: 0,
                name: "H100".into(),
                total_bytes: 80 * GIB,
            },
            start_ms: end_ms.saturating_sub(2_000),
            end_ms,
            samples: 4,
            used_bytes: BytesStat::single(GIB),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: Vec::new(),
        }],
        hook: Vec::new(),
        acks: Vec::new(),
    }
}

fn msg(batch: PushBatch) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Push(batch))
}

/// Posts `batch` and expects a 400 whose reason contains every one of `words`.
async fn refused(url: &str, batch: PushBatch, words: &[&str]) {
    refused_message(url, &msg(batch), words).await;
}

/// Posts `message` and expects a 400 whose reason contains every one of `words`.
async fn refused_message(url: &str, message: &AgentMessage, words: &[&str]) {
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/ingest"))
        .body(wire::encode(message))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: ApiErrorBody = resp.json().await.unwrap();
    for w in words {
        assert!(body.message.contains(w), "{w:?} not in {:?}", body.message);
    }
}

async fn cluster(url: &str) -> ClusterView {
    support::get_json(format!("{url}/api/v1/cluster")).await
}

async fn applied(url: &str, batch: PushBatch) {
    let seq = batch.seq;
    applied_message(url, &msg(batch), seq).await;
}

async fn applied_message(url: &str, message: &AgentMessage, seq: u64) {
    assert_eq!(
        push(url, message).await,
        PushOutcome::Committed {
            acked_seq: seq,
            duplicate: false
        }
    );
}

/// Every agent is up, by the cluster's own clock, and that clock is not
/// ahead of the wall.
fn assert_all_up(view: &ClusterView) {
    assert!(view.now_ms <= wall_ms(), "clock ahead: {}", view.now_ms);
    for a in &view.agents {
        assert!(
            view.now_ms - a.last_seen_ms <= AGENT_STALE_MS,
            "{} looks down: {view:?}",
            a.agent_id
        );
    }
}

#[tokio::test]
async fn a_forged_seq_is_refused_and_the_real_agent_keeps_applying() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    applied(&url, push_of("a", 7, 1, wall_ms())).await;
    applied(&url, push_of("a", 7, 2, wall_ms())).await;

    let max = u64::MAX.to_string();
    refused(
        &url,
        push_of("a", 7, u64::MAX, wall_ms()),
        &[&max, "seq", "4098"],
    )
    .await;
    let past_gap = 2 + MAX_SEQ_GAP + 1;
    refused(&url, push_of("a", 7, past_gap, wall_ms()), &["seq", "4098"]).await;
    refused(&url, push_of("a", 7, 0, wall_ms()), &["seq 0"]).await;

    let before = cluster(&url).await.ingest.windows_applied;
    applied(&url, push_of("a", 7, 3, wall_ms())).await;
    let after = cluster(&url).await;
    assert_eq!(after.ingest.windows_applied, before + 1);
    assert_eq!(after.agents[0].last_seq, 3);
    let rejected = after.coordinator.unwrap().rejected_pushes;
    assert_eq!((rejected.out_of_bounds, rejected.malformed), (3, 0));
    c.shutdown().await;
}

#[tokio::test]
async fn times_from_the_future_or_before_2020_are_refused_and_the_clock_stays() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    applied(&url, push_of("a", 1, 1, wall_ms())).await;
    applied(&url, push_of("b", 1, 1, wall_ms())).await;

    let started_now = |end_ms| {
        let mut b = push_of("a", 1, 2, end_ms);
        b.windows[0].start_ms = wall_ms();
        b
    };
    let max = u64::MAX.to_string();
    let forever = started_now(u64::MAX);
    refused(&url, forever, &["windows[0].end_ms", &max, "300000 ms"]).await;
    let ten_minutes = started_now(wall_ms() + 600_000);
    refused(&url, ten_minutes, &["windows[0].end_ms", "ahead"]).await;
    refused(
        &url,
        push_of("a", 1, 2, 1_000),
        &["windows[0].start_ms", "2020"],
    )
    .await;
    let mut record = push_of("a", 1, 2, wall_ms());
    record.hook.push(HookRecord::Event(EventRecord {
        t_ms: u64::MAX,
        job: "job-x".into(),
        rank: 0,
        name: "marker".into(),
        detail: None,
        snapshot: None,
    }));
    refused(&url, record, &["hook[0].t_ms"]).await;

    let view = cluster(&url).await;
    assert_all_up(&view);
    assert_eq!(view.coordinator.unwrap().rejected_pushes.out_of_bounds, 4);

    applied(&url, push_of("a", 1, 2, wall_ms())).await;
    applied(&url, push_of("b", 1, 2, wall_ms())).await;
    assert_all_up(&cluster(&url).await);
    c.shutdown().await;
}

#[tokio::test]
async fn a_restarted_agent_is_taken_from_seq_one_and_a_resend_stays_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    for seq in 1..=5 {
        applied(&url, push_of("a", 1, seq, wall_ms())).await;
    }
    // Between a restart's hello and its first push, a forged seq is bounded
    // too: the hello is the new incarnation's history.
    let hello = AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: "a".into(),
        incarnation: 2,
        node: "node-a".into(),
        agent_version: "test".into(),
        source: "test".into(),
        gpus: Vec::new(),
    }));
    push(&url, &hello).await;
    refused(&url, push_of("a", 2, u64::MAX, wall_ms()), &["seq", "4096"]).await;
    applied(&url, push_of("a", 2, 1, wall_ms())).await;
    let view = cluster(&url).await;
    let agent = &view.agents[0];
    assert_eq!((agent.incarnation, agent.last_seq), (2, 1));

    assert_eq!(
        push(&url, &msg(push_of("a", 1, 5, wall_ms()))).await,
        PushOutcome::Committed {
            acked_seq: 5,
            duplicate: true
        }
    );
    c.shutdown().await;
}

#[tokio::test]
async fn placements_beyond_the_processes_are_refused_and_a_malformed_one_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    let placed = |pid, namespace: &str| ProcPlacement {
        pid,
        placement: PodPlacement {
            namespace: Some(namespace.into()),
            ..PodPlacement::default()
        },
    };
    let v2 = |batch, placements| {
        AgentMessage::V2(AgentMessageV2::Push(PushBatchV2 {
            batch,
            placements,
            host: None,
        }))
    };
    // A version 2 hello is a hello.
    let hello = AgentMessage::V2(AgentMessageV2::Hello(Hello {
        agent_id: "a".into(),
        incarnation: 1,
        node: "node-a".into(),
        agent_version: "test".into(),
        source: "test".into(),
        gpus: Vec::new(),
    }));
    push(&url, &hello).await;

    // One window with one process: two placements are one too many.
    let mut batch = push_of("a", 1, 1, wall_ms());
    batch.windows[0].procs.push(ProcWindow {
        pid: 42,
        used_bytes: BytesStat::single(GIB),
        rank: None,
    });
    let two = vec![placed(42, "ml"), placed(43, "ml")];
    refused_message(
        &url,
        &v2(batch.clone(), two),
        &["2 placements", "1 processes"],
    )
    .await;
    let rejected = cluster(&url).await.coordinator.unwrap().rejected_pushes;
    assert_eq!((rejected.malformed, rejected.out_of_bounds), (1, 0));

    // A placement of the wrong shape is skipped and counted; the windows apply.
    let before = cluster(&url).await.ingest;
    let malformed = v2(batch, vec![placed(42, "Not A Namespace")]);
    applied_message(&url, &malformed, 1).await;
    let after = cluster(&url).await.ingest;
    assert_eq!(after.windows_applied, before.windows_applied + 1);
    assert_eq!(after.windows_skipped, before.windows_skipped + 1);
    // Version 2 without placements applies as a version 1 push does.
    let plain = v2(push_of("a", 1, 2, wall_ms()), Vec::new());
    applied_message(&url, &plain, 2).await;
    c.shutdown().await;
}

#[tokio::test]
async fn host_memory_that_cannot_be_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    let with_host = |seq, t_ms, used, total| {
        AgentMessage::V2(AgentMessageV2::Push(PushBatchV2 {
            batch: push_of("a", 1, seq, wall_ms()),
            placements: Vec::new(),
            host: Some(HostMemory {
                t_ms,
                total_bytes: total,
                used_max_bytes: used,
            }),
        }))
    };
    applied_message(&url, &with_host(1, wall_ms(), 6 * GIB, 8 * GIB), 1).await;
    let ahead = wall_ms() + 3_600_000;
    let cases: [(AgentMessage, &[&str]); 4] = [
        (
            with_host(2, ahead, GIB, 8 * GIB),
            &["host.t_ms", "ahead of the coordinator's clock"],
        ),
        (with_host(2, 1_000, GIB, 8 * GIB), &["host.t_ms", "2020"]),
        (
            with_host(2, wall_ms(), 9 * GIB, 8 * GIB),
            &["used_max_bytes", "above total_bytes"],
        ),
        (with_host(2, wall_ms(), 0, 0), &["host total_bytes 0"]),
    ];
    for (message, words) in &cases {
        refused_message(&url, message, words).await;
    }
    let rejected = cluster(&url).await.coordinator.unwrap().rejected_pushes;
    assert_eq!(rejected.out_of_bounds, 4);
    // The agent goes on: its next push applies with its host memory.
    applied_message(&url, &with_host(2, wall_ms(), 7 * GIB, 8 * GIB), 2).await;
    c.shutdown().await;
}
