//! The push client's rules against fake coordinators on real sockets: a
//! follower's hint is followed to the leader, whose actions come back; a
//! hint that leads nowhere fails the attempt and moves to the next URL; a
//! version 2 reply brings the node's alerts; a 4xx is a refusal that stays
//! put; a 429 is busy, with the wait it asks.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use gpumon_agent::push::{Attempt, Pusher, Route, MAX_LEADER_HOPS};
use gpumon_proto::{
    wire, ActionKind, CoordinatorReply, CoordinatorReplyV1, CoordinatorReplyV2, NodeAlert,
    PendingAction, PushOutcome,
};
use tokio::net::TcpListener;

/// A listener on a free loopback port, and its base URL.
async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Answers every ingest on `listener` with `status` and `reply` (none: a
/// text body).
fn serve(listener: TcpListener, status: StatusCode, reply: Option<CoordinatorReply>) {
    let body = reply.map_or_else(|| b"bad batch".to_vec(), |r| wire::encode(&r));
    let app = Router::new().route(
        "/api/v1/ingest",
        post(move |_: Bytes| async move { (status, body) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
}

/// A coordinator that answers every ingest alike; its base URL.
async fn coordinator(status: StatusCode, reply: Option<CoordinatorReply>) -> String {
    let (listener, url) = bind().await;
    serve(listener, status, reply);
    url
}

fn reply(outcome: PushOutcome, actions: Vec<PendingAction>) -> Option<CoordinatorReply> {
    Some(CoordinatorReply::V1(CoordinatorReplyV1 {
        outcome,
        actions,
    }))
}

fn not_leader(leader_url: Option<String>) -> Option<CoordinatorReply> {
    reply(PushOutcome::NotLeader { leader_url }, vec![])
}

fn action() -> PendingAction {
    PendingAction {
        id: 7,
        job: "j".into(),
        rank: 1,
        kind: ActionKind::ReleaseCache,
        reason: "fragmented".into(),
    }
}

#[tokio::test]
async fn a_follower_s_hint_leads_to_the_leader_and_its_actions() {
    let committed = PushOutcome::Committed {
        acked_seq: 4,
        duplicate: true,
    };
    let leader = coordinator(StatusCode::OK, reply(committed, vec![action()])).await;
    let follower = coordinator(StatusCode::OK, not_leader(Some(format!("{leader}/")))).await;
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![follower],
    );
    let mut route = Route::new(0);
    let mut hops = Vec::new();
    let got = pusher
        .attempt(&mut route, b"batch", |l| hops.push(l.to_owned()))
        .await;
    assert_eq!(
        got,
        Attempt::Committed {
            duplicate: true,
            actions: vec![action()],
            alerts: vec![],
        }
    );
    assert_eq!(hops.len(), 1);
    assert_eq!(hops[0], leader, "the hint, without its slash");
    assert_eq!(route.target(pusher.urls()), leader, "the leader is kept");
}

#[tokio::test]
async fn a_version_2_reply_brings_the_node_s_alerts() {
    let alert = NodeAlert {
        id: 12,
        kind: "memory_level".into(),
        severity: gpumon_proto::api::Severity::Warning,
        message: "host RAM on n is 80.0 % used".into(),
        job: None,
        rank: None,
        t_ms: 1_700_000_000_000,
    };
    let reply = CoordinatorReply::V2(CoordinatorReplyV2 {
        outcome: PushOutcome::Committed {
            acked_seq: 5,
            duplicate: false,
        },
        actions: vec![action()],
        alerts: vec![alert.clone()],
    });
    let leader = coordinator(StatusCode::OK, Some(reply)).await;
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![leader],
    );
    let got = pusher.attempt(&mut Route::new(0), b"batch", |_| {}).await;
    assert_eq!(
        got,
        Attempt::Committed {
            duplicate: false,
            actions: vec![action()],
            alerts: vec![alert],
        }
    );
}

#[tokio::test]
async fn hints_that_lead_nowhere_fail_and_rotate() {
    let a = coordinator(StatusCode::OK, not_leader(None)).await;
    let b = coordinator(StatusCode::OK, not_leader(None)).await;
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![a.clone(), b.clone()],
    );
    let mut route = Route::new(0);
    let got = pusher.attempt(&mut route, b"batch", |_| {}).await;
    assert_eq!(got, Attempt::Failed(format!("{a}: no leader is known yet")));
    assert_eq!(route.target(pusher.urls()), b, "the next attempt asks b");

    // A follower that names itself is not followed.
    let (listener, selfish) = bind().await;
    serve(listener, StatusCode::OK, not_leader(Some(selfish.clone())));
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![selfish.clone(), a.clone()],
    );
    let mut route = Route::new(0);
    let got = pusher.attempt(&mut route, b"batch", |_| {}).await;
    assert!(
        matches!(&got, Attempt::Failed(why) if why.contains("after 0 hops")),
        "{got:?}"
    );
    assert_eq!(route.target(pusher.urls()), a);

    // Two followers that name each other: the hops run out.
    let ((lx, x), (ly, y)) = (bind().await, bind().await);
    serve(lx, StatusCode::OK, not_leader(Some(y.clone())));
    serve(ly, StatusCode::OK, not_leader(Some(x.clone())));
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![x, a.clone()],
    );
    let mut route = Route::new(0);
    let mut hops = 0;
    let got = pusher.attempt(&mut route, b"batch", |_| hops += 1).await;
    assert!(matches!(got, Attempt::Failed(_)), "{got:?}");
    assert_eq!(hops, MAX_LEADER_HOPS, "hints followed, then given up");
    assert_eq!(
        route.target(pusher.urls()),
        a,
        "the hinted leader is forgotten"
    );
}

#[tokio::test]
async fn a_4xx_is_a_refusal_and_the_route_stays() {
    let refusing = coordinator(StatusCode::BAD_REQUEST, None).await;
    let other = coordinator(StatusCode::OK, not_leader(None)).await;
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![refusing.clone(), other],
    );
    let mut route = Route::new(0);
    let got = pusher.attempt(&mut route, b"batch", |_| {}).await;
    assert_eq!(
        got,
        Attempt::Rejected(format!("{refusing}: HTTP 400 Bad Request: bad batch"))
    );
    assert_eq!(route.target(pusher.urls()), refusing);
}

#[tokio::test]
async fn a_429_is_busy_with_the_asked_wait_and_the_route_stays() {
    let (listener, busy) = bind().await;
    let app = Router::new().route(
        "/api/v1/ingest",
        post(|_: Bytes| async {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "3")],
                "busy",
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let other = coordinator(StatusCode::OK, not_leader(None)).await;
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![busy.clone(), other],
    );
    let mut route = Route::new(0);
    let got = pusher.attempt(&mut route, b"batch", |_| {}).await;
    assert_eq!(got, Attempt::Busy(std::time::Duration::from_secs(3)));
    assert_eq!(
        route.target(pusher.urls()),
        busy,
        "busy is no reason to move"
    );
}

#[tokio::test]
async fn a_429_without_a_usable_wait_asks_for_the_default() {
    let (listener, busy) = bind().await;
    let app = Router::new().route(
        "/api/v1/ingest",
        post(|_: Bytes| async {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "999999")],
                "busy",
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let pusher = Pusher::new(
        gpumon_net::plain_client_builder().build().unwrap(),
        vec![busy],
    );
    let got = pusher.attempt(&mut Route::new(0), b"batch", |_| {}).await;
    assert_eq!(got, Attempt::Busy(gpumon_agent::push::DEFAULT_BUSY_WAIT));
}
