//! The page in headless Chromium (Debian's `chromium`), loaded from a file
//! as a user would open it: the script ran without an error and drew what
//! the report holds, hostile strings stay text, empty and damaged reports
//! say what is missing. Screenshots of the sample and of a 512-rank run are
//! kept in `target/test-artifacts/` for people to look at.
//!
//! What the DOM must show is computed from the report here, never taken from
//! the page.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpumon_testkit::chromium::{parse_tags, visible_text, Tag, HEADLESS};

use super::super::fixtures::{self, HOSTILE, LENGTH, START};
use super::super::render;
use crate::profile::report::ProfileReport;

const CHROMIUM: &str = "chromium";
/// One Chromium run: start, load, script, and the dump or the picture.
const CHROMIUM_WITHIN: Duration = Duration::from_secs(90);
/// The zone the browser runs in: local times must follow it.
const ZONE: &str = "Asia/Kolkata";

/// Writes the page of `report`, opens it, and answers Chromium's
/// serialization of its DOM after the script ran, with its start tags;
/// the script must have finished without an error.
async fn opened(report: &ProfileReport) -> (String, Vec<Tag>) {
    let dir = tempfile::tempdir().unwrap();
    let page = write_page(dir.path(), report);
    let out = run_chromium(&page, &["--dump-dom".into()]).await;
    let dom = String::from_utf8(out).expect("the DOM is UTF-8");
    let els = parse_tags(&dom);
    let root = root(&els);
    assert_eq!(root.attr("data-rendered"), Some("ok"), "{:?}", root.attrs);
    assert_eq!(
        root.attr("data-errors"),
        Some("0"),
        "script errors: {:?}",
        root.attrs
    );
    (dom, els)
}

fn write_page(dir: &Path, report: &ProfileReport) -> PathBuf {
    let path = dir.join("report.html");
    std::fs::write(&path, render(report)).unwrap();
    path
}

/// Headless Chromium on the file at `page` with `extra` arguments; its
/// stdout.
async fn run_chromium(page: &Path, extra: &[String]) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(CHROMIUM);
    cmd.args(HEADLESS)
        .args([
            "--force-device-scale-factor=1",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .env("TZ", ZONE)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(CHROMIUM_WITHIN, cmd.output()).await {
        Err(_) => panic!("chromium did not finish within {CHROMIUM_WITHIN:?}"),
        Ok(Err(e)) => panic!(
            "cannot run `{CHROMIUM}` ({e}); these tests drive headless Chromium: apt-get install -y chromium"
        ),
        Ok(Ok(out)) => out,
    };
    assert!(
        out.status.success(),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Takes a picture of the page of `report`, `height` pixels tall, and keeps
/// it as `name` in the test artifacts.
async fn keep_screenshot(report: &ProfileReport, name: &str, height: u32) -> PathBuf {
    let dir = tempfile::tempdir().unwrap();
    let page = write_page(dir.path(), report);
    let shot = dir.path().join(name);
    run_chromium(
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size=1400,{height}"),
        ],
    )
    .await;
    let bytes = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank page of this size compresses to a few KiB; charts take more.
    assert!(bytes.len() > 60_000, "{} bytes: a blank page?", bytes.len());
    let kept = artifacts_dir().join(name);
    std::fs::write(&kept, bytes).unwrap();
    eprintln!("screenshot kept at {}", kept.display());
    kept
}

/// `test-artifacts` in the target folder this test binary was built into
/// (`<target>/debug/deps/gpumon-*`).
fn artifacts_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "deps"))
        .and_then(|deps| deps.parent()?.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The page's root, which reports how the script did.
fn root(els: &[Tag]) -> &Tag {
    els.iter()
        .find(|e| e.attr("id") == Some("report"))
        .expect("the page has its root")
}

fn by(els: &[Tag], pred: impl Fn(&Tag) -> bool) -> Vec<&Tag> {
    els.iter().filter(|e| pred(e)).collect()
}

#[tokio::test]
async fn the_sample_report_draws_every_part() {
    let report = fixtures::sample();
    let (dom, els) = opened(&report).await;
    let root = root(&els);
    let n = report.ranks.len().to_string();
    assert_eq!(root.attr("data-rank-charts"), Some(n.as_str()));
    assert_eq!(root.attr("data-heatmap-rows"), Some(n.as_str()));

    // A chart per rank with its lines, marks and forecast.
    let gpu_of = |node: &Option<String>, gpu: Option<u32>| {
        report
            .gpus
            .iter()
            .find(|g| Some(&g.node) == node.as_ref() && Some(g.gpu) == gpu)
    };
    let charts = by(&els, |e| e.name == "canvas" && e.has_class("chart"));
    assert_eq!(
        charts.len(),
        report.ranks.len() + 1,
        "a chart per rank, and the host's"
    );
    for (rank, canvas) in report.ranks.iter().zip(&charts) {
        let gpu = gpu_of(&rank.node, rank.gpu);
        let hook_lines = if rank.timeline.is_empty() { 0 } else { 2 };
        let lines = hook_lines + usize::from(gpu.is_some_and(|g| !g.timeline.is_empty()));
        assert_eq!(
            canvas.attr("data-series"),
            Some(lines.to_string().as_str()),
            "rank {}",
            rank.rank
        );
        let forecast = rank.forecast.or(gpu.and_then(|g| g.forecast));
        // The predicted OOM is drawn as a mark when it falls within twice
        // the run's length.
        let oom_mark = forecast.is_some_and(|f| f.predicted_oom_t - START <= 2.0 * LENGTH);
        let marks = report
            .marks
            .iter()
            .filter(|m| m.job == rank.job && m.rank == rank.rank)
            .count()
            + usize::from(oom_mark);
        assert_eq!(
            canvas.attr("data-marks"),
            Some(marks.to_string().as_str()),
            "rank {}",
            rank.rank
        );
        let drawn = if forecast.is_some() { "1" } else { "0" };
        assert_eq!(
            canvas.attr("data-forecast"),
            Some(drawn),
            "rank {}",
            rank.rank
        );
    }
    assert!(
        report.ranks.iter().any(|r| r.forecast.is_some()),
        "the sample has a forecast to draw"
    );

    // The heatmap: a row per rank, its scale's top the highest sample.
    let heat = by(&els, |e| e.attr("id") == Some("heatmap"));
    assert_eq!(heat.len(), 1);
    assert_eq!(heat[0].attr("data-rows"), Some(n.as_str()));
    let highest = report
        .ranks
        .iter()
        .flat_map(|r| {
            let own: Vec<u64> = r.timeline.iter().map(|(_, v)| v[0]).collect();
            if own.is_empty() {
                let gpu = gpu_of(&r.node, r.gpu).expect("the rank's GPU");
                gpu.timeline.iter().map(|(_, v)| v[0]).collect()
            } else {
                own
            }
        })
        .max()
        .unwrap();
    let top = by(&els, |e| e.attr("id") == Some("heat-max"));
    assert_eq!(
        top[0].attr("data-bytes"),
        Some(highest.to_string().as_str())
    );

    // Section bars for the ranks with step times; the straggler flagged.
    let bars = by(&els, |e| e.has_class("bar-row"));
    let timed: Vec<_> = report
        .ranks
        .iter()
        .filter(|r| r.step_ms.is_some() || !r.sections.is_empty())
        .collect();
    assert_eq!(bars.len(), timed.len());
    for (rank, bar) in timed.iter().zip(&bars) {
        assert_eq!(bar.attr("data-rank"), Some(rank.rank.to_string().as_str()));
        assert_eq!(
            bar.attr("data-straggler"),
            Some(if rank.straggler { "true" } else { "false" })
        );
    }
    let sections: usize = timed.iter().map(|r| r.sections.len()).sum();
    assert_eq!(by(&els, |e| e.has_class("bar-seg")).len(), sections);

    // The tables: a row per item.
    for (class, items) in [
        ("gpu-row", report.gpus.len()),
        ("rank-row", report.ranks.len()),
        ("mark-row", report.marks.len()),
        ("rec", report.recommendations.len()),
    ] {
        assert_eq!(by(&els, |e| e.has_class(class)).len(), items, "{class}");
    }
    for a in &report.alerts {
        let row = by(&els, |e| {
            e.attr("data-alert-id") == Some(a.id.to_string().as_str())
        });
        assert_eq!(row.len(), 1, "alert {a:?}");
        assert_eq!(row[0].attr("data-alert-kind"), Some(a.kind.as_str()));
        let active = if a.is_active() { "true" } else { "false" };
        assert_eq!(row[0].attr("data-active"), Some(active), "alert {a:?}");
    }

    // The header: the start in UTC and in the browser's zone, 24-hour.
    let text = visible_text(&dom);
    for expected in [
        "2024-05-01 13:26:40",
        "2024-05-01 18:56:40",
        "UTC+05:30",
        "10 min 00 s",
        "exit code 0",
        "train.py",
        "/tmp/gpumon-snapshots/job-7-rank2-after-warmup.pickle",
    ] {
        assert!(
            text.contains(expected),
            "the page does not show {expected:?}"
        );
    }

    keep_screenshot(&report, "profile-report.png", 4000).await;
}

#[tokio::test]
async fn hostile_strings_show_as_text_and_run_nothing() {
    let report = fixtures::hostile();
    let (dom, els) = opened(&report).await;
    assert!(
        by(&els, |e| e.name == "img").is_empty(),
        "an <img> was injected"
    );
    assert!(!dom.contains("<img"), "an <img> was injected");
    let text = visible_text(&dom);
    for field in [
        "arg",
        "source",
        "reason",
        "job",
        "node",
        "model",
        "mark",
        "detail\u{2028}",
        "message",
        "advice",
        "section",
        "recommendation",
        "kind",
        "number",
        "/tmp/snapshot",
    ] {
        let shown = format!("{field}{HOSTILE}");
        assert!(text.contains(&shown), "{shown:?} is not shown as text");
    }
    assert!(
        text.contains("a\u{2028}b\u{2029}c"),
        "the line separators are lost"
    );
    // Section names go into hover titles: attributes, as text.
    assert!(els
        .iter()
        .any(|e| e.attr("data-section") == Some(format!("backward{HOSTILE}").as_str())));
}

#[tokio::test]
async fn a_wide_run_charts_64_ranks_and_maps_them_all() {
    let report = fixtures::wide(512);
    let (dom, els) = opened(&report).await;
    let root = root(&els);
    assert_eq!(root.attr("data-rank-charts"), Some("64"));
    assert_eq!(root.attr("data-heatmap-rows"), Some("512"));
    let heat = by(&els, |e| e.attr("id") == Some("heatmap"));
    assert_eq!(heat[0].attr("data-rows"), Some("512"));
    let more = by(&els, |e| e.attr("data-more") == Some("ranks"));
    assert_eq!(
        more[0].attr("data-more-count"),
        Some("448"),
        "the note on the charts"
    );
    // Ranks with findings are charted first, wherever they are.
    let charted: Vec<&str> = by(&els, |e| e.has_class("rank-chart"))
        .iter()
        .filter_map(|e| e.attr("data-rank"))
        .collect();
    for r in report.ranks.iter().filter(|r| r.leak || r.straggler) {
        assert!(
            charted.contains(&r.rank.to_string().as_str()),
            "rank {} has findings",
            r.rank
        );
    }
    assert!(visible_text(&dom).contains("448 more ranks in the JSON"));
    keep_screenshot(&report, "profile-report-512.png", 2400).await;
}

#[tokio::test]
async fn thousands_of_ranks_share_the_heatmaps_capped_height() {
    let report = fixtures::wide(1500);
    let (_, els) = opened(&report).await;
    assert_eq!(root(&els).attr("data-heatmap-rows"), Some("1500"));
    let heat = by(&els, |e| e.attr("id") == Some("heatmap"));
    assert_eq!(heat[0].attr("data-rows"), Some("1500"));
    let height: u32 = heat[0].attr("height").unwrap().parse().unwrap();
    assert!(height < 1000, "the heatmap is {height} px tall");
}

#[tokio::test]
async fn an_empty_run_says_what_is_missing() {
    let (_, els) = opened(&fixtures::empty()).await;
    let empty: Vec<&str> = by(&els, |e| e.has_class("placeholder"))
        .iter()
        .filter_map(|e| e.attr("data-empty"))
        .collect();
    for what in [
        "timeline",
        "heatmap",
        "sections",
        "host",
        "gpus",
        "ranks-table",
        "alerts",
        "recommendations",
        "marks",
        "snapshots",
    ] {
        assert!(
            empty.contains(&what),
            "no explanation for the empty {what}: {empty:?}"
        );
    }
    assert!(
        by(&els, |e| e.name == "canvas").is_empty(),
        "a blank chart was drawn"
    );
}

#[tokio::test]
async fn non_finite_numbers_do_not_break_the_page() {
    let report = fixtures::non_finite();
    let (_, els) = opened(&report).await;
    assert_eq!(
        root(&els).attr("data-rank-charts"),
        Some(report.ranks.len().to_string().as_str())
    );
}
