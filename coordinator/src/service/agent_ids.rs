//! Two agents under one id, noticed on the leader.
//!
//! Each agent process has an incarnation; a restart makes a new one, and an
//! agent never goes back to an older one. A push of an older incarnation
//! that the cluster still remembers, after a newer one joined, therefore
//! means two live processes share the agent id (two nodes with one host
//! name, `--agent-id` copied between nodes): their data would merge into
//! one agent. The push is still applied (it is real data), but the
//! conflict is counted (`gpumon_ingest_agent_id_conflicts_total`) and
//! logged, at most once a minute per agent id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Least time between two log lines about one agent id.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Agent ids whose last log line is remembered; past it the memory starts over.
const MAX_REMEMBERED: usize = 1024;

/// The conflicts seen by one replica; clones share them.
#[derive(Debug, Clone, Default)]
pub struct AgentIdConflicts {
    count: Arc<AtomicU64>,
    logged: Arc<Mutex<HashMap<String, Instant>>>,
}

impl AgentIdConflicts {
    /// Looks at a push of `incarnation` of `agent_id`, whose current
    /// incarnation is `current` and which remembers `incarnation` (an
    /// older one) when `remembered`; true when that is a conflict.
    pub fn check(
        &self,
        agent_id: &str,
        current: Option<u64>,
        incarnation: u64,
        remembered: bool,
    ) -> bool {
        let conflict = remembered && current.is_some_and(|c| c != incarnation);
        if !conflict {
            return false;
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.len() >= MAX_REMEMBERED && !logged.contains_key(agent_id) {
            logged.clear();
        }
        let due = logged
            .get(agent_id)
            .is_none_or(|last| now.duration_since(*last) >= LOG_EVERY);
        if due {
            logged.insert(agent_id.to_owned(), now);
            tracing::warn!(
                agent = agent_id,
                incarnation,
                current = current.unwrap_or_default(),
                "two agents push under one agent id (same host name or --agent-id on two nodes?); their data merges: give each its own --agent-id"
            );
        }
        true
    }

    /// Conflicting pushes seen so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_older_remembered_incarnation_is_a_conflict() {
        let c = AgentIdConflicts::default();
        assert!(!c.check("node-a", None, 7, false), "a new agent");
        assert!(
            !c.check("node-a", Some(7), 7, true),
            "the current incarnation"
        );
        assert!(
            !c.check("node-a", Some(7), 9, false),
            "a restart: a new incarnation"
        );
        assert!(
            c.check("node-a", Some(9), 7, true),
            "the old one pushes again"
        );
        assert!(c.check("node-a", Some(9), 7, true));
        assert_eq!(c.count(), 2);
    }
}
