//! `scripts/gpu-check`, the one command that proves the GPU path on a lent
//! GPU, run here with `--dry-run`: the same phases and checks on the
//! stand-ins (NVML simulator, fake allocator, fake CUDA events), so the
//! script cannot rot between the times a GPU is lent. Also how it says no:
//! a failing phase exits 1 naming the check, a machine without torch exits 2
//! before running anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `python3 scripts/gpu-check ARGS --out OUT` with this build's gpumon.
fn gpu_check(out: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo().join("scripts/gpu-check"))
        .args(["--gpumon", env!("CARGO_BIN_EXE_gpumon"), "--out"])
        .arg(out)
        .args(args)
        .env_remove("PYTHONPATH")
        .env_remove("GPUMON_AGENT")
        .env("GPUMON_LOG", "warn")
        .output()
        .expect("python3 runs scripts/gpu-check (the test command installs it)")
}

fn summary(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json is written");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

fn check<'a>(doc: &'a Value, phase: &str, name: &str) -> &'a Value {
    doc["phases"][phase]["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no phase {phase}: {doc}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {phase}: {}", doc["phases"][phase]))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_dry_run_passes_every_phase_and_reports_each_figure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = gpu_check(&out, &["--dry-run"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let doc = summary(&out);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{stdout}\n{stderr}\n{}",
        doc["failed"]
    );
    assert_eq!(doc["passed"], true);
    assert_eq!(doc["mode"], "dry-run");
    let phases = doc["phases"].as_object().unwrap();
    for name in [
        "nvml",
        "release_cache",
        "straggler",
        "hook",
        "overhead",
        "leak",
        "cap",
    ] {
        assert_eq!(phases[name]["ok"], true, "{name}: {}", phases[name]);
    }

    // The agent sampled every field at 500 ms and named each worker's rank.
    let nvml = &phases["nvml"]["figures"];
    assert!(
        (1.6..=2.2).contains(&f(&nvml["samples_per_s_per_gpu"])),
        "{nvml}"
    );
    for field in [
        "used_bytes",
        "total_bytes",
        "util_pct",
        "sm_clock_mhz",
        "power_w",
    ] {
        assert!(
            nvml["fields"][field]["n"].as_u64().unwrap() >= 10,
            "{field}: {nvml}"
        );
    }
    let jobs = nvml["attribution"].as_object().unwrap();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let two = jobs
        .values()
        .find(|j| j["workers"].as_object().unwrap().len() == 2)
        .expect("the two-rank job");
    for (rank, pid) in two["workers"].as_object().unwrap() {
        assert_eq!(&two["coordinator"][rank]["pid"], pid, "{two}");
        assert_eq!(two["coordinator"][rank]["gpu"], 0, "{two}");
    }

    // The release reached the rank and gave the cache back.
    let cache = &phases["release_cache"]["figures"];
    assert_eq!(cache["action"]["state"], "done", "{cache}");
    assert!(f(&cache["action"]["freed_bytes"]) >= 0.9 * f(&cache["cache_bytes"]));

    // The straggler: rank 1, in its forward, after it slowed down.
    let s = &phases["straggler"]["figures"];
    assert_eq!(s["first_alert"]["rank"], 1, "{s}");
    assert_eq!(s["first_alert"]["section"], "forward", "{s}");
    assert!(f(&s["delay_s"]) >= 0.0, "{s}");
    assert_eq!(s["clocks"]["0"], "cuda");

    // The hook: the CUDA clock's section agrees with the synchronized time.
    let hook = &phases["hook"]["figures"];
    let ratio = f(&hook["section_p50_ms"]) / f(&hook["synchronized_p50_ms"]);
    assert!((0.9..=1.1).contains(&ratio), "{hook}");
    assert_eq!(
        check(&doc, "hook", "device synchronizations by the hook")["value"],
        0
    );

    // The overhead in µs and % of the step.
    let o = &phases["overhead"]["figures"];
    assert!(
        o["overhead_us_per_step"].is_number() && o["overhead_pct"].is_number(),
        "{o}"
    );

    // The leak was forecast and named before the out-of-memory error.
    let leak = &phases["leak"]["figures"];
    assert!(f(&leak["lead_s"]["oom_predicted"]) > 0.0, "{leak}");
    assert!(f(&leak["lead_s"]["leak"]) > 0.0, "{leak}");
    assert!(leak["snapshot"]["segments"].as_u64().unwrap() > 0, "{leak}");

    // The capped rank died at its cap, forecast against it, not the device.
    let cap = &phases["cap"]["figures"];
    assert_eq!(cap["memory_limit"]["kind"], "cap", "{cap}");
    assert!(f(&cap["oom_predicted"]["lead_s"]) > 0.0, "{cap}");

    // The table names every check with its verdict.
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert_eq!(table, stdout, "the table is what it printed");
    let checks: usize = phases
        .values()
        .map(|p| p["checks"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        table.lines().filter(|l| l.ends_with("  ok")).count(),
        checks,
        "{table}"
    );
    assert!(table.starts_with("gpumon gpu-check (dry-run)"), "{table}");
}

#[test]
fn a_phase_that_fails_exits_1_and_names_the_failed_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A "python" that exits 1 at once: the hook's workload cannot run.
    let run = gpu_check(
        &out,
        &["--dry-run", "--only", "hook", "--python", "/bin/false"],
    );
    assert_eq!(run.status.code(), Some(1));
    let doc = summary(&out);
    assert_eq!(doc["passed"], false);
    assert_eq!(doc["failed"], serde_json::json!(["hook: ran"]));
    let ran = check(&doc, "hook", "ran");
    assert!(
        ran["detail"].as_str().unwrap().contains("exited with 1"),
        "{ran}"
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("FAILED"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("hook") && l.ends_with("FAIL")),
        "{stdout}"
    );
}

#[test]
fn without_torch_it_says_so_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A Python that cannot import torch stands for a GPU machine without it.
    let run = gpu_check(&out, &["--python", "/bin/false"]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("cannot import torch") && stderr.contains("Nothing was run"),
        "{stderr}"
    );
    assert!(!out.join("summary.json").exists());
}
