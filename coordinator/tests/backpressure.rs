//! Backpressure: a flood of pushes beyond what a replica lets into its Raft
//! pipeline is answered 429 with `Retry-After` (counted as `busy`), what
//! was accepted is all applied, and once the flood ends a push commits at
//! its usual speed again. A push that would pass the cluster's limits is
//! answered 429 with the reason and applied not at all.

mod support;

use std::time::{Duration, Instant};

use gpumon_proto::api::ClusterView;
use gpumon_proto::{wire, AgentMessage, AgentMessageV1, Hello};

fn hello(agent: usize) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: format!("flood-{agent}"),
        incarnation: 1,
        node: format!("node-{agent}"),
        agent_version: "test".into(),
        source: "none".into(),
        gpus: Vec::new(),
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_answered_busy_nothing_accepted_is_lost_and_latency_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let c = support::start_with(dir.path(), |c| c.max_pushes_in_flight = 4).await;
    let url = c.api_url();
    support::push(&url, &hello(0)).await;

    let client = gpumon_net::plain_client_builder().build().unwrap();
    let flood: Vec<_> = (1..=400)
        .map(|i| {
            let client = client.clone();
            let url = format!("{url}/api/v1/ingest");
            tokio::spawn(async move {
                let resp = client
                    .post(url)
                    .body(wire::encode(&hello(i)))
                    .send()
                    .await
                    .unwrap();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                (resp.status().as_u16(), retry_after)
            })
        })
        .collect();
    let (mut accepted, mut busy) = (0u64, 0u64);
    for task in flood {
        match task.await.unwrap() {
            (200, _) => accepted += 1,
            (429, Some(after)) => {
                assert_eq!(after, "1");
                busy += 1;
            }
            other => panic!("a flooded push answered {other:?}"),
        }
    }
    assert!(
        busy > 0,
        "400 pushes at once past a pipeline of 4: none was busy"
    );
    assert!(accepted > 0, "nothing got through the flood");

    let view: ClusterView =
        support::get_json(format!("{url}/api/v1/cluster?consistency=linearizable")).await;
    assert_eq!(
        view.agents.len() as u64,
        1 + accepted,
        "every accepted hello applied, no refused one"
    );
    let refused = view
        .coordinator
        .expect("a replica's own figures")
        .rejected_pushes;
    assert_eq!(refused.busy, busy);

    // The flood is over: a push commits at once, well within 10 s.
    let started = Instant::now();
    support::push(&url, &hello(1000)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a push after the flood took {took:?}"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn what_would_pass_a_limit_is_refused_with_429_and_the_reason_not_acknowledged_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let c = support::start_with(dir.path(), |c| {
        c.limits.max_gpus = 4;
        c.limits.max_agents = 2;
    })
    .await;
    let url = c.api_url();
    let with_gpus = |agent: usize, gpus: std::ops::Range<u32>| {
        let AgentMessage::V1(AgentMessageV1::Hello(mut h)) = hello(agent) else {
            unreachable!()
        };
        h.gpus = gpus
            .map(|i| gpumon_proto::GpuInfo {
                uuid: format!("GPU-{agent}-{i}"),
                index: i,
                name: "H100".into(),
                total_bytes: 80 << 30,
            })
            .collect();
        AgentMessage::V1(AgentMessageV1::Hello(h))
    };
    support::push(&url, &with_gpus(0, 0..3)).await;

    let client = gpumon_net::plain_client_builder().build().unwrap();
    let send = |msg: AgentMessage| {
        client
            .post(format!("{url}/api/v1/ingest"))
            .body(wire::encode(&msg))
            .send()
    };
    let resp = send(with_gpus(1, 0..2)).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "60");
    let body: gpumon_proto::api::ApiErrorBody = resp.json().await.unwrap();
    assert!(body.message.contains("GPUs"), "{body:?}");

    assert_eq!(
        send(with_gpus(2, 0..1)).await.unwrap().status(),
        200,
        "it fits"
    );
    let resp = send(with_gpus(3, 0..0)).await.unwrap();
    assert_eq!(resp.status(), 429, "a third agent past max_agents 2");

    let view: ClusterView = support::get_json(format!("{url}/api/v1/cluster")).await;
    assert_eq!(
        (view.agents.len(), view.gpus),
        (2, 4),
        "nothing refused was applied"
    );
    assert_eq!(view.coordinator.unwrap().rejected_pushes.full, 2);
    c.shutdown().await;
}
