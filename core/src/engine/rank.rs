//! Rank observations: linking ranks to GPUs, each rank's own memory level,
//! and the allocator statistics that drive the leak and fragmentation
//! detectors.

use std::collections::BTreeMap;

use super::alerts::{AlertKind, Severity, Subject};
use super::fits::{fit_series, fit_series_rising, fit_series_sloping_up};
use super::forecast::Room;
use super::fragmentation::{is_fragmenting, AllocatorView};
use super::input::{AllocObs, RankObs};
use super::latch::Edge;
use super::leak::{leak_rate, makes_new_highs, still_rising};
use super::regime::Placed;
use super::tracks::{AllocTrack, JobTrack, RankTrack, MAX_RANKS_PER_GPU};
use super::trend::fit;
use super::{Engine, EngineConfig, Scratch};
use crate::advice::LEAK_ADVICE;
use crate::shared::Shared;
use crate::units::fmt_bytes;

impl Engine {
    /// A training process found on a GPU.
    pub fn observe_rank(&mut self, r: &RankObs<'_>) {
        self.counters.rank += 1;
        if !self.tick(r.t) {
            return;
        }
        if r.world_size == 0 || r.rank >= r.world_size {
            self.counters.over_limit += 1;
            return;
        }
        let window_s = self.cfg.window_s;
        let Some(rank) = self.rank_track(r.t, r.job, r.rank, Some(r.world_size)) else {
            return;
        };
        let moved =
            rank.node.as_deref() != Some(r.node) || rank.gpu != Some(r.gpu) || rank.pid != r.pid;
        let revived = rank.ended_t.is_some() && moved;
        if revived {
            *rank = RankTrack::new(r.t, window_s);
        }
        let old = (rank.node.take(), rank.gpu.take());
        rank.local_rank = r.local_rank;
        rank.node = Some(r.node.to_owned());
        rank.gpu = Some(r.gpu);
        rank.pid = r.pid;
        rank.last_t = rank.last_t.max(r.t);
        if let Some(job) = self.jobs.get_mut(r.job) {
            job.world_size = r.world_size;
            if revived {
                job.ended_t = None;
            }
        }
        if moved {
            if let (Some(node), Some(gpu)) = old {
                if let Some(t) = self.nodes.get_mut(&node).and_then(|n| n.get_mut(&gpu)) {
                    t.ranks.retain(|(j, k, _)| !(j == r.job && *k == r.rank));
                }
            }
        }
        if let Some(t) = self.nodes.get_mut(r.node).and_then(|n| n.get_mut(&r.gpu)) {
            let count = t.ranks.len();
            match t
                .ranks
                .iter_mut()
                .find(|(j, k, _)| j == r.job && *k == r.rank)
            {
                Some(entry) => entry.2 = r.pid,
                None if count < MAX_RANKS_PER_GPU => {
                    t.ranks.push((r.job.to_owned(), r.rank, r.pid));
                }
                None => self.counters.over_limit += 1,
            }
        } else {
            self.pending_links
                .push((r.node.to_owned(), r.gpu, r.job.to_owned(), r.rank, r.pid));
            self.pending_links.truncate(MAX_RANKS_PER_GPU * 16);
        }
    }

    /// The rank's track, created (with its job) when new; `None` over a bound.
    pub(super) fn rank_track(
        &mut self,
        t: f64,
        job: &str,
        rank: u32,
        world_size: Option<u32>,
    ) -> Option<&mut RankTrack> {
        let (new_job, new_rank) = match self.jobs.get(job) {
            None => (true, true),
            Some(j) => (false, !j.ranks.contains_key(&rank)),
        };
        // Room in all jobs first, so that a job is not made for a rank
        // that cannot be kept.
        if new_rank && !self.room_for_a_rank(job) {
            self.counters.over_limit += 1;
            return None;
        }
        if new_job {
            if self.jobs.len() >= self.cfg.max_jobs && !self.forget_oldest_ended_job() {
                self.counters.over_limit += 1;
                return None;
            }
            let world = world_size.unwrap_or(rank + 1);
            self.jobs
                .insert(job.to_owned(), Shared::new(JobTrack::new(t, world)));
        }
        let window_s = self.cfg.window_s;
        let max_ranks = self.cfg.max_ranks_per_job;
        let tracked = new_rank.then(|| self.ranks_tracked());
        let j = self.jobs.get_mut(job)?;
        j.last_t = j.last_t.max(t);
        if let Some(total) = tracked {
            if j.ranks.len() >= max_ranks {
                self.counters.over_limit += 1;
                return None;
            }
            self.ranks.set(total + 1);
        }
        Some(
            j.ranks
                .entry(rank)
                .or_insert_with(|| Shared::new(RankTrack::new(t, window_s))),
        )
        .map(|r| &mut **r)
    }

    /// Rank tracks in all jobs, live and ended.
    pub fn ranks_tracked(&self) -> usize {
        self.ranks
            .get_or(|| self.jobs.values().map(|j| j.ranks.len()).sum())
    }

    /// Whether one more rank fits `max_ranks_per_job` in all jobs together
    /// (the cluster's `max_ranks`: hook records alone would otherwise make
    /// `max_jobs` times that many tracks), forgetting the oldest ended jobs
    /// other than `job` to make room, as a new job does.
    fn room_for_a_rank(&mut self, job: &str) -> bool {
        while self.ranks_tracked() >= self.cfg.max_ranks_per_job {
            if !self.forget_oldest_ended_job_but(Some(job)) {
                return false;
            }
        }
        true
    }

    fn forget_oldest_ended_job(&mut self) -> bool {
        self.forget_oldest_ended_job_but(None)
    }

    /// Forgets the job that ended first, other than `keep`; false when no
    /// other job has ended.
    fn forget_oldest_ended_job_but(&mut self, keep: Option<&str>) -> bool {
        let oldest = self
            .jobs
            .iter()
            .filter(|(name, _)| Some(name.as_str()) != keep)
            .filter_map(|(name, j)| j.ended_t.map(|t| (t, name.clone())))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match oldest {
            Some((_, name)) => {
                self.jobs.remove(&name);
                self.outside.remove(&name);
                self.limits.remove(&name);
                self.forgot_jobs = true;
                self.ranks.forget();
                true
            }
            None => false,
        }
    }

    /// One observation of a rank's own memory, bytes.
    pub(super) fn rank_used(&mut self, t: f64, job: &str, rank: u32, used: u64) {
        let level_points = self.cfg.imbalance.level_points;
        let warmup = self.cfg.warmup_s;
        let Some(r) = rank_in(&mut self.jobs, job, rank) else {
            return;
        };
        if r.ended_t.is_some() {
            return;
        }
        r.last_t = r.last_t.max(t);
        r.used_last = used;
        r.used_peak = r.used_peak.max(used);
        let outside = super::outside::sample_of(r, t, used, self.cfg.window_s, warmup);
        let v = used as f64;
        if let Some(point) = r.memory.add(t, v, v, v) {
            if point.t >= r.first_t + warmup {
                if r.levels.len() == level_points.max(1) {
                    r.levels.pop_front();
                }
                r.levels.push_back(point.peak);
                self.evaluate_imbalance(job, point.t);
            }
        }
        if let Some(sample) = outside {
            self.observe_outside(t, job, rank, sample);
        }
    }

    /// A rank's process is gone: its alerts resolve, its history stays.
    pub fn end_rank(&mut self, t: f64, job: &str, rank: u32) {
        let subject = Subject::Rank(job.to_owned(), rank);
        self.alerts.resolve_subject(&subject, t);
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if let Some(r) = j.ranks.get_mut(&rank) {
            r.ended_t.get_or_insert(t);
        }
        j.straggler.remove_rank(rank);
        if let Some(ranks) = self.outside.get_mut(job) {
            ranks.remove(&rank);
        }
        if let Some(ranks) = self.limits.get_mut(job) {
            ranks.remove(&rank);
        }
        if j.live_ranks() == 0 {
            j.ended_t.get_or_insert(t);
        }
    }

    /// The caching allocator's statistics for a rank.
    pub fn observe_alloc(&mut self, a: &AllocObs<'_>) {
        self.counters.alloc += 1;
        if !self.tick(a.t) {
            return;
        }
        if let Some(limit) = a.limit() {
            self.observe_limit(&a.job, a.rank, limit);
        }
        let capacity = self.rank_capacity(&a.job, a.rank);
        let window_s = self.cfg.window_s;
        let history = self.cfg.regime.max_points.max(2);
        let warmup_s = self.cfg.warmup_s;
        let Some(r) = self.rank_track(a.t, &a.job, a.rank, None) else {
            return;
        };
        if r.ended_t.is_some() {
            return;
        }
        let track = r
            .alloc
            .get_or_insert_with(|| AllocTrack::new(a.t, window_s));
        track.last_t = track.last_t.max(a.t);
        track.allocated_last = a.allocated;
        track.reserved_last = a.reserved;
        track.inactive_split = a.inactive_split.unwrap_or(0);
        track.retries = a.alloc_retries.unwrap_or(track.retries);
        track.retries_known |= a.alloc_retries.is_some();
        track.ooms = a.ooms.unwrap_or(track.ooms);
        let (al, re) = (a.allocated as f64, a.reserved as f64);
        let closed_alloc = track.allocated_env.add(a.t, al, al, al);
        let closed_res = track.reserved_env.add(a.t, re, re, re);
        if let (Some(pa), Some(pr)) = (closed_alloc, closed_res) {
            if let Some(peak) = a.peak_allocated {
                let reset = track.peak_history.back().is_some_and(|&(_, p)| peak < p);
                if reset || track.peak_history.len() == history {
                    if reset {
                        track.peak_history.clear();
                    } else {
                        track.peak_history.pop_front();
                    }
                }
                track.peak_history.push_back((pa.t, peak));
            }
            let at_last_window = track.retry_history.back().copied().unwrap_or(0);
            track.retry_streak = if track.retries > at_last_window {
                track.retry_streak + 1
            } else {
                0
            };
            if track.retry_history.len() == history {
                track.retry_history.pop_front();
            }
            track.retry_history.push_back(track.retries);
            if pa.t - window_s / 2.0 >= track.first_t + warmup_s {
                self.alloc_window(&a.job, a.rank, pa, pr);
            }
        }
        if let (Some(peak), Some(capacity)) = (a.peak_allocated, capacity) {
            self.early_leak(a, peak, capacity);
        }
    }

    /// The early watch on `peak_allocated`. `allocated` itself swings with
    /// every step's activations, but its running maximum is smooth: flat once
    /// a healthy job has warmed up (and when only the cache fragments), and
    /// climbing steadily when live tensors leak. The GPU's own early watch
    /// forecasts the OOM; this one names the leak.
    fn early_leak(&mut self, a: &AllocObs<'_>, peak: u64, capacity: f64) {
        let Some(r) = self
            .jobs
            .get_mut(a.job.as_ref())
            .and_then(|j| j.ranks.get_mut(&a.rank))
        else {
            return;
        };
        let Some(track) = r.alloc.as_mut() else {
            return;
        };
        let Some(f) = track.early.add(
            (a.t, track.first_t),
            peak as f64,
            Room::of(capacity),
            &self.cfg.early,
            &self.cfg.forecast,
            &mut self.scratch.trend,
        ) else {
            return;
        };
        let clear_after = self.cfg.for_job(&a.job).leak.clear_after;
        let edge = r.leak.update(true, 1, clear_after);
        r.leak_rate = Some(f.slope_bytes_per_s);
        let place = (r.node.clone(), r.gpu);
        self.leak_edge(
            &Subject::Rank(a.job.to_string(), a.rank),
            place,
            a.t,
            edge,
            f.slope_bytes_per_s,
            "its peak of live tensors keeps rising at a steady rate after its start-up ramp ended",
        );
    }

    /// A closed allocator window: leak and fragmentation judgements.
    fn alloc_window(
        &mut self,
        job: &str,
        rank: u32,
        allocated: super::envelope::EnvelopePoint,
        reserved: super::envelope::EnvelopePoint,
    ) {
        let cfg = self.cfg.for_job(job).clone();
        let capacity = self.rank_capacity(job, rank);
        let Some(r) = rank_in(&mut self.jobs, job, rank) else {
            return;
        };
        let Some(track) = r.alloc.as_mut() else {
            return;
        };
        let capacity = capacity.unwrap_or(track.reserved_last as f64 * 1.25);
        let placed = place_alloc_window(track, allocated, reserved, capacity, &cfg);
        let verdict = judge_alloc_window(
            track,
            placed,
            r.leak.is_on(),
            capacity,
            &cfg,
            &mut self.scratch,
        );

        // Too few windows to judge in the early watch's time: an early
        // warning's leak verdict stands.
        let early = allocated.t - track.first_t <= cfg.early.watch_s;
        let judged =
            verdict.leak.is_some() || track.allocated.len() >= cfg.leak.min_points || !early;
        let leak_edge = if judged {
            r.leak.update(
                verdict.leak.is_some(),
                cfg.leak.raise_after,
                cfg.leak.clear_after,
            )
        } else {
            Edge::Steady
        };
        r.leak_rate = verdict.leak.or(r.leak_rate.filter(|_| r.leak.is_on()));
        let frag_edge = r.fragmentation.update(
            verdict.fragmenting,
            cfg.fragmentation.raise_after,
            cfg.fragmentation.clear_after,
        );
        let (node, gpu) = (r.node.clone(), r.gpu);
        let leak_rate_now = r.leak_rate.unwrap_or(0.0);
        let subject = Subject::Rank(job.to_owned(), rank);
        let t = allocated.t;
        self.leak_edge(
            &subject,
            (node.clone(), gpu),
            t,
            leak_edge,
            leak_rate_now,
            "allocated memory's floor rises with its peaks",
        );
        match frag_edge {
            Edge::Raised => {
                let mut a = subject.alert(AlertKind::Fragmentation, t, Severity::Warning);
                a.node = node;
                a.gpu = gpu;
                a.reclaimable_bytes = Some(verdict.reclaimable);
                a.message = format!(
                    "rank {rank} of {job}: the caching allocator holds {} it does not use ({} reclaimable) and keeps growing or retrying allocations",
                    fmt_bytes(verdict.cached),
                    fmt_bytes(verdict.reclaimable as u64)
                );
                a.recommendation = Some(
                    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or release the cache with torch.cuda.empty_cache() at a step boundary".into(),
                );
                self.alerts.raise(subject, a);
            }
            Edge::Cleared => {
                self.alerts.resolve(AlertKind::Fragmentation, &subject, t);
            }
            Edge::Steady => {
                self.alerts.update(AlertKind::Fragmentation, &subject, |a| {
                    a.updated_t = t;
                    a.reclaimable_bytes = Some(verdict.reclaimable);
                });
            }
        }
    }

    /// Raises or resolves a rank's leak alert on a latch edge; `why` says
    /// what the evidence is.
    pub(super) fn leak_edge(
        &mut self,
        subject: &Subject,
        (node, gpu): (Option<String>, Option<u32>),
        t: f64,
        edge: Edge,
        rate: f64,
        why: &str,
    ) {
        let firing = self.alerts.is_active(AlertKind::Leak, subject);
        match edge {
            // While it fires, the text and rate follow the latest fit;
            // `raise` keeps its id and when it first fired.
            Edge::Raised | Edge::Steady if edge == Edge::Raised || firing => {
                let mut a = subject.alert(AlertKind::Leak, t, Severity::Warning);
                a.node = node;
                a.gpu = gpu;
                a.rate_bytes_per_s = Some(rate);
                let who = subject.describe();
                a.message = format!("{who} leaks about {}/s: {why}", fmt_bytes(rate as u64));
                a.recommendation = Some(LEAK_ADVICE.into());
                self.alerts.raise(subject.clone(), a);
            }
            Edge::Cleared => {
                self.alerts.resolve(AlertKind::Leak, subject, t);
            }
            Edge::Raised | Edge::Steady => {}
        }
    }

    /// What a rank's allocator may reach, bytes: its GPU's capacity, or
    /// less where its cap or its slice of the GPU is smaller.
    fn rank_capacity(&self, job: &str, rank: u32) -> Option<f64> {
        let r = self.jobs.get(job)?.ranks.get(&rank)?;
        let gpu = self.nodes.get(r.node.as_deref()?)?.get(&r.gpu?)?;
        Some(self.rank_limit_bytes(job, rank, gpu.total) as f64)
    }
}

/// The track of `rank` of `job` in `jobs`, to change (copied first if a
/// snapshot still shares it). Borrows only the jobs, not the engine.
pub(super) fn rank_in<'a>(
    jobs: &'a mut BTreeMap<String, Shared<JobTrack>>,
    job: &str,
    rank: u32,
) -> Option<&'a mut RankTrack> {
    jobs.get_mut(job)?.ranks.get_mut(&rank).map(|r| &mut **r)
}

/// Places a closed window's allocated and reserved envelope points in their
/// regime series, and the cache's size (reserved less allocated peak) in its
/// own, which starts again with a new reserved regime. Returns where the
/// allocated and the reserved point landed.
fn place_alloc_window(
    track: &mut AllocTrack,
    allocated: super::envelope::EnvelopePoint,
    reserved: super::envelope::EnvelopePoint,
    capacity: f64,
    cfg: &EngineConfig,
) -> (Placed, Placed) {
    let placed_a = track.allocated.push(allocated, capacity, &cfg.regime);
    let placed_r = track.reserved.push(reserved, capacity, &cfg.regime);
    if placed_r == Placed::NewRegime {
        track.gap.clear();
    }
    if track.gap.len() == cfg.regime.max_points.max(3) {
        track.gap.pop_front();
    }
    track
        .gap
        .push_back((reserved.t, reserved.peak - allocated.peak));
    (placed_a, placed_r)
}

/// What one closed allocator window says about a rank.
struct AllocVerdict {
    /// The leak rate, bytes/s, when the evidence of a leak holds.
    leak: Option<f64>,
    /// Whether the allocator fragments: its cache grows or it retries.
    fragmenting: bool,
    /// Bytes of the cache that could be given back.
    reclaimable: f64,
    /// Bytes reserved and not allocated.
    cached: u64,
}

/// Fits the window's series and weighs the leak and fragmentation evidence;
/// `leak_on` says whether the rank's leak latch is on.
fn judge_alloc_window(
    track: &AllocTrack,
    (placed_a, placed_r): (Placed, Placed),
    leak_on: bool,
    capacity: f64,
    cfg: &EngineConfig,
    scratch: &mut Scratch,
) -> AllocVerdict {
    // Fragmentation reads the reserved trend only when it rises that surely.
    let reserved_peaks = fit_series_rising(
        &track.reserved,
        |p| p.peak,
        cfg.fragmentation.p_max,
        cfg,
        scratch,
    );
    // Fragmentation compares the allocated trend with that one; without
    // it, only a leak reads the allocated trend, and only when it rises.
    let alloc_peaks = if reserved_peaks.is_some() {
        fit_series(&track.allocated, |p| p.peak, cfg, scratch)
    } else {
        fit_series_sloping_up(&track.allocated, |p| p.peak, cfg, scratch)
    };

    // Fits cost O(n^2): the troughs and the gap are fitted only when the
    // cheaper evidence already points that way.
    let leak = match alloc_peaks {
        Some(peaks) if placed_a != Placed::Pending && peaks.slope > 0.0 => {
            fit_series_rising(&track.allocated, |p| p.trough, cfg.leak.p_max, cfg, scratch)
                .and_then(|troughs| leak_rate(&peaks, &troughs, capacity, &cfg.leak))
                .filter(|&rate| {
                    leak_on
                        || (still_rising(&track.allocated, rate, cfg, scratch)
                            && makes_new_highs(&track.peak_history, rate, cfg.leak.min_points))
                })
        }
        _ => None,
    };
    let reserved_growing =
        reserved_peaks.is_some_and(|r| r.p_up <= cfg.fragmentation.p_max && r.slope_low > 0.0);
    let gap = if reserved_growing {
        scratch.points.clear();
        scratch.points.extend(track.gap.iter().copied());
        fit(&scratch.points, cfg.z_interval, &mut scratch.trend)
    } else {
        None
    };
    let retries_grew = track
        .retries_known
        .then(|| track.retry_history.back() > track.retry_history.front());
    let view = AllocatorView {
        gap: gap.as_ref(),
        retries_grew,
        reserved: reserved_peaks.as_ref(),
        allocated: alloc_peaks.as_ref(),
        retry_streak: track.retry_streak,
        reserved_bytes: track.reserved_last as f64,
        allocated_bytes: track.allocated_last as f64,
        inactive_split_bytes: track.inactive_split as f64,
    };
    let fragmenting =
        placed_r != Placed::Pending && is_fragmenting(&view, capacity, &cfg.fragmentation);
    let reclaimable = view.reclaimable_bytes();
    let cached = track.reserved_last.saturating_sub(track.allocated_last);
    AllocVerdict {
        leak,
        fragmenting,
        reclaimable,
        cached,
    }
}
