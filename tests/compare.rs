//! `gpumon compare` end to end: a real profile report (the fake allocator's
//! training loop of `tests/python/fake_train.py`, as in `tests/profile.rs`)
//! and a real two-point sweep, each compared with itself and with copies
//! changed the way a regression would change them. Checked: the verdict,
//! the exit status a CI job gates on (0 within the limits, 1 past them, 2
//! not comparable), the reason and the JSON.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::{finish, gpumon};

const GIB: u64 = 1 << 30;
const WITHIN: Duration = Duration::from_secs(120);

fn fake_train() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/fake_train.py")
}

/// `gpumon ARGS -- python3 fake_train.py` in `dir` with a short-window
/// engine and the hook's sampling, as rank 0 of the torchrun job `job`
/// alone, on an 8 GiB fake GPU holding `base` bytes of model.
fn fake_training(dir: &Path, job: &str, base: u64, args: &[&str]) -> tokio::process::Command {
    let config = "[engine]\nwindow_s = 1.0\nwarmup_s = 2.0\n";
    std::fs::write(dir.join("gpumon.toml"), config).unwrap();
    let (command, rest) = args.split_first().expect("a subcommand");
    let mut cmd = gpumon();
    cmd.current_dir(dir)
        .args(["--config", "gpumon.toml", command])
        .args(support::HOOK_SAMPLING)
        .args(rest)
        .args(["--", "python3"])
        .arg(fake_train())
        .env("FAKE_TOTAL_BYTES", (8 * GIB).to_string())
        .env("FAKE_BASE_BYTES", base.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    support::rank0_alone(&mut cmd, job, dir);
    cmd
}

/// `gpumon profile` of a 4 s fake training run in `dir`; its report is
/// `dir/a.json`.
async fn profiled(dir: &Path) -> PathBuf {
    let mut cmd = fake_training(dir, "cjob", 2 * GIB, &["profile", "--json", "a.json"]);
    cmd.env("FAKE_DURATION_S", "4");
    let (code, stderr) = finish(cmd, WITHIN).await;
    assert_eq!(code, Some(0), "{stderr}");
    dir.join("a.json")
}

/// `gpumon compare A B EXTRA...`: its exit code, stdout and stderr.
async fn compare(a: &Path, b: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(
        WITHIN,
        gpumon().arg("compare").arg(a).arg(b).args(extra).output(),
    )
    .await
    .expect("gpumon compare ends")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A copy of the report at `from` changed by `change`, written to `to`.
fn changed(from: &Path, to: &Path, change: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v = read(from);
    change(&mut v);
    std::fs::write(to, serde_json::to_vec(&v).unwrap()).unwrap();
    to.to_owned()
}

fn scale(v: &mut Value, by: f64) {
    *v = Value::from(v.as_f64().unwrap() * by);
}

fn scale_bytes(v: &mut Value, by: f64) {
    *v = Value::from((v.as_u64().unwrap() as f64 * by) as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_profiles_of_one_command_get_a_verdict_a_ci_job_can_gate_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = profiled(dir).await;
    let report = read(&a);
    let rank = &report["ranks"][0];
    assert!(rank["step_ms"]["p50"].as_f64().is_some(), "{rank}");
    assert!(rank["peak_reserved_bytes"].as_u64().is_some(), "{rank}");

    let (code, out, err) = compare(&a, &a, &[]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("verdict: same: within the limits"), "{out}");
    assert!(
        out.contains("step time (median)") && out.contains("peak reserved memory"),
        "{out}"
    );

    let slower = changed(&a, &dir.join("slower.json"), |v| {
        for r in v["ranks"].as_array_mut().unwrap() {
            scale(&mut r["step_ms"]["p50"], 1.2);
            scale(&mut r["step_ms"]["p90"], 1.2);
        }
    });
    let json = dir.join("verdict.json");
    let json_arg = json.to_str().unwrap();
    let (code, out, err) = compare(&a, &slower, &["--json", json_arg]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("worse: step time (median) +20.0 % (limit 5 %)"),
        "{err}"
    );
    let verdict = read(&json);
    assert_eq!(verdict["gpumon_compare"], 1);
    assert_eq!(verdict["kind"], "profile");
    assert_eq!(verdict["verdict"], "worse");
    let step = &verdict["rows"][0];
    assert_eq!(step["name"], "step time (median)");
    assert!(
        (step["change_pct"].as_f64().unwrap() - 20.0).abs() < 1e-6,
        "{step}"
    );
    let (code, out, err) = compare(&a, &slower, &["--max-step-time-regression-pct", "25"]).await;
    assert_eq!(code, Some(0), "within a 25 % limit: {out}{err}");

    let leaner = changed(&a, &dir.join("leaner.json"), |v| {
        for r in v["ranks"].as_array_mut().unwrap() {
            scale_bytes(&mut r["peak_reserved_bytes"], 0.8);
        }
    });
    let (code, out, _) = compare(&a, &leaner, &[]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("verdict: better: peak reserved memory -20.0 %"),
        "{out}"
    );

    let oom = changed(&a, &dir.join("oom.json"), |v| {
        v["exit"]["oom"] = Value::from(true);
        v["exit"]["oom_reason"] = Value::from("CUDA out of memory on rank 0");
    });
    let (code, _, err) = compare(&a, &oom, &[]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("B ran out of memory (CUDA out of memory on rank 0)"),
        "{err}"
    );

    let other = changed(&a, &dir.join("other.json"), |v| {
        v["ranks"][0]["rank"] = Value::from(5);
    });
    let (code, _, err) = compare(&a, &other, &[]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not comparable: A has rank 0 and B has rank 5"),
        "{err}"
    );

    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{}").unwrap();
    let (code, _, err) = compare(&a, &junk, &[]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("neither a profile report"), "{err}");
    let (code, _, err) = compare(&a, &a, &["--max-step-time-regression-pct=-1"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("must be a percentage of 0 or more"), "{err}");
}

/// A real sweep of two points compared with itself and with a copy whose
/// second point got slower: worse, naming the point.
#[tokio::test(flavor = "multi_thread")]
async fn two_sweeps_are_compared_point_by_point() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cmd = fake_training(
        dir,
        "csweep",
        GIB,
        &[
            "sweep",
            "--param",
            "step_ms=20,40",
            "--env",
            "FAKE_STEP_MS={step_ms}",
            "--env",
            "FAKE_DURATION_S=3",
            "--json",
            "a.json",
        ],
    );
    let (code, stderr) = finish(cmd, WITHIN).await;
    assert_eq!(code, Some(0), "{stderr}");
    let a = dir.join("a.json");

    let (code, out, err) = compare(&a, &a, &[]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("verdict: same: 2 points within the limits"),
        "{out}"
    );

    let slower = changed(&a, &dir.join("b.json"), |v| {
        let point = &mut v["points"][1];
        assert_eq!(point["params"]["step_ms"], "40");
        scale(&mut point["step_ms_p50"], 1.5);
    });
    let (code, out, err) = compare(&a, &slower, &[]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("worse: step_ms=40: step time (median) +50.0 % (limit 5 %)"),
        "{err}"
    );
    assert!(out.contains("point step_ms=20: same"), "{out}");

    let profile = dir.join("profile.json");
    std::fs::write(&profile, r#"{"gpumon_profile": 1}"#).unwrap();
    let (code, _, err) = compare(&a, &profile, &[]).await;
    assert_eq!(code, Some(2), "{err}");
}
