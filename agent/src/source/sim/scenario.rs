//! Named simulator scenarios and which rank each anomaly lands on.
//!
//! A scenario is what `--source sim:SCENARIO` names: a healthy job, or a job
//! with one of the failures gpumon exists to catch (`docs/detection.md`).
//! Each anomaly has a fixed global rank, so every node of a simulated job
//! agrees on who misbehaves without talking to the others, and a demo or an
//! end-to-end test knows which rank to expect in the alert.

use std::fmt;
use std::str::FromStr;

/// What the simulated job does wrong, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scenario {
    /// A healthy job: every rank's memory is a steady sawtooth under a flat
    /// reserved staircase; no anomaly.
    #[default]
    Steady,
    /// Rank 2 leaks about 40 MiB per step that it never frees; its reserved
    /// memory staircases up until it runs out of memory after roughly 10 to
    /// 15 minutes at one step per second, and its process disappears.
    Leak,
    /// Rank 1 fragments its caching allocator: reserved memory keeps growing
    /// (new segments for odd-sized requests) while allocated memory stays flat.
    Fragmentation,
    /// Rank 0 peaks about 9 GiB higher than every other rank, constantly.
    Imbalance,
    /// Rank 5 runs throttled: SM clock 1410 MHz instead of 1980, lower
    /// utilization and power; its memory is normal. With the hook, its
    /// forward and backward passes take a quarter longer than its peers'.
    Straggler,
    /// Leak on rank 2, imbalance on rank 0 and straggler on rank 5, at once.
    Mixed,
}

impl Scenario {
    /// Every scenario, in the order the CLI lists them.
    pub const ALL: [Scenario; 6] = [
        Scenario::Steady,
        Scenario::Leak,
        Scenario::Fragmentation,
        Scenario::Imbalance,
        Scenario::Straggler,
        Scenario::Mixed,
    ];

    /// The scenario's name, as `--source sim:NAME` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::Leak => "leak",
            Scenario::Fragmentation => "fragmentation",
            Scenario::Imbalance => "imbalance",
            Scenario::Straggler => "straggler",
            Scenario::Mixed => "mixed",
        }
    }

    /// Which global rank plays which anomaly in a world of `world_size` ranks.
    ///
    /// Each anomaly has a home rank (leak 2, fragmentation 1, imbalance 0,
    /// straggler 5); in a world too small for it, the last rank plays it, so a
    /// one-node demo with two GPUs still shows the anomaly it asked for.
    pub(crate) fn roles(&self, world_size: u32) -> Roles {
        let last = world_size.saturating_sub(1);
        let at = |home: u32| Some(home.min(last));
        let (leak, fragmentation, imbalance, straggler) = match self {
            Scenario::Steady => (None, None, None, None),
            Scenario::Leak => (at(LEAK_RANK), None, None, None),
            Scenario::Fragmentation => (None, at(FRAGMENTATION_RANK), None, None),
            Scenario::Imbalance => (None, None, at(IMBALANCE_RANK), None),
            Scenario::Straggler => (None, None, None, at(STRAGGLER_RANK)),
            Scenario::Mixed => (at(LEAK_RANK), None, at(IMBALANCE_RANK), at(STRAGGLER_RANK)),
        };
        Roles {
            leak,
            fragmentation,
            imbalance,
            straggler,
        }
    }
}

/// Home rank of the leak.
const LEAK_RANK: u32 = 2;
/// Home rank of the fragmenting allocator.
const FRAGMENTATION_RANK: u32 = 1;
/// Home rank of the memory-heavy rank.
const IMBALANCE_RANK: u32 = 0;
/// Home rank of the throttled GPU.
const STRAGGLER_RANK: u32 = 5;

/// The global rank of each anomaly in one job; `None` where the scenario has
/// no such anomaly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Roles {
    /// The rank that leaks.
    pub(crate) leak: Option<u32>,
    /// The rank whose allocator fragments.
    pub(crate) fragmentation: Option<u32>,
    /// The rank that peaks higher than the others.
    pub(crate) imbalance: Option<u32>,
    /// The rank on a throttled GPU.
    pub(crate) straggler: Option<u32>,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    /// Parses a scenario name (case-insensitive, surrounding blanks ignored);
    /// an unknown name gives an error that lists the valid ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| {
                let valid: Vec<&str> = Scenario::ALL.iter().map(Scenario::name).collect();
                format!(
                    "unknown simulator scenario `{s}`; valid scenarios: {}",
                    valid.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_scenario() {
        for sc in Scenario::ALL {
            assert_eq!(sc.name().parse::<Scenario>(), Ok(sc));
            assert_eq!(sc.to_string(), sc.name());
        }
        assert_eq!(" Leak ".parse::<Scenario>(), Ok(Scenario::Leak));
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "oom".parse::<Scenario>().unwrap_err();
        assert!(err.contains("`oom`"), "{err}");
        for sc in Scenario::ALL {
            assert!(err.contains(sc.name()), "{err} lacks {}", sc.name());
        }
        assert!("".parse::<Scenario>().is_err());
    }

    #[test]
    fn anomalies_sit_on_their_home_ranks_in_a_big_world() {
        let r = Scenario::Mixed.roles(16);
        assert_eq!(r.leak, Some(2));
        assert_eq!(r.imbalance, Some(0));
        assert_eq!(r.straggler, Some(5));
        assert_eq!(r.fragmentation, None);
        assert_eq!(Scenario::Fragmentation.roles(16).fragmentation, Some(1));
        let steady = Scenario::Steady.roles(16);
        assert_eq!(
            steady,
            Roles {
                leak: None,
                fragmentation: None,
                imbalance: None,
                straggler: None
            }
        );
    }

    #[test]
    fn small_worlds_put_the_anomaly_on_the_last_rank() {
        assert_eq!(Scenario::Straggler.roles(4).straggler, Some(3));
        assert_eq!(Scenario::Leak.roles(2).leak, Some(1));
        assert_eq!(Scenario::Leak.roles(1).leak, Some(0));
        assert_eq!(Scenario::Leak.roles(8).leak, Some(2));
    }
}
