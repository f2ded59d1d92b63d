//! Bounded state that stays useful: what has gone quiet expires, and what
//! would not fit is refused before it is proposed.
//!
//! - [`Cluster::expire`] (the transition's `Expire` command, which
//!   the leader proposes on a timer): an agent not heard from for
//!   `stale_after_ms` of data time is forgotten, with its GPUs; a GPU with
//!   no window for that long is forgotten and its live ranks end; a job
//!   whose ranks all ended that long ago is forgotten; a node's host memory
//!   is forgotten with its last agent. Time is the state's
//!   own clock, so every replica expires the same entries.
//! - [`Cluster::admits`] (the leader, before proposing): a push or
//!   hello that would add agents, GPUs or live ranks past the limits is
//!   refused with the limit it would break, rather than committed and then
//!   skipped.

use std::collections::BTreeSet;

use gpumon_proto::GpuWindow;

use super::{Cluster, ClusterEvent, RankKey};

/// What one expiry forgot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Agents forgotten.
    pub agents: usize,
    /// GPUs forgotten.
    pub gpus: usize,
    /// Ranks forgotten (their jobs ended long ago).
    pub ranks: usize,
}

impl Cluster {
    /// Forgets what has been quiet for `stale_after_ms` of data time.
    pub fn expire(&mut self, stale_after_ms: u64, events: &mut Vec<ClusterEvent>) -> Expired {
        let mut out = Expired::default();
        if self.now_ms == 0 || stale_after_ms == 0 {
            return out;
        }
        let cutoff = self.now_ms.saturating_sub(stale_after_ms);
        let before = self.agents.len();
        self.agents.retain(|_, a| a.last_seen_ms >= cutoff);
        out.agents = before - self.agents.len();
        self.expire_hosts();
        let live_nodes: BTreeSet<String> = self.agents.values().map(|a| a.node.clone()).collect();
        let stale_gpus: Vec<String> = self
            .gpus
            .iter()
            .filter(|(_, g)| g.last_end_ms < cutoff || !live_nodes.contains(&g.node))
            .map(|(uuid, _)| uuid.clone())
            .collect();
        for uuid in stale_gpus {
            let Some(gpu) = self.gpus.remove(&uuid) else {
                continue;
            };
            for key in &gpu.live_ranks {
                self.end_rank(key, &uuid, self.now_ms, events);
            }
            out.gpus += 1;
        }
        let long_ended: Vec<String> = self
            .ended_jobs()
            .into_iter()
            .filter(|(ended_ms, _)| *ended_ms < cutoff)
            .map(|(_, job)| job)
            .collect();
        for job in long_ended {
            let before = self.ranks.len();
            self.forget_job(&job);
            out.ranks += before - self.ranks.len();
        }
        out
    }

    /// Whether a hello fits the limits (its agent and GPUs).
    pub fn admits_hello(&self, hello: &gpumon_proto::Hello) -> Result<(), OverLimit> {
        self.admits_agent(&hello.agent_id)?;
        self.admits_gpus(hello.gpus.iter().map(|g| g.uuid.as_str()))
    }

    fn admits_agent(&self, agent_id: &str) -> Result<(), OverLimit> {
        if !self.agents.contains_key(agent_id) && self.agents.len() >= self.limits.max_agents {
            return Err(OverLimit::Agents {
                max: self.limits.max_agents,
            });
        }
        Ok(())
    }

    fn admits_gpus<'a>(&self, uuids: impl Iterator<Item = &'a str>) -> Result<(), OverLimit> {
        let new: BTreeSet<&str> = uuids.filter(|u| !self.gpus.contains_key(*u)).collect();
        if self.gpus.len() + new.len() > self.limits.max_gpus {
            return Err(OverLimit::Gpus {
                tracked: self.gpus.len(),
                max: self.limits.max_gpus,
                new: new.len(),
            });
        }
        Ok(())
    }

    /// Whether a push by `agent_id` with `windows` fits the limits; the
    /// error names the limit it would break.
    pub fn admits(&self, agent_id: &str, windows: &[GpuWindow]) -> Result<(), OverLimit> {
        let limits = self.limits;
        self.admits_agent(agent_id)?;
        self.admits_gpus(windows.iter().map(|w| w.gpu.uuid.as_str()))?;
        let new_ranks: BTreeSet<RankKey> = windows
            .iter()
            .flat_map(|w| &w.procs)
            .filter_map(|p| p.rank.as_ref())
            .map(|r| (r.job.clone(), r.rank))
            .filter(|key| !self.ranks.contains_key(key))
            .collect();
        if new_ranks.is_empty() {
            return Ok(());
        }
        // Counted only for a push that brings new ranks: a walk over every
        // rank on each push was a fifth of a busy leader's time.
        let live = self.ranks.values().filter(|r| r.ended_ms.is_none()).count();
        if live + new_ranks.len() > limits.max_ranks {
            return Err(OverLimit::Ranks {
                live,
                max: limits.max_ranks,
                new: new_ranks.len(),
            });
        }
        Ok(())
    }
}

/// The limit a hello or push would break.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// A new agent, with the agents at their limit.
    #[error("the cluster tracks {max} agents, its limit; a new agent waits until one expires")]
    Agents {
        /// The most agents tracked.
        max: usize,
    },
    /// New GPUs past the limit.
    #[error(
        "the cluster tracks {tracked} of its {max} GPUs; {new} new ones wait until stale ones expire"
    )]
    Gpus {
        /// GPUs tracked now.
        tracked: usize,
        /// The most GPUs tracked.
        max: usize,
        /// New GPUs the message brings.
        new: usize,
    },
    /// New live ranks past the limit.
    #[error(
        "the cluster tracks {live} live ranks of its {max}; {new} new ones wait until jobs end"
    )]
    Ranks {
        /// Live ranks now.
        live: usize,
        /// The most live ranks.
        max: usize,
        /// New ranks the push brings.
        new: usize,
    },
}
