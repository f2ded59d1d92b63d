//! Choosing the ranks worth a full history and thinning histories.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use gpumon_proto::api::{HistoryPoint, RankFlag, RankLine};

/// The `k` worst ranks of `lines`: those flagged [`RankFlag::Alert`] first,
/// then by used share (used / capacity) highest first, then by rank.
pub fn worst_ranks(lines: &[RankLine], k: usize) -> BTreeSet<u32> {
    let mut order: Vec<(bool, u64, u32)> = lines
        .iter()
        .map(|l| {
            let alert = l.flags.contains(&RankFlag::Alert);
            (alert, share_key(l.used_bytes, l.total_bytes), l.rank)
        })
        .collect();
    order.sort_by_key(|&(alert, share, rank)| (Reverse(alert), Reverse(share), rank));
    order.into_iter().take(k).map(|(_, _, rank)| rank).collect()
}

/// Used share in millionths, for ordering without floats; 0 without a
/// known capacity.
fn share_key(used: u64, total: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    (u128::from(used) * 1_000_000 / u128::from(total)) as u64
}

/// At most `n` points of `history` (oldest first): the points are cut into
/// `n` runs of equal count and each run gives the point with its highest
/// `max`, so peaks survive. Fewer than `n` points are kept as they are.
pub fn downsample_max(history: &[HistoryPoint], n: usize) -> Vec<HistoryPoint> {
    if n == 0 {
        return Vec::new();
    }
    if history.len() <= n {
        return history.to_vec();
    }
    (0..n)
        .filter_map(|b| {
            let start = b * history.len() / n;
            let end = (b + 1) * history.len() / n;
            history[start..end]
                .iter()
                .copied()
                .max_by_key(|p| (p.max, Reverse(p.t_ms)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rank: u32, used: u64, alert: bool) -> RankLine {
        RankLine {
            rank,
            node: "n".into(),
            gpu: 0,
            used_bytes: used,
            total_bytes: 100,
            flags: if alert { vec![RankFlag::Alert] } else { vec![] },
        }
    }

    #[test]
    fn alerting_ranks_come_first_then_the_fullest() {
        let lines = [
            line(0, 90, false),
            line(1, 10, true),
            line(2, 95, false),
            line(3, 50, false),
        ];
        assert_eq!(worst_ranks(&lines, 2), BTreeSet::from([1, 2]));
        assert_eq!(worst_ranks(&lines, 3), BTreeSet::from([0, 1, 2]));
        assert_eq!(worst_ranks(&lines, 10).len(), 4);
    }

    #[test]
    fn downsampling_keeps_every_peak_and_the_bound() {
        let history: Vec<HistoryPoint> = (0..1000u64)
            .map(|i| {
                let v = if i % 97 == 0 { 1_000 } else { i % 7 };
                HistoryPoint {
                    t_ms: i * 10,
                    min: 0,
                    max: v,
                    last: v,
                    mean: v,
                }
            })
            .collect();
        let thin = downsample_max(&history, 100);
        assert_eq!(thin.len(), 100);
        assert!(thin.windows(2).all(|w| w[0].t_ms < w[1].t_ms));
        let peaks = history.iter().filter(|p| p.max == 1_000).count();
        assert_eq!(thin.iter().filter(|p| p.max == 1_000).count(), peaks);
        assert_eq!(downsample_max(&history[..5], 100).len(), 5);
    }
}
