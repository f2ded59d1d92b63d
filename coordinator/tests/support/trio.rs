//! Three coordinator replicas on loopback, in the test's process, forming
//! one Raft cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use gpumon_coordinator::{Coordinator, CoordinatorConfig, Formation};
use openraft::ServerState;

/// Bound on every wait.
const WITHIN: Duration = Duration::from_secs(60);

/// The replicas, each with a data directory under one temporary directory.
pub struct Trio {
    pub nodes: Vec<Coordinator>,
    _dir: tempfile::TempDir,
}

impl Trio {
    /// Starts three replicas that list each other as peers.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Like [`Trio::start`], each replica's defaults changed by `tune`.
    pub async fn start_with(tune: impl Fn(&mut CoordinatorConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let listeners: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let peers: BTreeMap<u64, String> = (1..)
            .zip(&listeners)
            .map(|(id, l)| (id, l.local_addr().unwrap().to_string()))
            .collect();
        drop(listeners);
        let mut nodes = Vec::new();
        for (id, addr) in &peers {
            let mut c = CoordinatorConfig::new(*id, dir.path().join(id.to_string()));
            c.listen = addr.clone();
            c.formation = Formation::Peers(peers.clone());
            tune(&mut c);
            nodes.push(Coordinator::start(c).await.unwrap());
        }
        Self { nodes, _dir: dir }
    }

    /// The leader's index once every replica follows it.
    pub async fn leader(&self) -> usize {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let leader = self
                .nodes
                .iter()
                .position(|c| c.raft().metrics().borrow().state == ServerState::Leader);
            if let Some(i) = leader {
                let id = self.nodes[i].id();
                if self
                    .nodes
                    .iter()
                    .all(|c| c.raft().metrics().borrow().current_leader == Some(id))
                {
                    return i;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no leader in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every replica has applied `index`.
    pub async fn applied(&self, index: u64) {
        for c in &self.nodes {
            let mut m = c.raft().metrics();
            tokio::time::timeout(
                WITHIN,
                m.wait_for(|m| m.last_applied.is_some_and(|l| l.index >= index)),
            )
            .await
            .expect("every replica applies in time")
            .unwrap();
        }
    }

    pub async fn shutdown(self) {
        for c in self.nodes {
            c.shutdown().await;
        }
    }
}
