//! The hook end to end, with real processes on loopback: a coordinator, an
//! agent serving the hook on a Unix socket and sampling no GPU itself
//! (`--source none`), and four Python training processes started through
//! `gpumon run` with torchrun's environment, one of them leaking.
//!
//! CI has neither torch nor a GPU, so the processes use
//! `gpumon.testing.FakeAllocator`, which behaves like PyTorch's caching
//! allocator (segments, cached free blocks, `empty_cache`), and report the
//! device memory the way `torch.cuda.mem_get_info()` would. The test checks
//! the OOM forecast, that `release_cache` reaches exactly the ranks holding
//! reclaimable cache and runs at a step boundary, the acks and freed bytes
//! in the API, an admin's action by hand, and that an action for a rank that
//! has gone away expires. A second test runs the same path against real
//! torch on an NVIDIA GPU, and says it is skipped where there is none. A
//! third checks that the cluster's alerts reach the script's
//! `gpumon.on_alert`: the memory level of the rank's (fake) GPU, and the
//! level of this machine's real host RAM, set low enough to fire.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::{get, gpumon, wait_for, Proc};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const TOKEN: &str = "hook-e2e-admin-token-0123456789";
const JOB: &str = "fake-job-1";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A short-window engine and an eager planner, so a minute of training
/// shows a forecast and releases.
const CONFIG: &str = r#"
[engine]
window_s = 1.0
warmup_s = 2.0

[actions]
horizon_s = 3600.0
min_reclaimable_bytes = 268435456
interval_ms = 200
ttl_s = 60.0
"#;

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    url: String,
    socket: String,
    _coordinator: Proc,
    _agent: Proc,
}

/// A coordinator (with `config` when given) and an agent sampling `source`
/// that serves the hook on a Unix socket in a fresh directory.
async fn setup(config: Option<&str>, source: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let mut cmd = gpumon();
    if let Some(text) = config {
        let path = dir.join("gpumon.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(path);
    }
    cmd.args(["coordinator", "--id", "1", "--listen", "127.0.0.1:0"])
        .args(["--admin-token", TOKEN, "--data-dir"])
        .arg(dir.join("data"));
    let mut coordinator = Proc::spawn(cmd);
    let url = coordinator.url_line().await;
    let socket = format!("unix:{}", dir.join("hook.sock").display());
    let mut cmd = gpumon();
    cmd.args(["agent", "--source", source, "--node-name", "node-h"])
        .args(["--coordinators", &url, "--hook-listen", &socket])
        .args(["--sample-interval-ms", "100", "--window-ms", "500"]);
    let agent = Proc::spawn(cmd);
    wait_for(Duration::from_secs(20), "the hook socket", || async {
        match std::os::unix::net::UnixStream::connect(dir.join("hook.sock")) {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    Setup {
        _dir: tmp,
        dir,
        url,
        socket,
        _coordinator: coordinator,
        _agent: agent,
    }
}

/// `gpumon run --agent SOCKET -- python3 SCRIPT` as rank `rank` of a
/// 4-rank torchrun job.
fn rank_process(s: &Setup, rank: u32, script: &str, env: &[(&str, String)]) -> Proc {
    let mut cmd = gpumon();
    cmd.args(["run", "--agent", &s.socket, "--", "python3"])
        .arg(repo().join(script))
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", "4")
        .env("TORCHELASTIC_RUN_ID", JOB)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29500")
        .env("XDG_CACHE_HOME", s.dir.join("cache"))
        .env_remove("PYTHONPATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc::spawn(cmd)
}

async fn actions(url: &str) -> Result<Vec<Value>, String> {
    let body: Value = get(&format!("{url}/api/v1/actions"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(body["actions"].as_array().cloned().unwrap_or_default())
}

async fn post_action(url: &str, ranks: &[u32]) -> (u16, Value) {
    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/actions"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"kind": "release_cache", "job": JOB, "ranks": ranks}))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The engine's host RAM levels set so low that this machine's RAM is past
/// the warning level (and, short of a full machine, below the critical).
const LOW_HOST_LEVELS: &str = r#"
[engine.host_memory_levels]
warning_pct = 1.0
critical_pct = 99.9
clear_margin_pct = 0.5
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_s_alerts_about_a_rank_and_its_host_reach_on_alert() {
    assert!(python_available(), "python3 is needed");
    let s = setup(Some(LOW_HOST_LEVELS), "none").await;
    let alerts_file = s.dir.join("alerts-0.jsonl");
    // 6.5 of the fake device's 8 GiB are the model, 512 MiB the CUDA
    // context: about 89 %, past the GPU's warning level of 80 %.
    let env = [
        ("FAKE_TOTAL_BYTES", (8 * GIB).to_string()),
        ("FAKE_BASE_BYTES", (6 * GIB + GIB / 2).to_string()),
        ("FAKE_DURATION_S", "60".to_string()),
        ("FAKE_ALERTS_FILE", alerts_file.display().to_string()),
    ];
    let mut rank = rank_process(&s, 0, "tests/python/fake_train.py", &env);
    let heard = wait_for(
        Duration::from_secs(60),
        "the rank's and the host's memory levels heard by on_alert",
        || async {
            let heard = events(&alerts_file);
            let level = |rank: Option<u64>| {
                heard.iter().any(|a| {
                    a["kind"] == "memory_level" && a["job"] == JOB && a["rank"].as_u64() == rank
                })
            };
            if level(Some(0)) && level(None) {
                Ok(heard)
            } else {
                Err(format!("{heard:?}"))
            }
        },
    )
    .await;
    let gpu = heard.iter().find(|a| a["rank"] == 0).unwrap();
    assert!(
        matches!(gpu["severity"].as_str(), Some("warning" | "critical")),
        "{gpu}"
    );
    assert!(
        gpu["message"].as_str().unwrap().contains("GPU 0 on node-h"),
        "{gpu}"
    );
    let host = heard.iter().find(|a| a["rank"].is_null()).unwrap();
    assert_eq!(host["severity"], "warning", "{host}");
    assert!(
        host["message"]
            .as_str()
            .unwrap()
            .starts_with("host RAM on node-h is"),
        "{host}"
    );
    // The same alerts, as the API lists them: one episode each.
    let alerts: Value = get(&format!("{}/api/v1/alerts?active=true", s.url))
        .await
        .unwrap();
    let levels: Vec<&Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "memory_level")
        .collect();
    assert!(
        levels
            .iter()
            .any(|a| a["node"] == "node-h" && a["job"].is_null()),
        "{levels:?}"
    );
    assert!(levels.iter().any(|a| a["rank"] == 0), "{levels:?}");
    // Each alert reached the callback once, the rank's maybe once more if
    // its severity changed; the host's stays at its warning level.
    let host_heard = heard.iter().filter(|a| a["rank"].is_null()).count();
    assert_eq!(host_heard, 1, "{heard:?}");
    let nodes: Value = get(&format!("{}/api/v1/nodes", s.url)).await.unwrap();
    let node = &nodes["nodes"][0];
    assert!(
        node["host_total_bytes"].as_u64().unwrap_or(0) > 0,
        "the agent sends its host memory: {node}"
    );
    let _ = rank.child.kill().await;
}

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leaking_rank_is_forecast_and_cache_is_released_at_a_step_boundary() {
    assert!(
        python_available(),
        "python3 is needed (the test command installs it)"
    );
    let s = setup(Some(CONFIG), "none").await;
    let mut ranks: Vec<Proc> = Vec::new();
    for rank in 0..4u32 {
        let cache = if rank % 2 == 0 { GIB } else { 16 * MIB };
        let leak = if rank == 2 { 24 * MIB } else { 0 };
        let env = [
            ("FAKE_CACHE_BYTES", cache.to_string()),
            ("FAKE_LEAK_BYTES_PER_S", leak.to_string()),
            ("FAKE_DURATION_S", "120".to_string()),
            (
                "FAKE_EVENTS_FILE",
                s.dir
                    .join(format!("events-{rank}.jsonl"))
                    .display()
                    .to_string(),
            ),
        ];
        ranks.push(rank_process(&s, rank, "tests/python/fake_train.py", &env));
    }
    let url = s.url.clone();

    // The forecast names the leaking rank.
    wait_for(Duration::from_secs(60), "a forecast for rank 2", || async {
        let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}"))
            .await
            .map_err(|e| e.to_string())?;
        match job["analysis"]["forecast"]["rank"].as_u64() {
            Some(2) => Ok(()),
            _ => Err(job["analysis"].to_string()),
        }
    })
    .await;

    // The planner releases on ranks 0 and 2 (1 GiB of cache each), not on 1 and 3.
    let done = wait_for(Duration::from_secs(60), "two done releases", || async {
        let a = actions(&url).await?;
        let done: Vec<Value> = a.iter().filter(|x| x["state"] == "done").cloned().collect();
        if done.len() >= 2 {
            Ok(a)
        } else {
            Err(format!("{a:?}"))
        }
    })
    .await;
    let mut released: Vec<u64> = done.iter().map(|a| a["rank"].as_u64().unwrap()).collect();
    released.sort_unstable();
    assert_eq!(released, vec![0, 2], "{done:?}");
    for a in &done {
        assert_eq!(a["kind"], "release_cache");
        assert_eq!(a["origin"], "planner");
        let freed = a["freed_bytes"].as_u64().unwrap();
        assert!(
            freed >= GIB - 64 * MIB,
            "rank {} freed {freed} bytes, expected about 1 GiB",
            a["rank"]
        );
        // It ran at a step boundary: the user's callback saw it after step N
        // and the hook acknowledged it as run after that same step.
        let rank = a["rank"].as_u64().unwrap();
        let seen = events(&s.dir.join(format!("events-{rank}.jsonl")));
        assert_eq!(seen.len(), 1, "rank {rank} saw {seen:?}");
        assert_eq!(seen[0]["id"], a["id"]);
        assert_eq!(a["at_step"], seen[0]["step"], "{a}");
        assert_eq!(
            a["response"].as_str().unwrap(),
            format!("seen at step {}", seen[0]["step"])
        );
    }
    for rank in [1, 3] {
        assert!(
            events(&s.dir.join(format!("events-{rank}.jsonl"))).is_empty(),
            "rank {rank} holds no material cache and got nothing"
        );
    }

    // By hand, with the admin token: rank 3 releases its small cache.
    let (status, body) = post_action(&url, &[3]).await;
    assert_eq!(status, 200, "{body}");
    let id = body["actions"][0]["id"].as_u64().unwrap();
    wait_for(
        Duration::from_secs(30),
        "the admin's action done",
        || async {
            let a = actions(&url).await?;
            match a.iter().find(|x| x["id"] == id) {
                Some(x) if x["state"] == "done" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Rank 1's training process dies: its rank ends, and an action for it expires.
    kill_rank(&url, 1).await;
    wait_for(Duration::from_secs(60), "rank 1 ended", || async {
        let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}"))
            .await
            .map_err(|e| e.to_string())?;
        let ended = job["ranks"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x["rank"] == 1))
            .is_some_and(|x| !x["ended_ms"].is_null());
        if ended {
            Ok(())
        } else {
            Err(job["ranks"].to_string())
        }
    })
    .await;
    let (status, body) = post_action(&url, &[1]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["actions"][0]["outcome"], "expired", "{body}");

    // Markers and snapshots made it through too.
    let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}")).await.unwrap();
    let markers = job["analysis"]["markers"].to_string();
    assert!(markers.contains("training start"), "{markers}");
    let snaps: Value = get(&format!("{url}/api/v1/jobs/{JOB}/snapshots?a=start&b=warm"))
        .await
        .unwrap();
    let rank2 = snaps["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 2)
        .expect("rank 2 took both snapshots")
        .clone();
    assert!(
        rank2["delta"]["allocated"].as_i64().unwrap() > 0,
        "the leak shows between the snapshots: {rank2}"
    );
    for rank in [0, 2, 3] {
        kill_rank(&url, rank).await;
    }
    for p in ranks {
        p.kill().await;
    }
}

/// SIGKILLs a rank's training process, found by its pid in the API (the
/// Python process itself, not the `gpumon run` around it).
async fn kill_rank(url: &str, rank: u32) {
    let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}")).await.unwrap();
    let pid = job["ranks"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["rank"] == rank))
        .and_then(|x| x["pid"].as_u64())
        .expect("the rank has a pid");
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_gpu_a_real_training_loop_releases_real_cache() {
    let probe = std::process::Command::new("python3")
        .args([
            "-c",
            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)",
        ])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        // Written past libtest's capture, so the log of a passing run says it too.
        let _ = writeln!(
            std::io::stderr(),
            "with_a_gpu_a_real_training_loop_releases_real_cache: SKIPPED: needs python3 with torch and an NVIDIA GPU (torch.cuda.is_available() is false or torch is missing here)"
        );
        return;
    }
    let s = setup(None, "nvml").await;
    let url = s.url.clone();
    let events_file = s.dir.join("events-real.jsonl");
    let mut p = rank_process(
        &s,
        0,
        "tests/python/real_train.py",
        &[
            ("EVENTS_FILE", events_file.display().to_string()),
            ("REAL_LEAK_BYTES_PER_S", "0".into()),
            ("REAL_CACHE_BYTES", (2 * GIB).to_string()),
        ],
    );
    // Rank 0 shows up on its GPU through NVML; note the device's used memory.
    let used_before = wait_for(Duration::from_secs(120), "rank 0 on a GPU", || async {
        let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}"))
            .await
            .map_err(|e| e.to_string())?;
        let r = job["ranks"].as_array().and_then(|r| r.first()).cloned();
        match r {
            Some(r) if r["gpu_used_bytes"].as_u64().unwrap_or(0) > GIB => {
                Ok(r["gpu_used_bytes"].as_u64().unwrap())
            }
            _ => Err(job.to_string()),
        }
    })
    .await;
    let (status, body) = post_action(&url, &[0]).await;
    assert_eq!(status, 200, "{body}");
    let id = body["actions"][0]["id"].as_u64().unwrap();
    let done = wait_for(Duration::from_secs(60), "the release done", || async {
        let a = actions(&url).await?;
        match a.iter().find(|x| x["id"] == id) {
            Some(x) if x["state"] == "done" => Ok(x.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let freed = done["freed_bytes"].as_u64().unwrap();
    assert!(
        freed >= GIB,
        "real_train.py caches 2 GiB; freed only {freed}"
    );
    // NVML sees the device's used memory drop by about what the hook freed.
    wait_for(
        Duration::from_secs(30),
        "NVML to see the release",
        || async {
            let job: Value = get(&format!("{url}/api/v1/jobs/{JOB}"))
                .await
                .map_err(|e| e.to_string())?;
            let now = job["ranks"][0]["gpu_used_bytes"]
                .as_u64()
                .unwrap_or(u64::MAX);
            if now + freed * 3 / 4 <= used_before {
                Ok(())
            } else {
                Err(format!(
                    "used {now} bytes, before {used_before}, freed {freed}"
                ))
            }
        },
    )
    .await;
    let seen = events(&events_file);
    assert!(seen.iter().any(|e| e["id"] == id), "{seen:?}");
    let _ = p.child.kill().await;
}

/// Waits up to 20 s for the injected hook to connect, then exits 7 (so the
/// test can tell the script's own exit code from gpumon's).
const CONNECTED_THEN_EXIT_7: &str = r#"
import sys, time
import gpumon
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    if gpumon.stats().get("connected"):
        sys.exit(7)
    time.sleep(0.05)
sys.exit(1)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn gpumon_run_injects_the_hook_starts_an_agent_and_passes_the_exit_code_on() {
    assert!(python_available(), "python3 is needed");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_coordinator, url) = support::leading_coordinator(&dir.join("data")).await;
    let socket_path = dir.join("run.sock");
    let mut cmd = gpumon();
    cmd.args(["run", "--source", "none", "--coordinators", &url, "--agent"])
        .arg(format!("unix:{}", socket_path.display()))
        .args(["--", "python3", "-c", CONNECTED_THEN_EXIT_7])
        .env("RANK", "0")
        .env("LOCAL_RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("TORCHELASTIC_RUN_ID", "run-test")
        .env("XDG_RUNTIME_DIR", dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env_remove("PYTHONPATH");
    let status = tokio::time::timeout(Duration::from_secs(60), cmd.status())
        .await
        .expect("gpumon run ends")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "the script saw the hook connected, and its exit code came back"
    );
    assert!(
        dir.join("gpumon/agent.log").is_file(),
        "the agent it started logs beside the runtime directory"
    );
    assert!(
        !socket_path.exists(),
        "the agent it started is stopped, and its socket removed, when the command ends"
    );
    let cluster: Value = get(&format!("{url}/api/v1/cluster")).await.unwrap();
    assert_eq!(
        cluster["agents"].as_array().map(Vec::len),
        Some(1),
        "the started agent registered with the coordinator: {cluster}"
    );

    let mut bad = gpumon();
    bad.args(["run", "--agent", "10.1.2.3:5000", "--", "true"]);
    let out = bad.output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("loopback"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
