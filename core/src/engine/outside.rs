//! Memory outside the caching allocator, per rank, and when it grows.
//!
//! NVML's figure for a process is everything the process holds on its GPU;
//! PyTorch's caching allocator accounts for `reserved` of it. The rest is
//! memory torch's allocator never sees: the CUDA context, NCCL's buffers
//! (one set per communicator, so per process group), cuBLAS and cuDNN
//! workspaces, and other libraries' allocations. It is about constant
//! once a job has started; when it grows during a run (a new process
//! group's NCCL buffers, a library that allocates per call), it eats the
//! headroom the allocator's own figures say is there.
//!
//! Method, per rank with both figures (a GPU window listing its process,
//! and an allocator record at most two windows old):
//! - a sample is the process's NVML memory less `reserved`;
//! - the rank's *baseline* is the least of its first
//!   [`OutsideParams::baseline_samples`] samples after the warm-up, when the
//!   context and the communicators of start-up exist;
//! - its *level* is the least of its last [`RECENT`] samples: the two
//!   figures are read at slightly different instants, and `reserved` that
//!   grew between them shows as a short spike outside, never as a floor;
//! - a level above the baseline by [`OutsideParams::growth_frac`] of it and
//!   at least [`OutsideParams::min_growth_bytes`], for
//!   [`OutsideParams::raise_after`] samples, raises `outside_memory`
//!   (warning); [`OutsideParams::clear_after`] samples below clear it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::alerts::{AlertKind, Severity, Subject};
use super::latch::{Edge, Latch};
use super::tracks::RankTrack;
use super::Engine;
use crate::units::fmt_bytes;

/// Samples the level is the least of.
pub const RECENT: usize = 5;

/// Tuning of the detector (`[engine.outside]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutsideParams {
    /// Growth over the baseline that raises the alert, as a share of the
    /// baseline.
    pub growth_frac: f64,
    /// Smallest growth that raises the alert, bytes.
    pub min_growth_bytes: f64,
    /// Samples after the warm-up whose least is the baseline.
    pub baseline_samples: u32,
    /// Samples in a row over the threshold before it is raised.
    pub raise_after: u32,
    /// Samples in a row under it before it clears.
    pub clear_after: u32,
}

impl Default for OutsideParams {
    fn default() -> Self {
        Self {
            growth_frac: 0.5,
            min_growth_bytes: 512.0 * 1024.0 * 1024.0,
            baseline_samples: 5,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

/// One rank's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutsideTrack {
    /// The baseline, once it has its samples.
    baseline: Option<u64>,
    /// Samples toward the baseline.
    first: Vec<u64>,
    /// The last samples.
    recent: VecDeque<u64>,
    latch: Latch,
}

impl OutsideTrack {
    /// The level now: the least of the last [`RECENT`] samples, once there
    /// are that many.
    pub fn level(&self) -> Option<u64> {
        if self.recent.len() < RECENT {
            return None;
        }
        self.recent.iter().copied().min()
    }

    /// The baseline, once known.
    pub fn baseline(&self) -> Option<u64> {
        self.baseline
    }
}

/// Every tracked rank's figures, by job and rank. Holds only ranks the
/// engine tracks: a rank's entry goes when it ends, a job's when the engine
/// forgets it.
pub type OutsideWatch = BTreeMap<String, BTreeMap<u32, OutsideTrack>>;

/// A sample of `r`'s memory outside its allocator, when its process held
/// `used` bytes at `t` by NVML, its allocator's figures are at most two
/// windows old and its warm-up is over.
pub(super) fn sample_of(
    r: &RankTrack,
    t: f64,
    used: u64,
    window_s: f64,
    warmup_s: f64,
) -> Option<u64> {
    let a = r
        .alloc
        .as_ref()
        .filter(|a| t - a.last_t <= 2.0 * window_s)?;
    (t >= r.first_t + warmup_s).then(|| used.saturating_sub(a.reserved_last))
}

impl OutsideTrack {
    /// Takes a sample; once there is a baseline and a level, the latch's
    /// edge, whether the level is over the threshold, the baseline and the
    /// level.
    fn push(&mut self, sample: u64, params: &OutsideParams) -> Option<(Edge, bool, u64, u64)> {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(sample);
        let Some(baseline) = self.baseline else {
            self.first.push(sample);
            if self.first.len() >= params.baseline_samples.max(1) as usize {
                self.baseline = self.first.iter().copied().min();
                self.first = Vec::new();
            }
            return None;
        };
        let level = self.level()?;
        let growth = level.saturating_sub(baseline) as f64;
        let over = growth
            >= params
                .min_growth_bytes
                .max(params.growth_frac * baseline as f64);
        let edge = self
            .latch
            .update(over, params.raise_after, params.clear_after);
        Some((edge, over, baseline, level))
    }
}

impl Engine {
    /// A sample of a rank's memory outside its allocator ([`sample_of`]).
    pub(super) fn observe_outside(&mut self, t: f64, job: &str, rank: u32, sample: u64) {
        let params = self.cfg.for_job(job).outside;
        let judged = match self.outside.get_mut(job) {
            Some(ranks) => ranks.entry(rank).or_default().push(sample, &params),
            None => {
                let mut track = OutsideTrack::default();
                let judged = track.push(sample, &params);
                self.outside
                    .insert(job.to_owned(), BTreeMap::from([(rank, track)]));
                judged
            }
        };
        let Some((edge, over, baseline, level)) = judged else {
            return;
        };
        let growth = level.saturating_sub(baseline);
        let subject = Subject::Rank(job.to_owned(), rank);
        let firing = self.alerts.is_active(AlertKind::OutsideMemory, &subject);
        match edge {
            // While it fires, the figures follow the latest level above the
            // threshold; `raise` keeps the episode's id and start.
            Edge::Raised | Edge::Steady if edge == Edge::Raised || (firing && over) => {
                let mut alert = subject.alert(AlertKind::OutsideMemory, t, Severity::Warning);
                if let Some(r) = self.jobs.get(job).and_then(|j| j.ranks.get(&rank)) {
                    (alert.node, alert.gpu) = (r.node.clone(), r.gpu);
                }
                alert.message = format!(
                    "{}: memory outside the caching allocator grew from {} to {} (+{}, +{:.0} %): NVML's figure for the process less the allocator's reserved, which holds the CUDA context, NCCL's buffers (one set per process group), cuBLAS workspaces and other libraries",
                    subject.describe(),
                    fmt_bytes(baseline),
                    fmt_bytes(level),
                    fmt_bytes(growth),
                    100.0 * growth as f64 / (baseline.max(1) as f64),
                );
                alert.recommendation = Some(OUTSIDE_ADVICE.into());
                self.alerts.raise(subject, alert);
            }
            Edge::Cleared => {
                self.alerts.resolve(AlertKind::OutsideMemory, &subject, t);
            }
            Edge::Raised | Edge::Steady => {}
        }
    }

    /// The figures of a rank, when it has any.
    pub fn outside_of(&self, job: &str, rank: u32) -> Option<&OutsideTrack> {
        self.outside.get(job)?.get(&rank)
    }
}

const OUTSIDE_ADVICE: &str = "Look for process groups created during the run (each has its own NCCL buffers; create them once at start), libraries that allocate per call, or CUDA graphs captured repeatedly; NCCL_BUFFSIZE and fewer communicators shrink NCCL's share. This memory is not in torch.cuda.memory_reserved(), so the allocator's headroom overstates what is left.";

#[cfg(test)]
mod tests;
