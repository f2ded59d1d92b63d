//! `GET /api/v1/stream` over real HTTP on loopback: what is applied comes out
//! as trace v1 records (ranks once per connection, one `gpu` line per
//! window, the peak as `used` with the least and newest sample beside it,
//! absolute time), duplicates come out never,
//! bad requests are refused, the number of streams is bounded and shutdown
//! ends them.

use std::time::Duration;

mod support;
use support::start;

use gpumon_proto::api::ApiErrorBody;
use gpumon_proto::{
    AgentMessage, AgentMessageV1, BytesStat, GaugeStat, GpuInfo, GpuWindow, ProcWindow, PushBatch,
    PushOutcome, RankInfo,
};
use gpumon_trace::{GpuRecord, ProcRecord, RankRecord, TraceRecord};

const GIB: u64 = 1 << 30;
const T0_MS: u64 = 1_700_000_000_000;
/// The stream's limit (`MAX_STREAM_CLIENTS`).
const MAX_STREAMS: usize = 64;
const MAX_STREAMS_PER_CLIENT: usize = 4;
/// Bound on every wait.
const WITHIN: Duration = Duration::from_secs(10);

/// Batch `seq` (from 1): two 1-second windows of GPUs 0 and 1, rank g on GPU
/// g; rank 0 runs as `pid0`.
fn batch(seq: u64, pid0: u32) -> AgentMessage {
    let mut windows = Vec::new();
    for i in 0..2 {
        let start_ms = T0_MS + ((seq - 1) * 2 + i) * 1_000;
        for g in 0..2u32 {
            let used = 10 * GIB + u64::from(g) * GIB + seq * 1_000 + i;
            windows.push(GpuWindow {
                gpu: GpuInfo {
                    uuid: format!("GPU-{g}"),
                    index: g,
                    name: "H100".into(),
                    total_bytes: 80 * GIB,
                },
                start_ms,
                end_ms: start_ms + 750,
                samples: 4,
                used_bytes: BytesStat {
                    min: used - 100,
                    max: used,
                    last: used - 50,
                    mean: used - 60,
                },
                reserved_bytes: None,
                util_pct: Some(GaugeStat {
                    min: 80.0,
                    max: 100.0,
                    last: 90.0,
                    mean: 92.5,
                }),
                sm_clock_mhz: None,
                power_w: None,
                procs: vec![ProcWindow {
                    pid: if g == 0 { pid0 } else { 200 },
                    used_bytes: BytesStat {
                        min: used / 2 - 10,
                        max: used / 2,
                        last: used / 2 - 5,
                        mean: used / 2 - 5,
                    },
                    rank: Some(RankInfo {
                        job: "job-r".into(),
                        rank: g,
                        local_rank: g,
                        world_size: 2,
                        master_addr: None,
                        master_port: None,
                    }),
                }],
            });
        }
    }
    AgentMessage::V1(AgentMessageV1::Push(PushBatch {
        agent_id: "agent-r".into(),
        incarnation: 1,
        seq,
        node: "node-r".into(),
        dropped_batches: 0,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    }))
}

/// Pushes until committed; whether it was a duplicate.
async fn push(url: &str, msg: &AgentMessage) -> bool {
    matches!(
        support::push(url, msg).await,
        PushOutcome::Committed {
            duplicate: true,
            ..
        }
    )
}

/// A stream client reading whole lines.
/// A client whose connections come from the loopback address `from`.
fn from_address(from: [u8; 4]) -> reqwest::Client {
    gpumon_net::plain_client_builder()
        .local_address(std::net::IpAddr::from(from))
        .build()
        .unwrap()
}

struct StreamClient {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl StreamClient {
    async fn connect(url: &str) -> Self {
        Self::connect_from(url, [127, 0, 0, 1]).await
    }

    /// A stream opened from the loopback address `from` (any 127.x.y.z).
    async fn connect_from(url: &str, from: [u8; 4]) -> Self {
        let resp = from_address(from)
            .get(format!("{url}/api/v1/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"],
            "application/x-ndjson",
            "{:?}",
            resp.headers()
        );
        Self {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next `n` lines as trace records.
    async fn records(&mut self, n: usize) -> Vec<TraceRecord> {
        let mut out = Vec::new();
        while out.len() < n {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                let record = serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!(
                        "not a trace record ({e}): {}",
                        String::from_utf8_lossy(&line)
                    )
                });
                out.push(record);
                continue;
            }
            let chunk = tokio::time::timeout(WITHIN, self.resp.chunk())
                .await
                .expect("stream lines in time")
                .expect("stream readable")
                .expect("stream still open");
            self.buf.extend_from_slice(&chunk);
        }
        out
    }

    /// True when the stream ends (cleanly or not) within [`WITHIN`], having
    /// sent nothing more.
    async fn ends(&mut self) -> bool {
        let ended = tokio::time::timeout(WITHIN, async {
            loop {
                match self.resp.chunk().await {
                    Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => return,
                }
            }
        })
        .await
        .is_ok();
        ended && self.buf.is_empty()
    }
}

fn rank(t: f64, rank: u32, pid: u32) -> TraceRecord {
    TraceRecord::Rank(RankRecord {
        t,
        job: "job-r".into(),
        rank,
        local_rank: rank,
        world_size: 2,
        node: "node-r".into(),
        gpu: rank,
        pid,
    })
}

fn gpu(seq: u64, i: u64, g: u32, pid0: u32) -> TraceRecord {
    let end_ms = T0_MS + ((seq - 1) * 2 + i) * 1_000 + 750;
    let used = 10 * GIB + u64::from(g) * GIB + seq * 1_000 + i;
    TraceRecord::Gpu(GpuRecord {
        t: end_ms as f64 / 1000.0,
        node: "node-r".into(),
        gpu: g,
        uuid: format!("GPU-{g}"),
        name: "H100".into(),
        total: 80 * GIB,
        used,
        used_min: Some(used - 100),
        used_last: Some(used - 50),
        util: Some(92.5),
        sm_clock_mhz: None,
        power_w: None,
        procs: vec![ProcRecord {
            pid: if g == 0 { pid0 } else { 200 },
            used: used / 2,
        }],
    })
}

#[tokio::test]
async fn applied_windows_stream_as_trace_records_and_duplicates_never() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();
    let mut first = StreamClient::connect(&url).await;

    assert!(!push(&url, &batch(1, 100)).await);
    let t0 = (T0_MS + 750) as f64 / 1000.0;
    assert_eq!(
        first.records(6).await,
        [
            rank(t0, 0, 100),
            gpu(1, 0, 0, 100),
            rank(t0, 1, 200),
            gpu(1, 0, 1, 100),
            gpu(1, 1, 0, 100),
            gpu(1, 1, 1, 100),
        ]
    );

    // The same batch again is a duplicate: nothing streams for it, so the
    // next lines are batch 2's. Rank 0 restarted under pid 101: announced
    // again; rank 1 is unchanged: not repeated on this connection.
    assert!(push(&url, &batch(1, 100)).await, "re-push is a duplicate");
    let mut second = StreamClient::connect(&url).await;
    assert!(!push(&url, &batch(2, 101)).await);
    let t2 = (T0_MS + 2_000 + 750) as f64 / 1000.0;
    assert_eq!(
        first.records(5).await,
        [
            rank(t2, 0, 101),
            gpu(2, 0, 0, 101),
            gpu(2, 0, 1, 101),
            gpu(2, 1, 0, 101),
            gpu(2, 1, 1, 101),
        ]
    );
    // A new connection is told every rank it sees.
    assert_eq!(
        second.records(6).await,
        [
            rank(t2, 0, 101),
            gpu(2, 0, 0, 101),
            rank(t2, 1, 200),
            gpu(2, 0, 1, 101),
            gpu(2, 1, 0, 101),
            gpu(2, 1, 1, 101),
        ]
    );

    // Shutdown ends open streams rather than waiting for them.
    tokio::time::timeout(WITHIN, c.shutdown())
        .await
        .expect("shutdown does not wait for open streams");
    assert!(first.ends().await);
    assert!(second.ends().await);
}

#[tokio::test]
async fn bad_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();

    let resp = support::http()
        .get(format!("{url}/api/v1/stream?job=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let err: ApiErrorBody = resp.json().await.unwrap();
    assert!(err.message.contains("job=x"), "{err:?}");

    let resp = gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .post(format!("{url}/api/v1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    c.shutdown().await;
}

#[tokio::test]
async fn streams_are_bounded_and_a_closed_one_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), 1000).await;
    let url = c.api_url();

    // One client gets its share, and no more.
    let mut open = Vec::new();
    for _ in 0..MAX_STREAMS_PER_CLIENT {
        open.push(StreamClient::connect(&url).await);
    }
    let resp = support::http()
        .get(format!("{url}/api/v1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429, "a fifth stream from one client");
    // Other clients (other loopback addresses) fill the replica's slots.
    for i in 0..(MAX_STREAMS - MAX_STREAMS_PER_CLIENT) {
        let from = [127, 0, 1, 1 + (i / MAX_STREAMS_PER_CLIENT) as u8];
        open.push(StreamClient::connect_from(&url, from).await);
    }
    let resp = from_address([127, 0, 2, 1])
        .get(format!("{url}/api/v1/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let err: ApiErrorBody = resp.json().await.unwrap();
    assert_eq!(err.error, "unavailable");
    assert!(err.message.contains("64"), "{err:?}");

    // A client that hangs up frees its slot, even while nothing streams.
    drop(open.remove(0));
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let resp = support::http()
            .get(format!("{url}/api/v1/stream"))
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 429, "the client still holds its share");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot of a closed stream was not freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::timeout(WITHIN, c.shutdown())
        .await
        .expect("shutdown does not wait for open streams");
}
