//! GPU observations: device statistics, the used-memory envelope and its
//! regime, the OOM forecast, and per-process memory handed to the ranks.

use super::alerts::{Alert, AlertKind, Severity, Subject};
use super::envelope::EnvelopePoint;
use super::fits::{fit_series_rising, fit_series_sloping_up};
use super::forecast::{forecast, OomForecast, Risk};
use super::input::GpuObs;
use super::latch::Edge;
use super::leak::leak_rate;
use super::limits::{Binding, Ceiling};
use super::rank::rank_in;
use super::regime::Placed;
use super::tracks::{GpuTrack, GpuTracks};
use super::Engine;
use crate::advice::{reclaimable_bytes, release_worth_advising, LEAK_ADVICE};
use crate::shared::Shared;
use crate::units::fmt_bytes;

/// A trend at least this significant marks a GPU as growing (imbalance then
/// leaves its ranks alone: growth is the leak or forecast detector's call).
const GROWING_P: f64 = 0.01;

impl Engine {
    /// One GPU sample or agent window.
    pub fn observe_gpu(&mut self, g: &GpuObs<'_>) {
        self.counters.gpu += 1;
        if !self.tick(g.t) {
            return;
        }
        if g.total == 0 {
            return;
        }
        let window_s = self.cfg.window_s;
        if !self
            .nodes
            .get(g.node)
            .is_some_and(|n| n.contains_key(&g.gpu))
        {
            if self.gpu_count >= self.cfg.max_gpus {
                self.counters.over_limit += 1;
                return;
            }
            self.gpu_count += 1;
            self.nodes.entry(g.node.to_owned()).or_default().insert(
                g.gpu,
                Shared::new(GpuTrack::new(g.t, g.uuid, g.name, g.total, window_s)),
            );
            self.link_pending(g.node, g.gpu);
        }
        let Some(track) = self.nodes.get_mut(g.node).and_then(|n| n.get_mut(&g.gpu)) else {
            return;
        };
        track.total = g.total;
        track.last_t = track.last_t.max(g.t);
        track.samples += 1;
        track.used_sum += g.used as f64;
        track.used_peak = track.used_peak.max(g.used_high);
        track.used_last = g.used;
        if let Some(u) = g.util {
            track.util_sum += u;
            track.util_samples += 1;
            track.util_last = Some(u);
        }
        track.clock_mhz = g.sm_clock_mhz.or(track.clock_mhz);
        track.power_w = g.power_w.or(track.power_w);
        let Some(track) = self.nodes.get(g.node).and_then(|n| n.get(&g.gpu)) else {
            return;
        };
        let ceiling = self.ceiling((track.total, &track.ranks), g.used_high, g.procs);
        self.memory_level(g.node, g.gpu, g.t, &ceiling);
        let Some(track) = self.nodes.get_mut(g.node).and_then(|n| n.get_mut(&g.gpu)) else {
            return;
        };

        let idle = (g.used_high as f64) < self.cfg.idle_frac * g.total as f64;
        if idle {
            if track.active_since.take().is_some() {
                self.gpu_went_idle(g.node, g.gpu, g.t);
            }
            return;
        }
        let active_since = *track.active_since.get_or_insert(g.t);
        let closed = track
            .envelope
            .add(g.t, g.used_low as f64, g.used_high as f64, g.used as f64);
        let early = track.early.add(
            (g.t, active_since),
            g.used_high as f64,
            ceiling.room(),
            &self.cfg.early,
            &self.cfg.forecast,
            &mut self.scratch.trend,
        );
        self.rank_memory(g);
        if let Some(f) = early {
            self.early_warning(g.node, g.gpu, f, &ceiling);
        }
        if let Some(point) = closed {
            if point.t - window_s / 2.0 >= active_since + self.cfg.warmup_s {
                self.gpu_window(g.node, g.gpu, point, &ceiling);
            }
        }
    }

    /// Links ranks that were seen before their GPU.
    fn link_pending(&mut self, node: &str, gpu: u32) {
        let (mine, rest) = std::mem::take(&mut self.pending_links)
            .into_iter()
            .partition(|(n, g, ..)| n == node && *g == gpu);
        self.pending_links = rest;
        let mine: Vec<(String, u32, String, u32, u32)> = mine;
        if let Some(track) = self.nodes.get_mut(node).and_then(|n| n.get_mut(&gpu)) {
            for (_, _, job, rank, pid) in mine {
                if track.ranks.len() < super::tracks::MAX_RANKS_PER_GPU
                    && !track.ranks.iter().any(|(j, k, _)| *j == job && *k == rank)
                {
                    track.ranks.push((job, rank, pid));
                }
            }
        }
    }

    /// Hands per-process memory to the ranks on this GPU (the GPU's own
    /// memory when it lists no processes and holds a single rank).
    fn rank_memory(&mut self, g: &GpuObs<'_>) {
        let Some(track) = self.nodes.get(g.node).and_then(|n| n.get(&g.gpu)) else {
            return;
        };
        if track.ranks.is_empty() {
            return;
        }
        let sole = (track.ranks.len() == 1 && g.procs.is_empty()).then(|| track.ranks[0].clone());
        let mut fed: Vec<(String, u32, u64)> = Vec::new();
        if let Some((job, rank, _)) = sole {
            fed.push((job, rank, g.used_high));
        } else {
            for p in g.procs {
                if let Some((job, rank, _)) = track.ranks.iter().find(|r| r.2 == p.pid) {
                    fed.push((job.clone(), *rank, p.used));
                }
            }
        }
        for (job, rank, used) in fed {
            self.rank_used(g.t, &job, rank, used);
        }
    }

    /// A GPU's closed envelope window: regime, forecast (against the limit
    /// met first, `ceiling`), NVML-based leak.
    fn gpu_window(&mut self, node: &str, gpu: u32, point: EnvelopePoint, ceiling: &Ceiling) {
        let cfg = self.cfg.effective().clone();
        let Some(track) = self.nodes.get_mut(node).and_then(|n| n.get_mut(&gpu)) else {
            return;
        };
        let capacity = track.total as f64;
        let placed = track.regime.push(point, capacity, &cfg.regime);
        if placed == Placed::Pending {
            return;
        }
        let scratch = &mut self.scratch;
        // Growth, the forecast and the NVML leak all need a rising slope.
        let peaks = fit_series_sloping_up(&track.regime, |p| p.peak, &cfg, scratch);
        track.growing = peaks.is_some_and(|t| {
            t.p_up <= GROWING_P && t.slope > 0.0 && t.slope * t.span_s >= 0.005 * capacity
        });
        let room = ceiling.room();
        let fc = peaks.and_then(|t| forecast(&t, track.regime.spike_margin(), room, &cfg.forecast));
        // Until the regular forecast has its windows, the early watch speaks.
        if fc.is_some() || !track.early.holds() {
            track.forecast = fc;
        }
        let at_risk = match fc {
            Some(f) => f.risk >= Risk::Warning,
            None => track.early.holds(),
        };
        let edge = track
            .oom_latch
            .update(at_risk, cfg.oom_raise_after, cfg.oom_clear_after);
        if let Some(f) = fc.filter(|_| track.oom_latch.is_on()) {
            track.risk = f.risk.max(Risk::Warning);
        } else if !track.oom_latch.is_on() {
            track.risk = fc.map_or(Risk::None, |f| f.risk.min(Risk::Low));
        }
        // NVML-only leak evidence, for a GPU holding one rank without allocator stats.
        let sole_rank = sole_rank(track);
        let nvml_leak = match (&sole_rank, peaks) {
            (Some(_), Some(p)) if p.slope > 0.0 => {
                fit_series_rising(&track.regime, |p| p.trough, cfg.leak.p_max, &cfg, scratch)
                    .and_then(|troughs| leak_rate(&p, &troughs, capacity, &cfg.leak))
            }
            _ => None,
        };
        // In the early watch's time a short series leaves its verdict standing.
        let early = track
            .active_since
            .is_some_and(|since| point.t - since <= cfg.early.watch_s);
        let judged = nvml_leak.is_some() || track.regime.len() >= cfg.leak.min_points || !early;
        self.oom_edge(node, gpu, point.t, (edge, fc), ceiling);
        if let Some((job, rank)) = sole_rank {
            self.nvml_leak(&job, rank, node, gpu, point.t, nvml_leak, judged);
        }
    }

    /// Applies an OOM latch edge (or a steady forecast) to every subject of
    /// the GPU: its ranks, or the GPU itself.
    fn oom_edge(
        &mut self,
        node: &str,
        gpu: u32,
        t: f64,
        (edge, fc): (Edge, Option<OomForecast>),
        ceiling: &Ceiling,
    ) {
        let Some(track) = self.nodes.get(node).and_then(|n| n.get(&gpu)) else {
            return;
        };
        let subjects = track.oom_subjects(node, gpu);
        let risk = track.risk;
        let recommendation = (edge == Edge::Raised).then(|| {
            let usual = self.oom_recommendation(&subjects);
            match ceiling.advice() {
                Some(first) => format!("{first}; else {usual}"),
                None => usual,
            }
        });
        for subject in &subjects {
            self.apply_oom(
                subject,
                (node, gpu),
                t,
                (edge, risk, fc),
                ceiling,
                recommendation.clone(),
            );
        }
    }

    /// The early watch confirmed growth that started with the job: raise
    /// (or update) the OOM alert now, and on a GPU holding one rank, that
    /// rank's leak.
    fn early_warning(&mut self, node: &str, gpu: u32, f: OomForecast, ceiling: &Ceiling) {
        let clear_after = self.cfg.oom_clear_after;
        let Some(track) = self.nodes.get_mut(node).and_then(|n| n.get_mut(&gpu)) else {
            return;
        };
        track.forecast = Some(f);
        track.risk = track.risk.max(f.risk);
        let edge = track.oom_latch.update(true, 1, clear_after);
        let sole_rank = sole_rank(track);
        self.oom_edge(node, gpu, f.t, (edge, Some(f)), ceiling);
        // The GPU's memory also grows when the cache fragments: a rank with
        // allocator stats is called leaking by its allocator only.
        let Some((job, rank)) = sole_rank else {
            return;
        };
        let Some(r) = rank_in(&mut self.jobs, &job, rank) else {
            return;
        };
        if r.alloc.is_some() {
            return;
        }
        let leak_edge = r.leak.update(true, 1, self.cfg.leak.clear_after);
        r.leak_rate = Some(f.slope_bytes_per_s);
        self.leak_edge(
            &Subject::Rank(job, rank),
            (Some(node.to_owned()), Some(gpu)),
            f.t,
            leak_edge,
            f.slope_bytes_per_s,
            "its GPU's memory keeps growing at a steady rate after its start-up ramp ended",
        );
    }

    fn apply_oom(
        &mut self,
        subject: &Subject,
        (node, gpu): (&str, u32),
        t: f64,
        (edge, risk, fc): (Edge, Risk, Option<OomForecast>),
        ceiling: &Ceiling,
        recommendation: Option<String>,
    ) {
        match (edge, fc) {
            (Edge::Cleared, _) => {
                self.alerts.resolve(AlertKind::OomPredicted, subject, t);
            }
            // While it fires, the alert says what the latest forecast says:
            // its text, severity (up or down) and forecast; `raise` keeps
            // its id and when it first fired.
            (Edge::Raised, Some(f)) => {
                let alert = oom_alert(subject, (node, gpu), t, (risk, &f), ceiling, recommendation);
                self.alerts.raise(subject.clone(), alert);
            }
            // The recommendation was made when it was raised, and stands.
            (Edge::Steady, Some(f)) => {
                let key = (AlertKind::OomPredicted, subject.clone());
                let Some(open) = self.alerts.active_mut(&key) else {
                    return;
                };
                let kept = recommendation.or_else(|| open.recommendation.take());
                let alert = oom_alert(subject, (node, gpu), t, (risk, &f), ceiling, kept);
                self.alerts.raise(key.1, alert);
            }
            _ => {}
        }
    }

    /// What to suggest for an OOM on these ranks: release the cache when
    /// much of it is reclaimable, `expandable_segments` when the allocator
    /// fragments, a smaller batch otherwise.
    fn oom_recommendation(&self, subjects: &[Subject]) -> String {
        for s in subjects {
            let Subject::Rank(job, rank) = s else {
                continue;
            };
            let Some(r) = self.jobs.get(job).and_then(|j| j.ranks.get(rank)) else {
                continue;
            };
            if r.fragmentation.is_on() {
                return "the caching allocator fragments: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into();
            }
            if let Some(a) = &r.alloc {
                let reclaimable =
                    reclaimable_bytes(a.reserved_last, a.allocated_last, a.inactive_split);
                if release_worth_advising(reclaimable, a.reserved_last) {
                    return format!(
                        "release cached memory (torch.cuda.empty_cache() frees about {})",
                        fmt_bytes(reclaimable)
                    );
                }
            }
            if r.leak.is_on() {
                return format!("memory leaks: {LEAK_ADVICE}");
            }
        }
        "reduce the batch size or sequence length, or enable activation checkpointing".into()
    }

    /// Applies NVML-only leak evidence to a rank that has no allocator stats;
    /// a verdict not `judged` (a short series in the early watch's time)
    /// leaves it as it stands.
    #[allow(clippy::too_many_arguments)]
    fn nvml_leak(
        &mut self,
        job: &str,
        rank: u32,
        node: &str,
        gpu: u32,
        t: f64,
        rate: Option<f64>,
        judged: bool,
    ) {
        let params = self.cfg.leak;
        let Some(r) = rank_in(&mut self.jobs, job, rank) else {
            return;
        };
        if r.alloc.is_some() || !judged {
            return;
        }
        let edge = r
            .leak
            .update(rate.is_some(), params.raise_after, params.clear_after);
        r.leak_rate = rate.or(r.leak_rate.filter(|_| r.leak.is_on()));
        let rate = r.leak_rate.unwrap_or(0.0);
        let subject = Subject::Rank(job.to_owned(), rank);
        self.leak_edge(
            &subject,
            (Some(node.to_owned()), Some(gpu)),
            t,
            edge,
            rate,
            "its GPU's memory floor rises with its peaks",
        );
    }

    /// A GPU's memory fell to idle: its processes ended (an OOM kills the
    /// process; so does the end of training).
    fn gpu_went_idle(&mut self, node: &str, gpu: u32, t: f64) {
        let window_s = self.cfg.window_s;
        let Some(track) = self.nodes.get_mut(node).and_then(|n| n.get_mut(&gpu)) else {
            return;
        };
        track.envelope = super::envelope::Envelope::new(window_s);
        track.regime = super::regime::RegimeSeries::new();
        track.forecast = None;
        track.risk = Risk::None;
        track.oom_latch = Default::default();
        track.growing = false;
        track.early.reset();
        let ranks = std::mem::take(&mut track.ranks);
        self.alerts
            .resolve_subject(&Subject::Gpu(node.to_owned(), gpu), t);
        for (job, rank, _) in ranks {
            self.end_rank(t, &job, rank);
        }
    }

    /// The device tracks by node, for views.
    pub(crate) fn gpu_tracks(&self) -> &GpuTracks {
        &self.nodes
    }
}

/// The GPU's rank when it holds exactly one.
fn sole_rank(track: &GpuTrack) -> Option<(String, u32)> {
    match track.ranks.as_slice() {
        [(job, rank, _)] => Some((job.clone(), *rank)),
        _ => None,
    }
}

pub(super) fn severity_of(risk: Risk) -> Severity {
    match risk {
        Risk::Critical => Severity::Critical,
        Risk::High => Severity::High,
        _ => Severity::Warning,
    }
}

fn oom_alert(
    subject: &Subject,
    (node, gpu): (&str, u32),
    t: f64,
    (risk, f): (Risk, &OomForecast),
    ceiling: &Ceiling,
    recommendation: Option<String>,
) -> Alert {
    let mut a = subject.alert(AlertKind::OomPredicted, t, severity_of(risk));
    a.node = Some(node.to_owned());
    a.gpu = Some(gpu);
    a.predicted_oom_t = Some(f.predicted_oom_t);
    a.predicted_oom_interval = Some([f.earliest_oom_t, f.latest_oom_t]);
    a.confidence = Some(f.confidence);
    a.rate_bytes_per_s = Some(f.slope_bytes_per_s);
    let who = subject.describe();
    let left = (f.predicted_oom_t - t).max(0.0);
    a.message = match &ceiling.binding {
        Binding::Gpu { others: 0, .. } => format!(
            "{who} is forecast to run out of GPU memory in about {:.0} s ({} of {} used, growing {}/s, confidence {:.0} %)",
            left,
            fmt_bytes(f.level_bytes as u64),
            fmt_bytes(ceiling.gpu_total),
            fmt_bytes(f.slope_bytes_per_s as u64),
            f.confidence * 100.0
        ),
        _ => format!(
            "{who} is forecast to run out of GPU memory in about {:.0} s, at {} ({} of it in use, growing {}/s, confidence {:.0} %)",
            left,
            ceiling.describe(),
            fmt_bytes(ceiling.against),
            fmt_bytes(f.slope_bytes_per_s as u64),
            f.confidence * 100.0
        ),
    };
    a.recommendation = recommendation;
    a
}
