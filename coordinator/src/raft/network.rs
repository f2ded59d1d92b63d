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

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use std::error::Error;
use std::time::Duration;

use gpumon_common::secrets::Secret;
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{de::DeserializeOwned, Serialize};

use super::TypeConfig;

/// Header naming the Raft RPC protocol version.
pub const RAFT_VERSION_HEADER: &str = "x-gpumon-raft-version";
/// The Raft RPC protocol version this build speaks.
pub const RAFT_VERSION: &str = "1";

type NodeId = u64;

/// Makes a client per peer; all share one connection pool.
#[derive(Debug, Clone)]
pub struct HttpNetwork {
    client: reqwest::Client,
    secret: Option<Secret>,
}

impl HttpNetwork {
    /// A network on its own connection pool (separate from client
    /// forwarding) that sends `secret`, the cluster secret, with every RPC.
    pub fn new(secret: Option<Secret>) -> Self {
        Self {
            client: reqwest::Client::builder()
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
            client: self.client.clone(),
            secret: self.secret.clone(),
        }
    }
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    client: reqwest::Client,
    secret: Option<Secret>,
}

impl PeerClient {
    async fn call<Req, Resp, E>(
        &self,
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
        let url = format!("http://{}/raft/{route}", self.addr);
        let mut request = self
            .client
            .post(url)
            .header(RAFT_VERSION_HEADER, RAFT_VERSION);
        if let Some(secret) = &self.secret {
            request = request.bearer_auth(secret.expose());
        }
        let resp = request
            .timeout(option.hard_ttl())
            .body(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
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

/// First and largest wait before retrying an unreachable peer.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> Backoff {
        let (first, cap) = BACKOFF;
        Backoff::new(std::iter::successors(Some(first), move |d| {
            Some((*d * 2).min(cap))
        }))
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("append", &rpc, &option).await
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
