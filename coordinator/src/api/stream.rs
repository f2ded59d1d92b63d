//! `GET /api/v1/stream`: every window this replica applies from now on, as
//! trace v1 records, one JSON object per line (`application/x-ndjson`, chunked,
//! long-lived). `gpumon record` turns it into a trace file.
//!
//! Per applied window, in the order applied:
//! - a `rank` record for each process with a known job and rank, but only when
//!   that (job, rank) is new on this connection or moved (node, GPU, pid,
//!   local rank or world size changed), to keep the stream small;
//! - one `gpu` record;
//!
//! then the batch's hook records as `alloc`, `step` and `event` records
//! (named snapshots have no trace form and are left out).
//!
//! Records come from the one mapping of pushed data to trace records
//! ([`gpumon_trace::from_window`]) and are written with the trace writer's
//! own serde, so the lines are exactly what
//! [`gpumon_trace::TraceWriter`] writes, except that `t` is absolute:
//! the window's last sample (`end_ms`, the agent's clock) in seconds since
//! the Unix epoch. `used` (device and per process) is the window's **peak**
//! (`used_bytes.max`), so a spike between samples survives; `used_min` and
//! `used_last` carry the window's least and newest sample, so a recorded
//! trace replays as the engine saw the window live. `util`, `sm_clock_mhz`
//! and `power_w` are the window means.
//!
//! A client that falls more than
//! [`APPLIED_CHANNEL_CAPACITY`](crate::raft::state_machine::APPLIED_CHANNEL_CAPACITY)
//! batches behind loses the oldest; the hole is marked by a line
//! `{"type":"gap","t":T,"dropped_batches":N}` (`T`: the last `t` streamed),
//! which trace readers skip and count as an unknown type. Nothing that
//! streams can slow down apply.
//!
//! At most [`MAX_STREAM_CLIENTS`] streams are open at once per replica (503
//! beyond) and `MAX_STREAMS_PER_CLIENT` per client address (429 beyond;
//! see `stream_slots`). A client that stops reading is dropped, not kept:
//! chunks wait for it in a buffer of [`STREAM_BUFFER_CHUNKS`], and once that
//! is full the stream ends and frees its slot. Every stream ends when the
//! coordinator shuts down. The stream
//! takes no query parameters; any is refused (400) so typos do not pass
//! silently.
//!
//! While nothing is applied, a blank line goes out every
//! [`KEEPALIVE`]: the listener closes a connection that passes no byte for
//! two minutes (`gpumon_net::admission`), and an idle cluster's stream is
//! not a stalled connection. Trace readers and `gpumon record` skip blank
//! lines.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use gpumon_trace::from_window::{gpu_record, hook_record, rank_records};
use gpumon_trace::TraceRecord;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, watch};

use super::stream_slots::{NoSlot, StreamSlot};
use super::{ApiContext, ApiError};
use crate::raft::state_machine::AppliedBatch;

use super::stream_slots::{MAX_STREAMS_PER_CLIENT, MAX_STREAM_CLIENTS};

/// Chunks (one per applied batch) that wait for a slow client before it is
/// dropped.
pub const STREAM_BUFFER_CHUNKS: usize = 256;

/// (job, rank) pairs a connection remembers to leave out repeated `rank`
/// records; past it, it forgets them all and repeats each once.
const MAX_RANKS_REMEMBERED: usize = 65_536;

/// Longest time a stream goes without a byte: a blank line then.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// What a stream sends when it has had nothing to send for [`KEEPALIVE`].
const BLANK_LINE: &[u8] = b"\n";

/// Content type of the stream.
const NDJSON: &str = "application/x-ndjson";

/// Every window and hook record applied from now on, as trace v1 lines.
///
/// Chunked newline-delimited JSON; see docs/trace-format.md. Takes no parameters.
#[utoipa::path(
    get,
    path = "/api/v1/stream",
    responses(
        (status = 200, description = "A never-ending stream, one trace record per line.", body = String, content_type = "application/x-ndjson"),
        (status = 400, description = "A query parameter was given; the stream takes none.", body = gpumon_proto::api::ApiErrorBody),
        (status = 429, description = "This client holds its share of streams; close one.", body = gpumon_proto::api::ApiErrorBody),
        (status = 503, description = "Too many open streams; retry later.", body = gpumon_proto::api::ApiErrorBody),
    ),
)]
pub async fn stream(
    State(state): State<ApiContext>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        return Err(ApiError::BadRequest(format!(
            "bad query {q:?}: /api/v1/stream takes no parameters"
        )));
    }
    let inner = &state.inner;
    let slot = inner.stream_slots.claim(peer.ip()).map_err(|no| match no {
        NoSlot::Replica => ApiError::Unavailable(format!(
            "{MAX_STREAM_CLIENTS} streams are open on this replica, the most it serves; \
             close one or stream from another replica"
        )),
        NoSlot::Client => ApiError::Busy(
            std::time::Duration::from_secs(10),
            format!("this client holds {MAX_STREAMS_PER_CLIENT} streams, its share"),
        ),
    })?;
    // Subscribe before answering, so that everything applied after the
    // client has the response head is in the stream.
    let applied = inner.state_machine.subscribe_applied();
    tracing::info!(open = inner.stream_slots.open(), client = %peer.ip(), "stream client connected");
    let stream = Stream {
        applied,
        shutdown: inner.shutdown.clone(),
        encoder: Encoder::default(),
    };
    let (chunks, waiting) = mpsc::channel(STREAM_BUFFER_CHUNKS);
    tokio::spawn(feed(stream, chunks, slot, peer));
    let body = Body::from_stream(futures_util::stream::unfold(waiting, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    }));
    Ok(([(CONTENT_TYPE, NDJSON), (CACHE_CONTROL, "no-cache")], body).into_response())
}

/// Moves chunks to the client's buffer until the stream ends, the client
/// goes away, or the buffer is full (the client stopped reading); the slot
/// is freed then. A blank line goes out after [`KEEPALIVE`] without one.
async fn feed(stream: Stream, chunks: mpsc::Sender<Bytes>, _slot: StreamSlot, peer: SocketAddr) {
    let mut next = Box::pin(next_chunk(stream));
    loop {
        let chunk = tokio::select! {
            // The client went away while nothing was applied.
            _ = chunks.closed() => return,
            _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(BLANK_LINE),
            ready = &mut next => {
                let Some((Ok(chunk), stream)) = ready else {
                    return;
                };
                next = Box::pin(next_chunk(stream));
                chunk
            }
        };
        match chunks.try_send(chunk) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(client = %peer, buffered = STREAM_BUFFER_CHUNKS, "stream client stopped reading; dropping it");
                return;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}

/// One open stream's source: the applied batches and their encoding.
struct Stream {
    applied: broadcast::Receiver<Arc<AppliedBatch>>,
    shutdown: watch::Receiver<bool>,
    encoder: Encoder,
}

/// The lines of the next applied batch, or `None` once the coordinator stops.
async fn next_chunk(mut s: Stream) -> Option<(Result<Bytes, Infallible>, Stream)> {
    loop {
        let received = tokio::select! {
            biased;
            // `Err`: the node is gone without saying so; end as well.
            _ = s.shutdown.wait_for(|stop| *stop) => return None,
            r = s.applied.recv() => r,
        };
        let lines = match received {
            Ok(batch) => s.encoder.batch(&batch),
            Err(RecvError::Lagged(dropped)) => {
                tracing::warn!(
                    dropped_batches = dropped,
                    "stream client fell behind; a gap record marks the dropped batches"
                );
                s.encoder.gap(dropped)
            }
            Err(RecvError::Closed) => return None,
        };
        if !lines.is_empty() {
            return Some((Ok(Bytes::from(lines)), s));
        }
    }
}

/// What a connection has told its client about one rank.
#[derive(Debug, PartialEq)]
struct RankSeen {
    local_rank: u32,
    world_size: u32,
    node: String,
    gpu: u32,
    pid: u32,
}

/// Turns applied batches into NDJSON trace records, remembering per
/// connection which ranks it has announced.
#[derive(Debug, Default)]
struct Encoder {
    /// job -> rank -> last announced placement.
    ranks: HashMap<String, HashMap<u32, RankSeen>>,
    ranks_remembered: usize,
    /// `t` of the last `gpu` record, seconds since the Unix epoch.
    last_t: Option<f64>,
}

impl Encoder {
    /// The lines for one batch: per window, its new or moved ranks, then its `gpu` record.
    fn batch(&mut self, batch: &AppliedBatch) -> Vec<u8> {
        let mut out = Vec::with_capacity(batch.windows.len() * 320);
        for w in &batch.windows {
            let t = w.end_ms as f64 / 1000.0;
            for r in rank_records(&batch.node, w) {
                let seen = RankSeen {
                    local_rank: r.local_rank,
                    world_size: r.world_size,
                    node: r.node.clone(),
                    gpu: r.gpu,
                    pid: r.pid,
                };
                if self.remember(&r.job, r.rank, seen) {
                    push_line(&mut out, &TraceRecord::Rank(r));
                }
            }
            push_line(&mut out, &TraceRecord::Gpu(gpu_record(&batch.node, w)));
            self.last_t = Some(self.last_t.map_or(t, |last| last.max(t)));
        }
        for r in &batch.hook {
            if let Some(record) = hook_record(r) {
                push_line(&mut out, &record);
            }
        }
        if let Some(s) = &batch.settings {
            push_line(&mut out, &TraceRecord::Settings(s.clone()));
        }
        out
    }

    /// The line marking `dropped` batches this client never got.
    fn gap(&mut self, dropped: u64) -> Vec<u8> {
        let t = self.last_t.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        });
        let mut out = Vec::with_capacity(64);
        let line = serde_json::json!({ "type": "gap", "t": t, "dropped_batches": dropped });
        // A `Value` always serializes.
        let _ = serde_json::to_writer(&mut out, &line);
        out.push(b'\n');
        out
    }

    /// Records `seen` for (job, rank); true when it is new or differs from the last.
    fn remember(&mut self, job: &str, rank: u32, seen: RankSeen) -> bool {
        if let Some(last) = self.ranks.get(job).and_then(|ranks| ranks.get(&rank)) {
            if *last == seen {
                return false;
            }
        }
        if self.ranks_remembered >= MAX_RANKS_REMEMBERED {
            self.ranks.clear();
            self.ranks_remembered = 0;
        }
        let ranks = self.ranks.entry(job.to_owned()).or_default();
        if ranks.insert(rank, seen).is_none() {
            self.ranks_remembered += 1;
        }
        true
    }
}

fn push_line(out: &mut Vec<u8>, record: &TraceRecord) {
    // Trace records hold only strings and finite numbers: serializing cannot fail.
    let _ = serde_json::to_writer(&mut *out, record);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use gpumon_proto::{BytesStat, GpuInfo, ProcWindow, RankInfo};
    use serde_json::Value;

    use super::*;
    use gpumon_proto::{GaugeStat, GpuWindow, HookRecord};
    use gpumon_trace::ProcRecord;

    fn window(end_ms: u64, gpu: u32, pid: u32) -> GpuWindow {
        GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{gpu}"),
                index: gpu,
                name: "H100".into(),
                total_bytes: 80 << 30,
            },
            start_ms: end_ms - 500,
            end_ms,
            samples: 5,
            used_bytes: BytesStat {
                min: 10,
                max: 30,
                last: 20,
                mean: 20,
            },
            reserved_bytes: None,
            util_pct: Some(GaugeStat {
                min: 40.0,
                max: 45.0,
                last: 42.0,
                mean: 42.7,
            }),
            sm_clock_mhz: None,
            power_w: Some(GaugeStat {
                min: f32::NAN,
                max: f32::NAN,
                last: f32::NAN,
                mean: f32::NAN,
            }),
            procs: vec![ProcWindow {
                pid,
                used_bytes: BytesStat {
                    min: 1,
                    max: 7,
                    last: 3,
                    mean: 3,
                },
                rank: Some(RankInfo {
                    job: "job".into(),
                    rank: gpu,
                    local_rank: gpu,
                    world_size: 2,
                    master_addr: None,
                    master_port: None,
                }),
            }],
        }
    }

    fn lines(bytes: &[u8]) -> Vec<Value> {
        std::str::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn ranks_are_announced_once_then_again_when_they_move() {
        let mut enc = Encoder::default();
        let batch = |end_ms, pid| AppliedBatch {
            settings: None,
            node: "n0".into(),
            windows: vec![window(end_ms, 0, pid), window(end_ms, 1, 200)],
            hook: Vec::new(),
        };
        let first = lines(&enc.batch(&batch(1_000, 100)));
        let types: Vec<&str> = first.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["rank", "gpu", "rank", "gpu"]);
        assert_eq!(first[0]["pid"], 100);
        assert_eq!(first[0]["node"], "n0");

        let second = lines(&enc.batch(&batch(2_000, 100)));
        assert!(second.iter().all(|v| v["type"] == "gpu"), "{second:?}");

        // Rank 0 restarted under a new pid.
        let third = lines(&enc.batch(&batch(3_000, 101)));
        let types: Vec<&str> = third.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["rank", "gpu", "gpu"]);
        assert_eq!(third[0]["pid"], 101);
        assert_eq!(third[0]["t"], 3.0);
    }

    #[test]
    fn gpu_lines_are_trace_records_with_the_peak_least_newest_and_absolute_time() {
        let mut enc = Encoder::default();
        let out = enc.batch(&AppliedBatch {
            settings: None,
            node: "n0".into(),
            windows: vec![window(1_700_000_000_250, 0, 100)],
            hook: Vec::new(),
        });
        let text = std::str::from_utf8(&out).unwrap();
        let gpu_line = text.lines().nth(1).unwrap();
        let TraceRecord::Gpu(gpu) = serde_json::from_str(gpu_line).unwrap() else {
            panic!("not a gpu record: {gpu_line}");
        };
        assert_eq!(gpu.t, 1_700_000_000.25);
        assert_eq!(
            (gpu.used, gpu.used_min, gpu.used_last),
            (30, Some(10), Some(20))
        );
        assert_eq!(gpu.util, Some(42.7));
        assert_eq!(gpu.power_w, None, "NaN gauges are left out");
        assert_eq!(gpu.procs, vec![ProcRecord { pid: 100, used: 7 }]);
        // Byte for byte what the trace writer writes.
        assert_eq!(
            gpu_line,
            serde_json::to_string(&TraceRecord::Gpu(gpu)).unwrap()
        );
        assert!(gpu_line.contains("\"util\":42.7,"), "{gpu_line}");
    }

    #[test]
    fn a_settings_change_is_a_settings_line_a_replay_reads() {
        use gpumon_trace::{SettingValue, SettingsRecord};
        let record = SettingsRecord {
            t: 1_700_000_010.0,
            job: Some("j".into()),
            set: [(
                "straggler.min_loss_ms".to_owned(),
                SettingValue::Number(5.0),
            )]
            .into(),
            reset: Vec::new(),
            reset_all: false,
        };
        let out = Encoder::default().batch(&AppliedBatch {
            settings: Some(record.clone()),
            node: String::new(),
            windows: Vec::new(),
            hook: Vec::new(),
        });
        let line = String::from_utf8(out).unwrap();
        let back: TraceRecord = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(back, TraceRecord::Settings(record));
    }

    #[test]
    fn hook_records_follow_the_windows_as_trace_records() {
        use gpumon_proto::{AllocRecord as A, AllocStats, EventRecord as E, StepRecord as S};
        let mut enc = Encoder::default();
        let out = enc.batch(&AppliedBatch {
            settings: None,
            node: "n0".into(),
            windows: Vec::new(),
            hook: vec![
                HookRecord::Alloc(A {
                    limit: None,
                    t_ms: 1_500,
                    job: "j".into(),
                    rank: 1,
                    stats: AllocStats {
                        allocated: 5,
                        reserved: 8,
                        ..AllocStats::default()
                    },
                }),
                HookRecord::Step(S {
                    group: None,
                    waits: Default::default(),
                    collectives: Vec::new(),
                    t_ms: 2_000,
                    job: "j".into(),
                    rank: 1,
                    step: 3,
                    duration_ms: 10.0,
                    sections: vec![("forward".into(), 4.0)],
                }),
                HookRecord::Event(E {
                    t_ms: 2_500,
                    job: "j".into(),
                    rank: 1,
                    name: "snap".into(),
                    detail: None,
                    snapshot: Some(AllocStats::default()),
                }),
                HookRecord::Event(E {
                    t_ms: 3_000,
                    job: "j".into(),
                    rank: 1,
                    name: "eval start".into(),
                    detail: None,
                    snapshot: None,
                }),
            ],
        });
        let got = lines(&out);
        let types: Vec<&str> = got.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["alloc", "step", "event"],
            "the snapshot is left out"
        );
        assert_eq!(got[0]["t"], 1.5);
        assert_eq!(got[0]["reserved"], 8);
        assert_eq!(got[1]["sections"]["forward"], 4.0);
        assert_eq!(got[2]["name"], "eval start");
    }

    #[test]
    fn a_gap_carries_the_last_time_and_the_count() {
        let mut enc = Encoder::default();
        enc.batch(&AppliedBatch {
            settings: None,
            node: "n0".into(),
            windows: vec![window(5_000, 0, 100)],
            hook: Vec::new(),
        });
        let gap = lines(&enc.gap(7));
        assert_eq!(
            gap,
            [serde_json::json!({"type": "gap", "t": 5.0, "dropped_batches": 7})]
        );
    }

    #[test]
    fn forgetting_ranks_is_bounded() {
        let mut enc = Encoder::default();
        let seen = |pid| RankSeen {
            local_rank: 0,
            world_size: 1,
            node: "n".into(),
            gpu: 0,
            pid,
        };
        for r in 0..MAX_RANKS_REMEMBERED as u32 + 10 {
            assert!(enc.remember("job", r, seen(1)));
        }
        assert!(enc.ranks_remembered <= MAX_RANKS_REMEMBERED);
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_dropped_and_its_slot_freed() {
        let (applied_tx, applied) = broadcast::channel(64);
        let (_stop, shutdown) = watch::channel(false);
        let slots = crate::api::stream_slots::StreamSlots::default();
        let slot = slots.claim([127, 0, 0, 1].into()).unwrap();
        let (chunks, mut waiting) = mpsc::channel(2);
        let stream = Stream {
            applied,
            shutdown,
            encoder: Encoder::default(),
        };
        let peer: SocketAddr = ([127, 0, 0, 1], 5000).into();
        let feeding = tokio::spawn(feed(stream, chunks, slot, peer));
        for i in 0..3u64 {
            applied_tx
                .send(Arc::new(AppliedBatch {
                    settings: None,
                    node: "n0".into(),
                    windows: vec![window(1_000 * (i + 1), 0, 100)],
                    hook: Vec::new(),
                }))
                .unwrap();
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), feeding)
            .await
            .expect("the feeder gives up on a full buffer")
            .unwrap();
        assert_eq!(slots.open(), 0, "the slot is free again");
        let mut got = 0;
        while waiting.recv().await.is_some() {
            got += 1;
        }
        assert_eq!(
            got, 2,
            "what was buffered is still delivered, then the stream ends"
        );
    }

    /// A stream with nothing applied sends a blank line every
    /// [`KEEPALIVE`] (the listener closes connections silent for two
    /// minutes), and a batch applied in between still goes out at once.
    #[tokio::test(start_paused = true)]
    async fn an_idle_stream_sends_a_blank_line_every_keepalive() {
        let (applied_tx, applied) = broadcast::channel(4);
        let (_stop, shutdown) = watch::channel(false);
        let stream = Stream {
            applied,
            shutdown,
            encoder: Encoder::default(),
        };
        let (chunks, mut got) = mpsc::channel(16);
        let slots = super::super::stream_slots::StreamSlots::default();
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let slot = slots.claim(peer.ip()).unwrap();
        tokio::spawn(feed(stream, chunks, slot, peer));
        let began = tokio::time::Instant::now();
        assert_eq!(&got.recv().await.unwrap()[..], BLANK_LINE);
        assert_eq!(began.elapsed(), KEEPALIVE);
        let batch = AppliedBatch {
            settings: None,
            node: "n0".into(),
            windows: vec![window(1_000, 0, 100)],
            hook: Vec::new(),
        };
        applied_tx.send(Arc::new(batch)).unwrap();
        let lines = got.recv().await.unwrap();
        assert!(lines.starts_with(b"{"), "the batch, not a blank line");
        assert_eq!(began.elapsed(), KEEPALIVE, "at once");
        assert_eq!(&got.recv().await.unwrap()[..], BLANK_LINE);
        assert_eq!(began.elapsed(), 2 * KEEPALIVE);
    }
}
