//! How a replica reaches other replicas: the URL scheme and the TLS client
//! config of every replica-to-replica connection (Raft RPC, forwarded
//! reads, the probe before `cluster add`, the leader's URL given to
//! clients).
//!
//! A cluster speaks one scheme: a replica that serves TLS reaches its
//! peers over https (membership stores bare `host:port` addresses), and
//! presents its own certificate to them, which mutual TLS requires.

use gpumon_net::{ClientTls, ServerTls, TlsError};

/// A replica's way to its peers; built once at start, so the files are
/// read (and any error reported) before the replica serves.
#[derive(Debug, Clone)]
pub struct PeerLink {
    https: bool,
    tls: rustls::ClientConfig,
}

impl PeerLink {
    /// Plain HTTP between replicas.
    pub fn plain() -> Self {
        Self::new(None, None).expect("plain peer links read no file")
    }

    /// https when `server` is set: trusting `ca_file` (else the server's
    /// client CA, else the public roots) and presenting the server's own
    /// certificate.
    pub fn new(
        server: Option<&ServerTls>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, TlsError> {
        let client = ClientTls {
            ca_file: ca_file
                .map(ToOwned::to_owned)
                .or_else(|| server.and_then(|s| s.client_ca_file.clone())),
            identity: server.map(|s| s.identity.clone()),
        };
        Ok(Self {
            https: server.is_some(),
            tls: client.config()?,
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// The base URL of the replica at `addr` (`host:port`).
    pub fn url(&self, addr: &str) -> String {
        format!("{}://{addr}", self.scheme())
    }

    /// A client builder for connections to peers.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        gpumon_net::client_builder_with(self.tls.clone())
    }
}
