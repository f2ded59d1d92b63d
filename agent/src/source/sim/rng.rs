//! Tiny seedable pseudo-random numbers for the simulator.
//!
//! The simulator must be reproducible: the same settings and the same sequence
//! of sample times give the same samples, on every platform and every run, so
//! that tests and demos can assert on what they see. Two tools cover that, and
//! neither needs a dependency:
//!
//! - `SplitMix64`, a stateful generator (Steele, Lea and Flood, "Fast
//!   splittable pseudorandom number generators", OOPSLA 2014), draws the
//!   job-wide parameters once, at construction;
//! - [`hash`] and [`unit()`], stateless, give the per-rank, per-step and
//!   per-sample noise as a pure function of its coordinates (seed, rank, step,
//!   time), so noise never depends on how many samples came before. Each
//!   kind of noise hashes its own stream number (1 to 9, one `STREAM_*`
//!   constant per use across the simulator) with its coordinates, so that no
//!   two kinds draw the same numbers.
//!
//! `gpumon bench` draws the noise of its load from [`hash`] and [`unit()`] too,
//! so the simulated numbers of the whole tree come from here.
//!
//! Not for cryptography.

/// SplitMix64's increment: the 64-bit golden ratio.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A SplitMix64 generator: 64 bits of state, full period, good enough to
/// spread a small seed over a handful of parameters.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`; every seed, 0 included, is fine.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// A number in `0..n`; 0 when `n` is 0. The modulo bias is below 2^-40
    /// for the small `n` the simulator uses.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// SplitMix64's output function: a bijective avalanche of one word.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes a tuple of words into 64 well-mixed bits; order matters.
pub fn hash(words: &[u64]) -> u64 {
    words.iter().fold(GOLDEN_GAMMA, |h, &w| {
        mix(h ^ mix(w.wrapping_add(GOLDEN_GAMMA)))
    })
}

/// A number in `[0, 1)` from a tuple of words (53 random bits).
pub fn unit(words: &[u64]) -> f64 {
    // The top 53 bits fill an f64 mantissa exactly.
    (hash(words) >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a of a string: folds a job id into a seed word.
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_seeds_differ() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = SplitMix64::new(8);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs of the reference implementation seeded with 0.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn unit_stays_in_range_and_spreads() {
        let xs: Vec<f64> = (0..1000).map(|i| unit(&[1, i])).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((0.45..0.55).contains(&mean), "mean {mean}");
        assert_ne!(hash(&[1, 2]), hash(&[2, 1]));
    }

    #[test]
    fn below_respects_its_bound() {
        let mut r = SplitMix64::new(3);
        assert_eq!(r.below(0), 0);
        assert!((0..100).all(|_| r.below(5) < 5));
    }
}
