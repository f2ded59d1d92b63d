//! Two named allocator snapshots compared rank by rank: each statistic in
//! `b` minus `a`. The coordinator's API, `gpumon snapshots diff` and a
//! profile report's snapshots all compare through here.

use gpumon_proto::api::{
    MemorySnapshotComparison, NamedMemorySnapshot, RankMemoryComparison, RankMemorySnapshot,
    StatsDelta,
};
use gpumon_proto::AllocStats;

use super::MemorySnapshotSet;

/// `b - a` for each statistic both carry.
pub fn stats_delta(a: &AllocStats, b: &AllocStats) -> StatsDelta {
    let d = |x: Option<u64>, y: Option<u64>| Some(i128::from(y?) - i128::from(x?));
    StatsDelta {
        allocated: i128::from(b.allocated) - i128::from(a.allocated),
        reserved: i128::from(b.reserved) - i128::from(a.reserved),
        active: d(a.active, b.active),
        inactive_split: d(a.inactive_split, b.inactive_split),
        peak_allocated: d(a.peak_allocated, b.peak_allocated),
        peak_reserved: d(a.peak_reserved, b.peak_reserved),
        alloc_retries: d(a.alloc_retries, b.alloc_retries),
        ooms: d(a.ooms, b.ooms),
    }
}

/// A kept snapshot in the API's form.
pub fn named_snapshot(name: &str, set: &MemorySnapshotSet) -> NamedMemorySnapshot {
    NamedMemorySnapshot {
        name: name.to_owned(),
        first_t: set.first_t,
        last_t: set.last_t,
        ranks: set
            .ranks
            .iter()
            .map(|(&rank, (t, stats))| RankMemorySnapshot {
                rank,
                t: *t,
                stats: *stats,
            })
            .collect(),
    }
}

/// Every rank of either snapshot, in rank order, with `b - a` where it took
/// both.
pub fn compare_snapshots(
    job: &str,
    a: &NamedMemorySnapshot,
    b: &NamedMemorySnapshot,
) -> MemorySnapshotComparison {
    let find = |s: &NamedMemorySnapshot, rank: u32| {
        s.ranks.iter().find(|r| r.rank == rank).map(|r| r.stats)
    };
    let mut ranks: Vec<u32> = a.ranks.iter().chain(&b.ranks).map(|r| r.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    MemorySnapshotComparison {
        job: job.to_owned(),
        a: a.name.clone(),
        b: b.name.clone(),
        ranks: ranks
            .into_iter()
            .map(|rank| {
                let (ea, eb) = (find(a, rank), find(b, rank));
                RankMemoryComparison {
                    rank,
                    a: ea,
                    b: eb,
                    delta: ea.zip(eb).map(|(x, y)| stats_delta(&x, &y)),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(allocated: u64, reserved: u64, retries: Option<u64>) -> AllocStats {
        AllocStats {
            allocated,
            reserved,
            active: None,
            inactive_split: None,
            peak_allocated: None,
            peak_reserved: None,
            alloc_retries: retries,
            ooms: None,
        }
    }

    fn snap(name: &str, ranks: &[(u32, AllocStats)]) -> NamedMemorySnapshot {
        NamedMemorySnapshot {
            name: name.into(),
            first_t: 1.0,
            last_t: 2.0,
            ranks: ranks
                .iter()
                .map(|&(rank, stats)| RankMemorySnapshot {
                    rank,
                    t: 1.0,
                    stats,
                })
                .collect(),
        }
    }

    #[test]
    fn ranks_of_either_side_are_compared_and_growth_can_be_negative() {
        let a = snap(
            "a",
            &[(0, stats(100, 200, Some(1))), (2, stats(5, 5, None))],
        );
        let b = snap("b", &[(1, stats(7, 7, None)), (0, stats(40, 300, Some(4)))]);
        let c = compare_snapshots("job", &a, &b);
        assert_eq!((c.a.as_str(), c.b.as_str()), ("a", "b"));
        assert_eq!(
            c.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        let d = c.ranks[0].delta.unwrap();
        assert_eq!(
            (d.allocated, d.reserved, d.alloc_retries, d.active),
            (-60, 100, Some(3), None)
        );
        assert!(c.ranks[1].delta.is_none() && c.ranks[1].a.is_none());
        assert!(c.ranks[2].delta.is_none() && c.ranks[2].b.is_none());
    }
}
