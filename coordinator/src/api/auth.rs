//! Authorization, in one place: every route in the route table (`routes`)
//! names the [`Access`] it needs, and [`router`](super::router) puts this
//! layer in front of it; handlers never check credentials themselves.
//!
//! Credentials are bearer secrets (`Authorization: Bearer <secret>`, see
//! [`Credentials`]):
//! - [`Access::Peer`] (Raft RPC, `/raft/*`): the cluster secret. A vote,
//!   an append or a snapshot without it never reaches openraft, so no term,
//!   index or membership from an unauthenticated peer touches the log.
//! - [`Access::Agent`] (pushes): one of the accepted agent tokens. A token
//!   bound to agents (names after it in the token file) lets its holder
//!   push as those agents only: the layer hands the binding to the ingest
//!   route as an [`AgentBinding`], which refuses a message for another
//!   agent with 403 before anything of it is proposed.
//! - [`Access::Admin`] (membership, issuing actions): the admin token;
//!   with none configured, loopback clients only.
//! - [`Access::Read`]: anyone while reads are open; else the admin token.
//! - [`Access::Open`]: liveness and the dashboard's files.
//!
//! Where a secret is not configured its check is open (a replica refuses
//! to start that way on a non-loopback address unless told `--insecure`).
//! A refusal is a 401 saying what is missing, a warning in the log, and a
//! count in `gpumon_api_requests_unauthorized_total{access}`; nothing of
//! the request is read.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpumon_runtime::secrets::{AgentToken, Secret};

use super::auth_error::AuthError;
use super::log_gate::LogGate;
use super::{ApiContext, ApiError};
use crate::credentials::Credentials;
use gpumon_runtime::clock::wall_ms;

/// Who a route is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Liveness and the dashboard's files.
    Open,
    /// Reading the cluster's state.
    Read,
    /// Agents pushing.
    Agent,
    /// Changing the cluster by hand.
    Admin,
    /// Raft RPC between replicas.
    Peer,
}

impl Access {
    /// Its label in `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Access::Open => "open",
            Access::Read => "read",
            Access::Agent => "agent",
            Access::Admin => "admin",
            Access::Peer => "peer",
        }
    }

    const REFUSABLE: [Access; 4] = [Access::Read, Access::Agent, Access::Admin, Access::Peer];
}

/// Requests refused, per kind of access, and the gates of their log lines.
#[derive(Debug, Default)]
pub struct Refused([AtomicU64; 4], [LogGate; 4]);

impl Refused {
    /// Counts a refusal; `Some(n)` when it may be logged (`n` left out since
    /// the last line of its kind).
    fn add(&self, access: Access) -> Option<u64> {
        let i = Access::REFUSABLE.iter().position(|a| *a == access)?;
        self.0[i].fetch_add(1, Relaxed);
        self.1[i].pass(wall_ms())
    }

    /// `(access, refused)` for each kind that can be refused.
    pub fn counts(&self) -> [(&'static str, u64); 4] {
        std::array::from_fn(|i| (Access::REFUSABLE[i].name(), self.0[i].load(Relaxed)))
    }
}

/// Which agents the caller of an agent route may speak for: any (`None`:
/// no agent tokens configured, or a token bound to no agent), or the agent
/// ids and node names its token is bound to.
#[derive(Debug, Clone, Default)]
pub struct AgentBinding(pub Option<Arc<[String]>>);

impl AgentBinding {
    /// Whether a message from agent `agent_id` on `node` may come with
    /// this binding; the error says what the token may push as.
    pub fn allows(&self, agent_id: &str, node: &str) -> Result<(), AuthError> {
        let Some(names) = &self.0 else {
            return Ok(());
        };
        let known = |n: &str| names.iter().any(|s| s == n);
        if known(agent_id) && known(node) {
            return Ok(());
        }
        let (what, name) = if known(agent_id) {
            ("node", node)
        } else {
            ("agent id", agent_id)
        };
        Err(AuthError::OtherAgent {
            allowed: names.clone(),
            what,
            name: name.to_owned(),
        })
    }
}

/// The layer: lets the request through when the caller may have `access`.
pub async fn require(
    State((state, access)): State<(ApiContext, Access)>,
    mut request: Request,
    next: Next,
) -> Response {
    // Served without the peer's address (an in-process router), the caller
    // counts as remote.
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0);
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match check(&state.inner.credentials, access, peer, given) {
        Ok(binding) => {
            request.extensions_mut().insert(binding);
            next.run(request).await
        }
        Err(reason) => {
            if let Some(left_out) = state.inner.refused.add(access) {
                tracing::warn!(peer = %peer.ip(), path = request.uri().path(), access = access.name(), %reason, left_out, "refused a request (one line per 10 s per kind of access; left_out: those not logged since the last)");
            }
            ApiError::Unauthorized(reason.to_string()).into_response()
        }
    }
}

/// Whether a caller at `peer` holding `given` may have `access`, with the
/// agents it may speak for; the error says what is missing.
fn check(
    credentials: &Credentials,
    access: Access,
    peer: SocketAddr,
    given: Option<&str>,
) -> Result<AgentBinding, AuthError> {
    if access == Access::Agent {
        return match &credentials.agent_tokens {
            Some(tokens) => agent_token(tokens, given),
            None => Ok(AgentBinding::default()),
        };
    }
    check_secret(credentials, access, peer, given).map(|()| AgentBinding::default())
}

/// The binding of the agent token `given`, if it is one of `tokens`.
fn agent_token(tokens: &[AgentToken], given: Option<&str>) -> Result<AgentBinding, AuthError> {
    const WHAT: &str = "agent token";
    let Some(given) = given else {
        return Err(AuthError::Missing { what: WHAT });
    };
    tokens
        .iter()
        .find(|t| t.secret.matches(given.as_bytes()))
        .map(|t| AgentBinding(t.agents.clone()))
        .ok_or(AuthError::Wrong { what: WHAT })
}

/// [`check`] for the routes whose credential is a secret alone.
fn check_secret(
    credentials: &Credentials,
    access: Access,
    peer: SocketAddr,
    given: Option<&str>,
) -> Result<(), AuthError> {
    let one_of = |accepted: &[Secret], what: &'static str| match given {
        Some(g) if accepted.iter().any(|s| s.matches(g.as_bytes())) => Ok(()),
        Some(_) => Err(AuthError::Wrong { what }),
        None => Err(AuthError::Missing { what }),
    };
    let admin = credentials.admin_token.as_slice();
    match access {
        Access::Open => Ok(()),
        Access::Read if credentials.open_reads => Ok(()),
        Access::Read => one_of(admin, "admin token"),
        Access::Agent => Ok(()),
        Access::Peer => match &credentials.cluster_secret {
            Some(secret) => one_of(std::slice::from_ref(secret), "cluster secret"),
            None => Ok(()),
        },
        Access::Admin if admin.is_empty() => {
            if peer.ip().is_loopback() {
                Ok(())
            } else {
                Err(AuthError::AdminNotLocal { ip: peer.ip() })
            }
        }
        Access::Admin => one_of(admin, "admin token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::new(s).unwrap()
    }

    fn closed() -> Credentials {
        Credentials {
            cluster_secret: Some(secret("cluster-secret-0123456789")),
            agent_tokens: Some(vec![
                AgentToken {
                    secret: secret("agent-token-of-node-a-01"),
                    agents: Some(vec!["node-a".to_owned()].into()),
                    line: 1,
                },
                AgentToken {
                    secret: secret("agent-token-of-node-b-02"),
                    agents: None,
                    line: 2,
                },
            ]),
            admin_token: Some(secret("admin-token-0123456789")),
            open_reads: false,
            insecure: false,
        }
    }

    const REMOTE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::new(10, 0, 0, 9),
        40000,
    ));
    const LOCAL: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        40000,
    ));

    #[test]
    fn an_agent_token_speaks_for_its_own_agents_only() {
        let c = closed();
        let bound = check(&c, Access::Agent, REMOTE, Some("agent-token-of-node-a-01")).unwrap();
        assert_eq!(bound.allows("node-a", "node-a"), Ok(()));
        let err = bound.allows("node-b", "node-b").unwrap_err().to_string();
        assert!(
            err.contains("node-a only, not as agent id \"node-b\""),
            "{err}"
        );
        let err = bound.allows("node-a", "node-b").unwrap_err().to_string();
        assert!(err.contains("not as node \"node-b\""), "{err}");
        let any = check(&c, Access::Agent, REMOTE, Some("agent-token-of-node-b-02")).unwrap();
        assert_eq!(
            any.allows("node-z", "node-z"),
            Ok(()),
            "a token bound to none"
        );
    }

    #[test]
    fn each_kind_of_access_takes_its_own_secret_and_no_other() {
        let c = closed();
        let ok = |access, given| check(&c, access, REMOTE, given).is_ok();
        assert!(ok(Access::Peer, Some("cluster-secret-0123456789")));
        assert!(!ok(Access::Peer, Some("agent-token-of-node-a-01")));
        assert!(!ok(Access::Peer, None));
        assert!(ok(Access::Agent, Some("agent-token-of-node-b-02")));
        assert!(!ok(Access::Agent, Some("cluster-secret-0123456789")));
        assert!(!ok(Access::Agent, Some("agent-token-of-node-c-03")));
        assert!(ok(Access::Admin, Some("admin-token-0123456789")));
        assert!(!ok(Access::Admin, Some("agent-token-of-node-a-01")));
        assert!(ok(Access::Read, Some("admin-token-0123456789")));
        assert!(!ok(Access::Read, None));
        assert!(ok(Access::Open, None));
        assert!(
            check(&c, Access::Admin, LOCAL, None).is_err(),
            "loopback is no credential once a token exists"
        );
    }

    #[test]
    fn without_secrets_only_admin_is_limited_to_loopback() {
        let open = Credentials::default();
        for access in [Access::Peer, Access::Agent, Access::Read, Access::Open] {
            assert!(check(&open, access, REMOTE, None).is_ok(), "{access:?}");
        }
        assert!(check(&open, Access::Admin, LOCAL, None).is_ok());
        let err = check(&open, Access::Admin, REMOTE, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("10.0.0.9"), "{err}");
    }

    #[test]
    fn refusals_are_counted_per_kind() {
        let r = Refused::default();
        r.add(Access::Agent);
        r.add(Access::Agent);
        r.add(Access::Peer);
        r.add(Access::Open);
        assert_eq!(
            r.counts(),
            [("read", 0), ("agent", 2), ("admin", 0), ("peer", 1)]
        );
    }
}
