//! Prometheus remote-write of the per-GPU series, end to end: a coordinator
//! on loopback takes the windows pushed to it and writes them to a real
//! Prometheus (`/usr/bin/prometheus --web.enable-remote-write-receiver`,
//! Debian package `prometheus`), whose query API must then hold exactly the
//! values, times and labels pushed; and to a small receiver in the test
//! that answers 500, 400 or 503 on demand, for retries, refusals and the
//! queue bound.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use gpumon_coordinator::remote_write::proto::WriteRequest;
use gpumon_coordinator::remote_write::{RemoteWriteConfig, RemoteWriteCounts, RemoteWriteStats};
use gpumon_coordinator::Coordinator;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GaugeStat, GpuInfo, GpuWindow, ProcWindow, PushBatch,
    RankInfo,
};
use gpumon_runtime::secrets::Secret;
use prost::Message;
use serde_json::Value;
use support::prometheus::{Options, Prometheus};
use support::trio::Trio;
use support::{get_text, push, start_with, GIB};

/// Bound on every wait.
const WITHIN: Duration = Duration::from_secs(30);
const NODE: &str = "node-rw";
const JOB: &str = "job-rw";
const WINDOW_MS: u64 = 2_000;

/// One GPU of the pushed node: its rank (if any) and utilization (if any).
#[derive(Clone, Copy)]
struct Gpu {
    index: u32,
    rank: Option<u32>,
    util_pct: Option<f32>,
}

const GPUS: [Gpu; 3] = [
    Gpu {
        index: 0,
        rank: Some(0),
        util_pct: Some(40.0),
    },
    Gpu {
        index: 1,
        rank: Some(1),
        util_pct: Some(55.5),
    },
    Gpu {
        index: 2,
        rank: None,
        util_pct: None,
    },
];

fn uuid(g: &Gpu) -> String {
    format!("GPU-rw-{}", g.index)
}

/// Used bytes of GPU `g` in window `w`: (min, max, last), all different.
fn used(g: &Gpu, w: u64) -> (u64, u64, u64) {
    let base = 10 * GIB + u64::from(g.index) * GIB + w * (64 << 20);
    (base, base + (48 << 20), base + (16 << 20))
}

/// The end of window `w` (from 0): two seconds apart, starting a few
/// minutes before now, so the receiver's head block takes them.
fn end_ms(t0: u64, w: u64) -> u64 {
    t0 + (w + 1) * WINDOW_MS
}

fn start_time() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.as_millis() as u64 - 300_000) / 1000 * 1000
}

fn window(g: &Gpu, t0: u64, w: u64) -> GpuWindow {
    let (min, max, last) = used(g, w);
    GpuWindow {
        gpu: GpuInfo {
            uuid: uuid(g),
            index: g.index,
            name: "H100".into(),
            total_bytes: 80 * GIB,
        },
        start_ms: end_ms(t0, w) - WINDOW_MS + 1,
        end_ms: end_ms(t0, w),
        samples: 4,
        used_bytes: BytesStat {
            min,
            max,
            last,
            mean: (min + max) / 2,
        },
        reserved_bytes: None,
        util_pct: g.util_pct.map(|u| GaugeStat {
            min: u - 5.0,
            max: u + 5.0,
            last: u,
            mean: u,
        }),
        sm_clock_mhz: None,
        power_w: None,
        procs: g
            .rank
            .map(|rank| ProcWindow {
                pid: 4000 + rank,
                used_bytes: BytesStat::single(min),
                rank: Some(RankInfo {
                    job: JOB.into(),
                    rank,
                    local_rank: rank,
                    world_size: 2,
                    master_addr: None,
                    master_port: None,
                }),
            })
            .into_iter()
            .collect(),
    }
}

/// Batch `seq`: windows `ws` of `gpus`.
fn batch(seq: u64, gpus: &[Gpu], t0: u64, ws: std::ops::Range<u64>) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: "agent-rw".into(),
        incarnation: 1,
        seq,
        node: NODE.into(),
        dropped_batches: 0,
        windows: ws
            .flat_map(|w| gpus.iter().map(move |g| window(g, t0, w)))
            .collect(),
        hook: Vec::new(),
        acks: Vec::new(),
    }))
}

/// A label set, `__name__` included.
type Labels = BTreeMap<String, String>;
/// Every series to its samples, `(ms, value)` oldest first.
type Written = BTreeMap<Labels, Vec<(i64, f64)>>;

/// What the sender must write for windows `ws` of `gpus`, taken at once:
/// used and peak per window, capacity and utilization at the newest one.
fn expected(gpus: &[Gpu], t0: u64, ws: std::ops::Range<u64>, out: &mut Written) {
    let newest = ws.end - 1;
    for g in gpus {
        let mut labels = Labels::from([
            ("node".to_owned(), NODE.to_owned()),
            ("gpu".to_owned(), g.index.to_string()),
            ("uuid".to_owned(), uuid(g)),
            ("cluster".to_owned(), "a".to_owned()),
        ]);
        if let Some(rank) = g.rank {
            labels.insert("job".into(), JOB.into());
            labels.insert("rank".into(), rank.to_string());
        }
        let mut add = |name: &str, t: u64, v: f64| {
            let mut l = labels.clone();
            l.insert("__name__".into(), name.into());
            out.entry(l).or_default().push((t as i64, v));
        };
        for w in ws.clone() {
            let (_, max, last) = used(g, w);
            add("gpumon_gpu_memory_used_bytes", end_ms(t0, w), last as f64);
            add("gpumon_gpu_memory_peak_bytes", end_ms(t0, w), max as f64);
        }
        add(
            "gpumon_gpu_memory_total_bytes",
            end_ms(t0, newest),
            (80 * GIB) as f64,
        );
        if let Some(u) = g.util_pct {
            add(
                "gpumon_gpu_utilization_ratio",
                end_ms(t0, newest),
                f64::from(u) / 100.0,
            );
        }
    }
}

fn samples(w: &Written) -> u64 {
    w.values().map(|s| s.len() as u64).sum()
}

fn config(url: String) -> RemoteWriteConfig {
    let mut c = RemoteWriteConfig::new(url);
    c.interval = Duration::from_millis(200);
    c.timeout = Duration::from_secs(5);
    c.labels.insert("cluster".into(), "a".into());
    c
}

async fn coordinator(
    dir: &std::path::Path,
    rw: RemoteWriteConfig,
) -> (Coordinator, RemoteWriteStats) {
    let c = start_with(dir, |c| c.remote_write = Some(rw)).await;
    let stats = c.remote_write_stats();
    // A new leader starts from its view as it is: push only once it sends.
    until(&stats, "the sender starts", |c| c.sending).await;
    (c, stats)
}

/// Polls the sender's counters until `done`, bounded by [`WITHIN`].
async fn until(
    stats: &RemoteWriteStats,
    what: &str,
    done: impl Fn(&RemoteWriteCounts) -> bool,
) -> RemoteWriteCounts {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let now = stats.get();
        if done(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WITHIN:?}; counters {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every `gpumon_gpu_*` sample Prometheus holds up to `at_ms`.
async fn stored(web: &str, at_ms: u64) -> Written {
    let query = [
        ("query", "{__name__=~\"gpumon_gpu_.+\"}[30m]".to_owned()),
        ("time", format!("{:.3}", at_ms as f64 / 1000.0)),
    ];
    let q = serde_urlencoded::to_string(query).unwrap();
    let body: Value = support::get_json(format!("http://{web}/api/v1/query?{q}")).await;
    assert_eq!(body["status"], "success", "{body}");
    let mut out = Written::new();
    for series in body["data"]["result"].as_array().expect("a matrix") {
        let labels: Labels = serde_json::from_value(series["metric"].clone()).unwrap();
        let values = series["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let t = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
                (t, p[1].as_str().unwrap().parse::<f64>().unwrap())
            })
            .collect();
        out.insert(labels, values);
    }
    out
}

/// A Prometheus that accepts remote-write, ready; its web address.
async fn receiving_prometheus(dir: &std::path::Path) -> Prometheus {
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, "global:\n  scrape_interval: 15s\n").unwrap();
    let prometheus = Prometheus::start_with(
        &file,
        &dir.join("tsdb"),
        Options {
            remote_write_receiver: true,
        },
    );
    prometheus.wait_ready(WITHIN).await;
    prometheus
}

#[tokio::test]
async fn a_real_prometheus_holds_every_window_with_its_values_times_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = receiving_prometheus(dir.path()).await;
    let web = prometheus.web.clone();
    let url = format!("http://{web}/api/v1/write");
    let (coordinator, stats) = coordinator(&dir.path().join("c"), config(url)).await;
    let api = coordinator.api_url();
    let t0 = start_time();

    let mut want = Written::new();
    push(&api, &batch(1, &GPUS, t0, 0..4)).await;
    expected(&GPUS, t0, 0..4, &mut want);
    until(&stats, "the first batch is sent", |c| {
        c.sent == samples(&want)
    })
    .await;
    assert_eq!(stored(&web, end_ms(t0, 3)).await, want);

    // Later windows are sent alone: nothing twice (a receiver would refuse
    // it as out of order), nothing missing.
    push(&api, &batch(2, &GPUS, t0, 4..6)).await;
    expected(&GPUS, t0, 4..6, &mut want);
    let counts = until(&stats, "the second batch is sent", |c| {
        c.sent == samples(&want)
    })
    .await;
    assert_eq!(stored(&web, end_ms(t0, 5)).await, want);
    assert_eq!((counts.failed, counts.dropped, counts.queued), (0, 0, 0));
    assert!(
        counts.requests.keys().all(|code| code == "204"),
        "{counts:?}"
    );

    let metrics = get_text(format!("{api}/metrics")).await;
    for line in [
        format!(
            "gpumon_remote_write_samples_total{{outcome=\"sent\"}} {}",
            samples(&want)
        ),
        "gpumon_remote_write_samples_total{outcome=\"failed\"} 0".to_owned(),
        format!(
            "gpumon_remote_write_requests_total{{code=\"204\"}} {}",
            counts.requests["204"]
        ),
        "gpumon_remote_write_sending 1".to_owned(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    let last_success = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gpumon_remote_write_last_success_timestamp_seconds "))
        .expect("the last success is shown");
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let ago = now_s - last_success.parse::<f64>().unwrap();
    assert!((0.0..WITHIN.as_secs_f64()).contains(&ago), "{ago}");
    coordinator.shutdown().await;
}

#[tokio::test]
async fn after_a_failover_the_new_leader_sends_the_new_windows_and_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = receiving_prometheus(dir.path()).await;
    let web = prometheus.web.clone();
    let url = format!("http://{web}/api/v1/write");
    let mut trio = Trio::start_with(|c| c.remote_write = Some(config(url.clone()))).await;
    let old = trio.leader().await;
    let stats: Vec<RemoteWriteStats> = trio.nodes.iter().map(|c| c.remote_write_stats()).collect();
    until(&stats[old], "the leader sends", |c| c.sending).await;
    assert!(
        (0..3).all(|i| i == old || !stats[i].get().sending),
        "only the leader sends"
    );
    let t0 = start_time();
    let mut want = Written::new();
    push(&trio.nodes[old].api_url(), &batch(1, &GPUS, t0, 0..3)).await;
    expected(&GPUS, t0, 0..3, &mut want);
    until(&stats[old], "the old leader sends", |c| {
        c.sent == samples(&want)
    })
    .await;

    trio.nodes.remove(old).shutdown().await;
    let new = trio.leader().await;
    let new_stats = trio.nodes[new].remote_write_stats();
    until(&new_stats, "the new leader sends", |c| c.sending).await;
    let before = samples(&want);
    push(&trio.nodes[new].api_url(), &batch(2, &GPUS, t0, 3..5)).await;
    expected(&GPUS, t0, 3..5, &mut want);
    let counts = until(&new_stats, "the new leader sends the new windows", |c| {
        c.sent == samples(&want) - before
    })
    .await;
    assert_eq!((counts.failed, counts.dropped), (0, 0));
    assert_eq!(stored(&web, end_ms(t0, 4)).await, want);
    let follower = trio
        .nodes
        .iter()
        .position(|c| c.id() != trio.nodes[new].id())
        .unwrap();
    assert_eq!(trio.nodes[follower].remote_write_stats().get().sent, 0);
    trio.shutdown().await;
}

/// What the test receiver does and what it got.
#[derive(Default)]
struct Receiver {
    /// Status of each answer by request number (from 0); past the list, the last.
    answers: Mutex<Vec<StatusCode>>,
    /// Every request's headers and body, in order.
    got: Mutex<Vec<(HeaderMap, Bytes)>>,
    count: AtomicUsize,
    /// While set, every request is answered 503.
    failing: AtomicBool,
}

async fn receive(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let n = r.count.fetch_add(1, Ordering::SeqCst);
    r.got.lock().unwrap().push((headers, body));
    if r.failing.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let answers = r.answers.lock().unwrap();
    answers
        .get(n)
        .or(answers.last())
        .copied()
        .unwrap_or(StatusCode::NO_CONTENT)
}

/// Serves `receiver` on a loopback port; its write URL.
async fn serve(receiver: Arc<Receiver>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/api/v1/write", axum::routing::post(receive))
        .with_state(receiver);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/api/v1/write")
}

fn decode(body: &Bytes) -> Written {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .expect("snappy block");
    let request = WriteRequest::decode(raw.as_slice()).expect("a WriteRequest");
    let mut out = Written::new();
    for s in request.timeseries {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("UTF-8");
        let names: Vec<String> = s.labels.iter().map(|l| text(&l.name)).collect();
        assert_eq!(names[0], "__name__", "{names:?}");
        assert!(names.windows(2).all(|p| p[0] < p[1]), "sorted: {names:?}");
        let labels = s
            .labels
            .iter()
            .map(|l| (text(&l.name), text(&l.value)))
            .collect();
        let samples: Vec<(i64, f64)> = s.samples.iter().map(|p| (p.timestamp, p.value)).collect();
        assert!(samples.windows(2).all(|p| p[0].0 < p[1].0), "in time order");
        out.entry(labels).or_default().extend(samples);
    }
    out
}

#[tokio::test]
async fn a_500_is_retried_and_the_same_request_then_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Arc::new(Receiver::default());
    *receiver.answers.lock().unwrap() = vec![StatusCode::INTERNAL_SERVER_ERROR, StatusCode::OK];
    let mut rw = config(serve(receiver.clone()).await);
    let token = "remote-write-token-0001";
    rw.bearer_token = Some(Secret::new(token).unwrap());
    let (coordinator, stats) = coordinator(dir.path(), rw).await;
    let t0 = start_time();
    push(&coordinator.api_url(), &batch(1, &GPUS[..1], t0, 0..3)).await;
    let mut want = Written::new();
    expected(&GPUS[..1], t0, 0..3, &mut want);

    let counts = until(&stats, "sent after a retry", |c| c.sent == samples(&want)).await;
    let got = receiver.got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "one 500, one retry");
    assert_eq!(got[0].1, got[1].1, "the same request again");
    assert_eq!(decode(&got[1].1), want);
    let headers = &got[1].0;
    for (name, value) in [
        ("content-encoding", "snappy"),
        ("content-type", "application/x-protobuf"),
        ("x-prometheus-remote-write-version", "0.1.0"),
        ("authorization", &format!("Bearer {token}")),
    ] {
        assert_eq!(headers[name], value, "{name}");
    }
    let codes: Vec<(&str, u64)> = counts
        .requests
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(codes, [("200", 1), ("500", 1)]);
    assert_eq!((counts.failed, counts.dropped), (0, 0));
    coordinator.shutdown().await;
}

#[tokio::test]
async fn a_400_is_counted_as_failed_and_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Arc::new(Receiver::default());
    *receiver.answers.lock().unwrap() = vec![StatusCode::BAD_REQUEST];
    let (coordinator, stats) = coordinator(dir.path(), config(serve(receiver.clone()).await)).await;
    let api = coordinator.api_url();
    let t0 = start_time();
    let mut first = Written::new();
    expected(&GPUS, t0, 0..2, &mut first);
    push(&api, &batch(1, &GPUS, t0, 0..2)).await;
    until(&stats, "the first refusal", |c| c.failed == samples(&first)).await;

    // The next take's request is the second one the receiver sees: the
    // refused one was not tried again in between.
    let mut second = Written::new();
    expected(&GPUS, t0, 2..3, &mut second);
    push(&api, &batch(2, &GPUS, t0, 2..3)).await;
    let total = samples(&first) + samples(&second);
    let counts = until(&stats, "the second refusal", |c| c.failed == total).await;
    assert_eq!(receiver.count.load(Ordering::SeqCst), 2);
    assert_eq!(counts.requests, BTreeMap::from([("400".to_owned(), 2)]));
    assert_eq!((counts.sent, counts.queued), (0, 0));
    let bodies: Vec<Bytes> = receiver
        .got
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(decode(&bodies[0]), first);
    assert_eq!(decode(&bodies[1]), second);
    coordinator.shutdown().await;
}

#[tokio::test]
async fn past_the_queue_bound_the_oldest_requests_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Arc::new(Receiver::default());
    receiver.failing.store(true, Ordering::SeqCst);
    let gpu = &GPUS[2..];
    let (mut older, mut newer) = (Written::new(), Written::new());
    let t0 = start_time();
    expected(gpu, t0, 0..3, &mut older);
    expected(gpu, t0, 3..6, &mut newer);
    let one_take = samples(&older) as usize;
    assert_eq!(one_take, samples(&newer) as usize);
    let mut rw = config(serve(receiver.clone()).await);
    rw.max_samples_per_request = one_take;
    rw.max_queued_samples = one_take;
    let (coordinator, stats) = coordinator(dir.path(), rw).await;
    let api = coordinator.api_url();

    push(&api, &batch(1, gpu, t0, 0..3)).await;
    until(&stats, "the older take waits in the queue", |c| {
        c.queued == one_take && c.requests.contains_key("503")
    })
    .await;
    push(&api, &batch(2, gpu, t0, 3..6)).await;
    until(&stats, "the older take is dropped", |c| {
        c.dropped == one_take as u64
    })
    .await;
    receiver.failing.store(false, Ordering::SeqCst);
    let counts = until(&stats, "the newer take is sent", |c| {
        c.sent == one_take as u64
    })
    .await;
    assert_eq!(
        (counts.dropped, counts.failed, counts.queued),
        (one_take as u64, 0, 0)
    );

    let got = receiver.got.lock().unwrap().clone();
    let (_, accepted) = got.last().unwrap();
    assert_eq!(decode(accepted), newer, "only the newer windows arrived");
    coordinator.shutdown().await;
}
