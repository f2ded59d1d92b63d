//! End-to-end: real `gpumon` processes on loopback.
//!
//! - a coordinator and two simulated agents (2 nodes x 4 GPUs): the API shows
//!   every rank with plausible memory; `gpumon status` shows them too; after
//!   the coordinator is killed with SIGKILL and restarted on the same data
//!   directory, it shows the same state (redb log + snapshot);
//! - `gpumon demo` prints its URL first and serves every simulated rank; with
//!   `--chaos` it stops the leader, prints the failover, brings the old
//!   leader back, and windows keep being committed on every replica;
//! - bad usage and bad configuration exit 2 with a reason; a wrong cluster
//!   definition is refused before anything is written; a damaged Raft log
//!   stops its replica with the file named;
//! - a replica started with `--join` is added by `gpumon cluster add`, catches
//!   up, shows in `gpumon cluster status`, and is removed again;
//! - `gpumon record` writes a gzip trace from a live coordinator and agent
//!   that `gpumon replay` reads.
//!
//! Every wait is bounded; processes are killed when their guards drop.

mod support;

use std::time::Duration;

use gpumon_proto::api::{ClusterView, JobDetail, JobWithAnalysis, JobsView};
use support::{coordinator_cmd, get, gpumon, leading_coordinator, wait_for, Proc};

const GIB: u64 = 1 << 30;
const RANKS: u32 = 8;

fn agent(url: &str, node: u32) -> Proc {
    let mut cmd = gpumon();
    cmd.args([
        "agent",
        "--coordinators",
        url,
        "--source",
        "sim:mixed",
        "--node-name",
    ])
    .arg(format!("node-{node}"))
    .args([
        "--sim-nodes",
        "2",
        "--sim-gpus",
        "4",
        "--sim-job",
        "e2e-job",
        "--sim-node-index",
    ])
    .arg(node.to_string())
    .args(["--sample-interval-ms", "100", "--window-ms", "300"]);
    Proc::spawn(cmd)
}

fn coordinator(data_dir: &std::path::Path) -> Proc {
    let mut cmd = coordinator_cmd(data_dir);
    cmd.args(["--snapshot-every-entries", "5"]);
    Proc::spawn(cmd)
}

/// The job view once every rank has reported at least `min_history` windows.
async fn all_ranks(url: &str, min_history: usize) -> JobDetail {
    wait_for(
        Duration::from_secs(60),
        "every simulated rank in the API",
        || async {
            let detail: JobDetail = get(&format!("{url}/api/v1/jobs/e2e-job"))
                .await
                .map_err(|e| e.to_string())?;
            let ready = detail.ranks.len() == RANKS as usize
                && detail.ranks.iter().all(|r| r.history.len() >= min_history);
            if ready {
                Ok(detail)
            } else {
                Err(format!("{} ranks", detail.ranks.len()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_to_api_and_back_after_a_coordinator_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut coord = coordinator(dir.path());
    let url = coord.url_line().await;
    let agents = [agent(&url, 0), agent(&url, 1)];

    let detail = all_ranks(&url, 3).await;
    assert_eq!(detail.world_size, RANKS);
    for r in &detail.ranks {
        let rank = r.view.rank;
        assert_eq!(
            r.view.node,
            format!("node-{}", rank / 4),
            "rank {rank} on the node that hosts it"
        );
        assert_eq!(r.view.gpu, rank % 4, "rank {rank} on its own GPU");
        assert_eq!(r.view.total_bytes, 80 * GIB);
        assert!(
            (10 * GIB..r.view.total_bytes).contains(&r.view.used_bytes),
            "rank {rank} uses {} bytes",
            r.view.used_bytes
        );
        assert!(r.view.peak_used_bytes >= r.view.used_bytes);
        assert!(r.view.ended_ms.is_none());
        assert!(
            r.history.windows(2).all(|w| w[0].t_ms < w[1].t_ms),
            "history in time order"
        );
    }
    // The imbalanced rank 0 of the mixed scenario shows in the numbers.
    let others = detail.ranks[1..]
        .iter()
        .map(|r| r.view.peak_used_bytes)
        .max()
        .unwrap();
    assert!(
        detail.ranks[0].view.peak_used_bytes > others + 4 * GIB,
        "rank 0 is the heavy one"
    );

    let cluster: ClusterView = get(&format!("{url}/api/v1/cluster")).await.unwrap();
    assert_eq!(
        (
            cluster.agents.len(),
            cluster.nodes,
            cluster.gpus,
            cluster.live_ranks
        ),
        (2, 2, 8, 8)
    );

    // `gpumon status` shows every rank, live.
    let out = gpumon()
        .args(["status", "--coordinator", &url])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("e2e-job") && l.ends_with("live"))
            .count(),
        8,
        "{text}"
    );
    let out = gpumon()
        .args(["status", "--coordinator", &url, "--json"])
        .output()
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["jobs"]["jobs"][0]["ranks"].as_array().unwrap().len(),
        8
    );
    let analysis = &json["analysis"]["e2e-job"]["ranks"];
    assert_eq!(analysis.as_array().unwrap().len(), 8, "{json}");
    assert!(analysis[0]["risk"].is_string(), "{json}");
    assert!(json["alerts"].is_array(), "{json}");

    // `gpumon top --once` draws every rank with a memory bar and its share.
    let out = gpumon()
        .args(["top", "--coordinator", &url, "--once"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\x1b'), "no colors into a pipe: {text}");
    assert!(text.contains("JOB e2e-job  8 ranks  live"), "{text}");
    for rank in 0..RANKS {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&rank.to_string()) && l.contains('['))
            .unwrap_or_else(|| panic!("no row for rank {rank}: {text}"));
        let filled = row.chars().filter(|&c| c == '█').count();
        let pct: f64 = row
            .split_whitespace()
            .find_map(|w| w.strip_suffix('%')?.parse().ok())
            .unwrap();
        assert!(
            (filled as f64 - pct / 5.0).abs() <= 1.0,
            "bar matches {pct}%: {row}"
        );
    }
    let out = gpumon()
        .args(["top", "--coordinator", "localhost:1", "--once"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad URL is a usage error: {out:?}"
    );

    // Stop the agents, let the state settle, then crash the coordinator.
    for a in agents {
        a.kill().await;
    }
    let mut before: JobsView = get(&format!("{url}/api/v1/jobs")).await.unwrap();
    before = wait_for(Duration::from_secs(10), "the state to settle", || {
        let url = url.clone();
        let prev = before.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now: JobsView = get(&format!("{url}/api/v1/jobs"))
                .await
                .map_err(|e| e.to_string())?;
            if now == prev {
                Ok(now)
            } else {
                Err("still changing".into())
            }
        }
    })
    .await;
    let _ = coord.child.start_kill();
    let _ = coord.child.wait().await;

    let mut coord = coordinator(dir.path());
    let url = coord.url_line().await;
    let after = wait_for(
        Duration::from_secs(20),
        "the restarted coordinator to replay its log",
        || async {
            let now: JobsView = get(&format!("{url}/api/v1/jobs"))
                .await
                .map_err(|e| e.to_string())?;
            if now == before {
                Ok(now)
            } else {
                Err(format!("{} jobs", now.jobs.len()))
            }
        },
    )
    .await;
    assert_eq!(after.jobs[0].ranks.len(), 8);
    assert!(
        dir.path().join("snapshot.bin").exists(),
        "snapshots were taken every 5 entries"
    );
    coord.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_prints_its_url_first_and_serves_every_rank() {
    let mut cmd = gpumon();
    cmd.args(["demo", "--duration", "30", "--listen", "127.0.0.1:0"]);
    let mut demo = Proc::spawn(cmd);
    let first = demo.next_line(Duration::from_secs(20)).await;
    assert!(
        first.contains("http://127.0.0.1:"),
        "first line names the API: {first:?}"
    );
    let url = first[first.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let jobs: JobsView = wait_for(Duration::from_secs(20), "the demo's 8 ranks", || async {
        let jobs: JobsView = get(&format!("{url}/api/v1/jobs"))
            .await
            .map_err(|e| e.to_string())?;
        if jobs.jobs.first().is_some_and(|j| j.ranks.len() == 8) {
            Ok(jobs)
        } else {
            Err(format!("{jobs:?}"))
        }
    })
    .await;
    assert_eq!(jobs.jobs[0].job, "demo-job");
    // Each simulated process holds a CUDA context of 500 to 514 MiB beside
    // its allocator's reserved: the API shows it as memory outside the
    // allocator (while the allocator grows at start, the two figures are
    // read at different instants; they agree once it settles).
    const MIB: u64 = 1 << 20;
    wait_for(
        Duration::from_secs(25),
        "every rank's memory outside the allocator",
        || async {
            let job: JobWithAnalysis = get(&format!("{url}/api/v1/jobs/demo-job"))
                .await
                .map_err(|e| e.to_string())?;
            let outside: Vec<u64> = job
                .analysis
                .iter()
                .flat_map(|a| &a.ranks)
                .filter_map(|r| r.outside_allocator_bytes)
                .collect();
            let context = 500 * MIB..=514 * MIB;
            if outside.len() == 8 && outside.iter().all(|b| context.contains(b)) {
                Ok(())
            } else {
                Err(format!("{outside:?}"))
            }
        },
    )
    .await;
    // It prints a line for each rank it sees.
    let mut rank_lines = 0;
    while rank_lines < 8 {
        let line = demo.next_line(Duration::from_secs(10)).await;
        rank_lines += usize::from(line.contains("job demo-job rank"));
    }
    // Ctrl-C stops it cleanly and it removes its data directory.
    let data_dir = std::env::temp_dir().join(format!("gpumon-demo-{}", demo.child.id().unwrap()));
    assert!(data_dir.exists());
    let status = demo.interrupt(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");
    assert!(!data_dir.exists(), "the demo leaves no data behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_chaos_fails_over_while_data_keeps_flowing() {
    let mut cmd = gpumon();
    // Stopped replicas make peers log connection errors; they are expected here.
    cmd.env("GPUMON_LOG", "warn,openraft=off,gpumon_agent::uplink=error");
    cmd.args([
        "demo",
        "--chaos",
        "--chaos-every",
        "3",
        "--duration",
        "40",
        "--listen",
        "127.0.0.1:0",
    ]);
    let mut demo = Proc::spawn(cmd);
    let first = demo.next_line(Duration::from_secs(20)).await;
    let urls: Vec<String> = first
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter(|w| w.starts_with("http://"))
        .skip(1)
        .map(str::to_owned)
        .collect();
    assert_eq!(
        urls.len(),
        3,
        "the first line lists three replicas: {first:?}"
    );
    // The chaos loop stops the leader, a new one is elected, the old one returns.
    let (mut stopped, mut failover, mut caught_up) = (None, None, false);
    while !caught_up {
        let line = demo.next_line(Duration::from_secs(20)).await;
        if let Some(rest) = line.split("chaos: stopping the leader, replica ").nth(1) {
            stopped = Some(rest.trim().to_owned());
        }
        if line.contains("failover: replica ") {
            assert!(stopped.is_some(), "a failover follows a stop: {line}");
            failover = Some(line.clone());
        }
        caught_up = failover.is_some() && line.contains("caught up");
    }
    let failover = failover.unwrap();
    let new_leader = failover
        .split("failover: replica ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_owned();
    assert_ne!(Some(new_leader), stopped, "{failover}");
    // Windows keep being committed after the failover, on every replica.
    let windows = |c: &ClusterView| c.ingest.windows_applied;
    // Chaos goes on meanwhile: whichever replica answers first gives the count.
    let before = wait_for(Duration::from_secs(20), "a replica answering", || async {
        for url in &urls {
            if let Ok(c) = get::<ClusterView>(&format!("{url}/api/v1/cluster")).await {
                return Ok(windows(&c));
            }
        }
        Err("no replica answers".to_owned())
    })
    .await;
    for url in &urls {
        wait_for(
            Duration::from_secs(20),
            "windows committed after the failover",
            || async {
                match get::<ClusterView>(&format!("{url}/api/v1/cluster")).await {
                    Ok(c) if windows(&c) > before => Ok(()),
                    Ok(c) => Err(format!("{url}: still {} windows", windows(&c))),
                    Err(e) => Err(format!("{url}: {e}")),
                }
            },
        )
        .await;
    }
    let status = demo.interrupt(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn demo_stops_by_itself_after_its_duration() {
    let mut cmd = gpumon();
    cmd.args(["demo", "--duration", "2", "--listen", "127.0.0.1:0"]);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("demo ends")
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().next().unwrap().contains("http://"), "{text}");
    assert!(text.contains("stopping"), "{text}");
}

#[tokio::test]
async fn bad_usage_exits_2_with_a_reason() {
    let out = gpumon()
        .args(["agent", "--source", "cuda"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown source \"cuda\""));

    let out = gpumon()
        .args(["agent", "--source", "sim", "--window-ms", "100"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("window 100 ms"));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gpumon.toml");
    std::fs::write(
        &config,
        "[coordinator]\nlisten = \"127.0.0.1:0\"\nhistroy_windows = 5\n",
    )
    .unwrap();
    let out = gpumon()
        .arg("--config")
        .arg(&config)
        .args(["coordinator"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("histroy_windows") && err.contains("gpumon.toml"),
        "{err}"
    );

    let out = gpumon()
        .args(["coordinator", "--id", "0", "--listen", "127.0.0.1:0"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn a_wrong_cluster_definition_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let peers = "1=127.0.0.1:17801,2=127.0.0.1:17802,3=127.0.0.1:17803";
    for (args, says) in [
        (
            vec!["--id", "4", "--peers", peers],
            "--id 4 is not in --peers",
        ),
        (
            vec!["--id", "1", "--peers", "1=127.0.0.1,2=b:1"],
            "no :PORT",
        ),
        (
            vec!["--id", "1", "--peers", "1=127.0.0.1:1,1=b:2"],
            "listed twice",
        ),
        (
            vec!["--id", "1", "--peers", peers, "--listen", "127.0.0.1:17999"],
            "different ports",
        ),
        (
            vec!["--id", "1", "--peers", peers, "--join"],
            "cannot be used with",
        ),
    ] {
        let data = dir.path().join("data");
        let out = gpumon()
            .arg("coordinator")
            .args(&args)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!data.exists(), "{args:?} wrote {data:?}");
    }
}

#[tokio::test]
async fn a_damaged_raft_log_stops_the_replica_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _) = leading_coordinator(dir.path()).await;
    c.kill().await;
    let log = dir.path().join("raft-log.redb");
    let len = std::fs::metadata(&log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let out = gpumon()
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // redb's reason depends on where the cut falls; the file is always named.
    assert!(
        err.contains("cannot open Raft log") && err.contains("raft-log.redb"),
        "{err}"
    );
}

#[tokio::test]
async fn configuration_merges_file_then_environment_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gpumon.toml");
    std::fs::write(&config, "[coordinator]\nid = 3\nlisten = \"127.0.0.1:1\"\n").unwrap();
    let data = dir.path().join("data");
    let mut cmd = gpumon();
    cmd.arg("--config")
        .arg(&config)
        .arg("coordinator")
        .env("GPUMON_LISTEN", "127.0.0.1:0")
        .env("GPUMON_DATA_DIR", &data);
    let mut coord = Proc::spawn(cmd);
    let line = coord.next_line(Duration::from_secs(20)).await;
    // id from the file, listen from the environment (over the file's port 1), data dir from the environment.
    assert!(
        line.starts_with("gpumon coordinator 3 serving http://127.0.0.1:"),
        "{line}"
    );
    assert!(data.join("raft-log.redb").exists());
    coord.kill().await;
}

#[tokio::test]
async fn an_agent_without_gpus_still_registers() {
    let dir = tempfile::tempdir().unwrap();
    let mut coord = coordinator(dir.path());
    let url = coord.url_line().await;
    let mut cmd = gpumon();
    cmd.args([
        "agent",
        "--coordinators",
        &url,
        "--source",
        "none",
        "--node-name",
        "cpu-node",
    ]);
    let agent = Proc::spawn(cmd);
    let cluster: ClusterView = wait_for(Duration::from_secs(20), "the agent's hello", || async {
        let c: ClusterView = get(&format!("{url}/api/v1/cluster"))
            .await
            .map_err(|e| e.to_string())?;
        if c.agents.len() == 1 {
            Ok(c)
        } else {
            Err(format!("{c:?}"))
        }
    })
    .await;
    assert_eq!(cluster.agents[0].node, "cpu-node");
    assert_eq!(cluster.agents[0].source, "none");
    assert_eq!(cluster.gpus, 0);
    agent.kill().await;
    coord.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_writes_a_trace_from_a_live_cluster_that_replays() {
    use gpumon_trace::RecordRef;

    let dir = tempfile::tempdir().unwrap();
    let mut coord = coordinator(&dir.path().join("data"));
    let url = coord.url_line().await;
    let mut cmd = gpumon();
    cmd.args(["agent", "--coordinators", &url, "--source", "sim:leak"])
        .args([
            "--node-name",
            "rec-node",
            "--sim-gpus",
            "2",
            "--sim-job",
            "rec-job",
        ])
        .args(["--sample-interval-ms", "100", "--window-ms", "300"]);
    let agent = Proc::spawn(cmd);
    // Record once windows flow, so that the recording is not empty.
    wait_for(Duration::from_secs(30), "the simulated job", || async {
        let jobs: JobsView = get(&format!("{url}/api/v1/jobs"))
            .await
            .map_err(|e| e.to_string())?;
        match jobs.jobs.iter().find(|j| j.job == "rec-job") {
            Some(j) if j.ranks.len() == 2 => Ok(()),
            _ => Err(format!("{jobs:?}")),
        }
    })
    .await;

    let trace = dir.path().join("t.jsonl.gz");
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        gpumon()
            .args([
                "record",
                "--coordinator",
                &url,
                "--duration",
                "3",
                "--output",
            ])
            .arg(&trace)
            .output(),
    )
    .await
    .expect("record stops after its duration")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.contains("recorded ") && stderr.contains("t.jsonl.gz"),
        "{stderr}"
    );
    assert!(!dir.path().join("t.jsonl.gz.partial").exists());

    let mut reader = gpumon_trace::open(&trace).unwrap();
    assert!(reader.source().starts_with("gpumon record http://"));
    let (mut ranks, mut gpus, mut ts) = (Vec::new(), 0, Vec::new());
    while let Some(record) = reader.next_ref().unwrap() {
        match record {
            RecordRef::Rank(r) => {
                assert_eq!((r.job.as_ref(), r.node.as_ref()), ("rec-job", "rec-node"));
                ranks.push(r.rank);
                ts.push(r.t);
            }
            RecordRef::Gpu(g) => {
                assert_eq!(g.node, "rec-node");
                assert!(g.used > 0 && g.used <= g.total, "{g:?}");
                gpus += 1;
                ts.push(g.t);
            }
            other => panic!("only rank and gpu records are recorded: {other:?}"),
        }
    }
    assert_eq!(reader.stats().invalid, 0, "{:?}", reader.stats());
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(ranks, [0, 1], "both ranks are announced");
    // 3 s of 300 ms windows of 2 GPUs.
    assert!(gpus >= 6, "{gpus} gpu records");
    assert_eq!(ts[0], 0.0, "time starts at the first record");
    let mut latest = f64::MIN;
    for &t in &ts {
        assert!(
            t > latest - 2.0,
            "t {t} after {latest}: out of order beyond skew"
        );
        latest = latest.max(t);
    }
    assert!((0.5..10.0).contains(&latest), "{latest} s recorded in 3 s");

    let report_path = dir.path().join("r.json");
    let out = gpumon()
        .arg("replay")
        .arg(&trace)
        .arg("--output")
        .arg(&report_path)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    assert!(report["alerts"].is_array(), "{report}");
    assert!(report["devices"].is_object(), "{report}");

    // Clear failures: an unreachable coordinator (1), bad flags (2); no file either way.
    let failed = dir.path().join("failed.jsonl");
    let out = gpumon()
        .args(["record", "--coordinator", "http://127.0.0.1:1", "--output"])
        .arg(&failed)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://127.0.0.1:1"));
    let out = gpumon()
        .args([
            "record",
            "--coordinator",
            &url,
            "--duration",
            "0",
            "--output",
        ])
        .arg(&failed)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration"));
    assert!(!failed.exists());

    agent.kill().await;
    coord.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_replica_is_added_caught_up_and_removed_with_gpumon_cluster() {
    use gpumon_proto::api::RaftStatus;
    let dir = tempfile::tempdir().unwrap();
    let (_first, url1) = leading_coordinator(&dir.path().join("1")).await;
    // Something to replicate before the new replica arrives.
    let _agent = agent(&url1, 0);
    wait_for(Duration::from_secs(20), "windows on replica 1", || async {
        match get::<ClusterView>(&format!("{url1}/api/v1/cluster")).await {
            Ok(c) if c.ingest.windows_applied > 0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let addr2 = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut cmd = gpumon();
    cmd.args([
        "coordinator",
        "--id",
        "2",
        "--join",
        "--listen",
        &addr2,
        "--data-dir",
    ])
    .arg(dir.path().join("2"));
    let mut second = Proc::spawn(cmd);
    let url2 = second.url_line().await;

    let cluster = |args: &[&str]| {
        let mut cmd = gpumon();
        cmd.arg("cluster")
            .args(args)
            .arg("--coordinators")
            .arg(format!("{url2},{url1}"));
        cmd.output()
    };
    // Asked first through the replica that is not a member yet: it knows no
    // leader, so the command moves on to the next URL.
    let out = cluster(&["add", &format!("2={addr2}")]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("added replica 2") && text.contains(&format!("2={addr2}")),
        "{text}"
    );

    // Replica 2 votes, has the same data, and `cluster status` shows both.
    let s2: RaftStatus = wait_for(Duration::from_secs(20), "replica 2 caught up", || async {
        let s1: RaftStatus = get(&format!("{url1}/api/v1/raft"))
            .await
            .map_err(|e| e.to_string())?;
        let s2: RaftStatus = get(&format!("{url2}/api/v1/raft"))
            .await
            .map_err(|e| e.to_string())?;
        if s2.voters.len() == 2 && s2.applied_index >= s1.applied_index && s2.leader == Some(1) {
            Ok(s2)
        } else {
            Err(format!("{s1:?} / {s2:?}"))
        }
    })
    .await;
    assert_eq!(s2.role, "follower");
    let out = cluster(&["status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("127.0.0.1:")).count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("leader") && text.contains("follower"),
        "{text}"
    );

    let out = cluster(&["remove", "2"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s1: RaftStatus = get(&format!("{url1}/api/v1/raft")).await.unwrap();
    assert_eq!(s1.voters.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1]);
    assert!(s1.learners.is_empty());
    second.kill().await;
}
