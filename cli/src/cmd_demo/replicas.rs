//! The demo's three coordinator replicas, in this process: started with one
//! `--peers` list, each stoppable (as a crash would: no hand-over) and
//! restartable from its own data directory.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpumon_coordinator::notify::NotifyConfig;
use gpumon_coordinator::{Coordinator, CoordinatorConfig, Formation, StartError};

/// Replicas in the demo cluster.
pub const REPLICAS: u64 = 3;
/// Attempts to reopen a stopped replica's files (released a moment after it stops).
const REOPEN_ATTEMPTS: u32 = 50;

/// The replicas: a slot per Raft id, empty while that replica is down.
pub struct Replicas {
    configs: BTreeMap<u64, CoordinatorConfig>,
    running: BTreeMap<u64, Coordinator>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Loopback addresses for the replicas: `first` (or 127.0.0.1:7070) and the
/// two ports after it when free, else free ports the system picks.
pub fn pick_addrs(first: Option<&str>) -> Result<Vec<String>, String> {
    let wanted = first.unwrap_or("127.0.0.1:7070");
    let (host, port) = wanted
        .rsplit_once(':')
        .ok_or_else(|| format!("--listen {wanted:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--listen {wanted:?}: the port is not a number"))?;
    let mut addrs = Vec::new();
    for i in 0..REPLICAS as u16 {
        let preferred = (port != 0)
            .then(|| port.checked_add(i))
            .flatten()
            .map(|p| format!("{host}:{p}"));
        let addr = match preferred {
            Some(a) if TcpListener::bind(&a).is_ok() => a,
            Some(a) if first.is_some() && i == 0 => {
                return Err(format!("cannot listen on {a}: the address is in use"))
            }
            _ => {
                let l = TcpListener::bind(format!("{host}:0"))
                    .map_err(|e| format!("cannot listen on {host}: {e}"))?;
                l.local_addr().map_err(|e| e.to_string())?.to_string()
            }
        };
        addrs.push(addr);
    }
    Ok(addrs)
}

impl Replicas {
    /// Starts every replica, each with its own directory under `data_dir`
    /// and the same notification receivers (only the leader sends).
    pub async fn start(
        addrs: &[String],
        data_dir: &Path,
        notify: &NotifyConfig,
    ) -> Result<Self, StartError> {
        let peers: BTreeMap<u64, String> = (1..).zip(addrs.iter().cloned()).collect();
        let mut configs = BTreeMap::new();
        for (id, addr) in &peers {
            let mut config = CoordinatorConfig::new(*id, replica_dir(data_dir, *id));
            config.listen = addr.clone();
            config.formation = Formation::Peers(peers.clone());
            // Tuned so that the planted problems alert while people watch.
            config.engine = super::engine::demo_config();
            config.notify = notify.clone();
            configs.insert(*id, config);
        }
        let mut replicas = Self {
            configs,
            running: BTreeMap::new(),
        };
        for id in peers.keys() {
            replicas.restart(*id).await?;
        }
        Ok(replicas)
    }

    /// A running replica.
    pub fn get(&self, id: u64) -> Option<&Coordinator> {
        self.running.get(&id)
    }

    /// Every running replica.
    pub fn running(&self) -> impl Iterator<Item = &Coordinator> {
        self.running.values()
    }

    /// Base URLs of every replica, running or not.
    pub fn urls(&self) -> Vec<String> {
        self.configs
            .values()
            .map(|c| format!("http://{}", c.listen))
            .collect()
    }

    /// The leader as the running replicas see it, once one is elected.
    pub fn leader(&self) -> Option<u64> {
        self.running
            .values()
            .filter_map(|c| c.raft().metrics().borrow().current_leader)
            .find(|l| self.running.contains_key(l))
    }

    /// Stops replica `id` without handing leadership over.
    pub async fn stop(&mut self, id: u64) {
        if let Some(c) = self.running.remove(&id) {
            c.shutdown().await;
        }
    }

    /// Starts replica `id` from its data directory.
    pub async fn restart(&mut self, id: u64) -> Result<(), StartError> {
        let Some(config) = self.configs.get(&id).cloned() else {
            return Ok(());
        };
        let mut attempt = 0;
        let coordinator = loop {
            match Coordinator::start(config.clone()).await {
                Ok(c) => break c,
                // The stopped instance's log file or port is released a moment later.
                Err(StartError::Log(_) | StartError::Listen { .. })
                    if attempt < REOPEN_ATTEMPTS =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        self.running.insert(id, coordinator);
        Ok(())
    }

    /// Stops every replica.
    pub async fn shutdown(mut self) {
        let ids: Vec<u64> = self.running.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

fn replica_dir(data_dir: &Path, id: u64) -> PathBuf {
    data_dir.join(format!("replica-{id}"))
}
