//! Raft RPC between coordinators: postcard bodies over HTTP.
//!
//! A peer is addressed by its API `host:port` ([`openraft::BasicNode`]); the
//! routes are `POST /raft/{append,vote,snapshot}` (see `api::raft_rpc`). Every
//! request carries [`RAFT_VERSION_HEADER`] so a peer of another protocol
//! version is refused with a clear error rather than misread.
//!
//! Timeouts: each RPC is bounded by openraft's per-RPC hard TTL (the
//! heartbeat period for appends and votes; `install_snapshot_timeout` for each
//! snapshot chunk, which node.rs sizes for a chunk plus the final install).
//! Snapshots travel in chunks of `snapshot_chunk_bytes`. An unreachable peer
//! is retried after an exponential backoff (100 ms doubling to 2 s), so a
//! dead replica costs the leader little while it is down.
//!
//! A refused connection is unreachable at once. A call that runs past its
//! limit is only a slow answer until the peer has answered nothing for
//! [`SLOW_PEER_GRACE`]: a busy follower fsyncing a large append often takes
//! longer than one heartbeat period, and backing off from it (up to 2 s
//! without replication) stalled every commit under load. A peer behind a
//! cut link answers nothing, so it is unreachable after the grace.

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use std::error::Error;
use std::time::Duration;

use gpumon_runtime::secrets::Secret;
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{de::DeserializeOwned, Serialize};

use super::reachability::{Note, Reachability};
use super::TypeConfig;
use crate::peer_link::PeerLink;

/// Largest Raft RPC body accepted, bytes (snapshots travel in smaller chunks).
pub const MAX_RAFT_RPC_BYTES: usize = 64 << 20;
/// Most push bytes the leader gathers into one log entry: a quarter of an
/// RPC body, so an entry always fits one AppendEntries with room to spare
/// (an AppendEntries of several entries over the RPC limit is split by the
/// sender). `max_push_bytes` may not exceed it.
pub const MAX_ENTRY_BYTES: usize = MAX_RAFT_RPC_BYTES / 4;
/// Most bytes of entries a leader sends a follower in one AppendEntries,
/// and of pushes it gathers into one entry; a single entry or push larger
/// than this goes alone. openraft gives each AppendEntries one heartbeat
/// period (100 ms) to be answered, whatever it carries, and resends one
/// that runs over with the same entries: a call a follower cannot receive,
/// decode and write in time is retried without end, and the follower never
/// catches up. 4 MiB takes about 35 ms on 1 Gbit/s; a push near the 16 MiB
/// `max_push_bytes` ceiling needs about 1.3 Gbit/s between replicas.
pub const APPEND_BUDGET_BYTES: usize = 4 << 20;

/// Header naming the Raft RPC protocol version.
pub const RAFT_VERSION_HEADER: &str = "x-gpumon-raft-version";
/// The Raft RPC protocol version this build speaks.
pub const RAFT_VERSION: &str = "1";

type NodeId = u64;

/// Makes a client per peer; all share one connection pool.
#[derive(Debug, Clone)]
pub struct HttpNetwork {
    scheme: &'static str,
    client: reqwest::Client,
    secret: Option<Secret>,
}

impl HttpNetwork {
    /// A network on its own connection pool (separate from client
    /// forwarding) that sends `secret`, the cluster secret, with every RPC.
    pub fn new(secret: Option<Secret>, link: &PeerLink) -> Self {
        Self {
            scheme: link.scheme(),
            client: link
                .client_builder()
                .pool_max_idle_per_host(4)
                .connect_timeout(Duration::from_secs(1))
                .build()
                .expect("reqwest client builds"),
            secret,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            scheme: self.scheme,
            client: self.client.clone(),
            secret: self.secret.clone(),
            reachability: Reachability::default(),
            unanswered_since: None,
        }
    }
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    scheme: &'static str,
    client: reqwest::Client,
    secret: Option<Secret>,
    reachability: Reachability,
    /// Since when every call ran past its limit; `None` after an answer.
    unanswered_since: Option<std::time::Instant>,
}

/// How long calls to a peer may all run past their limit before it counts
/// as unreachable (and openraft backs off from it): a few election timeouts
/// of a busy peer, well under the time a cut peer is noticed in.
pub const SLOW_PEER_GRACE: Duration = Duration::from_millis(1_000);

impl PeerClient {
    /// What a call past its limit at `now` means: a slow answer within the
    /// grace, unreachable after it.
    fn timed_out_is_unreachable(&mut self, now: std::time::Instant) -> bool {
        let since = *self.unanswered_since.get_or_insert(now);
        now.duration_since(since) >= SLOW_PEER_GRACE
    }

    /// Logs the peer going away, staying away and coming back, at a
    /// bounded rate (openraft's own line per failed RPC is filtered out of
    /// the default log).
    fn note(&mut self, reached: bool) {
        let now = std::time::Instant::now();
        let note = if reached {
            self.reachability.answered(now)
        } else {
            self.reachability.failed(now)
        };
        let (peer, addr) = (self.target, &self.addr);
        match note {
            Note::Quiet => {}
            Note::WentAway => {
                tracing::warn!(peer, %addr, "peer does not answer; retrying with backoff")
            }
            Note::StillAway { failures, for_ } => tracing::warn!(
                peer, %addr, failures, away_s = for_.as_secs(), "peer still does not answer"
            ),
            Note::Back { after, failures } => tracing::info!(
                peer, %addr, failures, away_s = after.as_secs(), "peer answers again"
            ),
        }
    }

    async fn call<Req, Resp, E>(
        &mut self,
        route: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let body =
            postcard::to_allocvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.send(route, body, option).await
    }

    /// Sends an encoded request and decodes the answer.
    async fn send<Resp, E>(
        &mut self,
        route: &str,
        body: Vec<u8>,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let url = format!("{}://{}/raft/{route}", self.scheme, self.addr);
        let mut request = self
            .client
            .post(url)
            .header(RAFT_VERSION_HEADER, RAFT_VERSION);
        if let Some(secret) = &self.secret {
            request = request.bearer_auth(secret.expose());
        }
        let resp = match request.timeout(option.hard_ttl()).body(body).send().await {
            Ok(resp) => {
                self.unanswered_since = None;
                self.note(true);
                resp
            }
            // Slow, not gone (see the module doc): retried at the next
            // heartbeat, without a backoff, and not logged as away.
            Err(e)
                if e.is_timeout() && !self.timed_out_is_unreachable(std::time::Instant::now()) =>
            {
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Err(e) => {
                self.note(false);
                // A cut link (packets dropped) shows as the per-call limit
                // firing past the grace: unreachable, so openraft backs off
                // instead of retrying every 100 ms.
                return Err(if e.is_connect() || e.is_timeout() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                });
            }
        };
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let err =
                std::io::Error::other(format!("peer {} answered {status}: {text}", self.target));
            return Err(RPCError::Network(NetworkError::new(&err)));
        }
        let result: Result<Resp, RaftError<NodeId, E>> =
            postcard::from_bytes(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// How many of the leading entries, of these encoded sizes, to send when an
/// append of `bytes` is over [`APPEND_BUDGET_BYTES`]: as many as fit, at least
/// one; `None` when the whole append goes.
fn entries_that_fit(bytes: usize, sizes: impl IntoIterator<Item = usize>) -> Option<u64> {
    if bytes <= APPEND_BUDGET_BYTES {
        return None;
    }
    let (mut total, mut n, mut all) = (0usize, 0u64, 0u64);
    for size in sizes {
        all += 1;
        total = total.saturating_add(size);
        if n == 0 || total <= APPEND_BUDGET_BYTES {
            n += 1;
        }
    }
    (n < all).then_some(n)
}

/// First and largest wait before retrying an unreachable peer.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> Backoff {
        let (first, cap) = BACKOFF;
        Backoff::new(std::iter::successors(Some(first), move |d| {
            Some((*d * 2).min(cap))
        }))
    }

    /// An append over [`APPEND_BUDGET_BYTES`] is never sent: openraft is told
    /// to send the leading entries that fit, or the first alone, which
    /// always fits the peer's body limit (an entry holds at most
    /// `MAX_ENTRY_BYTES` of pushes).
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body =
            postcard::to_allocvec(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let sizes = rpc
            .entries
            .iter()
            .map(|e| postcard::experimental::serialized_size(e).unwrap_or(usize::MAX));
        if let Some(fewer) = entries_that_fit(body.len(), sizes) {
            tracing::debug!(
                peer = self.target,
                bytes = body.len(),
                entries = rpc.entries.len(),
                fewer,
                "an append over the bytes one call carries is split"
            );
            return Err(PayloadTooLarge::new_entries_hint(fewer).into());
        }
        self.send("append", body, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("vote", &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_over_its_byte_budget_asks_for_the_entries_that_fit() {
        const MIB: usize = 1 << 20;
        assert_eq!(
            entries_that_fit(APPEND_BUDGET_BYTES, [APPEND_BUDGET_BYTES]),
            None,
            "at the budget it goes"
        );
        assert_eq!(entries_that_fit(16 * 3 * MIB, [3 * MIB; 16]), Some(1));
        assert_eq!(entries_that_fit(5 * MIB, [MIB; 5]), Some(4));
        assert_eq!(
            entries_that_fit(16 * MIB, [16 * MIB]),
            None,
            "one entry always goes"
        );
        assert_eq!(entries_that_fit(20 * MIB, [16 * MIB, 4 * MIB]), Some(1));
    }

    #[tokio::test]
    async fn an_append_over_its_budget_is_not_sent_and_says_so() {
        // Nothing listens: a request that went out would fail to connect.
        let mut network = HttpNetwork::new(None, &PeerLink::plain());
        let mut peer = network.new_client(2, &BasicNode::new("127.0.0.1:9")).await;
        // Three entries of a little over half the budget each: one fits.
        let big = |index| openraft::Entry::<TypeConfig> {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(crate::raft::Command::V1(
                crate::raft::CommandV1::Push(gpumon_proto::PushBatch {
                    agent_id: "a".repeat(APPEND_BUDGET_BYTES / 2),
                    incarnation: 1,
                    seq: index,
                    node: "n".into(),
                    dropped_batches: 0,
                    windows: Vec::new(),
                    hook: Vec::new(),
                    acks: Vec::new(),
                }),
            )),
        };
        let rpc = AppendEntriesRequest {
            vote: openraft::Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: (1..=3).map(big).collect(),
            leader_commit: None,
        };
        let got = peer
            .append_entries(rpc, RPCOption::new(Duration::from_secs(1)))
            .await;
        match got {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 1),
            other => panic!("{other:?}"),
        }
    }

    /// A peer behind a cut link: the connection is taken but nothing ever
    /// answers, so the per-call limit fires. Within the grace that is a slow
    /// answer (retried at once, not logged); past it, it must read as
    /// unreachable, which makes openraft back off.
    #[tokio::test]
    async fn a_peer_that_never_answers_is_unreachable_after_the_grace_and_noted_once() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = silent.accept().await {
                open.push(conn);
            }
        });
        let mut network = HttpNetwork::new(None, &PeerLink::plain());
        let mut peer = network.new_client(2, &BasicNode::new(&addr)).await;
        let option = RPCOption::new(Duration::from_millis(100));
        let vote = || VoteRequest::new(openraft::Vote::new(1, 1), None);
        let start = std::time::Instant::now();
        let got = peer.vote(vote(), option.clone()).await;
        assert!(matches!(got, Err(RPCError::Network(_))), "{got:?}");
        assert!(
            peer.reachability.answered(std::time::Instant::now()) == Note::Quiet,
            "a slow answer is not an absence"
        );
        // Past the grace every call that runs out is unreachable.
        tokio::time::sleep(SLOW_PEER_GRACE.saturating_sub(start.elapsed())).await;
        for _ in 0..3 {
            let got = peer.vote(vote(), option.clone()).await;
            assert!(matches!(got, Err(RPCError::Unreachable(_))), "{got:?}");
        }
        assert!(
            matches!(
                peer.reachability.answered(std::time::Instant::now()),
                Note::Back { failures: 3, .. }
            ),
            "three failures noted as one absence"
        );
        held.abort();
    }
}
