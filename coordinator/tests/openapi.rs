//! Keeps `GET /api/v1/openapi.json` true to the server (the document
//! against the route table is checked by the coordinator's unit tests):
//! - every documented route is served by the live router, not its fallback;
//! - every documented JSON read answers 200 on a coordinator with data,
//!   valid against its schema, and reads back as its `gpumon_proto::api`
//!   type into the very same JSON;
//! - every documented JSON read refuses an unknown query parameter with a 400
//!   that names it, and job names that no job could have get a 400.

mod support;

use gpumon_proto::api::{
    ActionsBody, AlertsBody, ApiErrorBody, ClusterView, ConfigBody, JobScaleSummary,
    JobWithAnalysis, JobsView, MemorySnapshotsAnswer, NodesView, RaftStatus,
};
use gpumon_proto::{AgentMessage, AgentMessageV1, PodPlacement, ProcPlacement};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use support::openapi_schema::check;
use support::{leak_batch, start};

/// `path` with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{job}", "job-x").replace("{id}", "999")
}

/// `body` read as the read's type and written back.
fn typed(path: &str, body: &Value) -> Value {
    fn back<T: DeserializeOwned + Serialize>(body: &Value) -> Value {
        let t: T = serde_json::from_value(body.clone()).unwrap();
        serde_json::to_value(t).unwrap()
    }
    match path.split('?').next().unwrap_or(path) {
        "/api/v1/cluster" => back::<ClusterView>(body),
        "/api/v1/nodes" => back::<NodesView>(body),
        "/api/v1/jobs" => back::<JobsView>(body),
        "/api/v1/jobs/job-x" => back::<JobWithAnalysis>(body),
        "/api/v1/jobs/job-x/summary" => back::<JobScaleSummary>(body),
        "/api/v1/jobs/job-x/snapshots" => back::<MemorySnapshotsAnswer>(body),
        "/api/v1/alerts" => back::<AlertsBody>(body),
        "/api/v1/actions" => back::<ActionsBody>(body),
        "/api/v1/raft" => back::<RaftStatus>(body),
        "/api/v1/config" => back::<ConfigBody>(body),
        other => panic!("no type for GET {other}: add it here"),
    }
}

#[tokio::test]
async fn every_documented_route_is_served_by_the_live_router() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let doc: Value = get_json(&client, &format!("{url}/api/v1/openapi.json")).await;
    let fallback = |status: u16, body: &str| status == 405 || body.contains("no such route");
    let resp = client
        .get(format!("{url}/api/v1/nope"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    assert!(
        fallback(status, &resp.text().await.unwrap()),
        "the probe tells"
    );
    let mut probed = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            // Bodies that every write refuses, so nothing changes.
            let resp = client
                .request(method.clone(), format!("{url}{}", concrete(path)))
                .body("")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            // The stream never ends: its head is enough.
            let body = if path.ends_with("/stream") {
                String::new()
            } else {
                resp.text().await.unwrap()
            };
            assert!(!fallback(status, &body), "{method} {path}: {status} {body}");
            probed += 1;
        }
    }
    assert!(probed >= 16, "{probed} routes probed");
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

/// `message` with rank 0's process (pid 100) placed in a pod, and the
/// node's host memory (so node views carry it for the schema check).
fn in_a_pod(message: AgentMessage) -> AgentMessage {
    let AgentMessage::V1(AgentMessageV1::Push(batch)) = message else {
        panic!("a version 1 push");
    };
    let placement = PodPlacement {
        pod_uid: Some("1c3f2a4b-5d6e-4f70-8a9b-0c1d2e3f4a5b".into()),
        pod_name: Some("job-x-worker-0".into()),
        namespace: Some("ml".into()),
        container_id: Some("ab".repeat(32)),
        container_name: None,
    };
    let host = batch.windows.first().map(|w| gpumon_proto::HostMemory {
        t_ms: w.end_ms,
        total_bytes: 64 << 30,
        used_max_bytes: 10 << 30,
    });
    AgentMessage::push(gpumon_proto::PushBatchV2 {
        batch,
        placements: vec![ProcPlacement {
            pid: 100,
            placement,
        }],
        host,
    })
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
    // Ten minutes of data with a leaking rank: jobs, analysis and alerts;
    // rank 0 in a pod, so a rank's placement is checked against its schema.
    for seq in 1..=20 {
        support::push(&url, &in_a_pod(leak_batch(seq))).await;
    }
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let job = get_json(&client, &format!("{url}/api/v1/jobs/job-x")).await;
    assert_eq!(job["ranks"][0]["placement"]["namespace"], "ml", "{job}");
    let doc: Value = get_json(&client, &format!("{url}/api/v1/openapi.json")).await;

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
        assert_eq!(
            &typed(path, &body),
            &body,
            "GET {path} read back as its type"
        );

        let typo = format!("{url}{path}?no_such_param=1");
        let resp = client.get(&typo).send().await.unwrap();
        assert_eq!(resp.status(), 400, "GET {typo}");
        let err: Value = resp.json().await.unwrap();
        serde_json::from_value::<ApiErrorBody>(err.clone()).unwrap();
        let mut problems = Vec::new();
        check(
            &doc,
            &serde_json::json!({"$ref": "#/components/schemas/ApiErrorBody"}),
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
    // A big job's parts: the worst ranks, the others' lines, thinned histories.
    let path = "/api/v1/jobs/job-x?ranks=top:2&points=5&since=1&until=99999999999";
    let schema = &doc["paths"]["/api/v1/jobs/{job}"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    let body = get_json(&client, &format!("{url}{path}")).await;
    assert_eq!(body["others"].as_array().map(Vec::len), Some(2), "{body}");
    let mut problems = Vec::new();
    check(&doc, schema, &body, path, &mut problems);
    assert!(problems.is_empty(), "GET {path}: {problems:?}");
    assert_eq!(
        &typed(path, &body),
        &body,
        "GET {path} read back as its type"
    );

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
