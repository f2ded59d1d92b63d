//! One delivery attempt of an encoded agent message to the coordinators,
//! and the rules for where it goes: the agent's [`crate::uplink`] and
//! `gpumon bench`'s simulated agents both push through [`Pusher::attempt`].
//!
//! An attempt posts to `/api/v1/ingest` on the [`Route`]'s target: the
//! leader when known, else the route's turn in the URL list. A follower's
//! `NotLeader { leader_url: Some(u) }` is followed to `u`, at most
//! [`MAX_LEADER_HOPS`] times per attempt. A 429 is backpressure
//! ([`Attempt::Busy`]: keep the message, wait its `Retry-After`, same
//! route); any other 4xx is a refusal for good ([`Attempt::Rejected`]: the
//! coordinators will never take this message).
//! Anything else that does not commit (no leader known, a hint back to the
//! same URL or past the hops, a 5xx, a transport error, a reply that does
//! not decode) fails the attempt and rotates the route to the next URL, so
//! the next attempt asks someone else. Backoff between attempts is the
//! caller's.

use gpumon_proto::wire;
use gpumon_proto::{CoordinatorReply, CoordinatorReplyV2, NodeAlert, PendingAction, PushOutcome};
use gpumon_runtime::secrets::Secret;

/// Leader hints followed in one attempt.
pub const MAX_LEADER_HOPS: u32 = 3;
/// Largest reply accepted from a coordinator.
const MAX_REPLY_BYTES: usize = 1 << 20;
/// Longest refusal text kept.
const MAX_REASON_BYTES: usize = 1024;

/// Where one agent sends: the leader when known, else its turn in the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    leader: Option<String>,
    next: usize,
}

impl Route {
    /// A route starting at URL number `first` (modulo the list's length).
    pub fn new(first: usize) -> Self {
        Self {
            leader: None,
            next: first,
        }
    }

    /// The URL the next post goes to.
    pub fn target<'a>(&'a self, urls: &'a [String]) -> &'a str {
        self.leader
            .as_deref()
            .unwrap_or(&urls[self.next % urls.len()])
    }

    /// After a failure: forget the leader, take the next URL.
    fn rotate(&mut self, urls: &[String]) {
        self.leader = None;
        self.next = (self.next + 1) % urls.len();
    }
}

/// How an attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Committed through Raft.
    Committed {
        /// The coordinator had applied it before.
        duplicate: bool,
        /// Actions for this agent's training processes, from the reply.
        actions: Vec<PendingAction>,
        /// Active alerts about this agent's node, from a version 2 reply
        /// (none in a version 1 reply).
        alerts: Vec<NodeAlert>,
    },
    /// Worth retrying elsewhere, and why (`URL: reason`).
    Failed(String),
    /// Refused for good (4xx), and why (`URL: HTTP status: text`).
    Rejected(String),
    /// Too busy now (429): retry on the same route after the wait the
    /// coordinator asked for.
    Busy(std::time::Duration),
}

/// The wait a 429 asks for when it names none (or an absurd one).
pub const DEFAULT_BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest `Retry-After` honored.
pub const MAX_BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The HTTP client and the coordinators' base URLs.
#[derive(Debug)]
pub struct Pusher {
    client: reqwest::Client,
    urls: Vec<String>,
    token: Option<Secret>,
}

impl Pusher {
    /// A pusher over `urls` (base URLs; a trailing slash is dropped; at
    /// least one). The client's timeouts bound each post.
    pub fn new(client: reqwest::Client, urls: Vec<String>) -> Self {
        assert!(!urls.is_empty(), "a pusher needs a coordinator URL");
        let urls = urls
            .into_iter()
            .map(|u| u.trim_end_matches('/').to_owned())
            .collect();
        Self {
            client,
            urls,
            token: None,
        }
    }

    /// Sends `token`, this agent's token, with every push.
    pub fn with_token(mut self, token: Option<Secret>) -> Self {
        self.token = token;
        self
    }

    /// Posts through `client` instead (e.g. one set up for TLS).
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// The coordinators' base URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Sends `body` (an encoded `AgentMessage`) along `route`, following up
    /// to [`MAX_LEADER_HOPS`] leader hints; `on_hop` is called with each
    /// leader followed.
    pub async fn attempt(
        &self,
        route: &mut Route,
        body: &[u8],
        mut on_hop: impl FnMut(&str),
    ) -> Attempt {
        let mut hops = 0;
        loop {
            let url = route.target(&self.urls).to_owned();
            let CoordinatorReplyV2 {
                outcome,
                actions,
                alerts,
            } = match self.post(&url, body).await {
                Ok(reply) => reply,
                Err(Failure::Retry(why)) => {
                    route.rotate(&self.urls);
                    return Attempt::Failed(format!("{url}: {why}"));
                }
                Err(Failure::Refused(why)) => return Attempt::Rejected(format!("{url}: {why}")),
                Err(Failure::Busy(wait)) => return Attempt::Busy(wait),
            };
            match outcome {
                PushOutcome::Committed { duplicate, .. } => {
                    return Attempt::Committed {
                        duplicate,
                        actions,
                        alerts,
                    };
                }
                PushOutcome::NotLeader {
                    leader_url: Some(leader),
                } if leader.trim_end_matches('/') != url && hops < MAX_LEADER_HOPS => {
                    hops += 1;
                    let leader = leader.trim_end_matches('/').to_owned();
                    on_hop(&leader);
                    route.leader = Some(leader);
                }
                PushOutcome::NotLeader { leader_url } => {
                    route.rotate(&self.urls);
                    let why = match leader_url {
                        None => "no leader is known yet".to_owned(),
                        Some(l) => format!("still not the leader after {hops} hops (hint {l})"),
                    };
                    return Attempt::Failed(format!("{url}: {why}"));
                }
            }
        }
    }

    async fn post(&self, url: &str, body: &[u8]) -> Result<CoordinatorReplyV2, Failure> {
        let mut request = self
            .client
            .post(format!("{url}/api/v1/ingest"))
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose());
        }
        let resp = request
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| Failure::Retry(error_chain(&e)))?;
        let status = resp.status();
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let wait = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(std::time::Duration::from_secs)
                .filter(|w| *w <= MAX_BUSY_WAIT)
                .unwrap_or(DEFAULT_BUSY_WAIT);
            return Err(Failure::Busy(wait));
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| Failure::Retry(error_chain(&e)))?;
        if status.is_client_error() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_REASON_BYTES)]);
            return Err(Failure::Refused(format!("HTTP {status}: {text}")));
        }
        if !status.is_success() {
            return Err(Failure::Retry(format!("HTTP {status}")));
        }
        let reply: CoordinatorReply = wire::decode(&bytes, MAX_REPLY_BYTES)
            .map_err(|e| Failure::Retry(format!("bad reply: {e}")))?;
        Ok(reply.into_v2())
    }
}

enum Failure {
    Retry(String),
    Refused(String),
    Busy(std::time::Duration),
}

/// An error with its causes ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_rotates_through_the_list_and_forgets_the_leader() {
        let urls: Vec<String> = ["http://a", "http://b", "http://c"]
            .map(String::from)
            .into();
        let mut r = Route::new(2);
        assert_eq!(r.target(&urls), "http://c");
        r.leader = Some("http://b".into());
        assert_eq!(r.target(&urls), "http://b");
        r.rotate(&urls);
        assert_eq!(r.target(&urls), "http://a");
        r.rotate(&urls);
        assert_eq!(r.target(&urls), "http://b");
    }

    #[tokio::test]
    async fn an_unreachable_url_fails_and_rotates() {
        // Port 1 on loopback: connection refused, at once.
        let urls = vec![
            "http://127.0.0.1:1/".to_owned(),
            "http://127.0.0.1:2".to_owned(),
        ];
        let pusher = Pusher::new(
            gpumon_net::plain_client_builder()
                .build()
                .expect("the default client builds"),
            urls,
        );
        let mut route = Route::new(0);
        let got = pusher.attempt(&mut route, b"x", |_| {}).await;
        assert!(
            matches!(&got, Attempt::Failed(why) if why.starts_with("http://127.0.0.1:1: ")),
            "{got:?}"
        );
        assert_eq!(route.target(pusher.urls()), "http://127.0.0.1:2");
    }
}
