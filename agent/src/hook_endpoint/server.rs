//! Listening for hook connections, on a Unix socket or loopback TCP.
//!
//! [`HookServer::bind`] does everything that can fail up front, so the agent
//! can refuse to start with a clear reason; [`HookServer::serve`] then
//! accepts connections and runs each in its own task
//! ([`super::connection`]) until shutdown.
//!
//! A Unix socket file left behind by an agent that died is replaced, but
//! only after checking that nothing answers on it: two agents must never
//! share (and silently split) one endpoint. An agent running as a user
//! makes the socket mode `0600` (a missing parent directory `0700`), so
//! only that user (normally the job's) can connect. An agent running as
//! root serves every user's jobs: the socket is `0666` and a missing parent
//! `0755`. That opens nothing a process could abuse: the kernel names the
//! connecting process (`SO_PEERCRED`), a hook may register only its own
//! PID, and the job and rank it claims must match its environment
//! ([`super::identity`]). The file is removed at shutdown if it is still
//! this server's.
//!
//! TCP is served only when configured (`--hook-listen HOST:PORT`; there is
//! no hook endpoint at all by default) and only on loopback: a
//! [`HookAddr`] cannot hold another address. TCP has no `SO_PEERCRED`, so
//! for each accepted connection the server looks the peer's socket up in
//! `/proc/net/tcp*` (its user, for the per-user cap) and then, in the
//! connection's task and one search at a time, the process that holds it
//! in `/proc/*/fd` ([`super::tcp_owner`]). A peer found so is held to the
//! same rules as a Unix socket peer; one that is not found is counted
//! ([`super::HookStats::tcp_peers_unknown`]) and its claims are checked
//! against the claimed process's environment only. The table lookup runs
//! off the runtime's threads but before the next `accept`, so connections
//! are admitted in order; it is bounded ([`super::MAX_TABLE_BYTES`]).

use std::future::Future;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpumon_net::Admissions;
use thiserror::Error;
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinSet;

use super::addr::HookAddr;
use super::connection::{self, Peer, Shared};
use super::hub::{HookHub, MAX_SESSIONS};
use super::protocol;
use super::tcp_owner::{self, Holder, PeerSocket};
use crate::discovery::DEFAULT_PROC_ROOT;

/// Most open connections, registered or not; past it a connection is
/// answered with an error and closed.
pub const MAX_CONNECTIONS: usize = 2 * MAX_SESSIONS;

/// Most open connections of one local user (the kernel's word on a Unix
/// socket, the peer socket's user on loopback TCP; TCP peers whose socket
/// was not found count as one user), so that one user's connections cannot
/// lock every other user's jobs out of a root agent.
pub const MAX_CONNECTIONS_PER_USER: usize = MAX_CONNECTIONS / 8;

/// Why the hook endpoint could not listen.
#[derive(Debug, Error)]
pub enum HookError {
    /// The operating system refused (permission, address in use, ...).
    #[error("cannot listen for hooks on {addr}: {error}")]
    Bind {
        /// The address.
        addr: HookAddr,
        /// The operating system's reason.
        error: io::Error,
    },
    /// Another process is serving on the socket path.
    #[error("cannot listen for hooks on {addr}: another process is already listening there (a running gpumon agent?); stop it or choose another --hook-listen address")]
    InUse {
        /// The address.
        addr: HookAddr,
    },
    /// The socket path is taken by something that is not a socket.
    #[error("cannot listen for hooks on {addr}: {} exists and is not a socket; remove it or choose another path", path.display())]
    NotASocket {
        /// The address.
        addr: HookAddr,
        /// The path in the way.
        path: PathBuf,
    },
}

/// Settings of a [`HookServer`] beyond its address.
#[derive(Debug, Clone)]
pub struct HookServerOptions {
    /// Where `/proc` is, to check what registering processes claim
    /// (default [`DEFAULT_PROC_ROOT`]; tests pass a directory laid out like it).
    pub proc_root: PathBuf,
}

impl Default for HookServerOptions {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from(DEFAULT_PROC_ROOT),
        }
    }
}

/// A bound hook endpoint; see the module docs.
#[derive(Debug)]
pub struct HookServer {
    listener: Listener,
    addr: HookAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
enum Listener {
    /// The socket file goes when the listener does.
    Unix {
        listener: UnixListener,
        _socket_file: SocketFile,
    },
    Tcp(TcpListener),
}

/// The socket file this server created, removed on drop while it is still
/// the same file (same device and inode).
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let now = std::fs::symlink_metadata(&self.path).ok();
        if self.id.is_some() && now.map(|m| (m.dev(), m.ino())) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl HookServer {
    /// Binds `addr` with default options. Call from within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`HookError`] naming the address and the reason.
    pub async fn bind(addr: &HookAddr, hub: Arc<HookHub>) -> Result<Self, HookError> {
        Self::bind_with(addr, hub, HookServerOptions::default()).await
    }

    /// Binds `addr` with `options`.
    ///
    /// # Errors
    ///
    /// [`HookError`] naming the address and the reason.
    pub async fn bind_with(
        addr: &HookAddr,
        hub: Arc<HookHub>,
        options: HookServerOptions,
    ) -> Result<Self, HookError> {
        let bind_error = |error| HookError::Bind {
            addr: addr.clone(),
            error,
        };
        let (listener, local) = if let Some(path) = addr.unix_path() {
            let listener = bind_unix(addr, path)?;
            (listener, addr.clone())
        } else {
            let sock = addr.tcp_addr().expect("a hook address is unix or tcp");
            let listener = TcpListener::bind(sock).await.map_err(bind_error)?;
            let port = listener.local_addr().map_err(bind_error)?.port();
            (Listener::Tcp(listener), addr.with_port(port))
        };
        Ok(Self {
            listener,
            addr: local,
            shared: Arc::new(Shared::new(hub, options.proc_root)),
        })
    }

    /// The address it listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> &HookAddr {
        &self.addr
    }

    /// Accepts connections until `shutdown` completes, then closes every
    /// connection (their sessions end) and removes the socket file.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let places: Admissions<Option<u32>> =
            Admissions::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_USER);
        let mut tasks = JoinSet::new();
        let mut accept_failed = false;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Err(e) = done {
                        if e.is_panic() {
                            tracing::error!(addr = %self.addr, error = %e, "a hook connection task panicked; its session ended");
                        }
                    }
                }
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, mut peer)) => {
                        accept_failed = false;
                        if let Stream::Tcp(s) = &stream {
                            peer.socket = tcp_socket(&self.shared.proc_root, s).await;
                            peer.uid = peer.socket.map(|s| s.uid);
                        }
                        let shared = self.shared.clone();
                        match places.admit_from(peer.uid) {
                            Some(place) => {
                                tasks.spawn(async move {
                                    stream.serve(peer, shared).await;
                                    drop(place);
                                });
                            }
                            None => {
                                tasks.spawn(async move {
                                    let reason = format!("this agent already serves its maximum of {MAX_CONNECTIONS} hook connections, or {MAX_CONNECTIONS_PER_USER} of this user's");
                                    tracing::debug!(peer = %peer.label, "{reason}");
                                    stream.reject(&reason).await;
                                });
                            }
                        }
                    }
                    Err(e) => {
                        if !accept_failed {
                            tracing::warn!(addr = %self.addr, error = %e, "accepting a hook connection failed; retrying");
                            accept_failed = true;
                        }
                        // Out of file descriptors and the like: do not spin.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        tasks.shutdown().await;
        tracing::debug!(addr = %self.addr, "hook endpoint closed");
    }
}

/// Binds a Unix socket at `path`; see the module docs.
/// The socket's and a new parent directory's modes: open to every user
/// for an agent running as root, the agent's user only otherwise.
pub fn socket_modes(euid: u32) -> (u32, u32) {
    if euid == 0 {
        (0o666, 0o755)
    } else {
        (0o600, 0o700)
    }
}

fn bind_unix(addr: &HookAddr, path: &Path) -> Result<Listener, HookError> {
    let (socket_mode, dir_mode) = socket_modes(rustix::process::geteuid().as_raw());
    let bind_error = |error| HookError::Bind {
        addr: addr.clone(),
        error,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(HookError::InUse { addr: addr.clone() }),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "removing a stale hook socket (nothing answers on it)");
                    std::fs::remove_file(path).map_err(bind_error)?;
                }
                Err(e) => return Err(bind_error(e)),
            }
        }
        Ok(_) => {
            return Err(HookError::NotASocket {
                addr: addr.clone(),
                path: path.to_owned(),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_error(e)),
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(dir_mode)
                .create(parent)
                .map_err(bind_error)?;
        }
        crate::private_dir::check_dir(parent, true)
            .map_err(|why| bind_error(io::Error::new(io::ErrorKind::PermissionDenied, why)))?;
    }
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    let file = SocketFile {
        path: path.to_owned(),
        id: std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino())),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(socket_mode))
        .map_err(bind_error)?;
    Ok(Listener::Unix {
        listener,
        _socket_file: file,
    })
}

/// An accepted connection of either transport.
enum Stream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

impl Listener {
    async fn accept(&self) -> io::Result<(Stream, Peer)> {
        match self {
            Listener::Unix { listener, .. } => {
                let (stream, _) = listener.accept().await?;
                let cred = stream.peer_cred().ok();
                let pid = cred
                    .and_then(|c| c.pid())
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|&p| p != 0);
                let uid = cred.map(|c| c.uid());
                let label = pid.map_or_else(|| "unix peer".to_owned(), |p| format!("pid {p}"));
                Ok((
                    Stream::Unix(stream),
                    Peer {
                        pid,
                        uid,
                        socket: None,
                        label,
                    },
                ))
            }
            Listener::Tcp(l) => {
                let (stream, from) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                // Who it is comes after (`tcp_socket`, `find_tcp_holder`).
                let peer = Peer {
                    pid: None,
                    uid: None,
                    socket: None,
                    label: from.to_string(),
                };
                Ok((Stream::Tcp(stream), peer))
            }
        }
    }
}

impl Stream {
    async fn serve(self, peer: Peer, shared: Arc<Shared>) {
        match self {
            Stream::Unix(s) => connection::serve(s, peer, shared).await,
            Stream::Tcp(s) => {
                let peer = find_tcp_holder(peer, &shared).await;
                connection::serve(s, peer, shared).await;
            }
        }
    }

    async fn reject(self, reason: &str) {
        use tokio::io::AsyncWriteExt;
        let answer = protocol::refusal(reason);
        let _ = match self {
            Stream::Unix(mut s) => s.write_all(&answer).await,
            Stream::Tcp(mut s) => s.write_all(&answer).await,
        };
    }
}

/// The peer's socket of a loopback TCP connection, from the tables under
/// `proc_root` (read on the blocking pool); `None` when not found.
async fn tcp_socket(proc_root: &Path, stream: &tokio::net::TcpStream) -> Option<PeerSocket> {
    let (from, local) = (stream.peer_addr().ok()?, stream.local_addr().ok()?);
    let root = proc_root.to_owned();
    tokio::task::spawn_blocking(move || tcp_owner::find_socket(&root, from, local))
        .await
        .ok()
        .flatten()
}

/// `peer` with the PID of the process holding its TCP socket, when found
/// (one search at a time, on the blocking pool); a peer left unknown is
/// counted.
async fn find_tcp_holder(mut peer: Peer, shared: &Shared) -> Peer {
    let holder = match peer.socket {
        Some(socket) => {
            let _turn = shared.holder_search.acquire().await;
            let root = shared.proc_root.clone();
            tokio::task::spawn_blocking(move || {
                tcp_owner::find_holder(&root, socket.uid, socket.inode)
            })
            .await
            .unwrap_or(Holder::NotFound)
        }
        None => Holder::NotFound,
    };
    match holder {
        Holder::Pid(pid) => {
            peer.pid = Some(pid);
            peer.label = format!("pid {pid} ({})", peer.label);
        }
        Holder::NotFound | Holder::TooMany => {
            tracing::debug!(peer = %peer.label, socket = ?peer.socket, ?holder, "the process behind a TCP hook connection is unknown; its claims are checked against their environment only");
            shared.hub.count_tcp_peer_unknown();
        }
    }
    peer
}
