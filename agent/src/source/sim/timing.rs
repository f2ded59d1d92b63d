//! Where a simulated rank's step time goes: the sections the in-process hook
//! would time (`data`, `forward`, `backward`, `optimizer`).
//!
//! Ranks are synchronous, so every rank's step lasts the job's step; what
//! differs is the compute inside it. A healthy rank spends about 77 % of the
//! step in its sections and the rest outside them. A rank on a throttled GPU
//! (1410 MHz instead of 1980) computes its forward and backward passes about
//! a quarter slower. As under DDP, whose gradient all-reduce overlaps the
//! backward pass, its peers wait for it inside `backward`: their backward
//! lasts as long as it takes the straggler to catch up, and the straggler's
//! own backward is shorter than theirs. Every rank's sections then add up to
//! the same, as in a real lockstep job; the straggler detector compares the
//! rest (see `docs/stragglers.md`). Noise is a hash of (seed, rank, step,
//! section), so a step always reads the same.

use super::rng::unit;

/// Hash stream of section-time noise.
const STREAM_SECTIONS: u64 = 10;

/// The sections of a step and their share of it on a healthy rank.
pub(crate) const SECTIONS: [(&str, f64); 4] = [
    ("data", 0.06),
    ("forward", 0.26),
    ("backward", 0.40),
    ("optimizer", 0.05),
];
/// How much longer each section takes on a throttled GPU: compute-bound
/// passes about a quarter slower, data loading (CPU side) unchanged.
pub(crate) const THROTTLED: [f64; 4] = [1.0, 1.25, 1.25, 1.1];
/// Per-section noise: times vary by up to +-3 % from step to step.
const SECTION_NOISE: f64 = 0.03;
/// The section whose time absorbs the wait for the slowest rank.
const BACKWARD: usize = 2;

/// How a rank keeps up with its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Nobody in the job is slow.
    Healthy,
    /// Its GPU is throttled: the job's straggler.
    Throttled,
    /// A peer is throttled: it waits for it in `backward`.
    WaitsForStraggler,
}

impl Pace {
    /// The pace of `rank` in a job whose straggler is `straggler`.
    pub(crate) fn of(rank: u32, straggler: Option<u32>) -> Self {
        match straggler {
            Some(s) if s == rank => Self::Throttled,
            Some(_) => Self::WaitsForStraggler,
            None => Self::Healthy,
        }
    }
}

/// What a throttled rank adds to the step, as a share of it: the time its
/// peers wait.
fn straggler_extra_share() -> f64 {
    SECTIONS
        .iter()
        .zip(THROTTLED)
        .map(|(&(_, share), slow)| share * (slow - 1.0))
        .sum()
}

/// The section times of `rank` in step `step` of a job with steps of
/// `step_ms`, ms, rounded to 10 µs like a timer would print them.
pub(crate) fn sections(
    seed: u64,
    rank: u32,
    step: u64,
    step_ms: u64,
    pace: Pace,
) -> Vec<(String, f64)> {
    SECTIONS
        .iter()
        .zip(THROTTLED)
        .enumerate()
        .map(|(i, (&(name, share), slow))| {
            let key = [seed, STREAM_SECTIONS, u64::from(rank), step, i as u64];
            let noise = 1.0 + SECTION_NOISE * (2.0 * unit(&key) - 1.0);
            let share = match pace {
                Pace::Throttled => share * slow,
                Pace::WaitsForStraggler if i == BACKWARD => share + straggler_extra_share(),
                _ => share,
            };
            let ms = step_ms as f64 * share * noise;
            (name.to_owned(), (ms * 100.0).round() / 100.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(s: &[(String, f64)]) -> f64 {
        s.iter().map(|(_, ms)| ms).sum()
    }

    #[test]
    fn sections_fit_in_the_step_even_when_throttled() {
        for step in 0..500 {
            for pace in [Pace::Healthy, Pace::Throttled, Pace::WaitsForStraggler] {
                let s = sections(1, 3, step, 1000, pace);
                let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(names, ["data", "forward", "backward", "optimizer"]);
                assert!(s.iter().all(|(_, ms)| *ms > 0.0));
                assert!(total(&s) < 1000.0, "step {step}: {s:?}");
            }
        }
    }

    #[test]
    fn a_throttled_rank_computes_a_fifth_to_a_third_slower() {
        for step in 0..200 {
            let ok = sections(1, 5, step, 1000, Pace::Healthy);
            let slow = sections(1, 5, step, 1000, Pace::Throttled);
            for i in [1, 2] {
                let ratio = slow[i].1 / ok[i].1;
                assert!((1.2..=1.3).contains(&ratio), "{}: {ratio}", slow[i].0);
            }
            assert_eq!(slow[0], ok[0], "data loading is not on the GPU");
        }
    }

    #[test]
    fn in_lockstep_the_peers_wait_in_backward_and_every_total_is_the_same() {
        let (mut slow_total, mut peer_total) = (0.0, 0.0);
        for step in 0..300 {
            let slow = sections(1, 5, step, 1000, Pace::Throttled);
            let peer = sections(1, 2, step, 1000, Pace::WaitsForStraggler);
            assert!(slow[2].1 < peer[2].1, "step {step}: {slow:?} {peer:?}");
            slow_total += total(&slow);
            peer_total += total(&peer);
        }
        let ratio = slow_total / peer_total;
        assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
    }

    #[test]
    fn noise_is_small_and_a_function_of_its_coordinates() {
        assert_eq!(
            sections(7, 1, 9, 980, Pace::Healthy),
            sections(7, 1, 9, 980, Pace::Healthy)
        );
        assert_ne!(
            sections(7, 1, 9, 980, Pace::Healthy),
            sections(7, 2, 9, 980, Pace::Healthy)
        );
        assert_ne!(
            sections(7, 1, 9, 980, Pace::Healthy),
            sections(8, 1, 9, 980, Pace::Healthy)
        );
        let totals: Vec<f64> = (0..300)
            .map(|k| total(&sections(1, 0, k, 1000, Pace::Healthy)))
            .collect();
        let (lo, hi) = totals
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &t| (l.min(t), h.max(t)));
        assert!(lo > 770.0 * 0.97 && hi < 770.0 * 1.03, "{lo}..{hi}");
    }
}
