//! The coordinator's listener: plain TCP, or TLS with rustls.
//!
//! Every connection is admitted against the caps of [`crate::admission`]
//! (in all and per source) and closed when it stays silent: see
//! [`ApiStream`]. TLS handshakes run on tasks of their own, never in the
//! accept loop, so a client that opens a connection and says nothing (or
//! says it slowly) holds one handshake place for at most
//! [`HANDSHAKE_TIMEOUT`] and never stops others from connecting; a
//! connection past the handshake caps is closed at once. A failed
//! handshake (a plain-HTTP client on the TLS port, an untrusted client
//! certificate) is counted and logged at debug level.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::admission::{
    Admission, Admissions, ConnectionLimits, FIRST_BYTES_WITHIN, IDLE_TIMEOUT, MAX_HANDSHAKES,
    MAX_HANDSHAKES_PER_SOURCE,
};
use crate::files::{read_roots, Identity, TlsError};

/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
pub struct ApiListener {
    accepting: Accepting,
    connections: Admissions,
}

#[derive(Debug)]
enum Accepting {
    /// Plain TCP.
    Plain(TcpListener),
    /// TLS; handshakes done in the background.
    Tls(TlsAccepting),
}

/// A handshaken connection and its place.
type Ready = (TlsStream<TcpStream>, SocketAddr, Admission);

/// The background side of a TLS listener.
#[derive(Debug)]
struct TlsAccepting {
    local_addr: SocketAddr,
    ready: mpsc::Receiver<Ready>,
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
        Self::with_limits(tcp, config, ConnectionLimits::default())
    }

    /// [`ApiListener::new`] with connection caps of its own.
    pub fn with_limits(
        tcp: TcpListener,
        config: Option<Arc<rustls::ServerConfig>>,
        limits: ConnectionLimits,
    ) -> io::Result<Self> {
        let connections = Admissions::new(limits.max_connections, limits.max_per_source);
        let Some(config) = config else {
            return Ok(Self {
                accepting: Accepting::Plain(tcp),
                connections,
            });
        };
        let local_addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let failed = Arc::new(AtomicU64::new(0));
        let acceptor = tokio::spawn(accept_loop(
            tcp,
            TlsAcceptor::from(config),
            tx,
            failed.clone(),
            connections.clone(),
        ));
        Ok(Self {
            accepting: Accepting::Tls(TlsAccepting {
                local_addr,
                ready,
                failed,
                acceptor,
            }),
            connections,
        })
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.accepting, Accepting::Tls(_))
    }

    /// Handshakes that failed, timed out or found no place so far (0 for
    /// plain TCP).
    pub fn failed_handshakes(&self) -> Arc<AtomicU64> {
        match &self.accepting {
            Accepting::Plain(_) => Arc::new(AtomicU64::new(0)),
            Accepting::Tls(t) => t.failed.clone(),
        }
    }

    /// The connection caps: places held and connections refused.
    pub fn connections(&self) -> Admissions {
        self.connections.clone()
    }
}

/// Accepts TCP connections, or waits 100 ms after a failed accept (out of
/// file descriptors and the like) and tries again.
async fn accept_tcp(tcp: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match tcp.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<Ready>,
    failed: Arc<AtomicU64>,
    connections: Admissions,
) {
    let handshakes = Admissions::new(MAX_HANDSHAKES, MAX_HANDSHAKES_PER_SOURCE);
    loop {
        let (stream, peer) = accept_tcp(&tcp).await;
        let Some(place) = connections.admit(peer.ip()) else {
            tracing::debug!(%peer, "too many connections (in all or from this source); connection closed");
            continue;
        };
        let Some(handshake) = handshakes.admit(peer.ip()) else {
            failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "too many TLS handshakes at once (in all or from this source); connection closed");
            continue;
        };
        let (acceptor, ready, failed) = (acceptor.clone(), ready.clone(), failed.clone());
        tokio::spawn(async move {
            let outcome = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            drop(handshake);
            match outcome {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer, place)).await;
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
        match &mut self.accepting {
            Accepting::Plain(tcp) => loop {
                let (stream, peer) = accept_tcp(tcp).await;
                match self.connections.admit(peer.ip()) {
                    Some(place) => return (ApiStream::new(Io::Plain(stream), place), peer),
                    None => {
                        tracing::debug!(%peer, "too many connections (in all or from this source); connection closed");
                    }
                }
            },
            Accepting::Tls(t) => match t.ready.recv().await {
                Some((stream, peer, place)) => {
                    (ApiStream::new(Io::Tls(Box::new(stream)), place), peer)
                }
                // The accept loop ended (its task was aborted): nothing
                // more will come.
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.accepting {
            Accepting::Plain(tcp) => TcpListener::local_addr(tcp),
            Accepting::Tls(t) => Ok(t.local_addr),
        }
    }
}

/// One accepted connection, holding its place (given back when it drops).
/// It must send its first bytes within [`FIRST_BYTES_WITHIN`] and then
/// pass a byte either way at least every [`IDLE_TIMEOUT`]; past that, a
/// read fails with `TimedOut` and the server drops the connection.
#[derive(Debug)]
pub struct ApiStream {
    io: Io,
    deadline: Pin<Box<Sleep>>,
    _place: Admission,
}

#[derive(Debug)]
enum Io {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl ApiStream {
    fn new(io: Io, place: Admission) -> Self {
        Self {
            io,
            deadline: Box::pin(tokio::time::sleep(FIRST_BYTES_WITHIN)),
            _place: place,
        }
    }

    /// Bytes passed: the connection may idle [`IDLE_TIMEOUT`] from now.
    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + IDLE_TIMEOUT);
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the connection passed no byte within its deadline",
    )
}

impl AsyncRead for ApiStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        match read {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                Poll::Ready(Err(timed_out()))
            }
        }
    }
}

impl AsyncWrite for ApiStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        match written {
            Poll::Ready(Ok(n)) if n > 0 => this.moved(),
            Poll::Pending => {
                // A peer that reads nothing holds the response: the same
                // deadline.
                ready!(this.deadline.as_mut().poll(cx));
                return Poll::Ready(Err(timed_out()));
            }
            _ => {}
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
