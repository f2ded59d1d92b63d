//! Peer groups: which ranks of a step are compared with each other.
//!
//! Ranks doing the same work are peers: every rank of a DDP or FSDP job,
//! the data-parallel replicas of one pipeline stage. Ranks of different
//! stages do different work, and comparing them would name a whole stage a
//! straggler. The hook reports each rank's *group*: the lowest global rank
//! among those it shares a collective with and exchanges no point-to-point
//! data with (a stage's replicas share the gradient all-reduce; adjacent
//! stages exchange activations). A rank with no group reports none, which
//! reads as group 0: a job that reports no groups is one group.
//!
//! Local answers can disagree inside a stage (with tensor and data
//! parallelism in one stage, one rank's union of groups can miss the
//! stage's lowest rank), so the groups are the connected components of
//! "rank -- its reported group", found with a union-find in
//! O(n log n) per step.

use std::collections::BTreeMap;

use super::Row;

/// The rows of one step, split into peer groups: row indices per group,
/// groups in order of their lowest rank. One group when every row names
/// the same one (the common case, without building anything).
pub(super) fn peer_groups(rows: &[Row]) -> Vec<Vec<usize>> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let key = |r: &Row| r.group.min(r.rank);
    if rows.iter().all(|r| key(r) == key(first)) {
        return vec![(0..rows.len()).collect()];
    }
    let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
    for r in rows {
        let (a, b) = (root(&mut parent, r.rank), root(&mut parent, key(r)));
        if a != b {
            // The lower rank roots the union, so a group's root is its lowest rank.
            parent.insert(a.max(b), a.min(b));
        }
    }
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        groups.entry(root(&mut parent, r.rank)).or_default().push(i);
    }
    groups.into_values().collect()
}

/// The root of `x`, halving the path on the way.
fn root(parent: &mut BTreeMap<u32, u32>, mut x: u32) -> u32 {
    loop {
        let p = *parent.entry(x).or_insert(x);
        if p == x {
            return x;
        }
        let grand = *parent.entry(p).or_insert(p);
        parent.insert(x, grand);
        x = grand;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(groups: &[(u32, u32)]) -> Vec<Row> {
        groups
            .iter()
            .map(|&(rank, group)| Row {
                rank,
                group,
                t: 0.0,
                duration_ms: 1.0,
                sections: [f64::NAN; super::super::MAX_SECTIONS],
                waits: [f64::NAN; super::super::MAX_WAIT_GROUPS],
            })
            .collect()
    }

    fn ranks(rows: &[Row], groups: Vec<Vec<usize>>) -> Vec<Vec<u32>> {
        groups
            .into_iter()
            .map(|g| g.into_iter().map(|i| rows[i].rank).collect())
            .collect()
    }

    #[test]
    fn a_job_without_groups_is_one_group() {
        let r = rows(&[(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(ranks(&r, peer_groups(&r)), vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn two_stages_of_two_replicas_are_two_groups() {
        let r = rows(&[(2, 2), (0, 0), (3, 2), (1, 0)]);
        assert_eq!(ranks(&r, peer_groups(&r)), vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn disagreeing_answers_inside_a_stage_join_up() {
        // Tensor x data parallel inside one stage of ranks 0-3: rank 3 saw
        // ranks 1, 2 and 3 only; ranks 4-7 are the next stage.
        let r = rows(&[
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 1),
            (4, 4),
            (5, 4),
            (6, 4),
            (7, 5),
        ]);
        assert_eq!(
            ranks(&r, peer_groups(&r)),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
    }

    #[test]
    fn a_group_above_the_rank_is_read_as_the_rank() {
        // A rank cannot be grouped above itself; a claim of it keeps it alone.
        let r = rows(&[(0, 0), (1, 0), (2, 0), (3, 7)]);
        assert_eq!(ranks(&r, peer_groups(&r)), vec![vec![0, 1, 2], vec![3]]);
    }
}
