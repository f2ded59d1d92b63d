//! The listener against real clients on loopback: connections that never
//! finish their TLS handshake, or never send a request, hold only their own
//! source's places and are closed at their deadline; a plain-HTTP client on
//! the TLS port is refused and counted; handlers see the client's address
//! as with plain TCP. Stalling clients connect from 127.0.0.2, the others
//! from 127.0.0.1 (all of 127/8 is loopback on Linux).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use gpumon_net::admission::{FIRST_BYTES_WITHIN, MAX_HANDSHAKES};
use gpumon_net::{ApiListener, ClientTls, ConnectionLimits, Identity, ServerTls};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// Well under the listener's handshake timeout: what a client waits here.
const PROMPT: Duration = Duration::from_secs(5);

/// More stalled connections than the listener has handshake places in all.
const STALLED: usize = MAX_HANDSHAKES + 44;

/// The plain listener's caps in its test: small, so that the test holds
/// few sockets.
const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 64,
    max_per_source: 16,
};

/// Serves `listener` (a route `/peer` answering the client's address) in
/// the background.
fn serve(listener: ApiListener) {
    let app = Router::new().route(
        "/peer",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
    );
    tokio::spawn(async move {
        axum::serve(
            listener.tap_io(|_| {}),
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
}

/// `n` connections to `addr` from 127.0.0.2 that say nothing.
async fn stalled(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        held.push(socket.connect(addr).await.unwrap());
    }
    held
}

/// Whether the server has closed `stream` (EOF or an error) within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_block_no_one_and_plain_http_is_refused() {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let identity = Identity {
        cert_file: cert.clone(),
        key_file: key,
    };
    let server = ServerTls {
        identity,
        client_ca_file: None,
    };
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = ApiListener::new(tcp, Some(server.config().unwrap())).unwrap();
    assert!(listener.is_tls());
    let failed = listener.failed_handshakes();
    serve(listener);

    // Connections that say nothing, more than there are handshake places:
    // those past their source's share are closed at once.
    let mut stalled = stalled(addr, STALLED).await;
    assert!(closed_within(stalled.last_mut().unwrap(), PROMPT).await);

    let client = gpumon_net::client_builder(&ClientTls {
        ca_file: Some(cert),
        identity: None,
    })
    .unwrap()
    .timeout(PROMPT)
    .build()
    .unwrap();
    let answer = client
        .get(format!("https://{addr}/peer"))
        .send()
        .await
        .expect("answered despite stalled handshakes from another source");
    assert_eq!(answer.text().await.unwrap(), "127.0.0.1");

    let before = failed.load(Ordering::Relaxed);
    let plain = gpumon_net::plain_client_builder()
        .timeout(PROMPT)
        .build()
        .unwrap()
        .get(format!("http://{addr}/peer"))
        .send()
        .await;
    assert!(
        plain.as_ref().map_or(true, |r| !r.status().is_success()),
        "plain HTTP answered: {plain:?}"
    );
    let deadline = tokio::time::Instant::now() + PROMPT;
    while failed.load(Ordering::Relaxed) == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refused handshake was not counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stalled);
}

/// A plain listener: one source's stalled connections take its own places
/// only (the ones past them are closed at once), a client from another
/// source is answered, and a connection that sends nothing is closed at
/// its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_take_only_their_sources_places_and_are_closed_at_their_deadline() {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = ApiListener::with_limits(tcp, None, LIMITS).unwrap();
    let connections = listener.connections();
    serve(listener);

    let began = tokio::time::Instant::now();
    let mut stalled = stalled(addr, LIMITS.max_per_source + 4).await;
    assert!(
        closed_within(stalled.last_mut().unwrap(), PROMPT).await,
        "a connection past its source's places is closed at once"
    );
    let answer = gpumon_net::plain_client_builder()
        .timeout(PROMPT)
        .build()
        .unwrap()
        .get(format!("http://{addr}/peer"))
        .send()
        .await
        .expect("answered despite another source's stalled connections");
    assert_eq!(answer.text().await.unwrap(), "127.0.0.1");
    assert!(connections.refused() >= 4);
    // The first stalled connection sent nothing: closed at its deadline.
    let bound = FIRST_BYTES_WITHIN + Duration::from_secs(20);
    assert!(
        closed_within(&mut stalled[0], bound).await,
        "a silent connection is closed within {FIRST_BYTES_WITHIN:?} (bound {bound:?})"
    );
    assert!(began.elapsed() >= FIRST_BYTES_WITHIN - Duration::from_secs(1));
    drop(stalled);
    let deadline = tokio::time::Instant::now() + bound;
    while connections.held().0 > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "places come back: {:?} held",
            connections.held()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
