//! What one simulated rank allocates, as a pure function of step and time in
//! step.
//!
//! A training step of a data-parallel job, as the caching allocator sees it:
//! weights, gradients and optimizer state stay allocated (the *base*); the
//! forward pass piles up activations to a peak; the backward pass frees them
//! while it produces gradients; the optimizer step uses a little scratch. So
//! allocated memory is a sawtooth over the base, one tooth per step. Anomalies
//! bend it: a leak adds bytes every step that are never freed, imbalance adds
//! a constant extra peak on one rank, fragmentation strands odd-sized segments
//! without allocating more.
//!
//! Everything here is stateless: the allocator's history lives in
//! [`super::rank`]. Job-wide parameters are drawn once from the seed, so all
//! ranks of a job, on every node, agree on them; per-rank and per-step noise is
//! a hash of its coordinates.

use super::rng::{hash, unit, SplitMix64};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Hash stream of the job-wide parameters.
const STREAM_JOB: u64 = 1;
/// Hash stream of per-rank constants.
const STREAM_RANK: u64 = 2;
/// Hash stream of per-step activation noise.
const STREAM_ACTIVATIONS: u64 = 3;
/// Hash stream of fragmentation events.
const STREAM_FRAGMENTS: u64 = 4;

/// Size of one activation request, bytes: the allocator grows by segments of
/// this size when activations outgrow the cache, which draws the staircase.
pub(crate) const ACTIVATION_BLOCK_BYTES: u64 = 512 * MIB;
/// Size of a leaked tensor's request, bytes (served from cache when it can).
const LEAK_BLOCK_BYTES: u64 = 40 * MIB;
/// Per-step activation noise: peaks vary by +-4 % (sequence lengths differ).
const ACTIVATION_NOISE: f64 = 0.04;
/// Chance that a step of a fragmenting rank strands a segment.
const FRAGMENT_CHANCE: f64 = 0.2;
/// Where in the step a stranded segment appears (fraction of the step).
const FRAGMENT_AT: f64 = 0.3;
/// Where in the step activations peak (end of forward, fraction of the step).
const PEAK_AT: f64 = 0.5;

/// Parameters shared by every rank of a simulated job, drawn from its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobParams {
    /// Length of one training step, ms (950 to 1050; ranks are synchronous).
    pub(crate) step_ms: u64,
    /// Weights, gradients and optimizer state, bytes (34 to 38 GiB).
    pub(crate) base_bytes: u64,
    /// Mean activation peak per step, bytes (13 to 15 GiB).
    pub(crate) activation_bytes: u64,
    /// What the leaking rank leaks per step, bytes (36 to 44 MiB).
    pub(crate) leak_per_step_bytes: u64,
    /// The imbalanced rank's extra peak, bytes (8.5 to 9.5 GiB).
    pub(crate) imbalance_bytes: u64,
}

impl JobParams {
    /// The job-wide parameters of seed `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(hash(&[seed, STREAM_JOB]));
        Self {
            step_ms: 950 + rng.below(101),
            base_bytes: 34 * GIB + rng.below(2048) * 2 * MIB,
            activation_bytes: 13 * GIB + rng.below(1024) * 2 * MIB,
            leak_per_step_bytes: 36 * MIB + rng.below(5) * 2 * MIB,
            imbalance_bytes: 8 * GIB + 512 * MIB + rng.below(512) * 2 * MIB,
        }
    }
}

/// How one rank's allocations evolve, step by step.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    /// Seed of the job, for per-step noise.
    seed: u64,
    /// Global rank, for per-rank noise.
    rank: u32,
    /// Step length, ms.
    step_ms: u64,
    /// This rank's base, bytes.
    base_bytes: u64,
    /// Mean activation peak, the imbalance extra included, bytes.
    activation_bytes: u64,
    /// Bytes leaked per step; 0 on a healthy rank.
    leak_per_step_bytes: u64,
    /// Whether this rank strands segments.
    fragments: bool,
}

/// Which anomalies one rank plays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Anomalies {
    /// Leaks every step.
    pub(crate) leak: bool,
    /// Strands odd-sized segments.
    pub(crate) fragmentation: bool,
    /// Peaks higher than the others.
    pub(crate) imbalance: bool,
}

impl Workload {
    /// The workload of global rank `rank` of the job with `params`.
    pub(crate) fn new(seed: u64, rank: u32, params: &JobParams, anomalies: Anomalies) -> Self {
        // Ranks of one job differ a little (bucketing, communicator buffers).
        let jitter = hash(&[seed, STREAM_RANK, u64::from(rank)]) % 64 * 2 * MIB;
        let extra = if anomalies.imbalance {
            params.imbalance_bytes
        } else {
            0
        };
        Self {
            seed,
            rank,
            step_ms: params.step_ms,
            base_bytes: params.base_bytes + jitter,
            activation_bytes: params.activation_bytes + extra,
            leak_per_step_bytes: if anomalies.leak {
                params.leak_per_step_bytes
            } else {
                0
            },
            fragments: anomalies.fragmentation,
        }
    }

    /// Bytes allocated before the first step: the base.
    pub(crate) fn base_bytes(&self) -> u64 {
        self.base_bytes
    }

    /// Seed of the job.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Step length, ms.
    pub(crate) fn step_ms(&self) -> u64 {
        self.step_ms
    }

    /// Bytes allocated at `offset_ms` into step `step`.
    pub(crate) fn allocated(&self, step: u64, offset_ms: u64) -> u64 {
        self.with_activations(step, shape(self.fraction(offset_ms)))
    }

    /// The most bytes allocated at once in step `step` up to `offset_ms`.
    pub(crate) fn high_water(&self, step: u64, offset_ms: u64) -> u64 {
        let f = self.fraction(offset_ms).min(PEAK_AT);
        self.with_activations(step, shape(f))
    }

    /// The request size in which the allocator grows at `offset_ms` into a
    /// step: activations once the forward pass runs, else a leaked tensor.
    pub(crate) fn request_bytes(&self, offset_ms: u64) -> u64 {
        if shape(self.fraction(offset_ms)) > 0.0 || self.leak_per_step_bytes == 0 {
            ACTIVATION_BLOCK_BYTES
        } else {
            LEAK_BLOCK_BYTES
        }
    }

    /// The odd-sized segment this rank strands in step `step`, if any, as
    /// (offset into the step in ms, request bytes): about one step in five,
    /// 64 to 448 MiB.
    pub(crate) fn fragment(&self, step: u64) -> Option<(u64, u64)> {
        if !self.fragments {
            return None;
        }
        let key = [self.seed, STREAM_FRAGMENTS, u64::from(self.rank), step];
        if unit(&key) >= FRAGMENT_CHANCE {
            return None;
        }
        let bytes = 64 * MIB + hash(&[self.seed, STREAM_FRAGMENTS, step]) % 193 * 2 * MIB;
        let offset_ms = (self.step_ms as f64 * FRAGMENT_AT) as u64;
        Some((offset_ms, bytes))
    }

    /// Time into the step as a fraction in `[0, 1)`.
    fn fraction(&self, offset_ms: u64) -> f64 {
        (offset_ms % self.step_ms) as f64 / self.step_ms as f64
    }

    /// Base, leak so far and `level` times this step's activation peak.
    fn with_activations(&self, step: u64, level: f64) -> u64 {
        let key = [self.seed, STREAM_ACTIVATIONS, u64::from(self.rank), step];
        let noise = 1.0 + ACTIVATION_NOISE * (2.0 * unit(&key) - 1.0);
        let activations = (self.activation_bytes as f64 * noise * level) as u64;
        self.base_bytes
            .saturating_add(self.leak_per_step_bytes.saturating_mul(step))
            .saturating_add(activations)
    }
}

/// Activations as a fraction of the step's peak, over the step's timeline:
/// data loading (none), forward (ramp up to the peak), backward (freed down to
/// the gradients' share), optimizer step (a little scratch).
fn shape(f: f64) -> f64 {
    const DATA_END: f64 = 0.1;
    const BACKWARD_END: f64 = 0.9;
    const AFTER_BACKWARD: f64 = 0.15;
    if f < DATA_END {
        0.0
    } else if f < PEAK_AT {
        (f - DATA_END) / (PEAK_AT - DATA_END)
    } else if f < BACKWARD_END {
        1.0 - (1.0 - AFTER_BACKWARD) * (f - PEAK_AT) / (BACKWARD_END - PEAK_AT)
    } else {
        AFTER_BACKWARD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(anomalies: Anomalies) -> Workload {
        Workload::new(1, 3, &JobParams::new(1), anomalies)
    }

    #[test]
    fn job_parameters_stay_in_their_documented_ranges() {
        for seed in 0..200 {
            let p = JobParams::new(seed);
            assert!((950..=1050).contains(&p.step_ms));
            assert!((34 * GIB..38 * GIB).contains(&p.base_bytes));
            assert!((13 * GIB..15 * GIB).contains(&p.activation_bytes));
            assert!((36 * MIB..=44 * MIB).contains(&p.leak_per_step_bytes));
            assert!((8 * GIB + 512 * MIB..9 * GIB + 512 * MIB).contains(&p.imbalance_bytes));
        }
        assert_ne!(JobParams::new(1), JobParams::new(2));
    }

    #[test]
    fn allocated_saw_tooths_once_per_step() {
        let w = workload(Anomalies::default());
        let step = w.step_ms();
        for k in [0, 1, 50] {
            let start = w.allocated(k, 0);
            let peak = w.allocated(k, step / 2);
            assert_eq!(start, w.base_bytes());
            assert!(peak > start + 12 * GIB, "step {k}");
            // The high-water mark is the exact peak, at half the step.
            let high = w.high_water(k, step - 1);
            assert!(high >= peak && high - peak < 100 * MIB, "step {k}");
            assert!(w.allocated(k, step - 1) < peak - 10 * GIB);
        }
    }

    #[test]
    fn a_leak_raises_troughs_and_peaks_alike() {
        let healthy = workload(Anomalies::default());
        let leaky = workload(Anomalies {
            leak: true,
            ..Anomalies::default()
        });
        let rate = JobParams::new(1).leak_per_step_bytes;
        assert_eq!(
            leaky.allocated(100, 0),
            healthy.allocated(100, 0) + 100 * rate
        );
        assert_eq!(
            leaky.high_water(100, 600),
            healthy.high_water(100, 600) + 100 * rate
        );
        assert_eq!(leaky.allocated(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn imbalance_adds_to_the_peak_only() {
        let healthy = workload(Anomalies::default());
        let heavy = workload(Anomalies {
            imbalance: true,
            ..Anomalies::default()
        });
        let step = healthy.step_ms();
        assert_eq!(heavy.allocated(7, 0), healthy.allocated(7, 0));
        let excess = heavy.high_water(7, step / 2) - healthy.high_water(7, step / 2);
        assert!(excess > 8 * GIB, "excess {excess}");
    }

    #[test]
    fn only_a_fragmenting_rank_strands_segments() {
        let healthy = workload(Anomalies::default());
        let fragmenting = workload(Anomalies {
            fragmentation: true,
            ..Anomalies::default()
        });
        assert!((0..100).all(|k| healthy.fragment(k).is_none()));
        let events: Vec<_> = (0..100).filter_map(|k| fragmenting.fragment(k)).collect();
        assert!((10..35).contains(&events.len()), "{} events", events.len());
        assert!(events
            .iter()
            .all(|&(_, b)| (64 * MIB..=448 * MIB).contains(&b)));
    }
}
