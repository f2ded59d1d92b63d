//! The agent's node-level `/metrics` with real processes on loopback: a
//! `gpumon agent --source sim:steady` pushing to a real coordinator serves
//! its GPUs, its processes with job and rank, and its push counters; the
//! GPUs agree with the coordinator's view; every series is named
//! `gpumon_agent_*`; both formats pass `promtool check metrics`; a second agent whose metrics port is taken
//! warns and keeps monitoring.
//!
//! Needs `/usr/bin/promtool` (Debian package `prometheus`).

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpumon_proto::api::{ClusterView, NodesView};
use support::{get, gpumon, leading_coordinator, wait_for, Proc};

const WITHIN: Duration = Duration::from_secs(30);
const GPUS: usize = 4;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn agent(url: &str, node: &str, metrics: &str) -> Proc {
    let mut cmd = gpumon();
    cmd.args([
        "agent",
        "--coordinators",
        url,
        "--source",
        "sim:steady",
        "--sample-interval-ms",
        "100",
        "--window-ms",
        "500",
        "--node-name",
        node,
        "--metrics-listen",
        metrics,
    ]);
    Proc::spawn(cmd)
}

/// `(name, labels, value)` of each sample line.
fn samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("`series value`");
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            (
                name.to_owned(),
                labels.trim_end_matches('}').to_owned(),
                value.parse().unwrap_or_else(|_| panic!("value in {l:?}")),
            )
        })
        .collect()
}

/// Values of `name` whose label text contains every `with` (`k="v"`).
fn values(all: &[(String, String, f64)], name: &str, with: &[&str]) -> Vec<f64> {
    all.iter()
        .filter(|(n, l, _)| n == name && with.iter().all(|w| l.contains(w)))
        .map(|(_, _, v)| *v)
        .collect()
}

async fn scrape(addr: &str, accept: &str) -> Result<(String, String), String> {
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .get(format!("http://{addr}/metrics"))
        .header("accept", accept)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    Ok((ct, resp.text().await.map_err(|e| e.to_string())?))
}

#[tokio::test]
async fn an_agent_serves_its_node_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (coordinator, url) = leading_coordinator(dir.path()).await;
    let addr = format!("127.0.0.1:{}", free_port());
    let first = agent(&url, "node-x", &addr);

    // Windows built, pushed and committed: the counters say so.
    let text = wait_for(WITHIN, "an acknowledged push in /metrics", || async {
        let (ct, text) = scrape(&addr, "application/openmetrics-text").await?;
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        let all = samples(&text);
        let acked = values(&all, "gpumon_agent_pushes_total", &["outcome=\"acked\""]);
        let gpus = values(
            &all,
            "gpumon_agent_gpu_memory_used_bytes",
            &["node=\"node-x\""],
        );
        if acked.first().copied().unwrap_or(0.0) >= 1.0 && gpus.len() == GPUS {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let all = samples(&text);
    assert!(values(&all, "gpumon_agent_gpu_samples_total", &[])[0] >= GPUS as f64);
    assert!(values(&all, "gpumon_agent_windows_built_total", &[])[0] >= GPUS as f64);
    assert!(values(&all, "gpumon_agent_last_push_timestamp_seconds", &[])[0] > 1.6e9);
    assert_eq!(
        values(&all, "gpumon_agent_build_info", &["node=\"node-x\""]).len(),
        1
    );
    // The simulator reports clocks and power, as NVML does: in hertz and watts.
    let clocks = values(&all, "gpumon_agent_gpu_sm_clock_hertz", &[]);
    assert_eq!(clocks.len(), GPUS, "{text}");
    assert!(
        clocks.iter().all(|&hz| (1e8..1e10).contains(&hz)),
        "{clocks:?}"
    );
    let power = values(&all, "gpumon_agent_gpu_power_watts", &[]);
    assert_eq!(power.len(), GPUS, "{text}");
    assert!(
        power.iter().all(|&w| (1.0..2000.0).contains(&w)),
        "{power:?}"
    );
    for rank in 0..GPUS {
        let used = values(
            &all,
            "gpumon_agent_process_memory_used_bytes",
            &["job=\"sim-job\"", &format!("rank=\"{rank}\"")],
        );
        assert_eq!(used.len(), 1, "rank {rank} in {text}");
        assert!(used[0] > 0.0);
    }

    // The GPUs are the ones the coordinator knows, with the same capacity.
    let nodes: NodesView = get(&format!("{url}/api/v1/nodes")).await.unwrap();
    let node = nodes.nodes.iter().find(|n| n.node == "node-x").unwrap();
    assert_eq!(node.gpus.len(), GPUS);
    for g in &node.gpus {
        let total = values(
            &all,
            "gpumon_agent_gpu_memory_total_bytes",
            &[&format!("uuid=\"{}\"", g.uuid)],
        );
        assert_eq!(total, vec![g.total_bytes as f64], "{}", g.uuid);
    }

    // Every agent series is named apart from the coordinator's.
    let stray: Vec<_> = all
        .iter()
        .filter(|(n, _, _)| !n.starts_with("gpumon_agent_"))
        .collect();
    assert!(stray.is_empty(), "not gpumon_agent_*: {stray:?}");

    // What promtool and curl get by default, the classic text, passes
    // promtool's lint (which reads only that format).
    let (ct, classic) = scrape(&addr, "text/plain").await.unwrap();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let (ct, default) = scrape(&addr, "*/*").await.unwrap();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    for (format, body) in [("classic", &classic), ("default", &default)] {
        let mut promtool = Command::new("/usr/bin/promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run /usr/bin/promtool ({e}); install it with: apt-get install -y prometheus")
            });
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        let out = promtool.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics ({format}): {}{}\n{body}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A second agent on the same metrics port warns and still reports.
    let mut second = agent(&url, "node-y", &addr);
    wait_for(WITHIN, "the second agent in the cluster view", || async {
        let c: ClusterView = get(&format!("{url}/api/v1/cluster"))
            .await
            .map_err(|e| e.to_string())?;
        let seen = c
            .agents
            .iter()
            .any(|a| a.node == "node-y" && a.last_seq > 0);
        seen.then_some(()).ok_or_else(|| format!("{:?}", c.agents))
    })
    .await;
    assert!(
        second.child.try_wait().unwrap().is_none(),
        "the second agent is still running"
    );
    second.kill().await;
    first.kill().await;
    coordinator.kill().await;
}
