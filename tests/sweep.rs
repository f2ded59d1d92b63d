//! `gpumon sweep` end to end: the real binary runs a grid of points, each
//! through `gpumon profile` on a fake GPU (`tests/python/fake_train.py`:
//! the hook's fake caching allocator on an 8 GiB device, no torch, no GPU),
//! and writes JSON, CSV and HTML. The checks read the outputs as a user's
//! script or browser would: the CSV is parsed back, the HTML is drawn by
//! headless Chromium.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::browser::{assert_png, dump_dom, require_chromium, screenshot};
use support::{artifacts_dir, finish, gpumon};
use tokio::process::Command;

const GIB: u64 = 1 << 30;

fn fake_train() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/fake_train.py")
}

/// A point's command: takes `base_gib` as its argument, checks that the
/// sweep's variable agrees, and becomes fake_train with that base memory.
const POINT_PY: &str = r#"
import os, sys
base = sys.argv[1]
if os.environ.get("GPUMON_SWEEP_BASE_GIB") != base:
    sys.exit("GPUMON_SWEEP_BASE_GIB is %r, the argument %r" % (os.environ.get("GPUMON_SWEEP_BASE_GIB"), base))
os.environ["FAKE_BASE_BYTES"] = str(int(float(base) * (1 << 30)))
os.execv(sys.executable, [sys.executable, os.environ["FAKE_TRAIN"]])
"#;

/// `gpumon sweep` in `dir` with `args`, each point rank 0 of a torchrun
/// job of one (torchrun's variables set by hand) on an 8 GiB fake GPU,
/// sampled through the hook.
fn sweep(dir: &Path, args: &[&str]) -> Command {
    std::fs::write(dir.join("point.py"), POINT_PY).unwrap();
    std::fs::write(
        dir.join("gpumon.toml"),
        "[engine]\nwindow_s = 1.0\nwarmup_s = 2.0\n",
    )
    .unwrap();
    let mut cmd = gpumon();
    cmd.current_dir(dir)
        .args(["--config", "gpumon.toml", "sweep"])
        .args(support::HOOK_SAMPLING)
        .args(args)
        .env("FAKE_TOTAL_BYTES", (8 * GIB).to_string())
        .env("FAKE_TRAIN", fake_train())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    support::rank0_alone(&mut cmd, "sjob", dir);
    cmd
}

fn json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no {}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The point of `points` whose parameters are `params`.
fn at<'a>(points: &'a [Value], params: &[(&str, &str)]) -> &'a Value {
    points
        .iter()
        .find(|p| params.iter().all(|(k, v)| p["params"][k] == *v))
        .unwrap_or_else(|| panic!("no point {params:?}"))
}

/// RFC 4180 records: quoted fields may hold commas, quotes (doubled) and
/// line breaks; records end in CRLF.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {
                assert_eq!(chars.next(), Some('\n'), "CR without LF");
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(
        field.is_empty() && record.is_empty(),
        "the last record ends in CRLF"
    );
    records
}

/// The CSV's rows as maps from the header's names, after checking that
/// every row has the header's width.
fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let records = parse_csv(&std::fs::read_to_string(path).expect("the CSV is written"));
    let (header, rows) = records.split_first().expect("a header");
    rows.iter()
        .map(|r| {
            assert_eq!(r.len(), header.len(), "row {r:?}");
            header.iter().cloned().zip(r.iter().cloned()).collect()
        })
        .collect()
}

/// A number in the JSON as the CSV writes it: the same value (serde_json
/// may read a float one unit in the last place away), or empty.
fn same_number(csv: &str, json: &Value) -> bool {
    match json.as_f64() {
        Some(j) => csv
            .parse::<f64>()
            .is_ok_and(|c| (c - j).abs() <= j.abs() * 1e-12),
        None => csv.is_empty() && json.is_null(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grid_of_runs_is_profiled_point_by_point_and_an_oom_is_a_result() {
    require_chromium().await;
    let dir = tempfile::tempdir().unwrap();
    let cmd = sweep(
        dir.path(),
        &[
            "--param",
            "base_gib=1,3,8",
            "--param",
            "step_ms=20,50",
            "--env",
            "FAKE_STEP_MS={step_ms}",
            "--env",
            "FAKE_DURATION_S=3",
            "--html",
            "sweep.html",
            "--",
            "python3",
            "point.py",
            "{base_gib}",
        ],
    );
    let (code, stderr) = finish(cmd, Duration::from_secs(120)).await;
    assert_eq!(code, Some(0), "OOM points are results: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 6, "a line per point: {stderr}");
    for (i, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("[{}/6] base_gib=", i + 1)),
            "{line}"
        );
        if i < 4 {
            assert!(line.contains(": peak ") && line.ends_with(", ok"), "{line}");
        } else {
            assert!(line.ends_with("OOM"), "{line}");
        }
    }

    let r = json(&dir.path().join("gpumon-sweep.json"));
    assert_eq!(r["gpumon_sweep"], 1);
    assert_eq!(
        r["command"],
        serde_json::json!(["python3", "point.py", "{base_gib}"])
    );
    assert_eq!(r["params"][0]["name"], "base_gib");
    assert_eq!(r["params"][1]["values"], serde_json::json!(["20", "50"]));
    let points = r["points"].as_array().unwrap();
    assert_eq!(points.len(), 6);
    let numbers: Vec<u64> = points
        .iter()
        .map(|p| p["point"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
    // The first parameter is the outer loop.
    assert_eq!(points[1]["params"]["base_gib"], "1");
    assert_eq!(points[2]["params"]["base_gib"], "3");

    for step in ["20", "50"] {
        let small = at(points, &[("base_gib", "1"), ("step_ms", step)]);
        let large = at(points, &[("base_gib", "3"), ("step_ms", step)]);
        let oom = at(points, &[("base_gib", "8"), ("step_ms", step)]);
        for p in [small, large] {
            assert_eq!(p["status"], "ok", "{p}");
            assert_eq!(p["exit_code"], 0);
            assert_eq!(p["gpu_total_bytes"].as_u64(), Some(8 * GIB));
            assert!(p["steps"].as_u64().unwrap() >= 10, "{p}");
            assert!(p["report"].is_null() && p["log"].is_null(), "not kept: {p}");
        }
        // Peak memory rises with the model: base plus context plus a step.
        let (a, b) = (
            f(&small["peak_gpu_used_bytes"]),
            f(&large["peak_gpu_used_bytes"]),
        );
        assert!(
            a >= GIB as f64 && a < 2.0 * GIB as f64,
            "base 1 GiB: peak {a}"
        );
        assert!(
            b >= 3.0 * GIB as f64 && b < 4.0 * GIB as f64,
            "base 3 GiB: peak {b}"
        );
        assert!(f(&small["peak_gpu_used_pct"]) < f(&large["peak_gpu_used_pct"]));
        assert!(f(&small["peak_allocated_bytes"]) >= GIB as f64);
        assert_eq!(oom["status"], "oom", "{oom}");
        assert_eq!(oom["exit_code"], 3);
        assert!(
            oom["reason"].as_str().unwrap().contains("out-of-memory"),
            "{oom}"
        );
    }
    // Step time follows the step_ms parameter, passed through --env.
    for base in ["1", "3"] {
        let fast = f(&at(points, &[("base_gib", base), ("step_ms", "20")])["step_ms_p50"]);
        let slow = f(&at(points, &[("base_gib", base), ("step_ms", "50")])["step_ms_p50"]);
        assert!(
            (15.0..40.0).contains(&fast) && (40.0..100.0).contains(&slow),
            "{fast} {slow}"
        );
    }
    assert!(
        !dir.path().join("gpumon-sweep").exists(),
        "no point failed: the work directory is gone"
    );

    // The CSV says what the JSON says.
    let rows = csv_rows(&dir.path().join("gpumon-sweep.csv"));
    assert_eq!(rows.len(), points.len());
    for (row, p) in rows.iter().zip(points) {
        assert_eq!(row["base_gib"], p["params"]["base_gib"].as_str().unwrap());
        assert_eq!(row["step_ms"], p["params"]["step_ms"].as_str().unwrap());
        assert_eq!(row["status"], p["status"].as_str().unwrap());
        for col in [
            "point",
            "exit_code",
            "peak_gpu_used_bytes",
            "peak_gpu_used_pct",
            "peak_reserved_bytes",
            "step_ms_p50",
            "step_ms_p90",
            "steps",
            "wall_s",
        ] {
            assert!(
                same_number(&row[col], &p[col]),
                "{col}: {} vs {}",
                row[col],
                p[col]
            );
        }
        assert_eq!(row["reason"], p["reason"].as_str().unwrap_or(""));
    }

    // The page, drawn by a browser: a 3 x 2 heatmap, the OOM column marked.
    let page = dir.path().join("sweep.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("<script src") && !html.contains("<link"),
        "self-contained"
    );
    let url = format!("file://{}", page.display());
    let dom = dump_dom(&url).await;
    let main = tags(&dom, "id=\"sweep\"");
    assert!(main[0].contains("data-ready=\"true\""), "{}", main[0]);
    assert!(!dom.contains("data-error="), "a script error: {dom}");
    let chart = tags(&dom, "id=\"chart\"");
    assert!(chart[0].contains("data-kind=\"heatmap\""), "{}", chart[0]);
    assert!(chart[0].contains("data-cells=\"6\""), "{}", chart[0]);
    assert!(chart[0].contains("data-oom-cells=\"2\""), "{}", chart[0]);
    let cells = tags(&dom, "data-x=");
    assert_eq!(cells.len(), 6);
    for cell in cells {
        let oom = cell.contains("data-x=\"8\"");
        assert_eq!(cell.contains("data-status=\"oom\""), oom, "{cell}");
        assert_eq!(cell.contains("data-status=\"ok\""), !oom, "{cell}");
    }
    assert_eq!(tags(&dom, "data-point=").len(), 6, "a table row per point");
    let shot = artifacts_dir().join("sweep.png");
    screenshot(&url, &shot, (1200, 1000)).await;
    assert_png(&shot, 1200, 1000);
    eprintln!("screenshot kept at {}", shot.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_point_past_its_timeout_is_stopped_and_kept_and_the_sweep_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sweep(
        dir.path(),
        &[
            "--param",
            "dur=1,120",
            "--env",
            "FAKE_DURATION_S={dur}",
            "--point-timeout",
            "4",
            "--json",
            "out/t.json",
            "--",
            "python3",
        ],
    );
    cmd.arg(fake_train());
    let (code, stderr) = finish(cmd, Duration::from_secs(90)).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("[2/2] dur=120: ") && stderr.contains("timeout"),
        "{stderr}"
    );
    let r = json(&dir.path().join("out/t.json"));
    let points = r["points"].as_array().unwrap();
    assert_eq!(points[0]["status"], "ok");
    let late = &points[1];
    assert_eq!(late["status"], "timeout", "{late}");
    assert!(late["reason"]
        .as_str()
        .unwrap()
        .contains("--point-timeout 4 s"));
    let wall = f(&late["wall_s"]);
    assert!(
        (4.0..30.0).contains(&wall),
        "stopped soon after 4 s: {wall}"
    );
    // Its report and output stay, beside the JSON; the ok point's do not.
    let work = dir.path().join("out/gpumon-sweep");
    assert_eq!(late["report"], "out/gpumon-sweep/point-002.json");
    let report = json(&dir.path().join(late["report"].as_str().unwrap()));
    assert_eq!(
        report["exit"]["interrupted"], true,
        "gpumon profile stopped it gently"
    );
    assert!(dir.path().join(late["log"].as_str().unwrap()).exists());
    assert!(!work.join("point-001.json").exists() && !work.join("point-001.log").exists());
    let rows = csv_rows(&dir.path().join("out/t.csv"));
    assert_eq!(rows[1]["status"], "timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_oom_larger_values_are_skipped_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = sweep(
        dir.path(),
        &[
            "--param",
            "base_gib=8,9",
            "--stop-after-oom",
            "--keep-reports",
            "--",
            "python3",
            "point.py",
            "{base_gib}",
        ],
    );
    let (code, stderr) = finish(cmd, Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("[2/2] base_gib=9: skipped (base_gib=8 ran out of memory)"),
        "{stderr}"
    );
    let r = json(&dir.path().join("gpumon-sweep.json"));
    assert_eq!(r["points"].as_array().unwrap().len(), 1);
    assert_eq!(r["points"][0]["status"], "oom");
    assert_eq!(
        r["skipped"],
        serde_json::json!([{"point": 2, "params": {"base_gib": "9"}}])
    );
    // Kept on request, though the point did not fail.
    let kept = json(&dir.path().join(r["points"][0]["report"].as_str().unwrap()));
    assert_eq!(kept["exit"]["oom"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_2_and_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let big: String = (1..=20)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (a, b) = (format!("a={big}"), format!("b={big}"));
    let cases: [(&[&str], &str); 5] = [
        (&["--param", "bs=8", "--", "train", "{bs}", "{lr}"], "{lr}"),
        (
            &[
                "--param", "bs=8", "--param", "seq=1,2", "--", "train", "{bs}",
            ],
            "--param seq is used nowhere",
        ),
        (
            &["--param", &a, "--param", &b, "--", "t", "{a}", "{b}"],
            "more than 256 points",
        ),
        (&["--param", "bs=8", "--", "train", "{\"bs\": {bs}}"], "{{"),
        (&["--", "train"], "--param"),
    ];
    for (args, says) in cases {
        let (code, stderr) = finish(sweep(dir.path(), args), Duration::from_secs(30)).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("gpumon-sweep.json").exists(),
        "nothing ran"
    );
    assert!(!dir.path().join("gpumon-sweep").exists());

    // What gpumon profile refuses, it would refuse at every point: the
    // sweep stops at the first, saying why.
    let cases: [(&[&str], &str); 2] = [
        (
            &[
                "--param",
                "a=1,2",
                "--gpu-warning-pct",
                "200",
                "--",
                "true",
                "{a}",
            ],
            "GPU levels",
        ),
        (
            &["--param", "a=1,2", "--", "/nonexistent/train", "{a}"],
            "/nonexistent/train",
        ),
    ];
    for (args, says) in cases {
        let (code, stderr) = finish(sweep(dir.path(), args), Duration::from_secs(30)).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("refused the first point") && stderr.contains(says),
            "{stderr}"
        );
        assert!(!stderr.contains("[2/2]"), "no second point: {stderr}");
    }
}

/// Every start tag of the serialized `dom` that holds `needle`.
fn tags<'a>(dom: &'a str, needle: &str) -> Vec<&'a str> {
    dom.split('<')
        .filter_map(|t| t.split_once('>').map(|(tag, _)| tag))
        .filter(|t| t.contains(needle))
        .collect()
}
