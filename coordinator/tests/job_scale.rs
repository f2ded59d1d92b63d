//! `GET /api/v1/jobs/{job}` with `since`/`until`, `ranks=top:K`, `points`
//! and `node`, and `GET /api/v1/jobs/{job}/summary`, on a coordinator fed
//! ten minutes of a 4-rank job whose rank 2 leaks: the worst rank is chosen,
//! ranges and point bounds hold, bad values are 400s that say why.

mod support;

use serde_json::Value;
use support::{get_json, http, leak_batch, start, GIB, T0_MS};

async fn fed() -> (tempfile::TempDir, gpumon_coordinator::Coordinator, String) {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    for seq in 1..=20 {
        support::push(&url, &leak_batch(seq)).await;
    }
    (dir, c, url)
}

fn ranks_of(answer: &Value) -> Vec<u64> {
    answer["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect()
}

fn times(rank: &Value) -> Vec<u64> {
    rank["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["t_ms"].as_u64().unwrap())
        .collect()
}

/// Standard base64 back to bytes.
fn unbase64(text: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        bits = bits << 6 | A.iter().position(|&a| a == c).unwrap() as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

#[tokio::test]
async fn the_worst_ranks_a_time_range_and_fewer_points() {
    let (_dir, _c, url) = fed().await;
    let job = format!("{url}/api/v1/jobs/job-x");
    let full: Value = get_json(&job).await;
    assert!(
        full.get("ranks_total").is_none() && full.get("others").is_none(),
        "unchanged without parameters"
    );
    assert_eq!(ranks_of(&full), [0, 1, 2, 3]);
    let history_len = times(&full["ranks"][2]).len();
    assert!(history_len >= 300, "{history_len}");

    // The leaking rank holds the most memory and carries the alert.
    let top: Value = get_json(format!("{job}?ranks=top:1")).await;
    assert_eq!(ranks_of(&top), [2]);
    assert_eq!(top["ranks_total"], 4);
    assert_eq!(top["ranks"][0]["history"], full["ranks"][2]["history"]);
    let others = top["others"].as_array().unwrap();
    assert_eq!(
        others
            .iter()
            .map(|l| l["rank"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 3]
    );
    assert_eq!(others[0]["node"], "node-a");
    assert_eq!(others[0]["total_bytes"], 40 * GIB);
    let analysed: Vec<u64> = top["analysis"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(analysed, [2]);
    let quiet: Value = get_json(format!("{job}?ranks=top:2&rest=none")).await;
    assert_eq!(ranks_of(&quiet), [2, 3]);
    assert!(quiet.get("others").is_none());

    // Bucket maxima: at most N points, the peak kept.
    let thin: Value = get_json(format!("{job}?points=10")).await;
    for (r, f) in thin["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(full["ranks"].as_array().unwrap())
    {
        let maxima = |v: &Value| {
            v["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["max"].as_u64().unwrap())
                .max()
        };
        assert_eq!(times(r).len(), 10);
        assert_eq!(maxima(r), maxima(f));
    }

    // since/until bound the points, both ends kept.
    let (since, until) = (T0_MS / 1000 + 100, T0_MS / 1000 + 200);
    let part: Value = get_json(format!("{job}?since={since}&until={until}")).await;
    let expected: Vec<u64> = times(&full["ranks"][0])
        .into_iter()
        .filter(|t| (since * 1000..=until * 1000).contains(t))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(times(&part["ranks"][0]), expected);

    let node: Value = get_json(format!("{job}?node=node-a&ranks=top:3")).await;
    assert_eq!(ranks_of(&node), [1, 2, 3]);
    let elsewhere: Value = get_json(format!("{job}?node=node-z")).await;
    assert_eq!(
        (
            ranks_of(&elsewhere).len(),
            elsewhere["ranks_total"].as_u64()
        ),
        (0, Some(0))
    );
}

#[tokio::test]
async fn bad_values_are_400s_that_name_them() {
    let (_dir, _c, url) = fed().await;
    let client = http();
    for (query, says) in [
        ("ranks=top:0", "top:K"),
        ("ranks=top:1001", "1000"),
        ("ranks=bottom:3", "top:K"),
        ("points=0", "points"),
        ("points=2001", "2000"),
        ("since=NaN", "since"),
        ("until=-5", "until"),
        ("since=200&until=100", "after"),
        ("since=yesterday", "since"),
        ("rest=none", "top:K"),
        ("node=%01", "node"),
    ] {
        let resp = client
            .get(format!("{url}/api/v1/jobs/job-x?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{query}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{query}: {body}"
        );
    }
    for query in ["columns=0", "columns=241", "since=inf"] {
        let resp = client
            .get(format!("{url}/api/v1/jobs/job-x/summary?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{query}");
    }
    let resp = client
        .get(format!("{url}/api/v1/jobs/nope/summary"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn the_summary_aggregates_nodes_and_draws_every_rank_over_time() {
    let (_dir, _c, url) = fed().await;
    let s: Value = get_json(format!("{url}/api/v1/jobs/job-x/summary?columns=30")).await;
    assert_eq!(
        (s["ranks_total"].as_u64(), s["world_size"].as_u64()),
        (Some(4), Some(4))
    );
    let nodes = s["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(
        (
            nodes[0]["node"].as_str(),
            nodes[0]["ranks"].as_u64(),
            nodes[0]["worst_rank"].as_u64()
        ),
        (Some("node-a"), Some(4), Some(2))
    );
    // Rank 0 holds 19.5 GiB of 40 the whole time: 0.4875 of 250.
    let share0 = 19.5 / 40.0;
    assert!(
        (nodes[0]["min_share"].as_f64().unwrap() - share0).abs() < 1e-9,
        "{}",
        nodes[0]
    );

    let h = &s["heatmap"];
    assert_eq!(h["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(h["columns"], 30);
    let edges: Vec<u64> = h["edges_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_u64().unwrap())
        .collect();
    assert_eq!(edges.len(), 31);
    assert!(edges.windows(2).all(|w| w[0] < w[1]));
    let cells = unbase64(h["cells"].as_str().unwrap());
    assert_eq!(cells.len(), 4 * 30);
    assert!(
        cells[..30]
            .iter()
            .all(|&c| c == (share0 * 250.0).round() as u8),
        "{:?}",
        &cells[..30]
    );
    // The leak climbs: rank 2's row never falls and ends above where it began.
    let row2 = &cells[60..90];
    assert!(
        row2.windows(2).all(|w| w[0] <= w[1]) && row2[29] > row2[0],
        "{row2:?}"
    );

    // A range past the data: every cell empty, the edges where asked.
    let (since, until) = (T0_MS / 1000 + 100_000, T0_MS / 1000 + 100_060);
    let later: Value = get_json(format!(
        "{url}/api/v1/jobs/job-x/summary?columns=6&since={since}&until={until}"
    ))
    .await;
    let edges = later["heatmap"]["edges_ms"].as_array().unwrap();
    assert_eq!(
        (edges[0].as_u64(), edges[6].as_u64()),
        (Some(since * 1000), Some(until * 1000))
    );
    assert!(unbase64(later["heatmap"]["cells"].as_str().unwrap())
        .iter()
        .all(|&c| c == 255));
}
