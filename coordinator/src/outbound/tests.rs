//! The notifier's client against real servers on loopback: hyper serving
//! plain HTTP or TLS (tokio-rustls) with a self-signed certificate made
//! here by rcgen, which the client trusts only when the test adds it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use gpumon_net::ClientTls;

use super::{OutboundClient, SendError};

/// A path like a Slack webhook's: the secret part of the URL.
const SECRET_PATH: &str = "/services/T000/B000/s3cr3tTOKEN";
/// Deadline for requests that are expected to be answered.
const TIMEOUT: Duration = Duration::from_secs(20);

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    host: String,
    content_type: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A self-signed certificate for 127.0.0.1 (PEM) and its acceptor.
fn self_signed() -> (String, TlsAcceptor) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert: CertificateDer<'static> = made.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    (made.cert.pem(), TlsAcceptor::from(Arc::new(config)))
}

/// Serves on loopback (TLS with `tls`), logging each request and answering
/// `status`; runs until the test's runtime ends.
async fn serve(tls: Option<TlsAcceptor>, status: StatusCode) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Log::default();
    let seen = log.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            let log = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |r| record(r, log.clone(), status));
                let http = hyper::server::conn::http1::Builder::new();
                let _ = match tls {
                    Some(tls) => match tls.accept(tcp).await {
                        Ok(s) => http.serve_connection(TokioIo::new(s), service).await,
                        Err(_) => return,
                    },
                    None => http.serve_connection(TokioIo::new(tcp), service).await,
                };
            });
        }
    });
    (addr, log)
}

async fn record(
    request: Request<Incoming>,
    log: Log,
    status: StatusCode,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut seen = Seen {
        method: request.method().to_string(),
        target: request.uri().to_string(),
        host: header("host").unwrap_or_default(),
        content_type: header("content-type").unwrap_or_default(),
        authorization: header("authorization"),
        body: Vec::new(),
    };
    if let Ok(body) = request.into_body().collect().await {
        seen.body = body.to_bytes().to_vec();
    }
    log.lock().unwrap().push(seen);
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
    *response.status_mut() = status;
    Ok(response)
}

#[tokio::test]
async fn an_untrusted_certificate_fails_the_handshake_without_naming_the_path() {
    let (_, acceptor) = self_signed();
    let (addr, log) = serve(Some(acceptor), StatusCode::OK).await;
    let client = OutboundClient::new(TIMEOUT, &ClientTls::default()).unwrap();
    let url = format!("https://{addr}{SECRET_PATH}");
    let err = client
        .post_json(&url, b"{}".to_vec())
        .await
        .expect_err("a self-signed certificate must not be trusted");
    let SendError::Tls(why) = &err else {
        panic!("expected a TLS error, got {err:?}");
    };
    assert!(why.contains("UnknownIssuer"), "{why}");
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
    assert!(log.lock().unwrap().is_empty(), "the request went through");
}

#[tokio::test]
async fn a_trusted_certificate_carries_the_post_over_tls() {
    let (cert, acceptor) = self_signed();
    let (addr, log) = serve(Some(acceptor), StatusCode::OK).await;
    // The receiver's private CA, as `[notify] ca_file` names it.
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, cert).unwrap();
    let tls = ClientTls {
        ca_file: Some(ca_file),
        identity: None,
    };
    let client = OutboundClient::new(TIMEOUT, &tls).unwrap();
    let url = format!("https://{addr}{SECRET_PATH}");
    let body = br#"{"text":"leak on rank 2"}"#.to_vec();
    for _ in 0..2 {
        let status = client.post_json(&url, body.clone()).await.unwrap();
        assert_eq!(status, StatusCode::OK);
    }
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.target, SECRET_PATH);
        assert_eq!(s.host, addr.to_string());
        assert_eq!(s.content_type, "application/json");
        assert_eq!(s.body, body);
        assert_eq!(s.authorization, None);
    }
}

#[tokio::test]
async fn plain_http_goes_through_the_same_client_and_any_status_is_an_answer() {
    let (addr, log) = serve(None, StatusCode::SERVICE_UNAVAILABLE).await;
    let client = OutboundClient::new(TIMEOUT, &ClientTls::default()).unwrap();
    let status = client
        .post_json(&format!("http://{addr}/hook?x=1"), b"[]".to_vec())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/hook?x=1");
    assert_eq!(seen[0].body, b"[]");
}

#[tokio::test]
async fn credentials_in_the_url_become_basic_auth_and_leave_the_request() {
    let (addr, log) = serve(None, StatusCode::OK).await;
    let client = OutboundClient::new(TIMEOUT, &ClientTls::default()).unwrap();
    let url = format!(
        "http://Aladdin:open%20sesame@127.0.0.1:{}/api/v2/alerts",
        addr.port()
    );
    client.post_json(&url, b"[]".to_vec()).await.unwrap();
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/api/v2/alerts");
    assert_eq!(seen[0].host, addr.to_string());
    // RFC 7617's example credentials and their encoding.
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
    );
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and reads, never answers; keeps the connection open.
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            open.push(tcp);
        }
    });
    let client = OutboundClient::new(Duration::from_millis(300), &ClientTls::default()).unwrap();
    let err = client
        .post_json(&format!("http://{addr}/hook"), b"{}".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, SendError::Timeout), "{err:?}");
}

#[tokio::test]
async fn an_endless_answer_is_read_only_up_to_the_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut tcp, _)) = listener.accept().await else {
            return;
        };
        let mut buf = [0; 4096];
        let _ = tcp.read(&mut buf).await;
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        if tcp.write_all(head).await.is_err() {
            return;
        }
        let chunk = format!("2000\r\n{}\r\n", "x".repeat(0x2000));
        while tcp.write_all(chunk.as_bytes()).await.is_ok() {}
    });
    // Far longer than reading 64 KiB takes: returning before the deadline
    // shows the client stopped reading rather than waiting for the end.
    let timeout = Duration::from_secs(60);
    let client = OutboundClient::new(timeout, &ClientTls::default()).unwrap();
    let started = tokio::time::Instant::now();
    let status = client
        .post_json(&format!("http://{addr}/hook"), b"{}".to_vec())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() < timeout / 2,
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn no_listener_is_a_connect_error_without_the_path() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    // The listener is dropped: nothing listens on `addr` now.
    let client = OutboundClient::new(TIMEOUT, &ClientTls::default()).unwrap();
    for scheme in ["http", "https"] {
        let err = client
            .post_json(&format!("{scheme}://{addr}{SECRET_PATH}"), b"{}".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, SendError::Connect(_)), "{err:?}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}

#[test]
fn only_absolute_http_urls_make_requests() {
    for bad in ["ftp://host/x", "not a url", "http://", "/relative"] {
        assert!(
            matches!(super::target(bad), Err(SendError::BadUrl)),
            "{bad}"
        );
    }
    let (uri, auth) = super::target("https://u:p@hooks.example:8443/a%20b?q#frag").unwrap();
    assert_eq!(uri.to_string(), "https://hooks.example:8443/a%20b?q");
    assert!(auth.is_some());
}
