//! Each node's host RAM: the newest [`HostMemory`] its agent pushed (a
//! protocol version 2 push), checked, kept per node and forgotten with the
//! node's agents. The engine raises the host's memory levels from the same
//! readings (`engine::host_level`).

use gpumon_proto::{HostMemory, PushBatch};
use thiserror::Error;

use super::Cluster;
use crate::limits::MAX_DEVICE_BYTES;

/// Why a host memory reading was skipped.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvalidHost {
    /// No RAM, or more than anyone has.
    #[error("host total_bytes {0} is zero or above 1 PiB")]
    BadTotal(u64),
    /// More in use than there is.
    #[error("host used_max_bytes {used} is above total_bytes {total}")]
    BadUsed {
        /// In use.
        used: u64,
        /// Total.
        total: u64,
    },
}

/// Checks one reading's sizes (its time is checked against the clock on
/// apply, and against the leader's clock before it is proposed).
pub fn check_host(h: &HostMemory) -> Result<(), InvalidHost> {
    if h.total_bytes == 0 || h.total_bytes > MAX_DEVICE_BYTES {
        return Err(InvalidHost::BadTotal(h.total_bytes));
    }
    if h.used_max_bytes > h.total_bytes {
        return Err(InvalidHost::BadUsed {
            used: h.used_max_bytes,
            total: h.total_bytes,
        });
    }
    Ok(())
}

impl Cluster {
    /// Keeps `host` as the newest host memory of the batch's node, for a
    /// batch just applied (not a duplicate). Skipped and counted with the
    /// skipped windows: an invalid reading, one from a time past the
    /// clock's leap bound, one older than the node's newest, or one from an
    /// agent the view does not track. An applied one moves the agent's
    /// last seen time and the clock as a window's end does. Returns whether
    /// it was applied (and so is for the engine).
    pub fn apply_host(&mut self, batch: &PushBatch, host: &HostMemory) -> bool {
        let tracked = self
            .agents
            .get(&batch.agent_id)
            .is_some_and(|a| a.node == batch.node);
        let newer = self
            .hosts
            .get(&batch.node)
            .is_none_or(|kept| host.t_ms >= kept.t_ms);
        if !tracked || !newer || host.t_ms > self.leap_bound() || check_host(host).is_err() {
            self.counters.windows_skipped += 1;
            return false;
        }
        self.hosts.insert(batch.node.clone(), *host);
        if let Some(agent) = self.agents.get_mut(&batch.agent_id) {
            agent.last_seen_ms = agent.last_seen_ms.max(host.t_ms);
        }
        self.now_ms = self.now_ms.max(host.t_ms);
        true
    }

    /// The newest host memory of `node`, when its agent sent one.
    pub fn host(&self, node: &str) -> Option<&HostMemory> {
        self.hosts.get(node)
    }

    /// Forgets `node`'s host memory when no agent is on it any more (its
    /// agent said it is elsewhere now): host readings stay as many as the
    /// agents' nodes, however often an agent changes its node between two
    /// expiries. A scan of the agents, only when an agent's node changes.
    pub(super) fn forget_host_without_agent(&mut self, node: &str) {
        if self.hosts.contains_key(node) && !self.agents.values().any(|a| a.node == node) {
            self.hosts.remove(node);
        }
    }

    /// Forgets the host memory of nodes without an agent.
    pub(super) fn expire_hosts(&mut self) {
        let agents = &self.agents;
        self.hosts
            .retain(|node, _| agents.values().any(|a| &a.node == node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Limits;
    use gpumon_proto::Hello;

    const T0: u64 = 1_700_000_000_000;

    fn batch(seq: u64) -> PushBatch {
        PushBatch {
            agent_id: "a".into(),
            incarnation: 1,
            seq,
            node: "n".into(),
            dropped_batches: 0,
            windows: vec![],
            hook: vec![],
            acks: vec![],
        }
    }

    fn host(t_ms: u64, used: u64, total: u64) -> HostMemory {
        HostMemory {
            t_ms,
            total_bytes: total,
            used_max_bytes: used,
        }
    }

    fn state() -> Cluster {
        let mut s = Cluster::new(Limits::default());
        s.apply_hello(&Hello {
            agent_id: "a".into(),
            incarnation: 1,
            node: "n".into(),
            agent_version: "t".into(),
            source: "none".into(),
            gpus: vec![],
        });
        s
    }

    #[test]
    fn readings_are_checked() {
        assert!(check_host(&host(T0, 5, 10)).is_ok());
        assert!(check_host(&host(T0, 10, 10)).is_ok());
        assert_eq!(check_host(&host(T0, 0, 0)), Err(InvalidHost::BadTotal(0)));
        assert_eq!(
            check_host(&host(T0, 1, MAX_DEVICE_BYTES + 1)),
            Err(InvalidHost::BadTotal(MAX_DEVICE_BYTES + 1))
        );
        assert_eq!(
            check_host(&host(T0, 11, 10)),
            Err(InvalidHost::BadUsed {
                used: 11,
                total: 10
            })
        );
    }

    #[test]
    fn the_newest_valid_reading_is_kept_and_the_rest_counted() {
        let mut s = state();
        assert!(s.apply_host(&batch(1), &host(T0, 6, 10)));
        assert_eq!(s.host("n"), Some(&host(T0, 6, 10)));
        assert_eq!(s.now_ms(), T0, "a reading moves the clock");
        let view = s.cluster_view();
        assert_eq!(view.agents[0].last_seen_ms, T0, "and the agent's last seen");

        let skipped = [
            host(T0 + 1, 11, 10),
            host(T0 + 1, 1, 0),
            host(T0 - 1, 1, 10),
            host(T0 + crate::limits::MAX_CLOCK_LEAP_MS + 1, 1, 10),
        ];
        for h in skipped {
            assert!(!s.apply_host(&batch(2), &h), "{h:?}");
        }
        let mut stranger = batch(3);
        stranger.agent_id = "b".into();
        assert!(!s.apply_host(&stranger, &host(T0 + 2, 1, 10)), "no agent b");
        assert_eq!(s.counters().windows_skipped, 5);
        assert_eq!(s.host("n"), Some(&host(T0, 6, 10)));
        assert!(s.apply_host(&batch(4), &host(T0 + 5, 7, 10)));
        assert_eq!(s.host("n").map(|h| h.used_max_bytes), Some(7));
    }

    #[test]
    fn the_nodes_view_shows_host_memory_and_it_expires_with_the_agent() {
        let mut s = state();
        s.apply_host(&batch(1), &host(T0, 6, 10));
        let nodes = s.nodes_view().nodes;
        assert_eq!(nodes.len(), 1, "a node without GPUs shows with its host");
        assert_eq!(
            (nodes[0].host_used_bytes, nodes[0].host_total_bytes),
            (Some(6), Some(10))
        );
        assert!(nodes[0].gpus.is_empty());
        s.now_ms = T0 + 600_000;
        s.expire(60_000, &mut Vec::new());
        assert_eq!(s.host("n"), None);
        assert!(s.nodes_view().nodes.is_empty());
    }
}
