//! TLS end to end: three replicas serving their API and Raft over TLS
//! with mutual authentication (every client shows a certificate from the
//! cluster's CA), a real agent pushing over https, and the CLI reading
//! over https. Clients that cannot prove who they are, or that do not
//! trust the replicas' CA, or that speak plain HTTP, get nothing, and the
//! cluster goes on serving.

mod support;

use std::path::Path;
use std::time::Duration;

use gpumon_proto::api::ClusterView;
use support::cluster::Cluster;
use support::tls::{self, Pki};
use support::{gpumon, Proc};

/// Time allowed for elections, pushes and answers.
const WITHIN: Duration = Duration::from_secs(30);

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temporary paths")
}

/// The flags that make a client of the cluster trust its CA and show
/// `pair`.
/// A replica's flags: its certificate and key, and mutual TLS with the
/// test CA.
fn replica_flags(pki: &Pki) -> [&str; 6] {
    [
        "--tls-cert-file",
        path(&pki.replica.cert),
        "--tls-key-file",
        path(&pki.replica.key),
        "--tls-client-ca-file",
        path(&pki.ca),
    ]
}

fn client_flags<'a>(pki: &'a Pki, pair: &'a tls::Pair) -> [&'a str; 6] {
    [
        "--tls-ca-file",
        path(&pki.ca),
        "--tls-cert-file",
        path(&pair.cert),
        "--tls-key-file",
        path(&pair.key),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_mutual_tls_serves_agents_and_the_cli_and_refuses_strangers() {
    let pki = tls::make();
    let cluster = Cluster::start_with(
        3,
        &replica_flags(&pki),
        "https",
        pki.client(Some(&pki.agent)),
    )
    .await;
    // A leader every replica follows: Raft itself runs over mutual TLS.
    let leader = cluster.wait_leader(WITHIN).await;
    let url = cluster.url(leader);
    assert!(url.starts_with("https://"), "{url}");

    // A real agent pushes over https, showing its client certificate.
    let mut agent_cmd = gpumon();
    agent_cmd
        .arg("agent")
        .args(["--source", "sim:steady", "--agent-id", "tls-agent"])
        .args(["--coordinators", &cluster.urls().join(",")])
        .args(["--window-ms", "500", "--sample-interval-ms", "100"])
        .args(["--metrics-listen", "none"])
        .args(client_flags(&pki, &pki.agent));
    let _agent = Proc::spawn(agent_cmd);
    cluster
        .wait(WITHIN, "the agent's windows applied", || async {
            let (view, _) = cluster
                .get_from::<ClusterView>(leader, "/api/v1/cluster")
                .await?;
            let seen = view.agents.iter().any(|a| a.agent_id == "tls-agent");
            if seen && view.ingest.windows_applied > 0 {
                Ok(())
            } else {
                Err(format!("agents {:?}, {:?}", view.agents, view.ingest))
            }
        })
        .await;

    // The CLI reads over https with the same flags.
    let out = gpumon()
        .args(["status", "--json", "--coordinator", &url])
        .args(client_flags(&pki, &pki.agent))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "status over https: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("tls-agent"));
    let out = gpumon()
        .args(["cluster", "--coordinators", &url, "status", "--json"])
        .args(client_flags(&pki, &pki.agent))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each replica was reached by its own https address and answered.
    assert_eq!(text.matches("\"role\"").count(), 3, "{text}");

    // Strangers get no answer at all.
    let healthz = format!("{url}/healthz");
    let refused = |client: reqwest::Client, url: String| async move {
        match client.get(&url).send().await {
            Err(e) => support::cluster::chain(&e),
            Ok(resp) => panic!("{url} answered {} to a stranger", resp.status()),
        }
    };
    let why = refused(pki.client(None), healthz.clone()).await;
    assert!(!why.is_empty(), "no client certificate");
    refused(pki.client(Some(&pki.rogue)), healthz.clone()).await;
    let why = refused(
        gpumon_net::plain_client_builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        healthz.clone(),
    )
    .await;
    assert!(why.contains("UnknownIssuer"), "an untrusted server: {why}");
    let plain = healthz.replacen("https://", "http://", 1);
    match pki.client(None).get(&plain).send().await {
        Err(_) => {}
        Ok(resp) => assert!(
            !resp.status().is_success(),
            "plain HTTP on the TLS port answered {}",
            resp.status()
        ),
    }
    let out = gpumon()
        .args(["status", "--coordinator", &url])
        .output()
        .await
        .unwrap();
    assert!(
        !out.status.success(),
        "status without the CA file succeeded"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );

    // After all that, the cluster still serves its clients.
    let status = cluster.status(leader).await;
    assert_eq!(status.leader, Some(leader));
}

#[tokio::test]
async fn a_key_file_others_can_read_or_a_half_given_identity_stops_the_start() {
    let pki = tls::make();
    let open_key = pki.replica.key.with_file_name("open.key");
    std::fs::copy(&pki.replica.key, &open_key).unwrap();
    std::fs::set_permissions(
        &open_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec![
                "--tls-cert-file",
                path(&pki.replica.cert),
                "--tls-key-file",
                path(&open_key),
            ],
            path(&open_key).to_owned(),
        ),
        (
            vec!["--tls-cert-file", path(&pki.replica.cert)],
            "--tls-key-file".to_owned(),
        ),
        (
            vec!["--tls-client-ca-file", path(&pki.ca)],
            "--tls-cert-file".to_owned(),
        ),
    ] {
        let out = tokio::time::timeout(
            WITHIN,
            gpumon()
                .arg("coordinator")
                .args(["--listen", "127.0.0.1:0", "--data-dir"])
                .arg(data.path())
                .args(&args)
                .output(),
        )
        .await
        .expect("refused at once")
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&needle),
            "{args:?} should name {needle}: {err}"
        );
    }
}

/// Connections to `addr` from 127.0.0.2 (loopback, another source than the
/// clients' 127.0.0.1) that open TCP and never start their handshake.
async fn stalled(addr: &str, n: usize) -> Vec<tokio::net::TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        held.push(socket.connect(addr).await.unwrap());
    }
    held
}

/// More connections than a replica has TLS handshake places, all from one
/// address and silent, on the leader and on a follower: from another
/// address an agent's push commits, Raft carries it to the follower,
/// `gpumon status` answers and `/metrics` is scraped, each within 5 s (the
/// stalled handshakes hold their places for 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_from_one_address_delay_no_agent_peer_cli_or_scrape() {
    use gpumon_net::MAX_HANDSHAKES;
    use support::pusher::Plan;
    const PROMPT: Duration = Duration::from_secs(5);
    const STALLED: usize = MAX_HANDSHAKES + 4;
    let pki = tls::make();
    let cluster = Cluster::start_with(
        3,
        &replica_flags(&pki),
        "https",
        pki.client(Some(&pki.agent)),
    )
    .await;
    let leader = cluster.wait_leader(WITHIN).await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let before = cluster.status(leader).await.applied_index.unwrap_or(0);
    let mut held = stalled(cluster.addr(leader), STALLED).await;
    held.extend(stalled(cluster.addr(follower), STALLED).await);

    let agent = pki.client(Some(&pki.agent));
    let ingest = format!("{}/api/v1/ingest", cluster.url(leader));
    let plan = Plan::new(1, 1, 2, Duration::from_millis(100));
    for msg in [plan.hello(0), plan.batch(0, 1)] {
        let push = agent
            .post(&ingest)
            .timeout(PROMPT)
            .body(gpumon_proto::wire::encode(&msg))
            .send()
            .await
            .expect("the agent's push is answered promptly");
        assert!(push.status().is_success(), "{}", push.status());
    }
    cluster
        .wait_converged(&[leader, follower], before + 2, PROMPT)
        .await;
    let out = tokio::time::timeout(
        PROMPT,
        gpumon()
            .args(["status", "--coordinator", &cluster.url(follower)])
            .args(client_flags(&pki, &pki.agent))
            .output(),
    )
    .await
    .expect("gpumon status answers promptly")
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scrape = agent
        .get(format!("{}/metrics", cluster.url(leader)))
        .timeout(PROMPT)
        .send()
        .await
        .expect("scraped promptly");
    assert!(scrape.status().is_success());
    drop(held);
}
