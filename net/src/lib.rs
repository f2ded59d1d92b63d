//! gpumon's transport, in one place: which TLS files a process is given,
//! the listener the coordinator serves its API and Raft RPC on (plain TCP
//! or TLS), and the one HTTP client library (reqwest on rustls) that the
//! agent, the CLI, the replicas and the notifier all build their clients
//! with.
//!
//! Crypto is rustls with its `ring` provider, handed to each config
//! explicitly: nothing is installed process-wide, nothing needs a C
//! toolchain beyond what `ring` builds, and every client verifies servers
//! the same way. Building a reqwest client any other way in this workspace
//! panics (reqwest is built without a provider of its own), so every
//! client goes through [`client_builder`] or [`plain_client_builder`].

pub mod admission;
mod client;
mod files;
mod listener;

pub use admission::{Admissions, ConnectionLimits, LimitsError, MAX_HANDSHAKES};
pub use client::{client_builder, client_builder_with, plain_client_builder, ClientTls};
pub use files::{Identity, TlsError};
pub use listener::{ApiListener, ApiStream, ServerTls, HANDSHAKE_TIMEOUT};

use std::sync::Arc;

/// The crypto every TLS config of gpumon uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
