//! The Grafana dashboard `deploy/grafana/gpumon.json` against what gpumon
//! really exports.
//!
//! The dashboard is read as JSON: every panel, the panels of collapsed rows
//! included, must have a PromQL query, and every datasource in it must be
//! the `${datasource}` template variable. Then a real Prometheus scrapes a
//! live three-replica cluster fed with a leaking job (with hook records, so
//! the allocator, step and section series exist), and every query of the
//! dashboard, its template variables replaced by the scenario's values, must
//! parse and return at least one series as an instant query, and as a range
//! query where the panel draws over time. Prometheus also scrapes the leader
//! a second time under another `instance`, as around a failover when two
//! replicas both answer as leader: the counts must not double, so every
//! query must aggregate the `instance` label away (the per-replica Raft
//! queries excepted, which keep it on purpose).
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod support;
use support::prometheus::Prometheus;
use support::trio::Trio;
use support::{leak_batch, push, GIB, T0_MS, WINDOW_MS};

use gpumon_proto::{
    AgentMessage, AgentMessageV1, AllocRecord, AllocStats, GaugeStat, HookRecord, StepRecord,
};
use serde_json::{json, Value};

/// Bound on every wait for another process.
const WITHIN: Duration = Duration::from_secs(60);
/// The job, node and ranks `support::leak_batch` reports.
const JOB: &str = "job-x";
const NODE: &str = "node-a";
const RANKS: usize = 4;
/// 20 batches x 15 windows x 2 s: rank 2 is flagged leaking and forecast
/// out of memory.
const BATCHES: u64 = 20;
/// What Grafana would put in the built-in variables: the range queries run
/// over `RANGE_S` with a step of `STEP_S`.
const RATE_INTERVAL: &str = "1m";
const STEP_S: u64 = 15;
const RANGE_S: u64 = 300;

/// Queries that may legitimately return no series in this scenario, as
/// (panel title, refId, why). Every other query must return at least one.
const MAY_BE_EMPTY: &[(&str, &str, &str)] = &[];

/// Panel types drawn over time: their queries also run as range queries.
const OVER_TIME: [&str; 3] = ["timeseries", "state-timeline", "heatmap"];

fn dashboard_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/gpumon.json")
}

fn dashboard() -> Value {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The only datasource the dashboard may name.
fn datasource_variable() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

/// One PromQL query of one panel.
#[derive(Debug, Clone)]
struct Query {
    panel: String,
    panel_type: String,
    ref_id: String,
    expr: String,
}

impl Query {
    fn name(&self) -> String {
        format!("{:?} ({}) {}", self.panel, self.panel_type, self.ref_id)
    }

    fn over_time(&self) -> bool {
        OVER_TIME.contains(&self.panel_type.as_str())
    }

    /// Queries over one replica's own series keep `instance` on purpose.
    fn per_replica(&self) -> bool {
        self.expr.contains("by (instance)")
    }
}

/// Every datasource anywhere in `v` that is not the variable, by JSON path.
fn foreign_datasources(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{path}.{k}");
                if k == "datasource" && !child.is_null() && *child != datasource_variable() {
                    out.push(format!(
                        "{here} is {child}, not the ${{datasource}} variable"
                    ));
                }
                foreign_datasources(child, &here, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                foreign_datasources(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Walks `panels`, the panels of rows included, collecting their queries
/// and what is wrong with them.
fn walk(
    panels: &[Value],
    ids: &mut BTreeSet<u64>,
    queries: &mut Vec<Query>,
    bad: &mut Vec<String>,
) {
    for p in panels {
        let title = p["title"].as_str().unwrap_or("").to_owned();
        let kind = p["type"].as_str().unwrap_or("").to_owned();
        match p["id"].as_u64() {
            Some(id) if ids.insert(id) => {}
            Some(id) => bad.push(format!("panel {title:?}: id {id} used twice")),
            None => bad.push(format!("panel {title:?}: no id")),
        }
        if p["gridPos"]["w"].as_u64().is_none() {
            bad.push(format!("panel {title:?}: no gridPos"));
        }
        if kind == "row" {
            if p["targets"].as_array().is_some_and(|t| !t.is_empty()) {
                bad.push(format!("row {title:?} has queries"));
            }
            if let Some(inner) = p["panels"].as_array() {
                walk(inner, ids, queries, bad);
            }
            continue;
        }
        if title.is_empty() {
            bad.push(format!("a {kind} panel without a title"));
        }
        if p["datasource"] != datasource_variable() {
            bad.push(format!(
                "panel {title:?}: datasource {} is not the ${{datasource}} variable",
                p["datasource"]
            ));
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if targets.is_empty() {
            bad.push(format!("panel {title:?} has no query"));
        }
        let mut refs = BTreeSet::new();
        for t in targets {
            let ref_id = t["refId"].as_str().unwrap_or("").to_owned();
            if !refs.insert(ref_id.clone()) {
                bad.push(format!("panel {title:?}: refId {ref_id:?} twice"));
            }
            if !t["datasource"].is_null() && t["datasource"] != datasource_variable() {
                bad.push(format!(
                    "panel {title:?} {ref_id}: datasource {} is not the ${{datasource}} variable",
                    t["datasource"]
                ));
            }
            match t["expr"].as_str().map(str::trim) {
                Some(expr) if !expr.is_empty() => queries.push(Query {
                    panel: title.clone(),
                    panel_type: kind.clone(),
                    ref_id,
                    expr: expr.to_owned(),
                }),
                _ => bad.push(format!("panel {title:?} {ref_id}: no PromQL expr")),
            }
        }
    }
}

/// The metric and label of a `label_values(metric, label)` variable query.
fn label_values(query: &str) -> Option<(String, String)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (metric, label) = inner.rsplit_once(',')?;
    Some((metric.trim().to_owned(), label.trim().to_owned()))
}

/// The `job` and `node` variables: (name, metric, label).
fn variables(dash: &Value, bad: &mut Vec<String>) -> Vec<(String, String, String)> {
    let list = dash["templating"]["list"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for v in list {
        let name = v["name"].as_str().unwrap_or("").to_owned();
        seen.insert(name.clone());
        match v["type"].as_str() {
            Some("datasource") if name == "datasource" => {
                if v["query"] != "prometheus" {
                    bad.push(format!("variable datasource: type {}", v["query"]));
                }
            }
            Some("query") => {
                let query = v["query"]["query"]
                    .as_str()
                    .or(v["query"].as_str())
                    .unwrap_or("");
                match label_values(query) {
                    Some((metric, label)) if metric.starts_with("gpumon_") => {
                        out.push((name, metric, label))
                    }
                    _ => bad.push(format!(
                        "variable {name}: {query:?} is not label_values of a gpumon series"
                    )),
                }
            }
            other => bad.push(format!("variable {name}: unexpected type {other:?}")),
        }
    }
    for needed in ["datasource", "job", "node"] {
        if !seen.contains(needed) {
            bad.push(format!("no template variable {needed}"));
        }
    }
    out
}

/// Every query of the dashboard, and every problem found in it.
fn inspect(dash: &Value) -> (Vec<Query>, Vec<String>) {
    let mut bad = Vec::new();
    if dash["uid"] != "gpumon" {
        bad.push(format!("uid {} is not \"gpumon\"", dash["uid"]));
    }
    if dash["schemaVersion"].as_u64().is_none_or(|v| v < 39) {
        bad.push(format!(
            "schemaVersion {} is before 39",
            dash["schemaVersion"]
        ));
    }
    foreign_datasources(dash, "", &mut bad);
    variables(dash, &mut bad);
    let mut queries = Vec::new();
    let panels = dash["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    walk(panels, &mut BTreeSet::new(), &mut queries, &mut bad);
    if queries.is_empty() {
        bad.push("no query at all".into());
    }
    for q in &queries {
        // A series counted once stays once: aggregate by what is kept.
        if !(q.expr.contains(" by (") || q.expr.contains("without (instance)")) {
            bad.push(format!(
                "{}: {:?} aggregates neither by (...) nor without (instance)",
                q.name(),
                q.expr
            ));
        }
        if let Err(e) = substitute(&q.expr) {
            bad.push(format!("{}: {e}", q.name()));
        }
    }
    (queries, bad)
}

/// `expr` with Grafana's variables replaced by the scenario's values:
/// `$name`, `${name}`, `${name:format}` and `[[name]]`. An unknown
/// variable is an error.
fn substitute(expr: &str) -> Result<String, String> {
    let interval = format!("{STEP_S}s");
    let range = format!("{RANGE_S}s");
    let value = |name: &str| -> Result<&str, String> {
        Ok(match name {
            "job" => JOB,
            "node" => NODE,
            "__rate_interval" => RATE_INTERVAL,
            "__interval" => &interval,
            "__range" => &range,
            _ => return Err(format!("unknown variable ${name} in {expr:?}")),
        })
    };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find(['$', '[']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(braced) = tail.strip_prefix("${") {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {expr:?}"))?;
            let name = braced[..end].split(':').next().unwrap_or("");
            out.push_str(value(name)?);
            rest = &braced[end + 1..];
        } else if let Some(bracketed) = tail.strip_prefix("[[") {
            let end = bracketed
                .find("]]")
                .ok_or_else(|| format!("unclosed [[ in {expr:?}"))?;
            out.push_str(value(&bracketed[..end])?);
            rest = &bracketed[end + 2..];
        } else if let Some(named) = tail.strip_prefix('$') {
            let end = named.find(|c: char| !ident(c)).unwrap_or(named.len());
            if end == 0 {
                return Err(format!("a lone $ in {expr:?}"));
            }
            out.push_str(value(&named[..end])?);
            rest = &named[end..];
        } else {
            out.push('[');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[test]
fn the_dashboard_is_well_formed() {
    let (queries, bad) = inspect(&dashboard());
    assert!(
        bad.is_empty(),
        "{}:\n{}",
        dashboard_path().display(),
        bad.join("\n")
    );
    // The views the dashboard promises.
    let titles: BTreeSet<&str> = queries.iter().map(|q| q.panel.as_str()).collect();
    for needed in [
        "GPUs",
        "Live jobs",
        "Live ranks",
        "Agents up",
        "Alerts firing by severity",
        "Ingest rate",
        "Raft, per replica",
        "Memory used per rank",
        "Allocator: reserved vs allocated",
        "OOM forecast per rank",
        "Step time per rank",
        "Memory per rank over time",
        "Memory used per GPU",
    ] {
        assert!(titles.contains(needed), "no panel {needed:?}: {titles:?}");
    }
    let heatmaps: Vec<_> = queries
        .iter()
        .filter(|q| q.panel_type == "heatmap")
        .collect();
    assert!(
        heatmaps
            .iter()
            .any(|q| q.expr.contains("by (rank)") && q.expr.contains("gpumon_rank_memory")),
        "a rank x time heatmap of memory: {heatmaps:?}"
    );
    for (title, ref_id, _) in MAY_BE_EMPTY {
        assert!(
            queries
                .iter()
                .any(|q| q.panel == *title && q.ref_id == *ref_id),
            "MAY_BE_EMPTY names {title:?} {ref_id}, which the dashboard does not have"
        );
    }
}

/// The checks above catch what they promise: a panel without a query, a
/// datasource other than the variable (on a panel, a target, inside a
/// collapsed row, in the annotations), and an unknown variable.
/// What a broken copy of the dashboard must be reported as, and how to
/// break it.
type Breakage = (&'static str, fn(&mut Value));

#[test]
fn the_checks_catch_a_missing_query_a_foreign_datasource_and_an_unknown_variable() {
    let dash = dashboard();
    /// The first panel that is not a row: at the top level, or with
    /// `in_row` the first inside a row that holds panels (a collapsed one).
    fn first_panel(panels: &mut [Value], in_row: bool) -> Option<&mut Value> {
        for p in panels {
            if p["type"] == "row" {
                if in_row {
                    if let Some(inner) = p["panels"].as_array_mut().filter(|i| !i.is_empty()) {
                        return first_panel(inner, false);
                    }
                }
            } else if !in_row {
                return Some(p);
            }
        }
        None
    }
    let breakages: [Breakage; 6] = [
        ("has no query", |d| {
            let p = first_panel(d["panels"].as_array_mut().unwrap(), false).unwrap();
            p["targets"] = json!([]);
        }),
        ("no PromQL expr", |d| {
            let p = first_panel(d["panels"].as_array_mut().unwrap(), true).unwrap();
            p["targets"][0]["expr"] = json!("  ");
        }),
        ("not the ${datasource} variable", |d| {
            let p = first_panel(d["panels"].as_array_mut().unwrap(), false).unwrap();
            p["datasource"] = json!({"type": "prometheus", "uid": "prod"});
        }),
        ("not the ${datasource} variable", |d| {
            let p = first_panel(d["panels"].as_array_mut().unwrap(), true).unwrap();
            p["targets"][0]["datasource"] = json!({"type": "loki", "uid": "${datasource}"});
        }),
        ("not the ${datasource} variable", |d| {
            d["annotations"]["list"] =
                json!([{"datasource": {"type": "grafana", "uid": "-- Grafana --"}}]);
        }),
        ("unknown variable $cluster", |d| {
            let p = first_panel(d["panels"].as_array_mut().unwrap(), false).unwrap();
            p["targets"][0]["expr"] =
                json!("sum by (gpu) (gpumon_gpu_memory_used_bytes{node=\"$cluster\"})");
        }),
    ];
    for (i, (finding, breakage)) in breakages.iter().enumerate() {
        let mut broken = dash.clone();
        breakage(&mut broken);
        let (_, bad) = inspect(&broken);
        assert!(
            bad.iter().any(|b| b.contains(finding)),
            "breakage {i} should be reported as {finding:?}; got {bad:?}"
        );
    }
    assert_eq!(
        substitute("max by (rank) (rate(x{job=\"${job}\",node=\"[[node]]\"}[$__rate_interval])) [$__range:$__interval]").unwrap(),
        format!("max by (rank) (rate(x{{job=\"{JOB}\",node=\"{NODE}\"}}[{RATE_INTERVAL}])) [{RANGE_S}s:{STEP_S}s]")
    );
}

// ---- the live check ---------------------------------------------------------

/// `leak_batch(seq)` with what the hook would add: allocator statistics and
/// a step with its sections per window, and each GPU's utilization.
fn batch(seq: u64) -> AgentMessage {
    let AgentMessage::V1(AgentMessageV1::Push(mut push)) = leak_batch(seq) else {
        panic!("leak_batch is a push");
    };
    for w in &mut push.windows {
        w.util_pct = Some(GaugeStat {
            min: 60.0,
            max: 80.0,
            last: 70.0,
            mean: 70.0,
        });
        for p in &w.procs {
            let Some(rank) = &p.rank else { continue };
            let held = p.used_bytes.max;
            push.hook.push(HookRecord::Alloc(AllocRecord {
                limit: None,
                t_ms: w.end_ms,
                job: rank.job.clone(),
                rank: rank.rank,
                stats: AllocStats {
                    allocated: held - GIB,
                    reserved: held - GIB / 8,
                    ..AllocStats::default()
                },
            }));
            push.hook.push(HookRecord::Step(StepRecord {
                group: None,
                waits: Default::default(),
                collectives: Vec::new(),
                t_ms: w.end_ms,
                job: rank.job.clone(),
                rank: rank.rank,
                step: (w.start_ms - T0_MS) / WINDOW_MS + 1,
                duration_ms: 400.0,
                sections: vec![
                    ("data".into(), 20.0),
                    ("forward".into(), 150.0),
                    ("backward".into(), 220.0),
                ],
            }));
        }
    }
    AgentMessage::V1(AgentMessageV1::Push(push))
}

/// Prometheus' HTTP API on `web`.
struct Api {
    web: String,
    client: reqwest::Client,
}

impl Api {
    /// `GET /api/v1/PATH?params`: Ok(data) when Prometheus answers 200 and
    /// `success`, Err(why) otherwise (the transport error, or the status and
    /// Prometheus' error).
    async fn get(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let query = serde_urlencoded::to_string(params).unwrap();
        let resp = self
            .client
            .get(format!("http://{}/api/v1/{path}?{query}", self.web))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or_default();
        if status == 200 && body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(format!("HTTP {status}: {body}"))
        }
    }

    async fn instant(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.get("query", &[("query", expr)]).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    async fn range(&self, expr: &str) -> Result<Vec<Value>, String> {
        // Ends now (not at the last whole second, which may be before the
        // scrape the instant query saw).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let (start, end, step) = (
            format!("{:.3}", now - RANGE_S as f64),
            format!("{now:.3}"),
            STEP_S.to_string(),
        );
        let data = self
            .get(
                "query_range",
                &[
                    ("query", expr),
                    ("start", &start),
                    ("end", &end),
                    ("step", &step),
                ],
            )
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Polls `expr` until it returns a series or `deadline` passes: the
    /// series, or why not. A query Prometheus refuses fails at once.
    async fn until_some(
        &self,
        expr: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Value>, String> {
        loop {
            match self.instant(expr).await {
                Ok(r) if !r.is_empty() => return Ok(r),
                Err(e) if e.starts_with("HTTP 4") => return Err(e),
                Ok(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("no series within {WITHIN:?}"))
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("no answer within {WITHIN:?}: {e}"))
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

fn value(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::test]
async fn every_dashboard_query_answers_from_a_real_prometheus_scraping_a_live_cluster() {
    let dash = dashboard();
    let (queries, bad) = inspect(&dash);
    assert!(bad.is_empty(), "{}", bad.join("\n"));

    let dir = tempfile::tempdir().unwrap();
    let trio = Trio::start().await;
    let leader = trio.leader().await;
    let url = trio.nodes[leader].api_url();
    for seq in 1..=BATCHES {
        push(&url, &batch(seq)).await;
    }
    let alerts: Value = support::get_json(format!("{url}/api/v1/alerts?active=true")).await;
    let active = alerts["alerts"].as_array().unwrap();
    for kind in ["oom_predicted", "leak"] {
        assert!(
            active.iter().any(|a| a["kind"] == kind && a["rank"] == 2),
            "the scenario fires {kind} on rank 2: {alerts}"
        );
    }

    // Every replica, and the leader once more under another instance: for a
    // scrape or two around a failover, two replicas can both answer as
    // leader, and a query counted per instance would double.
    let targets: Vec<String> = trio
        .nodes
        .iter()
        .map(|c| format!("'{}'", c.api_url().trim_start_matches("http://")))
        .collect();
    let leader_addr = url.trim_start_matches("http://");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpumon-coordinator\n    honor_labels: true\n    \
             scrape_interval: 1s\n    scrape_timeout: 1s\n    static_configs:\n      \
             - targets: [{}]\n      \
             - targets: ['{leader_addr}']\n        labels: {{instance: second-leader}}\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let prometheus = Prometheus::start(&config, &dir.path().join("tsdb"));
    let web = prometheus.web.clone();
    let api = Api {
        web,
        client: gpumon_net::plain_client_builder().build().unwrap(),
    };
    let deadline = tokio::time::Instant::now() + WITHIN;

    // Every target up, the leader's twice.
    let up = api
        .until_some("count(up{job=\"gpumon-coordinator\"} == 1) == 4", deadline)
        .await;
    assert!(up.is_ok(), "the four scrape targets are up: {up:?}");

    // The template variables list the scenario's job and node.
    let mut bad = Vec::new();
    for (name, metric, label) in variables(&dash, &mut bad) {
        let want = match name.as_str() {
            "job" => JOB,
            "node" => NODE,
            other => panic!("no value for the variable {other}"),
        };
        let found = loop {
            let got = api
                .get(&format!("label/{label}/values"), &[("match[]", &metric)])
                .await;
            match got {
                Ok(v) if v.as_array().is_some_and(|a| a.iter().any(|x| x == want)) => break Ok(v),
                other if tokio::time::Instant::now() >= deadline => break Err(other),
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        };
        assert!(
            found.is_ok(),
            "variable {name}: label_values({metric}, {label}) lacks {want:?}: {found:?}"
        );
    }

    let mut failures = Vec::new();
    let mut answers: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for q in &queries {
        let expr = substitute(&q.expr).unwrap();
        let may_be_empty = MAY_BE_EMPTY
            .iter()
            .any(|(t, r, _)| *t == q.panel && *r == q.ref_id);
        let instant = if may_be_empty {
            api.instant(&expr).await
        } else {
            api.until_some(&expr, deadline).await
        };
        let series = match instant {
            Ok(series) => series,
            Err(e) => {
                failures.push(format!("{}: {expr}\n    instant: {e}", q.name()));
                continue;
            }
        };
        if !q.per_replica() {
            if let Some(s) = series.iter().find(|s| !s["metric"]["instance"].is_null()) {
                failures.push(format!(
                    "{}: {expr}\n    keeps `instance` (counts a series once per replica that exports it): {}",
                    q.name(),
                    s["metric"]
                ));
            }
        }
        if q.over_time() {
            match api.range(&expr).await {
                Ok(r) if r.is_empty() && !may_be_empty => {
                    failures.push(format!("{}: {expr}\n    range: no series", q.name()))
                }
                Ok(_) => {}
                Err(e) => failures.push(format!("{}: {expr}\n    range: {e}", q.name())),
            }
        }
        answers.insert((q.panel.clone(), q.ref_id.clone()), series);
    }
    assert!(
        failures.is_empty(),
        "{} of {} dashboard queries fail against Prometheus:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );

    // Counted once, although the leader is scraped twice.
    let one = |title: &str, ref_id: &str| -> f64 {
        let series = &answers[&(title.to_owned(), ref_id.to_owned())];
        assert_eq!(series.len(), 1, "{title} {ref_id}: {series:?}");
        value(&series[0])
    };
    for (title, ref_id, want) in [
        ("GPUs", "A", RANKS as f64),
        ("Live jobs", "A", 1.0),
        ("Live ranks", "A", RANKS as f64),
        ("Agents up", "A", 1.0),
        ("Agents up", "B", 1.0),
        ("Lost ranks", "A", 0.0),
    ] {
        assert_eq!(
            one(title, ref_id),
            want,
            "{title} {ref_id}: each series counted once, though the leader is scraped twice"
        );
    }
    let by_severity: f64 = answers[&("Alerts firing by severity".into(), "A".into())]
        .iter()
        .map(value)
        .sum();
    assert_eq!(by_severity, active.len() as f64, "{alerts}");
    assert_eq!(
        answers[&("Memory used per rank".into(), "A".into())].len(),
        RANKS,
        "one line per rank"
    );
    assert_eq!(
        answers[&("Memory per rank over time".into(), "A".into())].len(),
        RANKS,
        "one heatmap row per rank"
    );
    let replicas: BTreeSet<String> = answers[&("Raft, per replica".into(), "A".into())]
        .iter()
        .map(|s| s["metric"]["instance"].to_string())
        .collect();
    assert_eq!(
        replicas.len(),
        4,
        "three replicas and the leader's alias: {replicas:?}"
    );

    trio.shutdown().await;
}
