//! The web dashboard in a real browser: `gpumon demo` on loopback, headless
//! Chromium (Debian's `chromium`) loading the page from the coordinator.
//!
//! - the job page of `demo-job` shows a row for every rank, the rank x time
//!   heatmap with a row per rank, the memory chart, and every alert the API
//!   reports active, with its kind and rank; among them the demo's planted
//!   leak (rank 2), imbalance (rank 0) and straggler (rank 5);
//! - the overview shows every node and GPU the API reports, the job, and the
//!   active alerts; the alerts page lists them too;
//! - screenshots of the job page and the overview are kept in
//!   `target/test-artifacts/` for people to look at.
//!
//! What the DOM must show is taken from the API at the time of the test,
//! never from the page. Every wait is bounded; the demo is killed at the end
//! (and on a failure, when its guard drops).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gpumon_proto::api::{Alert, AlertsBody, ApiErrorBody, ConfigBody, JobWithAnalysis, NodesView};
use support::browser::{assert_png, dump_dom, require_chromium, screenshot};
use support::chromium::{find, parse_tags, Tag};
use support::{artifacts_dir, get, gpumon, wait_for, Proc};

const JOB: &str = "demo-job";
const RANKS: u32 = 8;
/// What the demo plants: (alert kind, rank) of `demo-job`.
const PLANTED: [(&str, u32); 3] = [("leak", 2), ("imbalance", 0), ("straggler", 5)];
/// How long the demo may take to raise them (it aims at about 40 s; a
/// loaded machine runs its simulation slower).
const PLANTED_WITHIN: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_every_rank_and_the_planted_alerts() {
    require_chromium().await;
    let mut cmd = gpumon();
    cmd.args(["demo", "--duration", "600", "--listen", "127.0.0.1:0"]);
    let mut demo = Proc::spawn(cmd);
    let url = demo.url_line().await;
    // Keep reading the demo's output so that it never blocks on a full pipe.
    let Proc {
        mut child,
        mut lines,
    } = demo;
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    wait_for(
        Duration::from_secs(60),
        "every rank with history",
        || async {
            let job: JobWithAnalysis = get(&format!("{url}/api/v1/jobs/{JOB}"))
                .await
                .map_err(|e| e.to_string())?;
            let seen: BTreeSet<u32> = job
                .detail
                .ranks
                .iter()
                .filter(|r| r.history.len() >= 3)
                .map(|r| r.view.rank)
                .collect();
            if seen == (0..RANKS).collect() {
                Ok(())
            } else {
                Err(format!("ranks with history: {seen:?}"))
            }
        },
    )
    .await;
    let started = std::time::Instant::now();
    wait_for(PLANTED_WITHIN, "the demo's planted alerts", || async {
        let active = active_alerts(&url).await?;
        let missing: Vec<_> = PLANTED
            .iter()
            .filter(|(kind, rank)| !active.values().any(|a| is(a, kind, *rank)))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            let have: Vec<_> = active.values().map(|a| (&a.kind, a.rank)).collect();
            Err(format!("missing {missing:?}; active: {have:?}"))
        }
    })
    .await;
    eprintln!(
        "the planted alerts were active after {:?}",
        started.elapsed()
    );
    // Every simulated rank takes the snapshots "warm" and "warm+60".
    wait_for(
        Duration::from_secs(120),
        "two snapshots of every rank",
        || async {
            let list: serde_json::Value = get(&format!("{url}/api/v1/jobs/{JOB}/snapshots"))
                .await
                .map_err(|e| e.to_string())?;
            let whole: Vec<usize> = list["snapshots"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s["ranks"].as_array().map_or(0, Vec::len))
                .collect();
            (whole.len() >= 2 && whole.iter().all(|&n| n == RANKS as usize))
                .then_some(())
                .ok_or(format!("ranks per snapshot: {whole:?}"))
        },
    )
    .await;
    let nodes: NodesView = get(&format!("{url}/api/v1/nodes")).await.unwrap();

    let before = active_alerts(&url).await.unwrap();
    let job_dom = dump_dom(&format!("{url}/#/jobs/{JOB}")).await;
    let overview_dom = dump_dom(&format!("{url}/#/")).await;
    let alerts_dom = dump_dom(&format!("{url}/#/alerts")).await;
    let after = active_alerts(&url).await.unwrap();
    // Active before and after the pages were read: active while they were.
    let steady: Vec<&Alert> = before
        .values()
        .filter(|a| after.contains_key(&a.id))
        .collect();

    // The job page.
    let tags = parse_tags(&job_dom);
    assert_live(&tags, "job page");
    for rank in 0..RANKS {
        assert!(
            find(&tags, |t| t.has_class("rank-row")
                && t.attr("data-rank") == Some(&rank.to_string()))
            .is_some(),
            "the job page has no row for rank {rank}"
        );
    }
    assert!(
        find(&tags, |t| t.name == "td" && t.has_class("limit")).is_some(),
        "the rank table says what limit each rank's memory meets first"
    );
    let verdict = find(&tags, |t| t.has_class("step-verdict"))
        .expect("the job page says what bounds the job's step");
    let bound = verdict.attr("data-bound").unwrap_or("");
    assert!(
        ["input", "compute", "communication", "host"].contains(&bound),
        "{bound:?}"
    );
    let heatmap = find(&tags, |t| {
        t.name == "canvas" && t.attr("id") == Some("heatmap")
    })
    .expect("the job page has the heatmap");
    assert_eq!(heatmap.attr("data-rows"), Some(RANKS.to_string().as_str()));
    assert!(
        find(&tags, |t| t.has_class("uplot")).is_some(),
        "the job page has the memory chart"
    );
    for a in steady.iter().filter(|a| a.job.as_deref() == Some(JOB)) {
        assert_alert_shown(&tags, a, "job page");
    }
    // The snapshot comparison: the two snapshots picked, a row per rank.
    for which in ["a", "b"] {
        assert!(
            find(&tags, |t| t.name == "select"
                && t.attr("data-which") == Some(which))
            .is_some(),
            "the job page has no snapshot picker {which}"
        );
    }
    for rank in 0..RANKS {
        assert!(
            find(&tags, |t| t.has_class("snap-row")
                && t.attr("data-rank") == Some(&rank.to_string()))
            .is_some(),
            "the snapshot comparison has no row for rank {rank}"
        );
    }
    assert!(find(&tags, |t| t.has_class("snap-total")).is_some());
    for (kind, rank) in PLANTED {
        assert!(
            find(&tags, |t| t.attr("data-alert-kind") == Some(kind)
                && t.attr("data-rank") == Some(&rank.to_string()))
            .is_some(),
            "the job page does not show the planted {kind} alert on rank {rank}"
        );
    }

    // The overview.
    let tags = parse_tags(&overview_dom);
    assert_live(&tags, "overview");
    assert!(!nodes.nodes.is_empty());
    for node in &nodes.nodes {
        assert!(
            find(&tags, |t| t.has_class("node")
                && t.attr("data-node") == Some(&node.node))
            .is_some(),
            "the overview does not show node {}",
            node.node
        );
        for gpu in &node.gpus {
            assert!(
                find(&tags, |t| t.has_class("gpu")
                    && t.attr("data-gpu-uuid") == Some(&gpu.uuid))
                .is_some(),
                "the overview does not show GPU {} of {}",
                gpu.uuid,
                node.node
            );
        }
    }
    assert!(
        find(&tags, |t| t.has_class("job-row")
            && t.attr("data-job") == Some(JOB))
        .is_some(),
        "the overview does not list {JOB}"
    );
    for a in &steady {
        assert_alert_shown(&tags, a, "overview");
    }

    // The alerts page.
    let tags = parse_tags(&alerts_dom);
    assert_live(&tags, "alerts page");
    for a in &steady {
        assert_alert_shown(&tags, a, "alerts page");
    }

    // The settings page, after a live change.
    change_settings(
        &url,
        serde_json::json!({"set": {"straggler.min_loss_ms": 7}}),
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the change on this replica",
        || async {
            let body: ConfigBody = get(&format!("{url}/api/v1/config"))
                .await
                .map_err(|e| e.to_string())?;
            let changed = body.cluster_overrides.get("straggler.min_loss_ms");
            (changed.map(String::as_str) == Some("7"))
                .then_some(())
                .ok_or(format!("{:?}", body.cluster_overrides))
        },
    )
    .await;
    let tags = parse_tags(&dump_dom(&format!("{url}/#/settings")).await);
    assert_live(&tags, "settings page");
    let row = find(&tags, |t| {
        t.has_class("setting-row") && t.attr("data-key") == Some("straggler.min_loss_ms")
    })
    .expect("the settings page has a row for straggler.min_loss_ms");
    assert_eq!(
        (row.attr("data-value"), row.attr("data-source")),
        (Some("7"), Some("cluster"))
    );

    // Pictures for people.
    let artifacts = artifacts_dir();
    for (name, route) in [
        ("dashboard-job.png", format!("#/jobs/{JOB}")),
        ("dashboard-overview.png", "#/".into()),
    ] {
        let path = artifacts.join(name);
        screenshot(&format!("{url}/{route}"), &path, (1400, 2000)).await;
        assert_png(&path, 1400, 2000);
        eprintln!("screenshot kept at {}", path.display());
    }

    let _ = child.kill().await;
    drain.abort();
}

/// `POST /api/v1/config` with `body`, to the leader (a follower's 421 names it).
async fn change_settings(url: &str, body: serde_json::Value) {
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let mut target = url.to_owned();
    for _ in 0..3 {
        let resp = client
            .post(format!("{target}/api/v1/config"))
            .json(&body)
            .send()
            .await
            .unwrap();
        if resp.status().is_success() {
            return;
        }
        let status = resp.status();
        let err: ApiErrorBody = resp.json().await.unwrap();
        match err.leader_url {
            Some(leader) if status == 421 => target = leader,
            _ => panic!("POST {target}/api/v1/config: {status}: {}", err.message),
        }
    }
    panic!("no leader took the settings change");
}

fn is(a: &Alert, kind: &str, rank: u32) -> bool {
    a.job.as_deref() == Some(JOB) && a.kind.as_str() == kind && a.rank == Some(rank)
}

/// Active alerts by id.
async fn active_alerts(url: &str) -> Result<BTreeMap<u64, Alert>, String> {
    let body: AlertsBody = get(&format!("{url}/api/v1/alerts?active=true"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(body.alerts.into_iter().map(|a| (a.id, a)).collect())
}

#[track_caller]
fn assert_live(tags: &[Tag], page: &str) {
    let conn = find(tags, |t| t.attr("id") == Some("conn")).expect("the header's connection state");
    assert_eq!(
        conn.attr("data-conn"),
        Some("ok"),
        "the {page} did not load its data from the API"
    );
}

#[track_caller]
fn assert_alert_shown(tags: &[Tag], a: &Alert, page: &str) {
    let el = find(tags, |t| t.attr("data-alert-id") == Some(&a.id.to_string()))
        .unwrap_or_else(|| panic!("the {page} does not show active alert {a:?}"));
    assert_eq!(
        el.attr("data-alert-kind"),
        Some(a.kind.as_str()),
        "{page}: {a:?}"
    );
    assert_eq!(
        el.attr("data-rank").map(str::to_owned),
        a.rank.map(|r| r.to_string()),
        "{page}: {a:?}"
    );
    assert_eq!(
        el.attr("data-active"),
        Some("true"),
        "{page}: {a:?} is active"
    );
}
