//! The TLS listener against real clients on loopback: connections that
//! never finish their handshake do not hold up others, a plain-HTTP client
//! on the TLS port is refused and counted, and handlers see the client's
//! address as with plain TCP.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use gpumon_net::{ApiListener, ClientTls, Identity, ServerTls};

/// Well under the listener's handshake timeout: what a client waits here.
const PROMPT: Duration = Duration::from_secs(5);

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

    // Connections that say nothing, holding handshake slots.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        stalled.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }

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
        .expect("answered despite 32 stalled handshakes");
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
