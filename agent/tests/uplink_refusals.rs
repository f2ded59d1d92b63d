//! The uplink against a coordinator that answers one batch busy (429 with
//! `Retry-After`, backpressure): the batch is kept and sent again, with its
//! seq, once the wait is over, and nothing is lost or counted as refused.
//!
//! The uplink against a coordinator that refuses one batch as out of bounds
//! (a 400 with the reason, as the leader answers a seq or a time it will
//! not take): the batch is counted as rejected and never sent again, the
//! batches after it are still delivered, and the next one takes the refused
//! batch's seq (it never reached the log), so the agent's seqs never run
//! ahead of what the coordinators applied.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use gpumon_agent::uplink::{Outgoing, Uplink};
use gpumon_proto::{
    wire, AgentMessage, AgentMessageV1, BytesStat, CoordinatorReply, CoordinatorReplyV1, GpuInfo,
    GpuWindow, Hello, PushOutcome,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Serves ingest: refuses a batch whose window ends at `refuse` with a
/// 400, answers the first push of a batch ending at `busy` with a 429 and
/// `Retry-After: 1`, commits everything else, and records every batch's
/// seq and window end in arrival order.
async fn coordinator(refuse: u64, busy: u64) -> (String, Arc<Mutex<Vec<(u64, u64)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let was_busy = Arc::new(Mutex::new(false));
    let app = Router::new().route(
        "/api/v1/ingest",
        post(move |body: Bytes| async move {
            let was_busy = was_busy.clone();
            let msg: AgentMessage = wire::decode(&body, 1 << 20).unwrap();
            let AgentMessage::V1(AgentMessageV1::Push(batch)) = msg else {
                return committed(0);
            };
            let end_ms = batch.windows[0].end_ms;
            log.lock().unwrap().push((batch.seq, end_ms));
            if end_ms == busy && !std::mem::replace(&mut *was_busy.lock().unwrap(), true) {
                return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "busy").into_response();
            }
            if end_ms == refuse {
                let reason = "windows[0].end_ms 18446744073709551615 is ahead of the coordinator's clock; at most 300000 ms is accepted";
                return (StatusCode::BAD_REQUEST, reason.as_bytes().to_vec()).into_response();
            }
            committed(batch.seq)
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn committed(acked_seq: u64) -> axum::response::Response {
    let reply = CoordinatorReply::V1(CoordinatorReplyV1 {
        outcome: PushOutcome::Committed {
            acked_seq,
            duplicate: false,
        },
        actions: Vec::new(),
    });
    wire::encode(&reply).into_response()
}

fn window(end_ms: u64) -> GpuWindow {
    GpuWindow {
        gpu: GpuInfo {
            uuid: "GPU-0".into(),
            index: 0,
            name: "H100".into(),
            total_bytes: 1 << 30,
        },
        start_ms: end_ms - 1_000,
        end_ms,
        samples: 1,
        used_bytes: BytesStat::single(1),
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: Vec::new(),
    }
}

#[tokio::test]
async fn a_refused_batch_is_counted_not_resent_and_the_rest_follow() {
    let end = |i: u64| 1_700_000_000_000 + i * 2_000;
    let (url, seen) = coordinator(end(2), 0).await;
    let hello = Hello {
        agent_id: "a".into(),
        incarnation: 5,
        node: "n".into(),
        agent_version: "t".into(),
        source: "sim".into(),
        gpus: Vec::new(),
    };
    let uplink = Uplink::new(vec![url], hello, 16, 1 << 20);
    let stats = uplink.stats();
    let (tx, rx) = mpsc::channel(8);
    for i in 1..=4u64 {
        let windows = vec![window(end(i))];
        tx.send(Outgoing {
            windows,
            ..Outgoing::default()
        })
        .await
        .unwrap();
    }
    drop(tx);
    tokio::time::timeout(std::time::Duration::from_secs(10), uplink.run(rx))
        .await
        .expect("the uplink drains its buffer and stops");

    let sent = vec![(1, end(1)), (2, end(2)), (2, end(3)), (3, end(4))];
    assert_eq!(*seen.lock().unwrap(), sent);
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        (count(&stats.acked), count(&stats.rejected)),
        (3, 1),
        "acked and rejected"
    );
    assert_eq!(count(&stats.failures), 0);
    assert_eq!(count(&stats.buffered), 0);
}

#[tokio::test]
async fn a_busy_answer_keeps_the_batch_and_sends_it_again_after_the_wait() {
    let end = |i: u64| 1_700_000_000_000 + i * 2_000;
    let (url, seen) = coordinator(0, end(2)).await;
    let hello = Hello {
        agent_id: "a".into(),
        incarnation: 5,
        node: "n".into(),
        agent_version: "t".into(),
        source: "sim".into(),
        gpus: Vec::new(),
    };
    let uplink = Uplink::new(vec![url], hello, 16, 1 << 20);
    let stats = uplink.stats();
    let (tx, rx) = mpsc::channel(8);
    let running = tokio::spawn(uplink.run(rx));
    for i in 1..=3u64 {
        tx.send(Outgoing {
            windows: vec![window(end(i))],
            ..Outgoing::default()
        })
        .await
        .unwrap();
    }
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while count(&stats.acked) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "not all delivered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(tx);
    running.await.unwrap();
    let sent = vec![(1, end(1)), (2, end(2)), (2, end(2)), (3, end(3))];
    assert_eq!(
        *seen.lock().unwrap(),
        sent,
        "the busy batch again, same seq"
    );
    assert_eq!(
        (
            count(&stats.busy),
            count(&stats.rejected),
            count(&stats.dropped)
        ),
        (1, 0, 0)
    );
}
