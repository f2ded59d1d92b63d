//! Keeps `GET /api/v1/openapi.json` true to the server:
//! - every route the router declares (read from its source, so a new route
//!   cannot be added without documenting it) is in the document with the same
//!   methods, and every documented path and method is routed;
//! - every documented JSON read answers 200 on a coordinator with data, with
//!   every field its schema requires, of the documented type;
//! - every documented JSON read refuses an unknown query parameter with a 400
//!   that names it, and job names that no job could have get a 400.

mod support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::{leak_batch, start};

/// The router's source: where routes are declared.
const ROUTER_SOURCE: &str = include_str!("../src/api/mod.rs");
const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// (method, path) of every `.route(...)` in the router, but Raft's internal
/// RPC and the dashboard's pages (documented in the README, not the API).
fn routed() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut rest = ROUTER_SOURCE;
    while let Some(i) = rest.find(".route(") {
        rest = &rest[i + ".route(".len()..];
        let open = rest.find('"').expect("a route's path is a string literal");
        let close = open + 1 + rest[open + 1..].find('"').unwrap();
        let path = rest[open + 1..close].to_owned();
        // The handlers: up to the parenthesis that closes `.route(`.
        let mut depth = 1;
        let mut end = close;
        for (k, c) in rest[close..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = close + k;
                break;
            }
        }
        let handlers = &rest[close..end];
        for m in METHODS {
            let called = handlers.match_indices(&format!("{m}(")).any(|(k, _)| {
                let before = handlers[..k].chars().last();
                before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
            });
            if called {
                out.insert((m.to_owned(), path.clone()));
            }
        }
        rest = &rest[end..];
    }
    out.retain(|(_, p)| !p.starts_with("/raft/") && p != "/" && !p.starts_with("/assets/"));
    out
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((m.to_owned(), path.clone()));
            }
        }
    }
    out
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            let target = &doc["components"]["schemas"][name];
            assert!(target.is_object(), "dangling $ref {r}");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// Checks `v` against the subset of OpenAPI schemas the document uses;
/// returns what does not match, with where.
fn check(doc: &Value, schema: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if v.is_null() {
        if schema["nullable"] != true && schema.get("allOf").is_none() {
            problems.push(format!("{at}: null but not nullable"));
        }
        return;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        // One object schema with the parts' properties and requirements.
        let mut merged = serde_json::json!({"type": "object", "properties": {}, "required": []});
        for part in all {
            let part = resolve(doc, part);
            for (k, p) in part["properties"].as_object().into_iter().flatten() {
                merged["properties"][k] = p.clone();
            }
            for r in part["required"].as_array().into_iter().flatten() {
                merged["required"].as_array_mut().unwrap().push(r.clone());
            }
        }
        check(doc, &merged, v, at, problems);
        return;
    }
    if let Some(any) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = any.iter().any(|s| {
            let mut p = Vec::new();
            check(doc, s, v, at, &mut p);
            p.is_empty()
        });
        if !fits {
            problems.push(format!("{at}: matches none of oneOf"));
        }
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if !values.contains(v) {
            problems.push(format!("{at}: {v} not in {values:?}"));
        }
    }
    let ok = match schema.get("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_u64() || v.is_i64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        problems.push(format!("{at}: {v} is not of type {}", schema["type"]));
        return;
    }
    if let Some(obj) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                problems.push(format!("{at}: required field {r:?} missing"));
            }
        }
        let props = schema["properties"].as_object();
        for (k, x) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(doc, s, x, &format!("{at}.{k}"), problems),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        problems.push(format!("{at}: field {k:?} is not documented"))
                    }
                    Some(s) if s.is_object() => check(doc, s, x, &format!("{at}.{k}"), problems),
                    // Undocumented fields of a documented object: say so.
                    _ if props.is_some() => {
                        problems.push(format!("{at}: field {k:?} is not documented"))
                    }
                    _ => {}
                },
            }
        }
    }
    if let Some(items) = v.as_array() {
        for (i, x) in items.iter().enumerate() {
            check(doc, &schema["items"], x, &format!("{at}[{i}]"), problems);
        }
    }
}

#[test]
fn every_route_is_documented_and_every_documented_route_is_served() {
    let doc: Value = serde_json::from_str(gpumon_coordinator_openapi()).unwrap();
    let routed = routed();
    assert!(routed.len() >= 15, "the router source parses: {routed:?}");
    let documented = documented(&doc);
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routed but not in openapi.json: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "in openapi.json but not routed: {unrouted:?}"
    );
}

fn gpumon_coordinator_openapi() -> &'static str {
    include_str!("../src/api/openapi.json")
}

/// Documented GETs answering JSON under /api/v1, path parameters filled in.
fn json_reads(doc: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(get) = item.get("get") else { continue };
        let schema = &get["responses"]["200"]["content"]["application/json"]["schema"];
        if !path.starts_with("/api/v1/") || schema.is_null() || path.ends_with("openapi.json") {
            continue;
        }
        out.push((path.replace("{job}", "job-x"), schema.clone()));
    }
    out
}

/// `GET url` answered 200 with JSON.
async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200, "GET {url}");
    resp.json().await.unwrap()
}

#[tokio::test]
async fn every_documented_read_answers_what_its_schema_says_and_refuses_unknown_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    // Ten minutes of data with a leaking rank: jobs, analysis and alerts.
    for seq in 1..=20 {
        support::push(&url, &leak_batch(seq)).await;
    }
    let client = reqwest::Client::new();
    let served: Value = get_json(&client, &format!("{url}/api/v1/openapi.json")).await;
    let doc: Value = serde_json::from_str(gpumon_coordinator_openapi()).unwrap();
    assert_eq!(served, doc, "the served document is the compiled-in one");

    let reads = json_reads(&doc);
    assert!(reads.len() >= 8, "{reads:?}");
    for (path, schema) in &reads {
        let body = get_json(&client, &format!("{url}{path}")).await;
        let mut problems = Vec::new();
        check(&doc, schema, &body, path, &mut problems);
        assert!(
            problems.is_empty(),
            "GET {path} differs from openapi.json:\n{}",
            problems.join("\n")
        );

        let typo = format!("{url}{path}?no_such_param=1");
        let resp = client.get(&typo).send().await.unwrap();
        assert_eq!(resp.status(), 400, "GET {typo}");
        let err: Value = resp.json().await.unwrap();
        let mut problems = Vec::new();
        check(
            &doc,
            &serde_json::json!({"$ref": "#/components/schemas/Error"}),
            &err,
            &typo,
            &mut problems,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert!(
            err["message"].as_str().unwrap().contains("no_such_param"),
            "{err}"
        );
    }
    // The analysis and alerts were really checked, not skipped as absent.
    let job: Value = get_json(&client, &format!("{url}/api/v1/jobs/job-x")).await;
    assert!(
        job["analysis"]["ranks"].as_array().unwrap().len() == 4,
        "{job}"
    );
    let alerts: Value = get_json(&client, &format!("{url}/api/v1/alerts")).await;
    assert!(!alerts["alerts"].as_array().unwrap().is_empty(), "{alerts}");

    // Names no job could have are a 400 with the rule, not a 404.
    let long = "x".repeat(300);
    for bad in [
        "/api/v1/jobs/a%01b",
        &format!("/api/v1/jobs/{long}"),
        &format!("/api/v1/alerts?job={long}"),
    ] {
        let resp = client.get(format!("{url}{bad}")).send().await.unwrap();
        assert_eq!(resp.status(), 400, "GET {bad}");
        let err: Value = resp.json().await.unwrap();
        assert!(
            err["message"].as_str().unwrap().contains("job name"),
            "{err}"
        );
    }
    let resp = client
        .get(format!("{url}/api/v1/jobs/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}
