//! `gpumon profile` end to end: the real binary runs a training loop on a
//! fake GPU (`tests/python/fake_train.py`: the hook's fake caching
//! allocator, no torch, no GPU), samples it through the hook (`--source
//! none`), runs the engine in-process and writes its JSON report. The
//! checks read the report as a user's script would.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::{finish, gpumon};
use tokio::process::Command;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A short-window engine (1 s windows, 2 s of warm-up), so a minute of
/// training shows forecasts; the defaults suit hours-long jobs.
const SHORT_ENGINE: &str = "[engine]\nwindow_s = 1.0\nwarmup_s = 2.0\n";

/// `gpumon profile` of `script` in `dir` as rank 0 of a torchrun job of
/// one (torchrun's variables set by hand), with `env` for the script.
fn profile(dir: &Path, script: &Path, env: &[(&str, String)]) -> Command {
    std::fs::write(dir.join("gpumon.toml"), SHORT_ENGINE).unwrap();
    let mut cmd = gpumon();
    cmd.current_dir(dir)
        .args(["--config", "gpumon.toml"])
        .arg("profile")
        .args(support::HOOK_SAMPLING)
        .args(["--json", "report.json", "--", "python3"])
        .arg(script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    support::rank0_alone(&mut cmd, "pjob", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("the report is written");
    serde_json::from_str(&text).expect("the report is JSON")
}

fn fake_train() -> PathBuf {
    repo().join("tests/python/fake_train.py")
}

/// When the script marked its out-of-memory error.
fn oom_mark_t(report: &Value) -> f64 {
    report["marks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "oom")
        .expect("the script's oom mark")["t"]
        .as_f64()
        .unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_training_run_is_profiled_per_gpu_rank_and_host() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("FAKE_TOTAL_BYTES", (8 * GIB).to_string()),
        ("FAKE_BASE_BYTES", (4 * GIB).to_string()),
        ("FAKE_DURATION_S", "12".to_string()),
    ];
    let (code, stderr) = finish(
        profile(dir.path(), &fake_train(), &env),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("report.json"),
        "says where the report is: {stderr}"
    );
    let r = report(dir.path());
    assert_eq!(r["gpumon_profile"], 1);
    // The HTML report beside it carries the same report (its rendering is
    // checked in Chromium by the html module's tests).
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("the HTML report");
    assert!(
        html.starts_with("<!DOCTYPE html>") || html.starts_with("<!doctype html>"),
        "{}",
        &html[..60.min(html.len())]
    );
    assert!(html.contains("profile-train") || html.contains("pjob"));
    assert_eq!(r["exit"]["code"], 0);
    assert_eq!(r["exit"]["oom"], false);
    assert_eq!(r["command"][0], "python3");
    assert!(r["ended_t"].as_f64().unwrap() - r["started_t"].as_f64().unwrap() >= 12.0);
    assert_eq!(r["levels"]["gpu_warning_pct"], 80.0);
    assert_eq!(r["levels"]["host_critical_pct"], 90.0);

    // The hook's device stands in for the GPU: its capacity and timeline.
    let gpus = r["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "{gpus:?}");
    assert_eq!(u(&gpus[0]["total_bytes"]), 8 * GIB);
    assert!(u(&gpus[0]["peak_used_bytes"]) >= 4 * GIB);
    let tl = gpus[0]["timeline"].as_array().unwrap();
    assert!(tl.len() >= 10, "{} GPU points", tl.len());
    let times: Vec<f64> = tl.iter().map(|p| p[0].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");

    // The rank: its allocator's peak holds the base and a step's buffers,
    // its floor the base, its steps and sections as the script ran them.
    let ranks = r["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1);
    let rank = &ranks[0];
    assert_eq!((rank["job"].as_str(), u(&rank["rank"])), (Some("pjob"), 0));
    let peak = u(&rank["peak_allocated_bytes"]);
    assert!(
        (4 * GIB + 96 * MIB..5 * GIB).contains(&peak),
        "peak allocated {peak}"
    );
    let floor = u(&rank["floor_allocated_bytes"]);
    assert!(
        (4 * GIB..4 * GIB + 96 * MIB).contains(&floor),
        "floor {floor}"
    );
    assert!(u(&rank["steps"]) >= 50, "steps {}", rank["steps"]);
    let p50 = rank["step_ms"]["p50"].as_f64().unwrap();
    assert!(
        (40.0..500.0).contains(&p50),
        "step p50 {p50} ms for 50 ms steps"
    );
    for s in ["data", "forward", "backward"] {
        assert!(
            rank["sections"][s]["p50"].as_f64().unwrap() > 0.0,
            "section {s}"
        );
    }
    assert!(rank["timeline"].as_array().unwrap().len() >= 5);

    let marks: Vec<&str> = r["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for m in ["start", "training start", "warm", "training end"] {
        assert!(marks.contains(&m), "mark {m} in {marks:?}");
    }
    let host = &r["host"];
    assert!(u(&host["total_bytes"]) > 0 && u(&host["peak_used_bytes"]) <= u(&host["total_bytes"]));
    assert!(
        u(&host["peak_rss_bytes"]) > MIB,
        "the script's resident memory"
    );
    assert!(u(&r["summary"]["windows"]) >= 10 && u(&r["summary"]["hook_records"]) >= 50);
    // 4.2 of 8 GiB, with a batch of 96 MiB: room for a larger batch.
    let recs = r["recommendations"].as_array().unwrap();
    let batch = recs
        .iter()
        .find(|x| x["kind"] == "batch_size")
        .expect("a batch-size recommendation");
    assert!(
        batch["numbers"]["batch_fraction"].as_f64().unwrap() > 1.5,
        "{batch}"
    );

    // The report's named snapshots compare like a cluster's.
    let names: Vec<&str> = r["snapshots"]["pjob"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["start", "warm"]);
    let mut cmd = gpumon();
    cmd.current_dir(dir.path()).args([
        "snapshots",
        "diff",
        "start",
        "warm",
        "--profile",
        "report.json",
        "--json",
    ]);
    let out = cmd.output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (cmp["job"].as_str(), cmp["a"].as_str(), cmp["b"].as_str()),
        (Some("pjob"), Some("start"), Some("warm"))
    );
    let start = &r["snapshots"]["pjob"][0]["ranks"][0];
    let warm = &r["snapshots"]["pjob"][1]["ranks"][0];
    let grew = warm["allocated"].as_i64().unwrap() - start["allocated"].as_i64().unwrap();
    assert_eq!(cmp["ranks"][0]["delta"]["allocated"].as_i64(), Some(grew));
    let mut cmd = gpumon();
    cmd.current_dir(dir.path()).args([
        "snapshots",
        "diff",
        "start",
        "nope",
        "--profile",
        "report.json",
    ]);
    let out = cmd.output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no snapshot \"nope\"") && err.contains("start, warm"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rank_that_leaks_into_an_oom_is_warned_of_and_its_exit_code_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    // 8 GiB, 0.5 of it the context, 4 GiB of model: 3.4 GiB to leak at
    // 64 MiB/s, out of memory after about 55 s.
    let env = [
        ("FAKE_TOTAL_BYTES", (8 * GIB).to_string()),
        ("FAKE_BASE_BYTES", (4 * GIB).to_string()),
        ("FAKE_LEAK_BYTES_PER_S", (64 * MIB).to_string()),
        ("FAKE_DURATION_S", "200".to_string()),
    ];
    let (code, stderr) = finish(
        profile(dir.path(), &fake_train(), &env),
        Duration::from_secs(150),
    )
    .await;
    assert_eq!(
        code,
        Some(3),
        "the script's own exit code (3: out of memory): {stderr}"
    );
    let r = report(dir.path());
    assert_eq!(r["exit"]["code"], 3);
    assert_eq!(r["exit"]["oom"], true);
    let reason = r["exit"]["oom_reason"].as_str().unwrap();
    assert!(reason.contains("rank 0 of pjob"), "{reason}");
    let oom_t = oom_mark_t(&r);
    let alerts = r["alerts"].as_array().unwrap();
    let first = |kind: &str| {
        alerts
            .iter()
            .filter(|a| a["kind"] == kind && a["rank"] == 0)
            .map(|a| a["t"].as_f64().unwrap())
            .reduce(f64::min)
    };
    let warned = [first("oom_predicted"), first("leak")]
        .into_iter()
        .flatten()
        .reduce(f64::min);
    let warned = warned.unwrap_or_else(|| panic!("no forecast or leak alert: {alerts:?}"));
    assert!(
        warned < oom_t,
        "warned at {warned}, out of memory at {oom_t}"
    );
    let level = alerts
        .iter()
        .filter(|a| a["kind"] == "memory_level" && a["rank"] == 0)
        .map(|a| a["severity"].as_str().unwrap())
        .collect::<Vec<_>>();
    assert!(
        level.contains(&"critical"),
        "the GPU filled past 95 %: {level:?}"
    );
    let kinds: Vec<&str> = r["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"batch_size") || kinds.contains(&"leak"),
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capped_rank_is_forecast_against_its_cap_not_its_gpu() {
    let dir = tempfile::tempdir().unwrap();
    // A 16 GiB device capped at a quarter (torch's
    // set_per_process_memory_fraction on the fake allocator): 4 GiB for
    // the allocator. 2 GiB of model leaking 64 MiB/s meets the cap after
    // about 30 s, when the device is not a third full; against the
    // device's 16 GiB the forecast would say three and a half minutes.
    let env = [
        ("FAKE_TOTAL_BYTES", (16 * GIB).to_string()),
        ("FAKE_CAP_FRACTION", "0.25".to_string()),
        ("FAKE_BASE_BYTES", (2 * GIB).to_string()),
        ("FAKE_LEAK_BYTES_PER_S", (64 * MIB).to_string()),
        ("FAKE_DURATION_S", "200".to_string()),
    ];
    let (code, stderr) = finish(
        profile(dir.path(), &fake_train(), &env),
        Duration::from_secs(150),
    )
    .await;
    assert_eq!(code, Some(3), "out of memory at the cap: {stderr}");
    let r = report(dir.path());
    let oom_t = oom_mark_t(&r);
    let alerts = r["alerts"].as_array().unwrap();
    let oom = alerts
        .iter()
        .filter(|a| a["kind"] == "oom_predicted" && a["rank"] == 0)
        .min_by(|a, b| {
            a["t"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["t"].as_f64().unwrap())
        })
        .unwrap_or_else(|| panic!("no OOM forecast: {alerts:?}"));
    let (warned, predicted) = (
        oom["t"].as_f64().unwrap(),
        oom["predicted_oom_t"].as_f64().unwrap(),
    );
    assert!(
        warned < oom_t,
        "warned at {warned}, out of memory at {oom_t}"
    );
    assert!(
        (predicted - oom_t).abs() < 20.0,
        "forecast for {predicted}, out of memory at the cap at {oom_t}: the forecast reads the cap"
    );
    let message = oom["message"].as_str().unwrap();
    assert!(
        message.contains("4.0 GiB cap") && message.contains("set_per_process_memory_fraction"),
        "{message}"
    );
    assert!(
        oom["recommendation"]
            .as_str()
            .is_some_and(|t| t.contains("raise it")),
        "{oom}"
    );
    let level = alerts
        .iter()
        .find(|a| a["kind"] == "memory_level" && a["rank"] == 0)
        .unwrap_or_else(|| panic!("the cap filled past 80 %: {alerts:?}"));
    assert!(
        level["message"].as_str().unwrap().contains("cap"),
        "{level}"
    );
    let rank = &r["ranks"][0];
    assert_eq!(rank["memory_limit"]["kind"], "cap", "{rank}");
    assert_eq!(rank["memory_limit"]["cap_source"], "memory_fraction");
    assert_eq!(u(&rank["memory_limit"]["limit_bytes"]), 4 * GIB);
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_the_command_and_the_report_is_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("started");
    let script = dir.path().join("wait.py");
    std::fs::write(
        &script,
        format!(
            "import time, gpumon\ngpumon.mark('waiting')\nopen({:?}, 'w').close()\ntime.sleep(300)\n",
            flag.display().to_string()
        ),
    )
    .unwrap();
    let mut child = profile(dir.path(), &script, &[])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_for(Duration::from_secs(30), "the script to start", || async {
        flag.exists()
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("gpumon ends after Ctrl-C")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(128 + 2),
        "Python died of the SIGINT passed on, after its exit handlers ran"
    );
    let r = report(dir.path());
    assert_eq!(r["exit"]["interrupted"], true);
    assert_eq!(r["exit"]["signal"], 2);
    assert!(r["marks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "waiting"));
}

#[tokio::test(flavor = "multi_thread")]
async fn impossible_levels_and_missing_programs_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = gpumon();
    cmd.current_dir(dir.path())
        .args(["profile", "--host-warning-pct", "95", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (code, stderr) = finish(cmd, Duration::from_secs(20)).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("host levels") && stderr.contains("95"),
        "{stderr}"
    );
    let mut cmd = gpumon();
    cmd.current_dir(dir.path())
        .args(["profile", "--source", "none", "--", "/nonexistent/train"])
        .env("XDG_RUNTIME_DIR", dir.path().join("run"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (code, stderr) = finish(cmd, Duration::from_secs(20)).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/train"), "{stderr}");
    assert!(
        !dir.path().join("gpumon-profile.json").exists(),
        "no report of a run that never started"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_python_script_is_rank_0_of_its_own_job_and_hears_its_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let alerts_file = dir.path().join("alerts.jsonl");
    let wrapper = dir.path().join("train.py");
    std::fs::write(
        &wrapper,
        format!(
            "import json, runpy, sys, gpumon\n\
             def on_alert(a):\n    \
                 with open({alerts:?}, 'a') as f:\n        \
                     f.write(json.dumps(a) + '\\n')\n\
             gpumon.on_alert(on_alert)\n\
             sys.argv = [{script:?}]\n\
             runpy.run_path({script:?}, run_name='__main__')\n",
            alerts = alerts_file.display().to_string(),
            script = fake_train().display().to_string(),
        ),
    )
    .unwrap();
    // 6.9 of 8 GiB in use: past the 80 % warning level from the start.
    let env = [
        ("FAKE_TOTAL_BYTES", (8 * GIB).to_string()),
        ("FAKE_BASE_BYTES", (6 * GIB + 400 * MIB).to_string()),
        ("FAKE_DURATION_S", "10".to_string()),
    ];
    let mut cmd = profile(dir.path(), &wrapper, &env);
    // Host RAM levels this machine is past (the engine's, from --config).
    let levels = "[engine.host_memory_levels]\nwarning_pct = 1.0\ncritical_pct = 99.9\nclear_margin_pct = 0.5\n";
    std::fs::write(
        dir.path().join("gpumon.toml"),
        format!("{SHORT_ENGINE}{levels}"),
    )
    .unwrap();
    for var in [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "TORCHELASTIC_RUN_ID",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        cmd.env_remove(var);
    }
    let (code, stderr) = finish(cmd, Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{stderr}");
    let r = report(dir.path());
    let ranks = r["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1, "one process, one rank: {ranks:?}");
    assert_eq!(
        (ranks[0]["job"].as_str(), u(&ranks[0]["rank"])),
        (Some("profile-train"), 0)
    );
    assert_eq!(r["jobs"]["profile-train"]["world_size"], 1);
    let level = r["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "memory_level" && a["rank"] == 0)
        .unwrap_or_else(|| panic!("no memory_level alert: {}", r["alerts"]));
    assert_eq!(level["severity"], "warning");
    // The training process heard of it through gpumon.on_alert.
    let heard: Vec<Value> = std::fs::read_to_string(&alerts_file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen = heard
        .iter()
        .find(|a| a["kind"] == "memory_level" && a["rank"] == 0)
        .unwrap_or_else(|| panic!("the callback heard no memory_level alert: {heard:?}"));
    assert_eq!(
        (seen["severity"].as_str(), seen["job"].as_str()),
        (Some("warning"), Some("profile-train"))
    );
    assert!(
        seen["message"]
            .as_str()
            .unwrap()
            .contains("warning level of 80"),
        "{seen}"
    );

    // Host RAM past its level: the engine's alert about the host, in the
    // report and heard by the callback, posted to the job as a whole.
    assert_eq!(r["levels"]["host_warning_pct"], 1.0);
    let host = r["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "memory_level" && a["gpu"].is_null())
        .unwrap_or_else(|| panic!("no host alert: {}", r["alerts"]));
    assert!(host["job"].is_null() && host["node"].is_string(), "{host}");
    assert_eq!(host["severity"], "warning");
    let heard_host = heard
        .iter()
        .find(|a| a["kind"] == "memory_level" && a["rank"].is_null())
        .unwrap_or_else(|| panic!("the callback heard no host alert: {heard:?}"));
    assert_eq!(heard_host["job"], "profile-train");
    assert!(
        heard_host["message"]
            .as_str()
            .unwrap()
            .starts_with("host RAM on "),
        "{heard_host}"
    );
}

/// The report says where each rank's step goes and what bounds it: with
/// half of every step spent waiting for data, rank 0 and the job are
/// input-bound, and the next thing to try is named; with the script's
/// default anatomy (a tenth in `data`), compute-bound.
#[tokio::test(flavor = "multi_thread")]
async fn the_report_names_what_bounds_the_step() {
    for (data_share, bound) in [("0.5", "input"), ("0.1", "compute")] {
        let dir = tempfile::tempdir().unwrap();
        let env = [
            ("FAKE_TOTAL_BYTES", (8 * GIB).to_string()),
            ("FAKE_BASE_BYTES", GIB.to_string()),
            ("FAKE_DURATION_S", "4".to_string()),
            ("FAKE_STEP_MS", "40".to_string()),
            ("FAKE_DATA_SHARE", data_share.to_string()),
        ];
        let (code, stderr) = finish(
            profile(dir.path(), &fake_train(), &env),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(code, Some(0), "{stderr}");
        let r = report(dir.path());
        let rank = &r["ranks"][0]["step_verdict"];
        let job = &r["jobs"]["pjob"]["step_verdict"];
        assert_eq!(rank["bound"], bound, "data share {data_share}: {rank}");
        assert_eq!(job["bound"], bound, "data share {data_share}: {job}");
        let parts: Vec<&str> = rank["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for name in ["data", "forward", "backward", "untimed"] {
            assert!(parts.contains(&name), "{name} in {parts:?}");
        }
        let shares: f64 = rank["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["share"].as_f64().unwrap())
            .sum();
        assert!(
            (shares - 1.0).abs() < 0.02,
            "the parts make the step: {rank}"
        );
        if bound == "input" {
            let next = rank["next"].as_str().unwrap();
            assert!(next.contains("num_workers"), "{next}");
            let evidence = rank["evidence"].as_str().unwrap();
            assert!(
                evidence.contains("waiting for the next batch"),
                "{evidence}"
            );
        }
    }
}
