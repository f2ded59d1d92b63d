//! The Raft surface of one replica: `GET /api/v1/raft`, linearizable reads,
//! the guards on membership changes, and refusal of a peer of another Raft
//! protocol version.

mod support;

use gpumon_coordinator::{Coordinator, CoordinatorConfig};
use gpumon_proto::api::{ApiErrorBody, RaftStatus};
use support::push;

const TOKEN: &str = "a-long-enough-admin-token";

async fn start_with_token(dir: &std::path::Path) -> Coordinator {
    let mut config = CoordinatorConfig::new(1, dir.to_owned());
    config.listen = "127.0.0.1:0".into();
    config.credentials.admin_token = gpumon_runtime::secrets::Secret::new(TOKEN).ok();
    Coordinator::start(config)
        .await
        .expect("coordinator starts")
}

fn hello() -> gpumon_proto::AgentMessage {
    gpumon_proto::AgentMessage::V1(gpumon_proto::AgentMessageV1::Hello(gpumon_proto::Hello {
        agent_id: "a".into(),
        incarnation: 1,
        node: "n".into(),
        agent_version: "test".into(),
        source: "none".into(),
        gpus: Vec::new(),
    }))
}

#[tokio::test]
async fn raft_status_names_the_leader_and_indexes_and_linearizable_reads_work() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_with_token(dir.path()).await;
    let url = c.api_url();
    push(&url, &hello()).await;
    let s: RaftStatus =
        support::get_json(format!("{url}/api/v1/raft?consistency=linearizable")).await;
    assert_eq!((s.id, s.leader, s.role.as_str()), (1, Some(1), "leader"));
    assert!(s.term >= 1);
    // The hello is committed and applied, so both indexes cover it.
    assert!(
        s.commit_index >= Some(2) && s.applied_index == s.commit_index,
        "{s:?}"
    );
    assert_eq!(s.apply_lag, 0);
    assert_eq!(s.voters.len(), 1);
    assert_eq!(s.state_digest.len(), 16);

    let bad = support::http()
        .get(format!("{url}/api/v1/jobs?consistency=strong"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: ApiErrorBody = bad.json().await.unwrap();
    assert!(body.message.contains("linearizable"), "{body:?}");
    c.shutdown().await;
}

#[tokio::test]
async fn membership_changes_need_the_admin_token_and_keep_the_last_voter() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_with_token(dir.path()).await;
    let url = c.api_url();
    push(&url, &hello()).await;
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let remove = |token: Option<&str>, id: u64| {
        let mut req = client.delete(format!("{url}/api/v1/cluster/members/{id}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(remove(None, 1).await.unwrap().status(), 401);
    assert_eq!(
        remove(Some("wrong-token-of-some-length"), 1)
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(remove(Some(TOKEN), 7).await.unwrap().status(), 404);
    let last = remove(Some(TOKEN), 1).await.unwrap();
    assert_eq!(last.status(), 409);
    let body: ApiErrorBody = last.json().await.unwrap();
    assert!(body.message.contains("last voter"), "{body:?}");

    let bad_addr = client
        .post(format!("{url}/api/v1/cluster/members"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"id": 2, "addr": "http://x:1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_addr.status(), 400);
    c.shutdown().await;
}

#[tokio::test]
async fn a_peer_of_another_raft_protocol_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_with_token(dir.path()).await;
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{}/raft/vote", c.api_url()))
        .header("x-gpumon-raft-version", "99")
        .body(vec![0u8; 8])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let text = resp.text().await.unwrap();
    assert!(text.contains("version 99 is not supported"), "{text}");
    c.shutdown().await;
}

#[tokio::test]
async fn ready_says_why_not_and_a_dead_address_is_never_added() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let c = start_with_token(&data).await;
    let url = c.api_url();
    push(&url, &hello()).await;
    let ready = support::http()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);
    assert_eq!(
        support::http()
            .get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // A replica whose address nothing answers at is refused, and the
    // membership stays as it was.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/cluster/members"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"id": 4, "addr": addr, "learner": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: ApiErrorBody = resp.json().await.unwrap();
    assert!(body.message.contains("nothing answers"), "{body:?}");
    let s: RaftStatus = support::get_json(format!("{url}/api/v1/raft")).await;
    assert_eq!((s.voters.len(), s.learners.len()), (1, 0), "{s:?}");

    // Storage that no longer takes writes makes the replica unready and
    // says so (the data directory gone from under it), once the last
    // probe's answer (at most a second old) has aged out.
    std::fs::remove_dir_all(&data).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let why = loop {
        let answer = support::http()
            .get(format!("{url}/readyz"))
            .send()
            .await
            .unwrap();
        let (status, why) = (answer.status(), answer.text().await.unwrap());
        if status == 503 && why.contains("does not take writes") {
            break why;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {status} after 30 s: {why}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(why.contains(&data.display().to_string()), "{why}");
    c.shutdown().await;
}
