//! Named allocator snapshots (`gpumon.snapshot("before_training")`): per
//! job, per name, each rank's statistics at the moment it took the
//! snapshot, so two moments can be compared rank by rank.
//!
//! Bounded: [`MAX_MEMORY_SNAPSHOTS_PER_JOB`] names per job (a new name pushes out
//! the oldest), [`MAX_MEMORY_SNAPSHOT_JOBS`] jobs (the job whose newest snapshot
//! is oldest goes first) and [`MAX_MEMORY_SNAPSHOT_ENTRIES`] rank entries in
//! all (the stalest other job goes first, then this job's oldest other name;
//! a name that alone holds them all takes no more ranks). Taking a snapshot
//! again under the same name replaces that rank's entry.

use std::collections::BTreeMap;

use gpumon_proto::AllocStats;
use serde::{Deserialize, Serialize};

use super::derived_count::DerivedCount;

/// Snapshot names kept per job.
pub const MAX_MEMORY_SNAPSHOTS_PER_JOB: usize = 64;
/// Jobs with snapshots kept.
pub const MAX_MEMORY_SNAPSHOT_JOBS: usize = 1024;
/// Rank entries kept in all jobs and names: one snapshot of every rank of
/// the largest cluster, about 20 MiB.
pub const MAX_MEMORY_SNAPSHOT_ENTRIES: usize = 1 << 17;

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
    /// Rank entries in all.
    #[serde(skip)]
    entries: DerivedCount,
}

fn entries_of(sets: &BTreeMap<String, MemorySnapshotSet>) -> usize {
    sets.values().map(|s| s.ranks.len()).sum()
}

impl MemorySnapshotBook {
    /// Records one rank's snapshot; false when it was not kept (its name
    /// alone holds [`MAX_MEMORY_SNAPSHOT_ENTRIES`] ranks).
    pub fn record(&mut self, t: f64, job: &str, rank: u32, name: &str, stats: &AllocStats) -> bool {
        let mut entries = self.entries();
        if !self.jobs.contains_key(job) && self.jobs.len() >= MAX_MEMORY_SNAPSHOT_JOBS {
            entries -= self.forget_stalest_job_but(job);
        }
        let sets = self.jobs.entry(job.to_owned()).or_default();
        if !sets.contains_key(name) && sets.len() >= MAX_MEMORY_SNAPSHOTS_PER_JOB {
            entries -= forget_oldest_name_but(sets, name);
        }
        let new_rank = !sets.get(name).is_some_and(|s| s.ranks.contains_key(&rank));
        while new_rank && entries >= MAX_MEMORY_SNAPSHOT_ENTRIES {
            let freed = match self.forget_stalest_job_but(job) {
                0 => forget_oldest_name_but(self.jobs.entry(job.to_owned()).or_default(), name),
                n => n,
            };
            if freed == 0 {
                self.entries.set(entries);
                return false;
            }
            entries -= freed;
        }
        let sets = self.jobs.entry(job.to_owned()).or_default();
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
        self.entries.set(entries + usize::from(new_rank));
        true
    }

    /// Forgets the job whose newest snapshot is oldest, other than `keep`;
    /// the rank entries it held.
    fn forget_stalest_job_but(&mut self, keep: &str) -> usize {
        let stalest = self
            .jobs
            .iter()
            .filter(|(j, _)| j.as_str() != keep)
            .map(|(j, sets)| {
                let newest = sets.values().map(|s| s.last_t).fold(f64::MIN, f64::max);
                (newest, j.clone())
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, j)| j);
        stalest
            .and_then(|j| self.jobs.remove(&j))
            .map_or(0, |sets| entries_of(&sets))
    }

    /// Forgets the jobs `keep` says no to.
    pub fn retain_jobs(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let before = self.jobs.len();
        self.jobs.retain(|job, _| keep(job));
        if self.jobs.len() != before {
            self.entries.forget();
        }
    }

    /// Rank entries in all.
    pub fn entries(&self) -> usize {
        self.entries
            .get_or(|| self.jobs.values().map(entries_of).sum())
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

/// Forgets the oldest name of `sets` other than `keep`; the rank entries it held.
fn forget_oldest_name_but(sets: &mut BTreeMap<String, MemorySnapshotSet>, keep: &str) -> usize {
    let oldest = sets
        .iter()
        .filter(|(n, _)| n.as_str() != keep)
        .min_by(|a, b| a.1.first_t.total_cmp(&b.1.first_t))
        .map(|(n, _)| n.clone());
    oldest
        .and_then(|n| sets.remove(&n))
        .map_or(0, |set| set.ranks.len())
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

    #[test]
    fn a_flood_of_ranks_is_bounded_in_all_and_evicts_the_stalest_first() {
        let mut b = MemorySnapshotBook::default();
        assert!(b.record(1.0, "old", 0, "a", &stats(1)));
        // One job's one name floods with ranks: the other job goes first,
        // then the name holds the bound and takes no more.
        let mut kept = 0;
        for rank in 0..(MAX_MEMORY_SNAPSHOT_ENTRIES as u32 + 1000) {
            kept += usize::from(b.record(2.0, "flood", rank, "x", &stats(1)));
        }
        assert_eq!(kept, MAX_MEMORY_SNAPSHOT_ENTRIES);
        assert_eq!(b.entries(), MAX_MEMORY_SNAPSHOT_ENTRIES);
        assert!(b.job("old").is_none(), "the stalest other job went first");
        // Replacing a rank's entry still works at the bound.
        assert!(b.record(3.0, "flood", 7, "x", &stats(9)));
        assert_eq!(b.get("flood", "x").unwrap().ranks[&7].1.allocated, 9);
        // A new name of the same job pushes out the flooded one.
        assert!(b.record(4.0, "flood", 0, "y", &stats(1)));
        assert!(b.get("flood", "x").is_none());
        assert_eq!(b.entries(), 1);
        // The count is derived again after a restore.
        let bytes = postcard::to_allocvec(&b).unwrap();
        let back: MemorySnapshotBook = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.entries(), 1);
    }
}
