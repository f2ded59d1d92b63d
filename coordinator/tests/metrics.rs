//! `/metrics` of a real coordinator over loopback HTTP: the per-rank series
//! agree with the JSON API, ranks pushed with a Kubernetes placement have
//! it in the API and a `gpumon_rank_info` series, every alert kind and
//! severity is reported, the
//! classic text passes `promtool check metrics`, a job's series go when it
//! ends; a real Prometheus server scrapes the coordinator and answers a
//! query for a rank's memory; and the shipped scrape config and rules in
//! `deploy/prometheus/` pass `promtool check`.
//!
//! Needs `/usr/bin/prometheus` and `/usr/bin/promtool` (Debian package
//! `prometheus`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod support;
use support::prometheus::{promtool, Prometheus, INSTALL};
use support::trio::Trio;
use support::{leak_batch, push, start_with};

use gpumon_core::engine::AlertKind;
use gpumon_proto::{
    AgentMessage, AllocRecord, AllocStats, BytesStat, GaugeStat, GpuInfo, GpuWindow, HookRecord,
    PodPlacement, ProcPlacement, ProcWindow, PushBatch, RankInfo, StepRecord,
};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T0_MS: u64 = 1_700_000_000_000;
const WINDOW_MS: u64 = 2_000;
const RANKS: u32 = 4;
const OPENMETRICS: &str = "application/openmetrics-text";
/// Bound on every wait for another process.
const WITHIN: Duration = Duration::from_secs(60);

/// Batches pushed while the job runs: 10 windows of 2 s each.
const BATCHES: u64 = 12;
/// Rank whose memory grows toward an OOM.
const GROWING: u32 = 3;

/// Memory of rank `rank`'s process `t_s` seconds in: each rank its own
/// size, and rank [`GROWING`] gains 40 MiB/s.
fn used(rank: u32, t_s: u64) -> u64 {
    let growth = if rank == GROWING { 40 * MIB * t_s } else { 0 };
    (10 + 3 * u64::from(rank)) * GIB + 7 * MIB + growth
}

/// Start and end of window `i` (from 0), ms.
fn window_ms(i: u64) -> (u64, u64) {
    let start = T0_MS + i * WINDOW_MS;
    (start, start + WINDOW_MS - 100)
}

/// Ranks below this run in pods (the agent found their placement); the
/// others do not.
const IN_PODS: u32 = 3;

/// The pod of rank `rank`'s process (pid `100 + rank`).
fn pod(rank: u32) -> PodPlacement {
    PodPlacement {
        pod_uid: Some(format!("7a1b2c3d-0000-4000-8000-00000000000{rank}")),
        pod_name: Some(format!("trainer-{rank}")),
        namespace: Some("ml-research".into()),
        container_id: Some(format!("{:064x}", 0xc0ffee00 + rank)),
        container_name: (rank != 0).then(|| "pytorch".to_owned()),
    }
}

/// Batch `seq` (from 1) of `job` with ten windows; `live` false: every
/// process has left its GPU, which ends the ranks. Live, it carries the
/// placement of the ranks in pods (protocol version 2).
fn batch(job: &str, seq: u64, live: bool) -> AgentMessage {
    let mut windows = Vec::new();
    let mut hook = Vec::new();
    for i in 0..10 {
        let (start_ms, end_ms) = window_ms((seq - 1) * 10 + i);
        let t_s = (start_ms - T0_MS) / 1000;
        for g in 0..RANKS {
            windows.push(GpuWindow {
                gpu: GpuInfo {
                    uuid: format!("GPU-{job}-{g}"),
                    index: g,
                    name: "H100".into(),
                    total_bytes: 80 * GIB,
                },
                start_ms,
                end_ms,
                samples: 4,
                used_bytes: BytesStat::single(if live { used(g, t_s) + GIB } else { GIB }),
                reserved_bytes: None,
                util_pct: Some(GaugeStat {
                    min: 50.0,
                    max: 50.0,
                    last: 50.0,
                    mean: 50.0,
                }),
                sm_clock_mhz: None,
                power_w: None,
                procs: live
                    .then(|| ProcWindow {
                        pid: 100 + g,
                        used_bytes: BytesStat::single(used(g, t_s)),
                        rank: Some(RankInfo {
                            job: job.into(),
                            rank: g,
                            local_rank: g,
                            world_size: RANKS,
                            master_addr: None,
                            master_port: None,
                        }),
                    })
                    .into_iter()
                    .collect(),
            });
            if live {
                hook.push(HookRecord::Alloc(AllocRecord {
                    limit: None,
                    t_ms: end_ms,
                    job: job.into(),
                    rank: g,
                    stats: AllocStats {
                        allocated: used(g, t_s) - GIB,
                        reserved: used(g, t_s) - MIB,
                        ..AllocStats::default()
                    },
                }));
                hook.push(HookRecord::Step(StepRecord {
                    group: None,
                    waits: Default::default(),
                    collectives: Vec::new(),
                    t_ms: end_ms,
                    job: job.into(),
                    rank: g,
                    step: (seq - 1) * 10 + i + 1,
                    duration_ms: 250.0,
                    sections: vec![("forward".into(), 100.0), ("backward".into(), 140.0)],
                }));
            }
        }
    }
    let placements = (0..IN_PODS)
        .filter(|_| live)
        .map(|rank| ProcPlacement {
            pid: 100 + rank,
            placement: pod(rank),
        })
        .collect();
    let batch = PushBatch {
        agent_id: format!("agent-{job}"),
        incarnation: 1,
        seq,
        node: "node-m".into(),
        dropped_batches: 0,
        windows,
        hook,
        acks: Vec::new(),
    };
    AgentMessage::push(gpumon_proto::PushBatchV2 {
        batch,
        placements,
        host: None,
    })
}

/// One sample of an exposition text.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of an exposition text (OpenMetrics or classic); panics on a
/// line it cannot read, which is a finding in itself.
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                (name, parse_labels(body, line))
            }
        };
        out.push(Sample {
            name: name.into(),
            labels,
            value: value
                .parse()
                .unwrap_or_else(|_| panic!("value in {line:?}")),
        });
    }
    out
}

fn parse_labels(mut body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    while !body.is_empty() {
        let (key, rest) = body.split_once("=\"").unwrap_or_else(|| panic!("{line:?}"));
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => panic!("{line:?}"),
                },
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label in {line:?}"),
            }
        };
        labels.insert(key.to_owned(), value);
        body = rest[end + 1..].trim_start_matches(',');
    }
    labels
}

/// Samples named `name` whose labels include every pair of `with`.
fn find<'a>(samples: &'a [Sample], name: &str, with: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
        .collect()
}

/// `/metrics` with an `Accept` header: the content type and the text.
async fn scrape(url: &str, accept: &str) -> (String, String) {
    let resp = support::http()
        .get(format!("{url}/metrics"))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    (content_type, resp.text().await.unwrap())
}

async fn get_json(url: &str, path: &str) -> Value {
    support::get_json(format!("{url}{path}")).await
}

/// A rank's placement as pushed, in the JSON API and in `gpumon_rank_info`
/// (with the rank's labels and those placement fields pushed); none for a
/// rank outside the pods.
async fn assert_placement(url: &str, samples: &[Sample], job: &str, rank: u32) {
    let detail = get_json(url, &format!("/api/v1/jobs/{job}")).await;
    let view = detail["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == rank)
        .unwrap()["placement"]
        .clone();
    let r = rank.to_string();
    let info = find(samples, "gpumon_rank_info", &[("job", job), ("rank", &r)]);
    if rank >= IN_PODS {
        assert_eq!(view, Value::Null, "rank {rank}");
        assert!(info.is_empty(), "{info:?}");
        return;
    }
    let p = pod(rank);
    assert_eq!(view, serde_json::to_value(&p).unwrap(), "rank {rank}");
    assert_eq!(info.len(), 1, "rank {rank}: {info:?}");
    assert_eq!(info[0].value, 1.0);
    let want: BTreeMap<String, String> = [
        ("job", job.to_owned()),
        ("rank", r),
        ("node", "node-m".into()),
        ("gpu", rank.to_string()),
    ]
    .into_iter()
    .chain(
        [
            ("namespace", p.namespace),
            ("pod", p.pod_name),
            ("container", p.container_name),
            ("uid", p.pod_uid),
            ("container_id", p.container_id),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?))),
    )
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(info[0].labels, want, "rank {rank}");
}

/// A rank's `used_bytes` as the JSON API shows it.
async fn api_used_bytes(url: &str, job: &str, rank: u64) -> u64 {
    let detail = get_json(url, &format!("/api/v1/jobs/{job}")).await;
    detail["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == rank)
        .unwrap_or_else(|| panic!("rank {rank} in {detail}"))["used_bytes"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn metrics_follow_the_replicated_state_and_pass_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_with(dir.path(), |_| {}).await;
    let url = coordinator.api_url();
    let job = "job-m";
    for seq in 1..=BATCHES {
        push(&url, &batch(job, seq, true)).await;
    }

    let (content_type, text) = scrape(&url, OPENMETRICS).await;
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let samples = parse(&text);

    // Per-rank memory equals the API's, with job and rank labels.
    for rank in 0..RANKS {
        let r = rank.to_string();
        let series = find(
            &samples,
            "gpumon_rank_memory_used_bytes",
            &[("job", job), ("rank", &r)],
        );
        assert_eq!(series.len(), 1, "one series for rank {rank}: {series:?}");
        assert_eq!(
            series[0].value,
            api_used_bytes(&url, job, u64::from(rank)).await as f64
        );
        assert_eq!(series[0].labels["node"], "node-m");
        let allocated = find(
            &samples,
            "gpumon_rank_memory_allocated_bytes",
            &[("job", job), ("rank", &r)],
        );
        let last_t_s = (window_ms(BATCHES * 10 - 1).0 - T0_MS) / 1000;
        assert_eq!(allocated[0].value, (used(rank, last_t_s) - GIB) as f64);
        let forward = find(
            &samples,
            "gpumon_rank_section_seconds",
            &[("job", job), ("rank", &r), ("section", "forward")],
        );
        assert_eq!(forward.len(), 1, "{forward:?}");
        assert!((forward[0].value - 0.1).abs() < 1e-9, "{forward:?}");
        assert_placement(&url, &samples, job, rank).await;
    }
    // The growing rank's OOM forecast counts from the data's newest time
    // (the last window's end), not from any clock.
    let detail = get_json(&url, &format!("/api/v1/jobs/{job}")).await;
    let analysis = detail["analysis"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == GROWING)
        .unwrap()
        .clone();
    let predicted = analysis["forecast"]["predicted_oom_t"]
        .as_f64()
        .unwrap_or_else(|| panic!("a forecast for the growing rank: {analysis}"));
    let newest_s = window_ms(BATCHES * 10 - 1).1 as f64 / 1000.0;
    let growing = GROWING.to_string();
    let forecast = find(
        &samples,
        "gpumon_rank_oom_forecast_seconds",
        &[("job", job), ("rank", &growing)],
    );
    assert_eq!(forecast.len(), 1, "{forecast:?}");
    assert!(
        (forecast[0].value - (predicted - newest_s)).abs() < 1e-6,
        "{} vs {predicted} - {newest_s}",
        forecast[0].value
    );
    let risk = ["none", "low", "warning", "high", "critical"]
        .iter()
        .position(|r| analysis["risk"] == *r)
        .unwrap();
    let level = find(
        &samples,
        "gpumon_rank_oom_risk",
        &[("job", job), ("rank", &growing)],
    );
    assert_eq!(level[0].value, risk as f64, "{analysis}");
    let steady = find(
        &samples,
        "gpumon_rank_oom_forecast_seconds",
        &[("rank", "0")],
    );
    assert!(steady.is_empty(), "no forecast, no series: {steady:?}");

    let total = find(
        &samples,
        "gpumon_gpu_memory_total_bytes",
        &[("node", "node-m")],
    );
    assert_eq!(total.len(), RANKS as usize);
    assert!(total.iter().all(|s| s.value == (80 * GIB) as f64));
    let util = find(&samples, "gpumon_gpu_utilization_ratio", &[("gpu", "0")]);
    assert_eq!(util[0].value, 0.5);
    let ranks = find(&samples, "gpumon_job_ranks", &[("job", job)]);
    assert_eq!(ranks[0].value, f64::from(RANKS));
    let applied = find(&samples, "gpumon_ingest_batches_applied_total", &[]);
    assert_eq!(applied[0].value, BATCHES as f64);
    assert_eq!(find(&samples, "gpumon_raft_is_leader", &[])[0].value, 1.0);
    let up = find(
        &samples,
        "gpumon_cluster_agent_up",
        &[("agent", "agent-job-m")],
    );
    assert_eq!(up[0].value, 1.0);
    assert_eq!(
        find(&samples, "gpumon_cluster_series_exported", &[])[0].value,
        1.0,
        "the leader exports the cluster series"
    );
    // The agent is up, so no rank is lost.
    let lost = find(&samples, "gpumon_rank_lost", &[("job", job)]);
    assert_eq!(lost.len(), RANKS as usize, "{lost:?}");
    assert!(lost.iter().all(|s| s.value == 0.0), "{lost:?}");
    // No coordinator series is named like an agent's.
    let agentish: Vec<_> = samples
        .iter()
        .filter(|s| s.name.starts_with("gpumon_agent_"))
        .collect();
    assert!(agentish.is_empty(), "{agentish:?}");
    // Each active alert has its own series, with its severity now and
    // when it first fired, as the API shows it.
    let alerts = get_json(&url, "/api/v1/alerts?active=true").await;
    let alerts = alerts["alerts"].as_array().unwrap();
    let active = find(&samples, "gpumon_alert_active", &[]);
    assert_eq!(active.len(), alerts.len(), "{active:?} vs {alerts:?}");
    for a in alerts {
        let rank = a["rank"].to_string();
        let kind = a["kind"].as_str().unwrap();
        let severity = a["severity"].as_str().unwrap();
        let with = [("kind", kind), ("severity", severity), ("rank", &rank)];
        assert_eq!(find(&samples, "gpumon_alert_active", &with).len(), 1, "{a}");
        let started = find(&samples, "gpumon_alert_started_timestamp_seconds", &with);
        assert_eq!(started[0].value, a["t"].as_f64().unwrap(), "{a}");
    }

    // Every alert kind and severity has a series, firing or not.
    for kind in AlertKind::ALL {
        for severity in ["warning", "high", "critical"] {
            let s = find(
                &samples,
                "gpumon_alerts_firing",
                &[("kind", kind.as_str()), ("severity", severity)],
            );
            assert_eq!(s.len(), 1, "{} {severity}", kind.as_str());
        }
    }

    // The classic text passes promtool's lint (which reads only that
    // format; a real Prometheus reads the OpenMetrics answer, below) and
    // carries the same samples.
    let (content_type, classic) = scrape(&url, "text/plain").await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let (ok, report) = promtool(&["check", "metrics"], &classic);
    assert!(ok, "promtool check metrics (classic): {report}\n{classic}");
    assert_eq!(parse(&classic), samples);
    // What curl gets by default is the classic text.
    let (content_type, default) = scrape(&url, "*/*").await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let (ok, report) = promtool(&["check", "metrics"], &default);
    assert!(ok, "promtool check metrics (default): {report}");

    // The job ends: every series about it goes.
    push(&url, &batch(job, BATCHES + 1, false)).await;
    let detail = get_json(&url, &format!("/api/v1/jobs/{job}")).await;
    assert_eq!(detail["live"], false, "{detail}");
    let (_, text) = scrape(&url, OPENMETRICS).await;
    let after = parse(&text);
    let left: Vec<_> = after
        .iter()
        .filter(|s| s.labels.get("job").map(String::as_str) == Some(job))
        .filter(|s| !s.name.starts_with("gpumon_alert_"))
        .collect();
    assert!(left.is_empty(), "series of the ended job: {left:?}");
    // Alerts are series for as long as the engine keeps them active.
    let still = get_json(&url, "/api/v1/alerts?active=true").await;
    assert_eq!(
        find(&after, "gpumon_alert_active", &[]).len(),
        still["alerts"].as_array().unwrap().len(),
        "{still}"
    );
    assert_eq!(find(&after, "gpumon_gpu_memory_used_bytes", &[]).len(), 4);
    coordinator.shutdown().await;
}

#[tokio::test]
async fn a_real_prometheus_scrapes_a_rank_memory() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_with(&dir.path().join("coordinator"), |_| {}).await;
    let url = coordinator.api_url();
    let job = "job-p";
    push(&url, &batch(job, 1, true)).await;
    let expected = api_used_bytes(&url, job, 2).await;

    let target = url.trim_start_matches("http://");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpumon-coordinator\n    honor_labels: true\n    \
             scrape_interval: 1s\n    scrape_timeout: 1s\n    static_configs:\n      \
             - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let prometheus = Prometheus::start(&config, &dir.path().join("tsdb"));
    let web = prometheus.web.clone();

    let query = format!("gpumon_rank_memory_used_bytes{{job=\"{job}\",rank=\"2\"}}");
    let encoded = serde_urlencoded::to_string([("query", query.as_str())]).unwrap();
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let deadline = tokio::time::Instant::now() + WITHIN;
    let answer = loop {
        let last = match client
            .get(format!("http://{web}/api/v1/query?{encoded}"))
            .send()
            .await
        {
            Ok(resp) => {
                let body: Value = resp.json().await.unwrap_or_default();
                match body["data"]["result"].as_array() {
                    Some(r) if !r.is_empty() => break body,
                    _ => body.to_string(),
                }
            }
            Err(e) => e.to_string(),
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus did not answer {query} within {WITHIN:?}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let result = answer["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{answer}");
    let series = &result[0];
    assert_eq!(
        series["metric"]["job"], job,
        "honor_labels keeps the job label"
    );
    assert_eq!(series["metric"]["rank"], "2");
    let value: f64 = series["value"][1].as_str().unwrap().parse().unwrap();
    assert_eq!(value, expected as f64);
    coordinator.shutdown().await;
}

#[test]
fn the_shipped_scrape_config_and_rules_pass_promtool() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus");
    for args in [
        ["check", "config", "prometheus.yml"],
        ["check", "rules", "rules.yml"],
    ] {
        let out = Command::new("/usr/bin/promtool")
            .args(args)
            .current_dir(&deploy)
            .output()
            .unwrap_or_else(|e| panic!("cannot run /usr/bin/promtool ({e}); {INSTALL}"));
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Snapshots and digests copy the state under its lock; `/metrics` shows
/// how long each copy held it, so an operator sees pushes never wait long.
#[tokio::test]
async fn state_copies_for_snapshots_and_digests_are_timed_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_with(dir.path(), |c| c.snapshot_every_entries = 5).await;
    let url = coordinator.api_url();
    for seq in 1..=BATCHES {
        push(&url, &batch("job-c", seq, true)).await;
    }
    let mut raft = coordinator.raft().metrics();
    tokio::time::timeout(WITHIN, raft.wait_for(|m| m.snapshot.is_some()))
        .await
        .expect("a snapshot in time")
        .unwrap();
    // A digest: /api/v1/raft carries the state's.
    get_json(&url, "/api/v1/raft").await;

    let (_, text) = scrape(&url, OPENMETRICS).await;
    let samples = parse(&text);
    for why in ["snapshot", "digest"] {
        let count = find(&samples, "gpumon_state_copy_seconds_count", &[("for", why)]);
        assert_eq!(count.len(), 1, "{why}: {count:?}");
        assert!(count[0].value >= 1.0, "no {why} copy counted");
        let buckets = find(
            &samples,
            "gpumon_state_copy_seconds_bucket",
            &[("for", why)],
        );
        let inf = buckets
            .iter()
            .find(|s| s.labels["le"] == "+Inf")
            .expect("an +Inf bucket");
        assert_eq!(
            inf.value, count[0].value,
            "{why}: cumulative buckets end at the count"
        );
    }
    let (_, classic) = scrape(&url, "text/plain").await;
    let (ok, out) = promtool(&["check", "metrics"], &classic);
    assert!(ok, "promtool check metrics: {out}");
}

// ---- which replica exports what --------------------------------------------

/// Families every replica serves about itself; a follower serves only these.
const REPLICA_LOCAL: [&str; 8] = [
    "gpumon_cluster_series_exported",
    "gpumon_raft_",
    "gpumon_ingest_pushes_rejected_total",
    "gpumon_ingest_agent_id_conflicts_total",
    "gpumon_api_requests_unauthorized_total",
    "gpumon_notification",
    "gpumon_state_copy_seconds",
    "gpumon_build_info",
];

#[tokio::test]
async fn only_the_leader_exports_the_cluster_series() {
    let trio = Trio::start().await;
    let leader = trio.leader().await;
    for seq in 1..=3 {
        push(&trio.nodes[leader].api_url(), &leak_batch(seq)).await;
    }
    let committed = trio.nodes[leader]
        .raft()
        .metrics()
        .borrow()
        .last_applied
        .unwrap()
        .index;
    // Every replica holds the same state: the followers' answers differ by
    // rule, not by lag.
    trio.applied(committed).await;

    let mut rank_series = Vec::new();
    for (i, node) in trio.nodes.iter().enumerate() {
        let url = node.api_url();
        let (_, text) = tokio::time::timeout(Duration::from_secs(5), scrape(&url, OPENMETRICS))
            .await
            .unwrap_or_else(|_| panic!("replica {i} answers /metrics within 5 s"));
        assert!(
            text.ends_with("# EOF\n"),
            "replica {i}: OpenMetrics ends with # EOF"
        );
        let (_, classic) = scrape(&url, "text/plain").await;
        let (ok, report) = promtool(&["check", "metrics"], &classic);
        assert!(ok, "replica {i}, classic: {report}\n{classic}");
        let samples = parse(&text);
        let exported = find(&samples, "gpumon_cluster_series_exported", &[]);
        assert_eq!(exported.len(), 1, "replica {i}");
        assert_eq!(
            find(&samples, "gpumon_raft_term", &[]).len(),
            1,
            "replica {i}"
        );
        if i == leader {
            assert_eq!(exported[0].value, 1.0);
            assert!(!find(&samples, "gpumon_alerts_firing", &[]).is_empty());
        } else {
            assert_eq!(exported[0].value, 0.0, "replica {i} follows");
            let cluster: Vec<_> = samples
                .iter()
                .filter(|s| !REPLICA_LOCAL.iter().any(|p| s.name.starts_with(p)))
                .collect();
            assert!(cluster.is_empty(), "follower {i} serves {cluster:?}");
            assert!(
                text.len() < 32 * 1024,
                "follower {i} answers {} bytes",
                text.len()
            );
        }
        rank_series.extend(
            find(
                &samples,
                "gpumon_rank_memory_used_bytes",
                &[("job", "job-x"), ("rank", "2")],
            )
            .into_iter()
            .cloned(),
        );
    }
    assert_eq!(
        rank_series.len(),
        1,
        "one series for rank 2 across the replicas: {rank_series:?}"
    );
    trio.shutdown().await;
}

// ---- the shipped rules -------------------------------------------------------

/// Values of `key: value` lines (after `- ` or not) in a YAML text we ship.
fn yaml_values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .collect()
}

/// `promtool test rules` passes on deploy/prometheus/tests/, every alert
/// and recording rule is exercised there, every alert kind the coordinator
/// raises has its rule under the name the notifier posts to Alertmanager,
/// and severities are only critical, warning and info.
#[test]
fn every_shipped_rule_is_unit_tested_and_named_like_the_pushed_alerts() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus");
    let tests_dir = deploy.join("tests");
    let mut test_files: Vec<String> = std::fs::read_dir(&tests_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yml"))
        .collect();
    test_files.sort();
    assert!(
        !test_files.is_empty(),
        "no tests in {}",
        tests_dir.display()
    );
    let mut args = vec!["test".to_owned(), "rules".to_owned()];
    args.extend(test_files.iter().cloned());
    let out = Command::new("/usr/bin/promtool")
        .args(&args)
        .current_dir(&tests_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run /usr/bin/promtool ({e}); {INSTALL}"));
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let rules = std::fs::read_to_string(deploy.join("rules.yml")).unwrap();
    let tests: String = test_files
        .iter()
        .map(|f| std::fs::read_to_string(tests_dir.join(f)).unwrap())
        .collect();
    let tested_alerts = yaml_values(&tests, "alertname");
    let tested_exprs = yaml_values(&tests, "expr");
    let alerts = yaml_values(&rules, "alert");
    for alert in &alerts {
        assert!(tested_alerts.contains(alert), "{alert} has no test");
    }
    for record in yaml_values(&rules, "record") {
        assert!(
            tested_exprs.iter().any(|e| e.contains(&record)),
            "{record} has no test"
        );
    }
    for kind in AlertKind::ALL {
        let alert = gpumon_core::engine::Subject::Rank("j".into(), 0).alert(
            kind,
            0.0,
            gpumon_core::engine::Severity::High,
        );
        let name = gpumon_coordinator::notify::payload::alertmanager::alertname(&alert);
        let mirrors: Vec<_> = rules
            .lines()
            .filter(|l| l.contains(&format!("kind=\"{}\"", kind.as_str())))
            .collect();
        assert!(alerts.contains(&name), "no rule {name} for {kind:?}");
        assert_eq!(mirrors.len(), 1, "one rule for {kind:?}: {mirrors:?}");
    }
    for severity in yaml_values(&rules, "severity") {
        let ok = ["critical", "warning", "info"].contains(&severity.as_str())
            || severity.starts_with("&severity") // the mapping below, checked by the tests
            || severity == "*severity";
        assert!(ok, "severity {severity:?}");
    }
}

/// With `alerting`, only ranks with an active alert get per-rank series;
/// the others are counted as left out, and the job's series stay.
#[tokio::test]
async fn with_alerting_rank_series_only_alerting_ranks_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_with(dir.path(), |c| {
        c.metrics_rank_series = gpumon_coordinator::config::RankSeries::Alerting;
    })
    .await;
    let url = coordinator.api_url();
    for seq in 1..=20 {
        push(&url, &support::leak_batch(seq)).await;
    }
    let alerts = get_json(&url, "/api/v1/alerts?active=true").await;
    let alerting: std::collections::BTreeSet<String> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["rank"].as_u64().map(|r| r.to_string()))
        .collect();
    assert_eq!(
        alerting,
        ["2".to_owned()].into(),
        "the leak fires on rank 2 only"
    );

    let (_, text) = scrape(&url, "text/plain").await;
    let samples = parse(&text);
    let ranks: std::collections::BTreeSet<String> =
        find(&samples, "gpumon_rank_memory_used_bytes", &[])
            .iter()
            .map(|s| s.labels["rank"].clone())
            .collect();
    assert_eq!(ranks, alerting);
    let omitted = find(&samples, "gpumon_metrics_ranks_omitted", &[]);
    assert_eq!(omitted[0].value, 3.0);
    assert_eq!(
        find(&samples, "gpumon_job_ranks", &[("job", "job-x")]).len(),
        1
    );
    coordinator.shutdown().await;
}
