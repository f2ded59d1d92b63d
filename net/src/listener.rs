//! The coordinator's listener: plain TCP, or TLS with rustls.
//!
//! TLS handshakes run on tasks of their own, never in the accept loop, so
//! a client that opens a connection and says nothing (or says it slowly)
//! holds one handshake slot for at most [`HANDSHAKE_TIMEOUT`] and never
//! stops others from connecting. At most [`MAX_HANDSHAKES`] run at once;
//! connections beyond that are closed at once. A failed handshake (a
//! plain-HTTP client on the TLS port, an untrusted client certificate) is
//! counted and logged at debug level.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::files::{read_roots, Identity, TlsError};

/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most TLS handshakes in progress at once.
pub const MAX_HANDSHAKES: usize = 256;
/// Connections handshaken but not yet taken by the server.
const READY_QUEUE: usize = 64;

/// A server's TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// The server's certificate and key.
    pub identity: Identity,
    /// When set, every client must present a certificate issued by a CA in
    /// this file (mutual TLS); replicas present their own server identity.
    pub client_ca_file: Option<PathBuf>,
}

impl ServerTls {
    /// The rustls config, HTTP/1.1 only.
    pub fn config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = crate::provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls {
                context: "TLS server".into(),
                source,
            })?;
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let roots = Arc::new(read_roots(path)?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::Pem {
                        path: path.clone(),
                        reason: format!("cannot verify client certificates with it ({e})"),
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let (chain, key) = self.identity.read()?;
        let mut config =
            builder
                .with_single_cert(chain, key)
                .map_err(|source| TlsError::Rustls {
                    context: format!(
                        "server certificate {} with key {}",
                        self.identity.cert_file.display(),
                        self.identity.key_file.display()
                    ),
                    source,
                })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A bound listener that axum serves: plain, or TLS.
#[derive(Debug)]
pub enum ApiListener {
    /// Plain TCP.
    Plain(TcpListener),
    /// TLS; handshakes done in the background.
    Tls(TlsAccepting),
}

/// The background side of a TLS listener.
#[derive(Debug)]
pub struct TlsAccepting {
    local_addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    failed: Arc<AtomicU64>,
    acceptor: JoinHandle<()>,
}

impl Drop for TlsAccepting {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl ApiListener {
    /// Serves `tcp` with TLS per `config`, or plain without one.
    pub fn new(tcp: TcpListener, config: Option<Arc<rustls::ServerConfig>>) -> io::Result<Self> {
        let Some(config) = config else {
            return Ok(Self::Plain(tcp));
        };
        let local_addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let failed = Arc::new(AtomicU64::new(0));
        let acceptor = tokio::spawn(accept_loop(
            tcp,
            TlsAcceptor::from(config),
            tx,
            failed.clone(),
        ));
        Ok(Self::Tls(TlsAccepting {
            local_addr,
            ready,
            failed,
            acceptor,
        }))
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// Handshakes that failed or timed out so far (0 for plain TCP).
    pub fn failed_handshakes(&self) -> Arc<AtomicU64> {
        match self {
            Self::Plain(_) => Arc::new(AtomicU64::new(0)),
            Self::Tls(t) => t.failed.clone(),
        }
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    failed: Arc<AtomicU64>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait, then go on.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "too many TLS handshakes at once; connection closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, ready, failed) = (acceptor.clone(), ready.clone(), failed.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(e)) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "TLS handshake timed out");
                }
            }
        });
    }
}

impl axum::serve::Listener for ApiListener {
    type Io = ApiStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ApiStream, SocketAddr) {
        match self {
            Self::Plain(tcp) => {
                // axum's own accept for TcpListener retries failed accepts.
                let (stream, peer) = axum::serve::Listener::accept(tcp).await;
                let _ = stream.set_nodelay(true);
                (ApiStream::Plain(stream), peer)
            }
            Self::Tls(t) => match t.ready.recv().await {
                Some((stream, peer)) => (ApiStream::Tls(Box::new(stream)), peer),
                // The accept loop ended (its task was aborted): nothing
                // more will come.
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Plain(tcp) => TcpListener::local_addr(tcp),
            Self::Tls(t) => Ok(t.local_addr),
        }
    }
}

/// One accepted connection.
#[derive(Debug)]
pub enum ApiStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for ApiStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ApiStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
