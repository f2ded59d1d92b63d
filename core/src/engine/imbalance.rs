//! Imbalance: one rank of a job holding clearly more memory than its peers,
//! which sets the job's ceiling (all ranks must fit the largest).
//!
//! Method: each rank's level is the median of its last few window peaks
//! (its own process memory where NVML lists it, else its GPU's). Against
//! the job's median level and the scaled MAD of the levels (floored at
//! `mad_floor_frac` of the median), a rank is imbalanced when its excess is at
//! least `min_excess_frac` of the median *and* `min_excess_bytes`, and its
//! robust z-score is at least `z_min`. Needs `min_ranks` ranks: with two, no
//! one can say which is the odd one. The caller keeps growing ranks out of
//! both the judged and the reference set (a leak is reported as a leak, and
//! a moving level is no reference) and applies hysteresis.

use serde::{Deserialize, Serialize};

use super::robust_stats::{median_of, scaled_mad};

/// Tuning of the imbalance detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImbalanceParams {
    /// Ranks with a level needed to judge.
    pub min_ranks: usize,
    /// Smallest excess, fraction of the median level.
    pub min_excess_frac: f64,
    /// Smallest excess, bytes.
    pub min_excess_bytes: f64,
    /// Smallest robust z-score.
    pub z_min: f64,
    /// Floor of the spread, fraction of the median level.
    pub mad_floor_frac: f64,
    /// Window peaks a rank's level is the median of.
    pub level_points: usize,
    /// Consecutive positive evaluations before alerting.
    pub raise_after: u32,
    /// Consecutive negative evaluations before clearing.
    pub clear_after: u32,
}

impl Default for ImbalanceParams {
    fn default() -> Self {
        Self {
            min_ranks: 3,
            min_excess_frac: 0.08,
            min_excess_bytes: 1024.0 * 1024.0 * 1024.0,
            z_min: 5.0,
            mad_floor_frac: 0.01,
            level_points: 5,
            raise_after: 4,
            clear_after: 6,
        }
    }
}

/// One rank found above its peers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Excess {
    /// The rank.
    pub rank: u32,
    /// Bytes above the job's median level.
    pub excess_bytes: f64,
    /// Excess as a fraction of the median level.
    pub excess_frac: f64,
    /// The job's median level, bytes.
    pub median_bytes: f64,
}

/// Ranks whose level stands out above the job's, in rank order.
pub fn imbalanced(
    levels: &[(u32, f64)],
    p: &ImbalanceParams,
    scratch: &mut Vec<f64>,
) -> Vec<Excess> {
    if levels.len() < p.min_ranks.max(3) {
        return Vec::new();
    }
    let Some(median) = median_of(levels.iter().map(|l| l.1), scratch) else {
        return Vec::new();
    };
    if median <= 0.0 {
        return Vec::new();
    }
    let spread = scaled_mad(levels.iter().map(|l| l.1), median, scratch)
        .unwrap_or(0.0)
        .max(p.mad_floor_frac * median);
    levels
        .iter()
        .filter_map(|&(rank, level)| {
            let excess = level - median;
            let stands_out = excess >= p.min_excess_frac * median
                && excess >= p.min_excess_bytes
                && excess / spread >= p.z_min;
            stands_out.then_some(Excess {
                rank,
                excess_bytes: excess,
                excess_frac: excess / median,
                median_bytes: median,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    #[test]
    fn finds_the_heavy_rank_with_its_excess() {
        let mut levels: Vec<(u32, f64)> = (0..8)
            .map(|r| (r, 53.0 * GIB + r as f64 * 0.1 * GIB))
            .collect();
        levels[2].1 = 66.0 * GIB;
        let found = imbalanced(&levels, &ImbalanceParams::default(), &mut Vec::new());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rank, 2);
        assert!(
            (found[0].excess_bytes / GIB - 12.6).abs() < 0.2,
            "{found:?}"
        );
    }

    #[test]
    fn ordinary_spread_is_balanced() {
        let levels: Vec<(u32, f64)> = (0..16)
            .map(|r| (r, 58.5 * GIB + (r % 5) as f64 * 0.35 * GIB))
            .collect();
        assert!(imbalanced(&levels, &ImbalanceParams::default(), &mut Vec::new()).is_empty());
    }

    #[test]
    fn small_absolute_excess_is_ignored_even_when_relative_is_large() {
        let mut levels: Vec<(u32, f64)> = (0..4).map(|r| (r, 2.0 * GIB)).collect();
        levels[0].1 = 2.5 * GIB;
        assert!(imbalanced(&levels, &ImbalanceParams::default(), &mut Vec::new()).is_empty());
    }

    #[test]
    fn two_ranks_cannot_be_judged() {
        let levels = [(0, 10.0 * GIB), (1, 20.0 * GIB)];
        assert!(imbalanced(&levels, &ImbalanceParams::default(), &mut Vec::new()).is_empty());
    }
}
