//! Actions and hook data through a real coordinator over HTTP: the leader's
//! planner issues `release_cache` to exactly the ranks of a job near OOM
//! that hold reclaimable cache; the next push's reply hands them out and
//! they turn `delivered`; an acknowledgement in a later push makes them
//! `done` with the freed bytes; an admin issues one by hand with the token;
//! an action for a rank that has gone expires; named snapshots compare rank
//! by rank; all of it survives a restart. Time comes from the data, so
//! ten minutes of a job are pushed in well under a second.

use std::time::Duration;

mod support;
use support::{push, push_reply, start_with};

use gpumon_coordinator::CoordinatorConfig;
use gpumon_core::actions::PlannerConfig;
use gpumon_proto::{
    ActionAck, ActionKind, ActionOutcome, AgentMessage, AgentMessageV1, AllocRecord, AllocStats,
    BytesStat, EventRecord, GpuInfo, GpuWindow, HookRecord, ProcWindow, PushBatch, RankInfo,
    StepRecord,
};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T0_MS: u64 = 1_700_000_000_000;
const WINDOW_MS: u64 = 2_000;
const WINDOWS_PER_BATCH: u64 = 15;
const TOKEN: &str = "admin-token-for-the-actions-test";

/// Live tensors of a rank at `t_s`: rank 2 leaks 20 MiB/s.
fn allocated(rank: u32, t_s: u64) -> u64 {
    16 * GIB + if rank == 2 { 20 * MIB * t_s } else { 0 }
}

/// Free cache the rank's allocator holds: 1 GiB on ranks 0 and 2.
fn cache(rank: u32) -> u64 {
    if rank % 2 == 0 {
        GIB
    } else {
        16 * MIB
    }
}

/// Batch `seq` from 1; `gone` ranks have left their GPU.
fn batch(seq: u64, gone: &[u32], extra: Vec<HookRecord>, acks: Vec<ActionAck>) -> AgentMessage {
    let mut windows = Vec::new();
    let mut hook = Vec::new();
    for i in 0..WINDOWS_PER_BATCH {
        let start_ms = T0_MS + ((seq - 1) * WINDOWS_PER_BATCH + i) * WINDOW_MS;
        let end_ms = start_ms + WINDOW_MS - 500;
        let t_s = (start_ms - T0_MS) / 1000;
        for g in 0..4u32 {
            let reserved = allocated(g, t_s) + cache(g);
            let used = reserved + GIB / 2;
            let here = !gone.contains(&g);
            windows.push(GpuWindow {
                gpu: GpuInfo {
                    uuid: format!("GPU-{g}"),
                    index: g,
                    name: "A100-40GB".into(),
                    total_bytes: 40 * GIB,
                },
                start_ms,
                end_ms,
                samples: 4,
                used_bytes: BytesStat::single(if here { used } else { GIB / 2 }),
                reserved_bytes: None,
                util_pct: None,
                sm_clock_mhz: None,
                power_w: None,
                procs: here
                    .then(|| ProcWindow {
                        pid: 100 + g,
                        used_bytes: BytesStat::single(used),
                        rank: Some(RankInfo {
                            job: "job-x".into(),
                            rank: g,
                            local_rank: g,
                            world_size: 4,
                            master_addr: None,
                            master_port: None,
                        }),
                    })
                    .into_iter()
                    .collect(),
            });
            if here {
                hook.push(HookRecord::Alloc(AllocRecord {
                    limit: None,
                    t_ms: end_ms,
                    job: "job-x".into(),
                    rank: g,
                    stats: AllocStats {
                        allocated: allocated(g, t_s),
                        reserved,
                        inactive_split: Some(0),
                        alloc_retries: Some(0),
                        ooms: Some(0),
                        ..AllocStats::default()
                    },
                }));
                hook.push(HookRecord::Step(StepRecord {
                    group: None,
                    waits: Default::default(),
                    collectives: Vec::new(),
                    t_ms: end_ms,
                    job: "job-x".into(),
                    rank: g,
                    step: (seq - 1) * WINDOWS_PER_BATCH + i + 1,
                    duration_ms: 200.0 + 10.0 * g as f64,
                    sections: vec![("forward".into(), 100.0 + 10.0 * g as f64)],
                }));
            }
        }
    }
    hook.extend(extra);
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: "agent-a".into(),
        incarnation: 1,
        seq,
        node: "node-a".into(),
        dropped_batches: 0,
        windows,
        hook,
        acks,
    }))
}

fn snapshot(rank: u32, name: &str, t_ms: u64, allocated: u64) -> HookRecord {
    HookRecord::Event(EventRecord {
        t_ms,
        job: "job-x".into(),
        rank,
        name: name.into(),
        detail: None,
        snapshot: Some(AllocStats {
            allocated,
            reserved: allocated + GIB,
            ..AllocStats::default()
        }),
    })
}

async fn get(url: &str, path: &str) -> (u16, Value) {
    let resp = support::http()
        .get(format!("{url}{path}"))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn post_actions(url: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/actions"))
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// Polls `GET /api/v1/actions` until `done` holds, bounded.
async fn wait_for_actions(url: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = get(url, "/api/v1/actions").await;
        let actions = body["actions"].as_array().unwrap().clone();
        if done(&actions) {
            return actions;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "actions never reached the expected state: {actions:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ranks_of(actions: &[Value]) -> Vec<u64> {
    actions
        .iter()
        .map(|a| a["rank"].as_u64().unwrap())
        .collect()
}

fn tune(c: &mut CoordinatorConfig) {
    c.credentials.admin_token = gpumon_runtime::secrets::Secret::new(TOKEN).ok();
    c.planner = PlannerConfig {
        horizon_s: 3600.0,
        min_reclaimable_bytes: 256 * MIB,
        interval_ms: 50,
        // Data time runs far ahead of the wall clock here: the planner may
        // act while the pushes go on; its actions must not expire meanwhile,
        // nor be planned again before the restart compares the book.
        ttl_s: 1.0e6,
        min_interval_s: 1.0e6,
        ..PlannerConfig::default()
    };
}

#[tokio::test]
async fn the_planner_releases_cache_on_the_right_ranks_and_the_lifecycle_is_replicated() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_with(dir.path(), tune).await;
    let url = c.api_url();
    let t_ms = |seq: u64| T0_MS + seq * WINDOWS_PER_BATCH * WINDOW_MS;
    // 600 s of data; snapshots at the start and near the end.
    for seq in 1..=20u64 {
        let extra = match seq {
            1 => vec![
                snapshot(0, "start", t_ms(0) + 1, 16 * GIB),
                snapshot(2, "start", t_ms(0) + 1, 16 * GIB),
            ],
            20 => vec![
                snapshot(0, "late", t_ms(20), 16 * GIB),
                snapshot(2, "late", t_ms(20), 16 * GIB + 11 * GIB),
            ],
            _ => Vec::new(),
        };
        push(&url, &batch(seq, &[], extra, Vec::new())).await;
    }

    // The planner sees rank 2's forecast and releases on ranks 0 and 2 only.
    let planned = wait_for_actions(&url, |a| a.len() >= 2).await;
    assert_eq!(ranks_of(&planned), vec![0, 2], "{planned:?}");
    for a in &planned {
        assert_eq!(a["kind"], "release_cache");
        // Pushes made after it was planned may have handed it out already.
        assert!(a["state"] == "planned" || a["state"] == "delivered", "{a}");
        assert_eq!(a["origin"], "planner");
        assert_eq!(a["job"], "job-x");
        assert!(a["reason"].as_str().unwrap().contains("run out of memory"));
    }

    // The next push's reply hands both out, and they are recorded delivered.
    let reply = push_reply(&url, &batch(21, &[], Vec::new(), Vec::new())).await;
    let mut handed: Vec<(u64, u32)> = reply.actions.iter().map(|a| (a.id, a.rank)).collect();
    handed.sort_unstable();
    assert_eq!(handed.iter().map(|h| h.1).collect::<Vec<_>>(), vec![0, 2]);
    assert!(reply
        .actions
        .iter()
        .all(|a| a.kind == ActionKind::ReleaseCache));
    let delivered = wait_for_actions(&url, |a| a.iter().all(|x| x["state"] == "delivered")).await;
    assert_eq!(delivered.len(), 2);
    // Until acknowledged, every reply carries them again (a lost reply loses nothing).
    let again = push_reply(&url, &batch(22, &[], Vec::new(), Vec::new())).await;
    assert_eq!(again.actions.len(), 2);

    // The agent acknowledges: rank 0 freed 1 GiB, rank 2 failed.
    let acks = vec![
        ActionAck {
            id: handed[0].0,
            t_ms: t_ms(23),
            outcome: ActionOutcome::Done {
                freed_bytes: GIB,
                at_step: Some(77),
            },
            response: Some("batch size 32 -> 24".into()),
        },
        ActionAck {
            id: handed[1].0,
            t_ms: t_ms(23),
            outcome: ActionOutcome::Failed {
                reason: "torch.cuda.empty_cache() raised".into(),
            },
            response: None,
        },
    ];
    let reply = push_reply(&url, &batch(23, &[], Vec::new(), acks)).await;
    assert!(
        reply.actions.is_empty(),
        "acknowledged actions are not handed out again"
    );
    let (_, body) = get(&url, "/api/v1/actions?state=done").await;
    let done = body["actions"].as_array().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["rank"], 0);
    assert_eq!(done[0]["freed_bytes"], GIB);
    assert_eq!(done[0]["at_step"], 77);
    assert_eq!(done[0]["response"], "batch size 32 -> 24");
    let (_, body) = get(&url, "/api/v1/actions?state=failed&job=job-x").await;
    assert_eq!(body["actions"][0]["rank"], 2);
    assert!(body["actions"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("empty_cache"));

    // By hand: the token is required; rank 3 gets one, rank 9 does not exist.
    let req = json!({"kind": "release_cache", "job": "job-x", "ranks": [3, 9]});
    let (status, err) = post_actions(&url, None, req.clone()).await;
    assert_eq!(status, 401, "{err}");
    let (status, _) = post_actions(&url, Some("wrong-token-wrong-token"), req.clone()).await;
    assert_eq!(status, 401);
    let (status, body) = post_actions(&url, Some(TOKEN), req).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["actions"][0]["outcome"], "issued");
    assert!(body["actions"][0]["id"].as_u64().is_some());
    assert_eq!(body["actions"][1]["outcome"], "unknown_rank");
    let (status, body) = post_actions(
        &url,
        Some(TOKEN),
        json!({"kind": "release_cache", "job": "job-x", "ranks": [3]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["actions"][0]["outcome"], "existing",
        "one outstanding per rank"
    );
    for (bad, code) in [
        (
            json!({"kind": "release_cache", "job": "nope", "ranks": [0]}),
            404,
        ),
        (
            json!({"kind": "explode", "job": "job-x", "ranks": [0]}),
            400,
        ),
        (
            json!({"kind": "release_cache", "job": "job-x", "ranks": []}),
            400,
        ),
        (
            json!({"kind": "release_cache", "job": "job-x", "ranks": [1, 1]}),
            400,
        ),
        (
            json!({"kind": "release_cache", "job": "job-x", "ranks": [1], "x": 1}),
            400,
        ),
    ] {
        let (status, err) = post_actions(&url, Some(TOKEN), bad.clone()).await;
        assert_eq!(status, code, "{bad} -> {err}");
        assert!(!err["message"].as_str().unwrap().is_empty());
    }

    // Rank 1's process leaves its GPU: an action for it expires cleanly.
    push(&url, &batch(24, &[1], Vec::new(), Vec::new())).await;
    let (status, body) = post_actions(
        &url,
        Some(TOKEN),
        json!({"kind": "release_cache", "job": "job-x", "ranks": [1]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["actions"][0]["outcome"], "expired");
    let id = body["actions"][0]["id"].as_u64().unwrap();
    let (_, body) = get(&url, "/api/v1/actions?state=expired").await;
    let expired = &body["actions"].as_array().unwrap()[0];
    assert_eq!(expired["id"], id);
    assert!(expired["detail"].as_str().unwrap().contains("ended"));

    // Snapshots: listed by name, compared rank by rank.
    let (status, body) = get(&url, "/api/v1/jobs/job-x/snapshots").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["late", "start"]);
    let (status, cmp) = get(&url, "/api/v1/jobs/job-x/snapshots?a=start&b=late").await;
    assert_eq!(status, 200, "{cmp}");
    assert_eq!(cmp["ranks"][0]["delta"]["allocated"], 0);
    assert_eq!(cmp["ranks"][1]["rank"], 2);
    assert_eq!(cmp["ranks"][1]["delta"]["allocated"], 11 * GIB);
    let (status, err) = get(&url, "/api/v1/jobs/job-x/snapshots?a=start&b=nope").await;
    assert_eq!(status, 404);
    assert!(err["message"].as_str().unwrap().contains("start"), "{err}");
    let (status, _) = get(&url, "/api/v1/jobs/job-x/snapshots?a=start").await;
    assert_eq!(status, 400);
    let (status, _) = get(&url, "/api/v1/jobs/nope/snapshots").await;
    assert_eq!(status, 404);
    let (status, _) = get(&url, "/api/v1/actions?sate=done").await;
    assert_eq!(status, 400);

    // Step and section times per rank, in the job view.
    let (status, job) = get(&url, "/api/v1/jobs/job-x").await;
    assert_eq!(status, 200);
    let steps = &job["steps"]["3"];
    assert_eq!(steps["sections"]["forward"]["last_ms"], 130.0, "{steps}");
    assert_eq!(steps["sections"]["forward"]["mean_ms"], 130.0, "{steps}");
    assert_eq!(steps["mean_duration_ms"], 230.0, "{steps}");
    assert!(steps["step"].as_u64().unwrap() > 100, "{steps}");

    // A restart brings back the same book, from snapshot plus log.
    let (_, before) = get(&url, "/api/v1/actions").await;
    c.shutdown().await;
    let c = start_with(dir.path(), |c| {
        tune(c);
        c.planner.enabled = false;
    })
    .await;
    let url = c.api_url();
    support::wait_for_same(&url, "/api/v1/actions", Value::clone, &before).await;
    c.shutdown().await;
}
