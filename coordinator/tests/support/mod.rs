//! Helpers shared by the coordinator's integration tests: an in-process
//! single-replica coordinator on a loopback port, and a push that waits for
//! the commit.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::time::Duration;

use gpumon_coordinator::{Coordinator, CoordinatorConfig};
use gpumon_proto::wire;
use gpumon_proto::{AgentMessage, CoordinatorReply, CoordinatorReplyV1, PushOutcome};

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

/// Like [`push`], with the whole reply (the actions handed out included).
pub async fn push_reply(url: &str, msg: &AgentMessage) -> CoordinatorReplyV1 {
    let deadline = tokio::time::Instant::now() + ELECTION_WITHIN;
    let client = reqwest::Client::new();
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
            let CoordinatorReply::V1(reply) = reply;
            if matches!(reply.outcome, PushOutcome::Committed { .. }) {
                return reply;
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
        let now: serde_json::Value = reqwest::get(format!("{url}{path}"))
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
