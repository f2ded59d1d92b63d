//! Where a simulated rank's step time goes: the sections the in-process hook
//! would time (`data`, `forward`, `backward`, `optimizer`).
//!
//! Ranks are synchronous, so every rank's step lasts the job's step; what
//! differs is the compute inside it. A healthy rank spends about 77 % of the
//! step in its sections and the rest waiting in collectives. A rank on a
//! throttled GPU (1410 MHz instead of 1980) computes its forward and backward
//! passes about a quarter slower, which is what the straggler detector
//! compares across ranks (DESIGN.md, "Straggler"); it still fits in the
//! step, the others wait for it. Noise is a hash of (seed, rank, step,
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

/// The section times of `rank` in step `step` of a job with steps of
/// `step_ms`, ms, rounded to 10 µs like a timer would print them.
pub(crate) fn sections(
    seed: u64,
    rank: u32,
    step: u64,
    step_ms: u64,
    throttled: bool,
) -> Vec<(String, f64)> {
    SECTIONS
        .iter()
        .zip(THROTTLED)
        .enumerate()
        .map(|(i, (&(name, share), slow))| {
            let key = [seed, STREAM_SECTIONS, u64::from(rank), step, i as u64];
            let noise = 1.0 + SECTION_NOISE * (2.0 * unit(&key) - 1.0);
            let factor = if throttled { slow } else { 1.0 };
            let ms = step_ms as f64 * share * factor * noise;
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
            for throttled in [false, true] {
                let s = sections(1, 3, step, 1000, throttled);
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
            let ok = sections(1, 5, step, 1000, false);
            let slow = sections(1, 5, step, 1000, true);
            for i in [1, 2] {
                let ratio = slow[i].1 / ok[i].1;
                assert!((1.2..=1.3).contains(&ratio), "{}: {ratio}", slow[i].0);
            }
            assert_eq!(slow[0], ok[0], "data loading is not on the GPU");
        }
    }

    #[test]
    fn noise_is_small_and_a_function_of_its_coordinates() {
        assert_eq!(sections(7, 1, 9, 980, false), sections(7, 1, 9, 980, false));
        assert_ne!(sections(7, 1, 9, 980, false), sections(7, 2, 9, 980, false));
        assert_ne!(sections(7, 1, 9, 980, false), sections(8, 1, 9, 980, false));
        let totals: Vec<f64> = (0..300)
            .map(|k| total(&sections(1, 0, k, 1000, false)))
            .collect();
        let (lo, hi) = totals
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &t| (l.min(t), h.max(t)));
        assert!(lo > 770.0 * 0.97 && hi < 770.0 * 1.03, "{lo}..{hi}");
    }
}
