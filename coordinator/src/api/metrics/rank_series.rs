//! Which live ranks get per-rank series on `/metrics`.
//!
//! A 64k-GPU fleet has as many ranks, and every rank has a dozen series:
//! millions of samples a scrape. Job and cluster aggregates are always
//! exported; per-rank series follow [`RankSeries`]: all of them for a
//! cluster of a few thousand ranks (where Prometheus copes and dashboards
//! want every rank), only the ranks with an active alert beyond that, or
//! either way by configuration. The API and the dashboard serve every rank
//! whatever this says. Never more than [`super::scrape::MAX_RANK_SERIES`].

use std::str::FromStr;

/// Live ranks up to which [`RankSeries::Auto`] exports every rank.
pub const AUTO_ALL_UP_TO: usize = 4_096;

/// The policy (`--metrics-rank-series`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RankSeries {
    /// Every rank while the cluster has at most `AUTO_ALL_UP_TO` live
    /// ranks, only alerting ones beyond.
    #[default]
    Auto,
    /// Every live rank.
    All,
    /// Only ranks with an active alert.
    Alerting,
}

impl RankSeries {
    /// Whether a live rank is exported, in a cluster of `live_ranks`.
    pub fn exports(self, live_ranks: usize, alerting: bool) -> bool {
        match self {
            Self::All => true,
            Self::Alerting => alerting,
            Self::Auto => live_ranks <= AUTO_ALL_UP_TO || alerting,
        }
    }
}

impl FromStr for RankSeries {
    type Err = UnknownRankSeries;

    fn from_str(s: &str) -> Result<Self, UnknownRankSeries> {
        match s {
            "auto" => Ok(Self::Auto),
            "all" => Ok(Self::All),
            "alerting" => Ok(Self::Alerting),
            other => Err(UnknownRankSeries {
                given: other.to_owned(),
            }),
        }
    }
}

/// A rank series policy that is none of `auto`, `all` or `alerting`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics rank series {given:?}: give auto, all or alerting")]
pub struct UnknownRankSeries {
    /// The policy given.
    pub given: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_exports_every_rank_of_a_small_cluster_and_only_alerting_ones_of_a_large_one() {
        assert!(RankSeries::Auto.exports(8, false));
        assert!(RankSeries::Auto.exports(AUTO_ALL_UP_TO, false));
        assert!(!RankSeries::Auto.exports(AUTO_ALL_UP_TO + 1, false));
        assert!(RankSeries::Auto.exports(65_536, true));
        assert!(RankSeries::All.exports(65_536, false));
        assert!(!RankSeries::Alerting.exports(8, false));
        assert_eq!("alerting".parse(), Ok(RankSeries::Alerting));
        assert!("some"
            .parse::<RankSeries>()
            .unwrap_err()
            .to_string()
            .contains("auto, all or alerting"));
    }
}
