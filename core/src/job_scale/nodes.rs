//! Per-node aggregates of a job's ranks, for the dashboard's drill-down
//! from the job to its nodes to their ranks.

use std::collections::BTreeMap;

use gpumon_proto::api::{NodeAggregate, RankFlag, RankLine};

/// One aggregate per node of `lines`, by node name: ranks, the lowest,
/// median and highest used share now, the fullest rank and how many ranks
/// have an active alert. Ranks without a known capacity count as 0.
pub fn node_aggregates(lines: &[RankLine]) -> Vec<NodeAggregate> {
    let mut by_node: BTreeMap<&str, Vec<&RankLine>> = BTreeMap::new();
    for l in lines {
        by_node.entry(l.node.as_str()).or_default().push(l);
    }
    by_node
        .into_iter()
        .map(|(node, ranks)| {
            let mut shares: Vec<(f64, u32)> = ranks.iter().map(|l| (share(l), l.rank)).collect();
            shares.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
            let n = shares.len();
            let median = if n % 2 == 1 {
                shares[n / 2].0
            } else {
                (shares[n / 2 - 1].0 + shares[n / 2].0) / 2.0
            };
            NodeAggregate {
                node: node.to_owned(),
                ranks: n as u32,
                min_share: shares[0].0,
                median_share: median,
                max_share: shares[n - 1].0,
                worst_rank: shares[n - 1].1,
                alerts: ranks
                    .iter()
                    .filter(|l| l.flags.contains(&RankFlag::Alert))
                    .count() as u32,
            }
        })
        .collect()
}

fn share(l: &RankLine) -> f64 {
    if l.total_bytes == 0 {
        0.0
    } else {
        l.used_bytes as f64 / l.total_bytes as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rank: u32, node: &str, used: u64, alert: bool) -> RankLine {
        RankLine {
            rank,
            node: node.into(),
            gpu: rank % 8,
            used_bytes: used,
            total_bytes: 100,
            flags: if alert { vec![RankFlag::Alert] } else { vec![] },
        }
    }

    #[test]
    fn nodes_aggregate_their_own_ranks() {
        let lines = [
            line(0, "b", 10, false),
            line(1, "a", 20, true),
            line(2, "b", 30, false),
            line(3, "b", 90, true),
            line(4, "a", 40, false),
        ];
        let agg = node_aggregates(&lines);
        assert_eq!(
            agg.iter().map(|a| a.node.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let b = &agg[1];
        assert_eq!((b.ranks, b.worst_rank, b.alerts), (3, 3, 1));
        assert_eq!((b.min_share, b.median_share, b.max_share), (0.1, 0.3, 0.9));
        assert!((agg[0].median_share - 0.3).abs() < 1e-12);
    }
}
