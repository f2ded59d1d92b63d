//! The real limit of a GPU's memory: the one its memory meets first.
//!
//! The GPU's capacity is not always what a process dies at. Its hook
//! reports what else bounds it ([`DeviceLimit`]):
//! - a cap on the caching allocator (`set_per_process_memory_fraction`, or
//!   the same setting in `PYTORCH_CUDA_ALLOC_CONF`): an allocation that
//!   would take `reserved` past it fails, however much the GPU has free;
//! - the device as the process sees it: on a MIG GPU, a slice of it.
//!
//! NVML lists the GPU's processes, so the memory held by processes that
//! are none of its ranks is known too; the GPU's used figure already
//! counts it, and the limit's description names it.
//!
//! Each limit is measured in its own terms: the GPU's used memory against
//! its capacity, a rank's `reserved` against its cap, a rank's process
//! memory (NVML) against its slice. The *binding* limit is the one with the
//! least room left (the GPU's on a tie). The memory levels read the share
//! of the binding limit; the OOM forecast, which follows the GPU's used
//! memory, moves its ceiling by the room that limit leaves: the GPU's used
//! memory can grow by as much as the binding limit's usable share less what
//! counts against it (see [`Ceiling::room`]). On a GPU of one rank, the
//! usual layout, that is exactly when the rank's own figure reaches its
//! limit; with several, it assumes the growth is the binding rank's, which
//! warns no later than the truth.

use std::collections::BTreeMap;

use gpumon_proto::{api, CapSource, DeviceLimit};

use super::forecast::Room;
use super::Engine;
use crate::records::ProcRecord;
use crate::units::Bytes;

/// The newest device limit each tracked rank's hook reported, by job and
/// rank (snapshot format 12). Holds only tracked ranks: a rank's entry goes
/// when it ends, a job's when the engine forgets it.
pub type LimitWatch = BTreeMap<String, BTreeMap<u32, DeviceLimit>>;

/// A device the process sees as smaller than this share of its GPU is a
/// slice of it (MIG). A whole GPU's figure from CUDA and from NVML differ
/// by a few hundred MiB at most.
pub const SLICE_FRAC: f64 = 0.9;

/// Which limit a GPU's memory meets first.
#[derive(Debug, Clone, PartialEq)]
pub enum Binding {
    /// The GPU's capacity; `others` bytes of it held by `other_procs`
    /// processes that are none of its ranks (NVML; 0 when it lists none).
    Gpu {
        /// Bytes held by the other processes.
        others: u64,
        /// How many other processes.
        other_procs: u32,
    },
    /// A rank's allocator cap: its `reserved` against it.
    Cap {
        /// The rank's job.
        job: String,
        /// The rank.
        rank: u32,
        /// What set the cap.
        source: CapSource,
    },
    /// A rank's device as it sees it, smaller than the GPU (a MIG slice):
    /// its process memory against it.
    Slice {
        /// The rank's job.
        job: String,
        /// The rank.
        rank: u32,
    },
}

/// The binding limit of one GPU, now.
#[derive(Debug, Clone, PartialEq)]
pub struct Ceiling {
    /// Which limit it is.
    pub binding: Binding,
    /// The limit, bytes.
    pub limit: u64,
    /// What counts against it now, bytes.
    pub against: u64,
    /// The GPU's used memory now (its highest sample), bytes.
    pub gpu_used: u64,
    /// The GPU's capacity, bytes.
    pub gpu_total: u64,
}

impl Ceiling {
    /// The GPU's own capacity, with what other processes hold of it.
    pub fn gpu(total: u64, used: u64, (others, other_procs): (u64, u32)) -> Self {
        Self {
            binding: Binding::Gpu {
                others,
                other_procs,
            },
            limit: total,
            against: used,
            gpu_used: used,
            gpu_total: total,
        }
    }

    /// Whether it is the GPU's capacity.
    pub fn is_gpu(&self) -> bool {
        matches!(self.binding, Binding::Gpu { .. })
    }

    /// Bytes left before the limit.
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.against)
    }

    /// The share of the limit in use, percent.
    pub fn pct(&self) -> f64 {
        100.0 * self.against as f64 / self.limit as f64
    }

    /// What the GPU's forecast measures against: this limit, shifted by
    /// what the GPU's used memory counts that the limit does not (nothing
    /// for the GPU's own capacity).
    pub fn room(&self) -> Room {
        if self.is_gpu() {
            return Room::of(self.limit as f64);
        }
        Room {
            limit: self.limit as f64,
            shift: self.gpu_used as f64 - self.against as f64,
        }
    }

    /// The limit in words: "the GPU's 80.0 GiB", "the 16.0 GiB cap
    /// torch.cuda.set_per_process_memory_fraction set on rank 0 of job-a".
    pub fn describe(&self) -> String {
        match &self.binding {
            Binding::Gpu { others: 0, .. } => format!("the GPU's {}", Bytes(self.limit)),
            Binding::Gpu {
                others,
                other_procs,
            } => format!(
                "the GPU's {}, {} of it held by {other_procs} other process{}",
                Bytes(self.limit),
                Bytes(*others),
                if *other_procs == 1 { "" } else { "es" }
            ),
            Binding::Cap { job, rank, source } => format!(
                "the {} cap {} set on rank {rank} of {job}",
                Bytes(self.limit),
                source.setter()
            ),
            Binding::Slice { job, rank } => format!(
                "the {} MIG slice of the GPU's {} that rank {rank} of {job} runs in",
                Bytes(self.limit),
                Bytes(self.gpu_total)
            ),
        }
    }

    /// What to try first when this limit is the one met, beyond the usual
    /// (none for the GPU's own capacity with no other process on it).
    pub fn advice(&self) -> Option<String> {
        match &self.binding {
            Binding::Gpu { others: 0, .. } => None,
            Binding::Gpu {
                others,
                other_procs,
            } => Some(format!(
                "{other_procs} other process{} hold{} {} of this GPU: move {} elsewhere",
                if *other_procs == 1 { "" } else { "es" },
                if *other_procs == 1 { "s" } else { "" },
                Bytes(*others),
                if *other_procs == 1 { "it" } else { "them" },
            )),
            Binding::Cap { source, .. } => Some(format!(
                "the allocator's cap ({}) is reached before the GPU's {}: raise it",
                source.setter(),
                Bytes(self.gpu_total)
            )),
            Binding::Slice { .. } => Some(format!(
                "the MIG slice is reached before the GPU's {}: run on a larger slice",
                Bytes(self.gpu_total)
            )),
        }
    }
}

/// A rank's limit weighed against the others, before it is named.
struct Candidate<'a> {
    kind: CandidateKind,
    job: &'a str,
    rank: u32,
    limit: u64,
    against: u64,
}

/// Which of a rank's limits a [`Candidate`] is.
#[derive(Clone, Copy)]
enum CandidateKind {
    Cap(CapSource),
    Slice,
}

impl Candidate<'_> {
    fn left(&self) -> u64 {
        self.limit.saturating_sub(self.against)
    }

    /// The binding limit it is, on the GPU `gpu` describes.
    fn ceiling(&self, gpu: &Ceiling) -> Ceiling {
        let (job, rank) = (self.job.to_owned(), self.rank);
        let binding = match self.kind {
            CandidateKind::Cap(source) => Binding::Cap { job, rank, source },
            CandidateKind::Slice => Binding::Slice { job, rank },
        };
        Ceiling {
            binding,
            limit: self.limit,
            against: self.against,
            gpu_used: gpu.gpu_used,
            gpu_total: gpu.gpu_total,
        }
    }
}

impl From<&Ceiling> for api::MemoryLimit {
    fn from(c: &Ceiling) -> Self {
        let (kind, cap_source) = match &c.binding {
            Binding::Gpu { .. } => (api::LimitKind::Gpu, None),
            Binding::Cap { source, .. } => (api::LimitKind::Cap, Some(*source)),
            Binding::Slice { .. } => (api::LimitKind::MigSlice, None),
        };
        Self {
            kind,
            cap_source,
            limit_bytes: c.limit,
            used_bytes: c.against,
            description: c.describe(),
        }
    }
}

impl Engine {
    /// Keeps the newest device limit of a tracked rank.
    pub(super) fn observe_limit(&mut self, job: &str, rank: u32, limit: DeviceLimit) {
        let tracked = self
            .jobs
            .get(job)
            .is_some_and(|j| j.ranks.contains_key(&rank));
        if !tracked {
            return;
        }
        match self.limits.get_mut(job) {
            Some(ranks) => {
                ranks.insert(rank, limit);
            }
            None => {
                self.limits
                    .insert(job.to_owned(), BTreeMap::from([(rank, limit)]));
            }
        }
    }

    /// The limit a GPU of `total` bytes holding `ranks` (job, rank, pid)
    /// meets first, its highest sample using `used` and NVML listing
    /// `procs` on it.
    pub(super) fn ceiling(
        &self,
        (total, ranks): (u64, &[(String, u32, u32)]),
        used: u64,
        procs: &[ProcRecord],
    ) -> Ceiling {
        let others = procs
            .iter()
            .filter(|p| !ranks.iter().any(|(_, _, pid)| *pid == p.pid))
            .fold((0u64, 0u32), |(bytes, n), p| {
                (bytes.saturating_add(p.used), n.saturating_add(1))
            });
        let gpu = Ceiling::gpu(total, used, others);
        if self.limits.is_empty() {
            return gpu;
        }
        let nearest = ranks
            .iter()
            .flat_map(|(job, rank, _)| self.rank_limits(job, *rank, gpu.gpu_total))
            .flatten()
            .filter(|c| c.left() < gpu.left())
            .min_by_key(Candidate::left);
        match nearest {
            Some(c) => c.ceiling(&gpu),
            None => gpu,
        }
    }

    /// The cap and the slice of one rank on a GPU of `gpu_total` bytes,
    /// each with what counts against it.
    fn rank_limits<'a>(
        &'a self,
        job: &'a str,
        rank: u32,
        gpu_total: u64,
    ) -> [Option<Candidate<'a>>; 2] {
        let limit = self.limits.get(job).and_then(|r| r.get(&rank));
        let r = self.jobs.get(job).and_then(|j| j.ranks.get(&rank));
        let (Some(limit), Some(r)) = (limit, r) else {
            return [None, None];
        };
        let cap = match (limit.cap, r.alloc.as_ref()) {
            (Some(cap), Some(alloc)) if cap.bytes > 0 => Some(Candidate {
                kind: CandidateKind::Cap(cap.source),
                job,
                rank,
                limit: cap.bytes,
                against: alloc.reserved_last,
            }),
            _ => None,
        };
        let slice = limit
            .device_total
            .filter(|&d| d > 0 && (d as f64) < SLICE_FRAC * gpu_total as f64)
            .map(|device_total| Candidate {
                kind: CandidateKind::Slice,
                job,
                rank,
                limit: device_total,
                against: r.used_last,
            });
        [cap, slice]
    }

    /// The bytes a rank's allocator may reach: the least of its GPU's
    /// capacity, its device as it sees it and its cap.
    pub(super) fn rank_limit_bytes(&self, job: &str, rank: u32, gpu_total: u64) -> u64 {
        let Some(limit) = self.limits.get(job).and_then(|r| r.get(&rank)) else {
            return gpu_total;
        };
        [
            Some(gpu_total),
            limit.device_total.filter(|&d| d > 0),
            limit.cap.map(|c| c.bytes).filter(|&b| b > 0),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(gpu_total)
    }

    /// The limit rank `rank` of `job` meets first, when its hook reported
    /// what bounds it (the GPU's own figures as its last window gave them).
    pub fn rank_ceiling(&self, job: &str, rank: u32) -> Option<Ceiling> {
        self.limit_of(job, rank)?;
        let r = self.jobs.get(job)?.ranks.get(&rank)?;
        let track = self.nodes.get(r.node.as_deref()?)?.get(&r.gpu?)?;
        let gpu = Ceiling::gpu(track.total, track.used_last, (0, 0));
        let nearest = self
            .rank_limits(job, rank, gpu.gpu_total)
            .into_iter()
            .flatten()
            .filter(|c| c.left() < gpu.left())
            .min_by_key(Candidate::left);
        Some(match nearest {
            Some(c) => c.ceiling(&gpu),
            None => gpu,
        })
    }

    /// The device limit rank `rank` of `job` reported last, if any.
    pub fn limit_of(&self, job: &str, rank: u32) -> Option<&DeviceLimit> {
        self.limits.get(job)?.get(&rank)
    }
}

#[cfg(test)]
mod tests;
