//! The detection engine inside the replicated state machine: windows pushed
//! over HTTP become forecasts and alerts in the API, and a restart from
//! snapshot plus log brings back the same alerts. Time comes from the data,
//! so ten minutes of windows are pushed in well under a second.

mod support;
use support::{leak_batch, start, GIB, LEAK, T0_MS};

use serde_json::Value;

async fn get(url: &str, path: &str) -> (u16, Value) {
    let resp = support::http()
        .get(format!("{url}{path}"))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn a_leaking_rank_is_forecast_in_the_api_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    // 20 batches x 15 windows x 2 s = 600 s of data.
    for seq in 1..=20 {
        support::push(&url, &leak_batch(seq)).await;
    }
    let (status, body) = get(&url, "/api/v1/alerts").await;
    assert_eq!(status, 200);
    let alerts = body["alerts"].as_array().unwrap();
    let kinds: Vec<(&str, u64)> = alerts
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["rank"].as_u64().unwrap()))
        .collect();
    assert!(kinds.contains(&("oom_predicted", 2)), "{kinds:?}");
    assert!(kinds.contains(&("leak", 2)), "{kinds:?}");
    assert!(
        kinds.iter().all(|k| k.1 == 2),
        "only rank 2 misbehaves: {kinds:?}"
    );

    // The forecast lands near the real OOM: 20 GiB of headroom at 20 MiB/s.
    let oom = alerts
        .iter()
        .find(|a| a["kind"] == "oom_predicted")
        .unwrap();
    let real_oom_s = (T0_MS / 1000) as f64 + (20 * GIB - GIB / 10) as f64 / LEAK as f64;
    let predicted = oom["predicted_oom_t"].as_f64().unwrap();
    assert!(
        (predicted - real_oom_s).abs() < 90.0,
        "predicted {predicted}, real {real_oom_s}"
    );

    let (_, job) = get(&url, "/api/v1/jobs/job-x").await;
    assert_eq!(job["analysis"]["forecast"]["rank"], 2);
    assert_eq!(job["analysis"]["ranks"][2]["leak"], true);
    assert_eq!(job["analysis"]["ranks"][0]["leak"], false);

    let (_, filtered) = get(&url, "/api/v1/alerts?active=true&job=nope").await;
    assert_eq!(filtered["alerts"].as_array().unwrap().len(), 0);
    let (_, limited) = get(&url, "/api/v1/alerts?limit=1").await;
    assert_eq!(limited["alerts"].as_array().unwrap().len(), 1);
    assert_eq!(
        limited["truncated"].as_u64().unwrap() as usize,
        alerts.len() - 1
    );

    let (status, err) = get(&url, "/api/v1/alerts?activ=true").await;
    assert_eq!(status, 400);
    assert!(err["message"].as_str().unwrap().contains("activ"), "{err}");
    let (status, _) = get(&url, "/api/v1/alerts?limit=999999").await;
    assert_eq!(status, 400);

    c.shutdown().await;
    let c = start(dir.path(), 5).await;
    let url = c.api_url();
    support::wait_for_same(
        &url,
        "/api/v1/alerts",
        |v| v["alerts"].clone(),
        &body["alerts"],
    )
    .await;
    c.shutdown().await;
}
