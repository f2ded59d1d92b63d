//! End-to-end: `gpumon bench ingest` against a real coordinator on loopback.
//!
//! - 8 simulated agents x 4 GPUs at 20 Hz push to one coordinator: the run
//!   exits 0 with one JSON report whose throughput is positive and no more
//!   than offered, whose percentiles are ordered, with no error and no
//!   refusal; the coordinator then knows the 8 bench nodes and their GPUs;
//! - a bad flag value exits 2 naming the flag;
//! - an unreachable coordinator (a closed loopback port) exits 1 in bounded
//!   time, saying the cluster never committed.
//!
//! Every wait is bounded; processes are killed when their guards drop.

mod support;

use std::process::Stdio;
use std::time::Duration;

use gpumon_proto::api::{ClusterView, NodesView};
use serde_json::Value;
use support::{get, gpumon, leading_coordinator};

/// Runs `gpumon bench ingest ARGS` to the end, within `within`; (exit code, stdout, stderr).
async fn bench(args: &[&str], within: Duration) -> (i32, String, String) {
    let mut cmd = gpumon();
    cmd.args(["bench", "ingest"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(within, cmd.output())
        .await
        .expect("gpumon bench ends in time")
        .expect("gpumon bench runs");
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn num(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_against_one_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let (coord, url) = leading_coordinator(dir.path()).await;

    let (code, stdout, stderr) = bench(
        &[
            "--coordinators",
            &url,
            "--agents",
            "8",
            "--gpus-per-agent",
            "4",
            "--rate",
            "20",
            "--window-ms",
            "250",
            "--duration",
            "2",
            "--warmup",
            "1",
            "--json",
        ],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON object on stdout ({e}): {stdout}"));
    let offered = num(&report, "offered_samples_per_s");
    assert_eq!(offered, 8.0 * 4.0 * 20.0);
    let samples = num(&report, "samples_per_s");
    assert!(
        samples > 0.0 && samples <= offered * 1.05,
        "{samples} of {offered} offered: {report}"
    );
    assert!(num(&report, "windows_per_s") > 0.0 && num(&report, "pushes_per_s") > 0.0);
    let (p50, p99, max) = (
        num(&report, "p50_ms"),
        num(&report, "p99_ms"),
        num(&report, "max_ms"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["rejected"], 0, "{report}");
    // Every committed window reached the cluster view (well within its limits).
    let committed = num(&report, "windows_committed_total");
    assert!(committed > 0.0, "{report}");
    assert_eq!(
        num(&report, "cluster_windows_applied"),
        committed,
        "{report}"
    );
    assert_eq!(num(&report, "cluster_windows_skipped"), 0.0, "{report}");
    for (key, want) in [
        ("agents", 8.0),
        ("gpus_per_agent", 4.0),
        ("rate_hz", 20.0),
        ("window_ms", 250.0),
        ("duration_s", 2.0),
    ] {
        assert_eq!(num(&report, key), want, "{key} in {report}");
    }
    assert!(
        stderr.contains("bench"),
        "progress lines on stderr: {stderr}"
    );

    let nodes: NodesView = get(&format!("{url}/api/v1/nodes")).await.unwrap();
    let mut bench_nodes: Vec<&str> = nodes
        .nodes
        .iter()
        .filter(|n| n.node.starts_with("bench-node-"))
        .map(|n| n.node.as_str())
        .collect();
    bench_nodes.sort_unstable();
    let want: Vec<String> = (0..8).map(|i| format!("bench-node-{i}")).collect();
    assert_eq!(bench_nodes, want, "the coordinator knows every bench node");
    for n in nodes
        .nodes
        .iter()
        .filter(|n| n.node.starts_with("bench-node-"))
    {
        assert_eq!(n.gpus.len(), 4, "{}: {:?}", n.node, n.gpus);
        assert!(n
            .gpus
            .iter()
            .all(|g| g.used_bytes > 0 && !g.processes.is_empty()));
    }
    let cluster: ClusterView = get(&format!("{url}/api/v1/cluster")).await.unwrap();
    assert_eq!(
        cluster.ingest.windows_skipped, 0,
        "every bench window is valid"
    );
    coord.kill().await;
}

#[tokio::test]
async fn a_bad_flag_value_is_a_usage_error_naming_it() {
    let (code, stdout, stderr) = bench(
        &["--coordinators", "http://127.0.0.1:7070", "--agents", "0"],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(code, 2, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("--agents"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}

#[tokio::test]
async fn an_unreachable_cluster_fails_in_bounded_time() {
    // A port that was free a moment ago: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = bench(
        &[
            "--coordinators",
            &url,
            "--agents",
            "4",
            "--gpus-per-agent",
            "2",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--json",
        ],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("never committed"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("the report still prints");
    assert!(report["errors"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["samples_per_s"], 0.0);
}

/// A secured replica, as operators deploy one: TLS and an agent token. The
/// bench with the token and the CA commits every push; without the token
/// every push is refused (exit 1, the cluster never committed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_against_a_secured_coordinator_with_a_token_and_tls() {
    use std::os::unix::fs::PermissionsExt;
    use support::cluster::Cluster;
    let pki = support::tls::make();
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.display().to_string()
    };
    let tokens = secret("agent-tokens", "bench-agent-token-0001\n");
    let token = secret("agent-token", "bench-agent-token-0001\n");
    let (cert, key, ca) = (
        pki.replica.cert.display().to_string(),
        pki.replica.key.display().to_string(),
        pki.ca.display().to_string(),
    );
    let flags = [
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--agent-token-file",
        &tokens,
    ];
    let cluster = Cluster::start_with(1, &flags, "https", pki.client(None)).await;
    let id = cluster.wait_leader(Duration::from_secs(30)).await;
    let url = cluster.url(id);
    assert!(url.starts_with("https://"), "{url}");
    let run = |with_token: bool| {
        let mut args = vec![
            "--coordinators",
            &url,
            "--agents",
            "2",
            "--gpus-per-agent",
            "2",
            "--rate",
            "10",
            "--window-ms",
            "250",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--json",
            "--tls-ca-file",
            &ca,
        ];
        if with_token {
            args.extend(["--agent-token-file", &token]);
        }
        args.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let args = run(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = bench(&args, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(num(&report, "samples_per_s") > 0.0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["rejected"], 0, "{report}");

    let args = run(false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = bench(&args, Duration::from_secs(30)).await;
    assert_eq!(code, 1, "refused without its token: {stdout}\n{stderr}");
}
