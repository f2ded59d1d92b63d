//! Replays public-corpus traces (copied from the project's labelled corpus with their
//! ground-truth labels) and checks every detection against the labels with
//! the corpus scorer's rules: an OOM forecast at least 60 s
//! before the OOM, leak / fragmentation / imbalance alerts naming the labelled
//! rank, a straggler alert within 120 s of the slowdown, and no alert that no
//! label explains.

use std::path::{Path, PathBuf};

use gpumon_core::engine::{Alert, AlertKind, EngineConfig};
use gpumon_trace::replay;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Labels {
    events: Vec<Label>,
}

#[derive(Debug, Deserialize)]
struct Label {
    kind: String,
    job: String,
    rank: u32,
    t: Option<f64>,
    t_start: Option<f64>,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces")
        .join(name)
}

fn replay_alerts(name: &str) -> Vec<Alert> {
    let mut reader = gpumon_trace::open(&fixture(&format!("{name}.jsonl.gz"))).unwrap();
    let mut replay = replay::Replay::new(&EngineConfig::default());
    replay.run(&mut reader, u64::MAX, |_| {}).unwrap();
    let report = replay.report(reader.stats(), reader.source());
    // The one skip allowed: a device's reading past its capacity as a
    // process runs out of memory (counted, named, and left out).
    let skips = &report.summary.skipped_examples;
    assert!(
        skips.iter().all(|s| s.contains("exceeds total")),
        "{name}: {skips:?}"
    );
    assert!(report.summary.invalid_records <= 1, "{name}: {skips:?}");
    report.alerts
}

fn labels(name: &str) -> Labels {
    let text = std::fs::read_to_string(fixture(&format!("{name}.labels.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn first(alerts: &[Alert], kind: AlertKind, job: &str, rank: u32) -> Option<f64> {
    alerts
        .iter()
        .filter(|a| a.kind == kind && a.job.as_deref() == Some(job) && a.rank == Some(rank))
        .map(|a| a.t)
        .reduce(f64::min)
}

/// Checks one trace; returns the OOM lead times.
fn check(name: &str) -> Vec<f64> {
    let alerts = replay_alerts(name);
    let labels = labels(name);
    let mut leads = Vec::new();
    for l in &labels.events {
        let oom_t = labels
            .events
            .iter()
            .filter(|o| o.kind == "oom" && o.job == l.job)
            .filter_map(|o| o.t)
            .reduce(f64::min)
            .unwrap_or(f64::INFINITY);
        match l.kind.as_str() {
            "oom" => {
                let t = first(&alerts, AlertKind::OomPredicted, &l.job, l.rank)
                    .unwrap_or_else(|| panic!("{name}: no OOM forecast for rank {}", l.rank));
                let lead = l.t.unwrap() - t;
                assert!(
                    lead >= 60.0,
                    "{name}: OOM of rank {} forecast only {lead:.0} s ahead",
                    l.rank
                );
                leads.push(lead);
            }
            "straggler" => {
                let start = l.t_start.unwrap();
                let t = first(&alerts, AlertKind::Straggler, &l.job, l.rank)
                    .unwrap_or_else(|| panic!("{name}: straggler rank {} not found", l.rank));
                assert!(
                    (start..=start + 120.0).contains(&t),
                    "{name}: straggler rank {} flagged at {t:.0} s, slowdown began at {start:.0} s",
                    l.rank
                );
            }
            kind => {
                let k = match kind {
                    "leak" => AlertKind::Leak,
                    "fragmentation" => AlertKind::Fragmentation,
                    "imbalance" => AlertKind::Imbalance,
                    other => panic!("unknown label kind {other}"),
                };
                let t = first(&alerts, k, &l.job, l.rank)
                    .unwrap_or_else(|| panic!("{name}: no {kind} alert for rank {}", l.rank));
                assert!(
                    t < oom_t,
                    "{name}: {kind} alert for rank {} after the OOM",
                    l.rank
                );
            }
        }
    }
    for a in &alerts {
        let explained_by: &[&str] = match a.kind {
            AlertKind::OomPredicted => &["oom", "leak", "fragmentation"],
            AlertKind::Leak => &["leak"],
            AlertKind::Fragmentation => &["fragmentation"],
            AlertKind::Imbalance => &["imbalance"],
            AlertKind::Straggler => &["straggler"],
            // A fixed level of the capacity is a fact about the GPU, not a
            // prediction: the corpus labels none, and none is false.
            AlertKind::MemoryLevel => continue,
            // The corpus has no pipeline job: any is false.
            AlertKind::StageImbalance => &[],
            // The corpus has no stall record, so no hang can be judged: any is false.
            AlertKind::Hang => &["hang"],
            // The corpus has no collective waits, so no link can be judged: any is false.
            AlertKind::SlowLink | AlertKind::OutsideMemory => &[],
        };
        let explained = labels.events.iter().any(|l| {
            Some(l.job.as_str()) == a.job.as_deref()
                && Some(l.rank) == a.rank
                && explained_by.contains(&l.kind.as_str())
                && l.t_start
                    .is_none_or(|s| a.kind != AlertKind::Straggler || a.t >= s)
        });
        assert!(
            explained,
            "{name}: false alarm {:?} on rank {:?} at {:.0} s: {}",
            a.kind, a.rank, a.t, a.message
        );
    }
    leads
}

#[test]
fn a_stable_job_raises_no_alert() {
    assert!(check("stable-1").is_empty());
    assert!(replay_alerts("stable-1").is_empty());
}

#[test]
fn a_fast_leak_is_forecast_and_named() {
    let leads = check("leak_fast-1");
    assert_eq!(leads.len(), 1);
}

#[test]
fn fragmentation_is_told_apart_from_a_leak() {
    check("fragmentation-0");
    let alerts = replay_alerts("fragmentation-0");
    assert!(alerts.iter().all(|a| a.kind != AlertKind::Leak));
    let frag = alerts
        .iter()
        .find(|a| a.kind == AlertKind::Fragmentation)
        .unwrap();
    assert!(frag.reclaimable_bytes.unwrap() > 1e9, "{frag:?}");
}

#[test]
fn a_data_loading_straggler_is_named_with_its_section() {
    check("straggler_data-1");
    let alerts = replay_alerts("straggler_data-1");
    let s = alerts
        .iter()
        .find(|a| a.kind == AlertKind::Straggler)
        .unwrap();
    assert_eq!(s.section.as_deref(), Some("data"));
}

#[test]
fn a_combined_incident_finds_leak_imbalance_straggler_and_oom() {
    let leads = check("combo-1");
    assert_eq!(leads.len(), 1);
    // A long warning: the rise becomes visible about 500 s before the OOM.
    assert!(leads[0] >= 300.0, "lead {:.0} s", leads[0]);
}

#[test]
fn a_compute_straggler_in_lockstep_is_named_by_its_forward() {
    // Every rank's step lasts the same; the slow rank's forward is longer
    // and its backward, where its peers wait in DDP's all-reduce, shorter.
    check("straggler_compute-1");
    let alerts = replay_alerts("straggler_compute-1");
    let s = alerts
        .iter()
        .find(|a| a.kind == AlertKind::Straggler)
        .unwrap();
    assert_eq!((s.rank, s.section.as_deref()), (Some(2), Some("forward")));
    assert!(s.message.contains("wait"), "{}", s.message);
}

#[test]
fn a_leak_from_the_first_steps_is_forecast_a_minute_ahead_and_named() {
    for name in ["oom_early-0", "oom_early-1"] {
        let leads = check(name);
        assert_eq!(leads.len(), 1, "{name}");
    }
}
