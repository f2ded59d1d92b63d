//! [`Credentials`]: the secrets a replica checks every request against, and
//! the rule that a replica reachable from other hosts must have them. The
//! configuration builds them from owner-only files; the API's authorization
//! layer (`api::auth`) checks requests against them.

use gpumon_runtime::loopback::is_loopback_authority;
use gpumon_runtime::secrets::{AgentToken, Secret};

/// The secrets a replica checks requests against (`Authorization: Bearer`),
/// read from owner-only files (see `gpumon_runtime::secrets`).
///
/// With none configured a replica is open, which [`Credentials::validate`]
/// allows only on a loopback address or with `insecure`.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// What replicas send each other on `/raft/*`.
    pub cluster_secret: Option<Secret>,
    /// The agent tokens accepted on `/api/v1/ingest`, each with the agents
    /// it may push as; one per agent, so one leaked token is revoked alone
    /// and speaks for its own agent only.
    pub agent_tokens: Option<Vec<AgentToken>>,
    /// What admin requests carry; it also reads. Without one, only loopback
    /// clients may make admin requests.
    pub admin_token: Option<Secret>,
    /// Reads (the JSON API, `/metrics`, the stream) without a token.
    pub open_reads: bool,
    /// Run without secrets on a non-loopback address.
    pub insecure: bool,
}

impl Default for Credentials {
    fn default() -> Self {
        Self {
            cluster_secret: None,
            agent_tokens: None,
            admin_token: None,
            open_reads: true,
            insecure: false,
        }
    }
}

impl Credentials {
    /// Refuses an open replica on a non-loopback `listen` address (unless
    /// `insecure`), and closed reads without an admin token.
    pub fn validate(&self, listen: &str) -> Result<(), CredentialsError> {
        if !self.open_reads && self.admin_token.is_none() {
            return Err(CredentialsError::ClosedReadsWithoutToken);
        }
        if self.insecure || is_loopback_authority(listen) {
            return Ok(());
        }
        let missing: Vec<&str> = [
            (self.cluster_secret.is_none(), "--cluster-secret-file"),
            (self.agent_tokens.is_none(), "--agent-token-file"),
            (self.admin_token.is_none(), "--admin-token-file"),
        ]
        .into_iter()
        .filter_map(|(gone, flag)| gone.then_some(flag))
        .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(CredentialsError::Open {
            listen: listen.to_owned(),
            missing,
        })
    }
}

/// Why a replica may not start with these credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// Reads are closed and nothing can open them.
    #[error(
        "closed reads (open_reads = false) need an admin token (--admin-token-file) to read with"
    )]
    ClosedReadsWithoutToken,
    /// A non-loopback address without every secret, and not `--insecure`.
    #[error(
        "--listen {listen} is reachable from other hosts, and anyone who reaches it could forge pushes and Raft messages: give {} (or --insecure to run open on a trusted network)",
        .missing.join(", ")
    )]
    Open {
        /// The address.
        listen: String,
        /// The flags of the missing secrets.
        missing: Vec<&'static str>,
    },
}
