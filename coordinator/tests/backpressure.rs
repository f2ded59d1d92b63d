//! Backpressure: a flood of pushes beyond what a replica lets into its Raft
//! pipeline is answered 429 with `Retry-After` (counted as `busy`), what
//! was accepted is all applied, and once the flood ends a push commits at
//! its usual speed again.

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

    let client = reqwest::Client::new();
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

    let view: ClusterView = reqwest::get(format!("{url}/api/v1/cluster?consistency=linearizable"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
