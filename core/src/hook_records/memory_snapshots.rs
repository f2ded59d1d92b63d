//! Named allocator snapshots (`gpumon.snapshot("before_training")`): per
//! job, per name, each rank's statistics at the moment it took the
//! snapshot, so two moments can be compared rank by rank.
//!
//! Bounded by the cluster's configured limits ([`SnapshotBounds`], from the
//! engine's configuration, which every replica and replay share) and by
//! constants above them: [`MAX_MEMORY_SNAPSHOTS_PER_JOB`] names per job (a
//! new name pushes out the oldest); `max_jobs` jobs, at most
//! [`MAX_MEMORY_SNAPSHOT_JOBS`] (the job whose newest snapshot is oldest
//! goes first); `max_ranks` ranks in one name (a job has no more; one
//! past it is refused); and `max_ranks` x [`MAX_MEMORY_SNAPSHOTS_PER_JOB`]
//! rank entries in all, at most [`MAX_MEMORY_SNAPSHOT_ENTRIES`] (the
//! stalest other job goes first, then this job's oldest other name; a name
//! that alone holds them all takes no more ranks). Taking a snapshot again
//! under the same name replaces that rank's entry.
//!
//! A snapshot is kept for a job the engine does not track yet: a script's
//! first `gpumon.snapshot` often comes before its rank's first allocator
//! report. Such jobs count against the same bounds, and go with the
//! engine's jobs when it forgets one (`transition::apply`).

use std::collections::BTreeMap;

use gpumon_proto::AllocStats;
use serde::{Deserialize, Serialize};

use crate::derived_count::DerivedCount;
use crate::not_state::NotState;

/// Snapshot names kept per job.
pub const MAX_MEMORY_SNAPSHOTS_PER_JOB: usize = 64;
/// Jobs with snapshots kept.
pub const MAX_MEMORY_SNAPSHOT_JOBS: usize = 1024;
/// Rank entries kept in all jobs and names: one snapshot of every rank of
/// the largest cluster, about 20 MiB.
pub const MAX_MEMORY_SNAPSHOT_ENTRIES: usize = 1 << 17;

/// The bounds a [`MemorySnapshotBook`] keeps, from the configured limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBounds {
    /// Jobs with snapshots.
    pub jobs: usize,
    /// Ranks in one named snapshot.
    pub ranks_per_name: usize,
    /// Rank entries in all jobs and names.
    pub entries: usize,
}

impl SnapshotBounds {
    /// The bounds for an engine's `max_jobs` and `max_ranks_per_job` (the
    /// cluster's `[limits] max_jobs` and `max_ranks`).
    pub fn for_limits(max_jobs: usize, max_ranks: usize) -> Self {
        Self {
            jobs: max_jobs.clamp(1, MAX_MEMORY_SNAPSHOT_JOBS),
            ranks_per_name: max_ranks.clamp(1, MAX_MEMORY_SNAPSHOT_ENTRIES),
            entries: max_ranks
                .saturating_mul(MAX_MEMORY_SNAPSHOTS_PER_JOB)
                .clamp(1, MAX_MEMORY_SNAPSHOT_ENTRIES),
        }
    }
}

impl Default for SnapshotBounds {
    /// The constants alone.
    fn default() -> Self {
        Self::for_limits(MAX_MEMORY_SNAPSHOT_JOBS, MAX_MEMORY_SNAPSHOT_ENTRIES)
    }
}

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
    entries: NotState<DerivedCount>,
}

fn entries_of(sets: &BTreeMap<String, MemorySnapshotSet>) -> usize {
    sets.values().map(|s| s.ranks.len()).sum()
}

impl MemorySnapshotBook {
    /// Records one rank's snapshot within `bounds`; false when it was not
    /// kept (its name holds `ranks_per_name` ranks, or alone holds
    /// `entries`).
    pub fn record(
        &mut self,
        bounds: SnapshotBounds,
        t: f64,
        job: &str,
        rank: u32,
        name: &str,
        stats: &AllocStats,
    ) -> bool {
        let new_rank = !self
            .get(job, name)
            .is_some_and(|s| s.ranks.contains_key(&rank));
        if new_rank
            && self
                .get(job, name)
                .is_some_and(|s| s.ranks.len() >= bounds.ranks_per_name)
        {
            return false;
        }
        let mut entries = self.entries();
        while !self.jobs.contains_key(job) && self.jobs.len() >= bounds.jobs {
            match self.forget_stalest_job_but(job) {
                Some(freed) => entries -= freed,
                None => break,
            }
        }
        let sets = self.jobs.entry(job.to_owned()).or_default();
        if !sets.contains_key(name) && sets.len() >= MAX_MEMORY_SNAPSHOTS_PER_JOB {
            entries -= forget_oldest_name_but(sets, name);
        }
        while new_rank && entries >= bounds.entries {
            // Another job first (an empty one frees nothing: go on), then
            // this job's oldest other name.
            let freed = match self.forget_stalest_job_but(job) {
                Some(n) => n,
                None => {
                    match forget_oldest_name_but(self.jobs.entry(job.to_owned()).or_default(), name)
                    {
                        0 => {
                            self.entries.set(entries);
                            return false;
                        }
                        n => n,
                    }
                }
            };
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
    /// the rank entries it held, `None` when there is no other job.
    fn forget_stalest_job_but(&mut self, keep: &str) -> Option<usize> {
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
            .map(|sets| entries_of(&sets))
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
        b.record(SnapshotBounds::default(), 1.0, "j", 0, "start", &stats(1));
        b.record(SnapshotBounds::default(), 2.0, "j", 1, "start", &stats(2));
        b.record(SnapshotBounds::default(), 3.0, "j", 0, "start", &stats(3));
        let s = b.get("j", "start").unwrap();
        assert_eq!((s.first_t, s.last_t), (1.0, 3.0));
        assert_eq!(s.ranks[&0].1.allocated, 3);
        assert_eq!(s.ranks[&1].1.allocated, 2);
        for i in 0..MAX_MEMORY_SNAPSHOTS_PER_JOB {
            b.record(
                SnapshotBounds::default(),
                10.0 + i as f64,
                "j",
                0,
                &format!("s{i}"),
                &stats(1),
            );
        }
        assert_eq!(b.job("j").unwrap().len(), MAX_MEMORY_SNAPSHOTS_PER_JOB);
        assert!(b.get("j", "start").is_none(), "the oldest name went first");
    }

    #[test]
    fn a_flood_of_ranks_is_bounded_in_all_and_evicts_the_stalest_first() {
        let mut b = MemorySnapshotBook::default();
        assert!(b.record(SnapshotBounds::default(), 1.0, "old", 0, "a", &stats(1)));
        // One job's one name floods with ranks: the other job goes first,
        // then the name holds the bound and takes no more.
        let mut kept = 0;
        for rank in 0..(MAX_MEMORY_SNAPSHOT_ENTRIES as u32 + 1000) {
            kept += usize::from(b.record(
                SnapshotBounds::default(),
                2.0,
                "flood",
                rank,
                "x",
                &stats(1),
            ));
        }
        assert_eq!(kept, MAX_MEMORY_SNAPSHOT_ENTRIES);
        assert_eq!(b.entries(), MAX_MEMORY_SNAPSHOT_ENTRIES);
        assert!(b.job("old").is_none(), "the stalest other job went first");
        // Replacing a rank's entry still works at the bound.
        assert!(b.record(SnapshotBounds::default(), 3.0, "flood", 7, "x", &stats(9)));
        assert_eq!(b.get("flood", "x").unwrap().ranks[&7].1.allocated, 9);
        // A new name of the same job pushes out the flooded one.
        assert!(b.record(SnapshotBounds::default(), 4.0, "flood", 0, "y", &stats(1)));
        assert!(b.get("flood", "x").is_none());
        assert_eq!(b.entries(), 1);
        // The count is derived again after a restore.
        let bytes = postcard::to_allocvec(&b).unwrap();
        let back: MemorySnapshotBook = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.entries(), 1);
    }
}
