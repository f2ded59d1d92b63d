//! The attacks of issue 15 on authentication, replayed against real
//! replicas on loopback, each refused with nothing applied:
//! - forged pushes: no token, a wrong token, the cluster secret in place of
//!   an agent token, a revoked token; a listed token is accepted;
//! - forged Raft RPC: a vote with a term of `u64::MAX` (which once
//!   overflowed openraft and left the cluster down), an append that drops
//!   two voters, a garbage snapshot: refused before openraft sees them, and
//!   the leader, its term and the voters stay;
//! - an admin request from loopback once an admin token exists;
//! - start-up: an open replica or agent on an address other hosts reach, a
//!   secret file others can read, and closed reads.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpumon_coordinator::raft::{Command, CommandV1, TypeConfig};
use gpumon_proto::api::ClusterView;
use gpumon_proto::wire;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, Vote,
};
use support::cluster::Cluster;
use support::pusher::Plan;

const CLUSTER_SECRET: &str = "cluster-secret-for-the-security-test";
const TOKEN_A: &str = "agent-token-of-node-a-0001";
const TOKEN_B: &str = "agent-token-of-node-b-0002";
const ADMIN: &str = "admin-token-for-the-security-test";
const WITHIN: Duration = Duration::from_secs(30);

/// Writes `text` to `dir/name` with `mode`.
fn secret_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

struct Secrets {
    _dir: tempfile::TempDir,
    flags: Vec<String>,
}

fn secrets() -> Secrets {
    let dir = tempfile::tempdir().unwrap();
    let cluster = secret_file(dir.path(), "cluster", &format!("{CLUSTER_SECRET}\n"), 0o600);
    let agents = secret_file(
        dir.path(),
        "agents",
        &format!("# node-a\n{TOKEN_A}\n# node-b\n{TOKEN_B}\n"),
        0o600,
    );
    let admin = secret_file(dir.path(), "admin", ADMIN, 0o400);
    let flags = vec![
        "--cluster-secret-file".into(),
        cluster.display().to_string(),
        "--agent-token-file".into(),
        agents.display().to_string(),
        "--admin-token-file".into(),
        admin.display().to_string(),
    ];
    Secrets { _dir: dir, flags }
}

async fn post(url: &str, token: Option<&str>, body: Vec<u8>) -> (u16, String) {
    let mut req = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(url)
        .header("x-gpumon-raft-version", "1")
        .timeout(Duration::from_secs(10))
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

async fn applied_batches(cluster: &Cluster, id: u64) -> u64 {
    let view: ClusterView = cluster
        .get(id, "/api/v1/cluster?consistency=linearizable")
        .await;
    view.ingest.batches_applied
}

async fn unauthorized_count(cluster: &Cluster, id: u64, access: &str) -> u64 {
    let text = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .get(format!("{}/metrics", cluster.url(id)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("gpumon_api_requests_unauthorized_total{{access=\"{access}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_pushes_raft_messages_and_admin_requests_are_refused_and_change_nothing() {
    let secrets = secrets();
    let flags: Vec<&str> = secrets.flags.iter().map(String::as_str).collect();
    let cluster = Cluster::start(3, &flags).await;
    let leader = cluster.wait_leader(WITHIN).await;
    let before = cluster.status(leader).await;
    let ingest = format!("{}/api/v1/ingest", cluster.url(leader));

    // Forged pushes: refused before decoding, nothing applied.
    let plan = Plan::new(1, 2, 2, Duration::from_millis(100));
    let push = wire::encode(&plan.batch(0, 1));
    for (token, what) in [
        (None, "no token"),
        (
            Some("agent-token-of-node-c-0003"),
            "a token not on the list",
        ),
        (Some(CLUSTER_SECRET), "the cluster secret"),
        (Some(ADMIN), "the admin token"),
    ] {
        let (status, body) = post(&ingest, token, push.clone()).await;
        assert_eq!(status, 401, "a push with {what}: {body}");
    }
    assert_eq!(applied_batches(&cluster, leader).await, 0);
    assert_eq!(unauthorized_count(&cluster, leader, "agent").await, 4);
    let (status, body) = post(&ingest, Some(TOKEN_B), push).await;
    assert_eq!(status, 200, "a listed token: {body}");
    assert_eq!(applied_batches(&cluster, leader).await, 1);

    // Forged Raft RPC from someone without the cluster secret.
    let vote = VoteRequest::<u64>::new(Vote::new(u64::MAX, 9), None);
    let log_id = LogId::new(CommittedLeaderId::new(u64::MAX - 1, 9), 1_000_000);
    let only_nine = Membership::<u64, BasicNode>::new(
        vec![BTreeSet::from([9])],
        BTreeMap::from([(9, BasicNode::new("127.0.0.1:9"))]),
    );
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(u64::MAX - 1, 9),
        prev_log_id: None,
        entries: vec![
            Entry {
                log_id,
                payload: EntryPayload::Membership(only_nine),
            },
            Entry {
                log_id: LogId::new(CommittedLeaderId::new(u64::MAX - 1, 9), 1_000_001),
                payload: EntryPayload::Normal(Command::V1(CommandV1::Notified {
                    entries: Vec::new(),
                    at_ms: u64::MAX,
                })),
            },
        ],
        leader_commit: Some(log_id),
    };
    let snapshot = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(u64::MAX - 1, 9),
        meta: SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: Default::default(),
            snapshot_id: "forged".into(),
        },
        offset: 0,
        data: b"not a snapshot at all".to_vec(),
        done: true,
    };
    let base = cluster.url(leader);
    let forged = [
        ("vote", postcard::to_allocvec(&vote).unwrap()),
        ("append", postcard::to_allocvec(&append).unwrap()),
        ("snapshot", postcard::to_allocvec(&snapshot).unwrap()),
    ];
    for id in cluster.ids() {
        for (route, body) in &forged {
            for token in [None, Some(TOKEN_A), Some("cluster-secret-guessed-wrong!")] {
                let url = format!("{}/raft/{route}", cluster.url(id));
                let (status, text) = post(&url, token, body.clone()).await;
                assert_eq!(status, 401, "replica {id}: {route} with {token:?}: {text}");
            }
        }
    }
    assert_eq!(unauthorized_count(&cluster, leader, "peer").await, 9);

    // Admin from loopback is not enough once a token exists.
    let members = format!("{base}/api/v1/cluster/members/2");
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .delete(&members)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    // The cluster is as it was: same leader and term, three voters, and a
    // real push still commits everywhere.
    let after = cluster.wait_converged(&cluster.ids(), 0, WITHIN).await;
    assert_eq!(after.leader, Some(leader));
    assert_eq!(after.term, before.term, "no forged vote moved the term");
    assert_eq!(after.voters.len(), 3, "no forged append changed membership");
    let push = wire::encode(&plan.batch(0, 2));
    let (status, body) = post(&ingest, Some(TOKEN_A), push).await;
    assert_eq!(status, 200, "{body}");
    for id in cluster.ids() {
        cluster
            .wait(WITHIN, "the second push applied everywhere", || async {
                let view: ClusterView = cluster.get(id, "/api/v1/cluster").await;
                (view.ingest.batches_applied == 2)
                    .then_some(())
                    .ok_or(format!(
                        "replica {id}: {} batches",
                        view.ingest.batches_applied
                    ))
            })
            .await;
    }
}

/// Runs `gpumon ARGS` expecting it to refuse to start; gives its stderr.
async fn refuses(args: &[&str]) -> String {
    let out = tokio::time::timeout(WITHIN, support::gpumon().args(args).output())
        .await
        .expect("gpumon ends by itself")
        .unwrap();
    assert!(!out.status.success(), "gpumon {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn an_open_replica_or_agent_on_a_reachable_address_and_an_open_secret_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let err = refuses(&["coordinator", "--listen", "0.0.0.0:0", "--data-dir", data]).await;
    for flag in [
        "--cluster-secret-file",
        "--agent-token-file",
        "--admin-token-file",
        "--insecure",
    ] {
        assert!(err.contains(flag), "{err}");
    }

    let readable = secret_file(dir.path(), "open", "a-secret-that-others-can-read", 0o644);
    let readable = readable.to_str().unwrap();
    let err = refuses(&[
        "coordinator",
        "--cluster-secret-file",
        readable,
        "--data-dir",
        data,
    ])
    .await;
    assert!(err.contains(readable) && err.contains("chmod 600"), "{err}");

    let err = refuses(&[
        "agent",
        "--source",
        "none",
        "--coordinators",
        "http://10.0.0.1:7070",
    ])
    .await;
    assert!(err.contains("--agent-token-file"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_reads_need_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let admin = secret_file(dir.path(), "admin", ADMIN, 0o600);
    let admin = admin.to_str().unwrap();
    let cluster = Cluster::start(1, &["--admin-token-file", admin]).await;
    let open = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .get(format!("{}/api/v1/cluster", cluster.url(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status().as_u16(), 200, "reads are open by default");
    drop(cluster);

    let cluster = Cluster::start(1, &["--admin-token-file", admin, "--closed-reads"]).await;
    let url = format!("{}/api/v1/cluster", cluster.url(1));
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let metrics = client
        .get(format!("{}/metrics", cluster.url(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status().as_u16(), 401, "/metrics is a read too");
    let health = client
        .get(format!("{}/healthz", cluster.url(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200, "liveness stays open");
    let admin_read = client.get(&url).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(admin_read.status().as_u16(), 200);
}

/// A token bound to an agent pushes as that agent only: a hello or a push
/// for another agent id (or another node) is refused with 403 and changes
/// nothing; an unbound token still pushes as anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_pushes_as_its_own_agent_only() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = secret_file(
        dir.path(),
        "agents",
        &format!("{TOKEN_A} agent-0 node-0\n{TOKEN_B}\n"),
        0o600,
    );
    let tokens = tokens.to_str().unwrap();
    let cluster = Cluster::start(1, &["--agent-token-file", tokens]).await;
    let leader = cluster.wait_leader(WITHIN).await;
    let ingest = format!("{}/api/v1/ingest", cluster.url(leader));
    let plan = Plan::new(2, 2, 2, Duration::from_millis(100));

    for msg in [plan.hello(0), plan.batch(0, 1)] {
        let (status, body) = post(&ingest, Some(TOKEN_A), wire::encode(&msg)).await;
        assert_eq!(status, 200, "agent-0 with its own token: {body}");
    }
    let before: ClusterView = cluster
        .get(leader, "/api/v1/cluster?consistency=linearizable")
        .await;
    for msg in [plan.hello(1), plan.batch(1, 1)] {
        let (status, body) = post(&ingest, Some(TOKEN_A), wire::encode(&msg)).await;
        assert_eq!(status, 403, "agent-1 with agent-0's token: {body}");
        assert!(
            body.contains("agent-0, node-0 only, not as agent id \\\"agent-1\\\""),
            "{body}"
        );
    }
    let after: ClusterView = cluster
        .get(leader, "/api/v1/cluster?consistency=linearizable")
        .await;
    assert_eq!(after.ingest, before.ingest, "nothing of them was applied");
    assert_eq!(after.agents.len(), 1);
    let refused = after.coordinator.expect("the replica's own figures");
    assert_eq!(refused.rejected_pushes.forbidden, 2);

    let (status, body) = post(&ingest, Some(TOKEN_B), wire::encode(&plan.hello(1))).await;
    assert_eq!(status, 200, "a token bound to no agent: {body}");
}

/// Closed reads on three replicas: a follower refuses an anonymous
/// linearizable read itself (401, nothing forwarded, no quorum round for a
/// stranger) and forwards the admin's with its token, which the leader
/// checks again (200, served by the leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_reads_stay_closed_through_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let admin = secret_file(dir.path(), "admin", ADMIN, 0o600);
    let admin = admin.to_str().unwrap();
    // The harness reads the replicas' status as the admin.
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {ADMIN}");
    headers.insert(reqwest::header::AUTHORIZATION, bearer.parse().unwrap());
    let harness = gpumon_net::plain_client_builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let flags = ["--admin-token-file", admin, "--closed-reads"];
    let cluster = Cluster::start_with(3, &flags, "http", harness).await;
    let leader = cluster.wait_leader(WITHIN).await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let url = format!(
        "{}/api/v1/cluster?consistency=linearizable",
        cluster.url(follower)
    );
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    assert!(
        anonymous.headers().get("x-gpumon-served-by").is_none(),
        "refused by the follower itself, not forwarded"
    );
    let wrong = client
        .get(&url)
        .bearer_auth("not-the-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let admin_read = client.get(&url).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(admin_read.status().as_u16(), 200);
    assert_eq!(
        admin_read
            .headers()
            .get("x-gpumon-served-by")
            .and_then(|v| v.to_str().ok()),
        Some(cluster.addr(leader)),
        "forwarded to the leader with the caller's token"
    );
}
