//! Named allocator snapshots (`gpumon.snapshot("before_training")`): per
//! job, per name, each rank's statistics at the moment it took the
//! snapshot, so two moments can be compared rank by rank.
//!
//! Bounded: [`MAX_MEMORY_SNAPSHOTS_PER_JOB`] names per job (a new name pushes out
//! the oldest) and [`MAX_MEMORY_SNAPSHOT_JOBS`] jobs (the job whose newest snapshot
//! is oldest goes first). Taking a snapshot again under the same name
//! replaces that rank's entry.

use std::collections::BTreeMap;

use gpumon_proto::AllocStats;
use serde::{Deserialize, Serialize};

/// Snapshot names kept per job.
pub const MAX_MEMORY_SNAPSHOTS_PER_JOB: usize = 64;
/// Jobs with snapshots kept.
pub const MAX_MEMORY_SNAPSHOT_JOBS: usize = 1024;

/// One named snapshot of a job: every rank that took it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshotSet {
    /// When the first rank took it, seconds.
    pub first_t: f64,
    /// When the newest rank took it, seconds.
    pub last_t: f64,
    /// Per rank: when, and the allocator's statistics.
    pub ranks: BTreeMap<u32, (f64, AllocStats)>,
}

/// Snapshots by job, then name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshotBook {
    jobs: BTreeMap<String, BTreeMap<String, MemorySnapshotSet>>,
}

impl MemorySnapshotBook {
    /// Records one rank's snapshot.
    pub fn record(&mut self, t: f64, job: &str, rank: u32, name: &str, stats: &AllocStats) {
        if !self.jobs.contains_key(job) && self.jobs.len() >= MAX_MEMORY_SNAPSHOT_JOBS {
            let stalest = self
                .jobs
                .iter()
                .map(|(j, sets)| {
                    let newest = sets.values().map(|s| s.last_t).fold(f64::MIN, f64::max);
                    (newest, j.clone())
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, j)| j);
            if let Some(j) = stalest {
                self.jobs.remove(&j);
            }
        }
        let sets = self.jobs.entry(job.to_owned()).or_default();
        if !sets.contains_key(name) && sets.len() >= MAX_MEMORY_SNAPSHOTS_PER_JOB {
            let oldest = sets
                .iter()
                .min_by(|a, b| a.1.first_t.total_cmp(&b.1.first_t))
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                sets.remove(&n);
            }
        }
        let set = sets
            .entry(name.to_owned())
            .or_insert_with(|| MemorySnapshotSet {
                first_t: t,
                last_t: t,
                ranks: BTreeMap::new(),
            });
        set.first_t = set.first_t.min(t);
        set.last_t = set.last_t.max(t);
        set.ranks.insert(rank, (t, *stats));
    }

    /// One job's snapshots by name.
    pub fn job(&self, job: &str) -> Option<&BTreeMap<String, MemorySnapshotSet>> {
        self.jobs.get(job)
    }

    /// One named snapshot.
    pub fn get(&self, job: &str, name: &str) -> Option<&MemorySnapshotSet> {
        self.jobs.get(job)?.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(allocated: u64) -> AllocStats {
        AllocStats {
            allocated,
            reserved: allocated * 2,
            ..AllocStats::default()
        }
    }

    #[test]
    fn keeps_each_ranks_latest_entry_and_bounds_the_names() {
        let mut b = MemorySnapshotBook::default();
        b.record(1.0, "j", 0, "start", &stats(1));
        b.record(2.0, "j", 1, "start", &stats(2));
        b.record(3.0, "j", 0, "start", &stats(3));
        let s = b.get("j", "start").unwrap();
        assert_eq!((s.first_t, s.last_t), (1.0, 3.0));
        assert_eq!(s.ranks[&0].1.allocated, 3);
        assert_eq!(s.ranks[&1].1.allocated, 2);
        for i in 0..MAX_MEMORY_SNAPSHOTS_PER_JOB {
            b.record(10.0 + i as f64, "j", 0, &format!("s{i}"), &stats(1));
        }
        assert_eq!(b.job("j").unwrap().len(), MAX_MEMORY_SNAPSHOTS_PER_JOB);
        assert!(b.get("j", "start").is_none(), "the oldest name went first");
    }
}
