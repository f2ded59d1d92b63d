//! Job-wide detectors: imbalance across ranks' memory and stragglers across
//! ranks' step sections.

use super::alerts::{AlertKind, Severity, Subject};
use super::imbalance::imbalanced;
use super::latch::Edge;
use super::robust_stats::median_of;
use super::straggler::arrivals::MIN_LATE_MS;
use super::straggler::links::LinkEvent;
use super::straggler::stages::StageEvent;
use super::straggler::{Comms, StragglerEvent};
use super::tracks::{GpuTracks, JobTrack};
use super::Engine;
use crate::units::fmt_bytes;
use gpumon_proto::P2P_WAITS;

impl Engine {
    /// One rank's finished training step with its section timings (ms) and
    /// its peer group (see `straggler::classes`; `None`: the whole job).
    #[allow(clippy::too_many_arguments)]
    pub fn observe_step<'s>(
        &mut self,
        t: f64,
        job: &str,
        rank: u32,
        step: u64,
        duration_ms: f64,
        sections: impl IntoIterator<Item = (&'s str, f64)>,
        group: Option<u32>,
    ) {
        let comms = Comms::default();
        self.observe_waited_step(t, job, rank, step, duration_ms, sections, group, comms);
    }

    /// [`Self::observe_step`] with what the hook says of the step's
    /// collectives (on the CPU clock): waits per process group, and each
    /// collective where it lists them.
    #[allow(clippy::too_many_arguments)]
    pub fn observe_waited_step<'s>(
        &mut self,
        t: f64,
        job: &str,
        rank: u32,
        step: u64,
        duration_ms: f64,
        sections: impl IntoIterator<Item = (&'s str, f64)>,
        group: Option<u32>,
        comms: Comms<'_>,
    ) {
        self.counters.step += 1;
        if !self.tick(t) {
            return;
        }
        if !duration_ms.is_finite() || duration_ms < 0.0 {
            return;
        }
        let params = self.cfg.for_job(job).straggler;
        let Some(r) = self.rank_track(t, job, rank, None) else {
            return;
        };
        if r.ended_t.is_some() {
            return;
        }
        r.steps += 1;
        r.last_step_ms = Some(duration_ms);
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        // Live ranks can outnumber the world size only when the job has more
        // ranks than that: counting them (a walk over the job's ranks) for
        // every step record of a 16k-rank job was most of the leader's time.
        let world = if j.ranks.len() <= j.world_size as usize {
            j.world_size
        } else {
            j.world_size.max(j.live_ranks() as u32)
        };
        let sections = sections
            .into_iter()
            .filter(|(_, ms)| ms.is_finite() && *ms >= 0.0);
        let group = group.unwrap_or(0);
        let events = j.straggler.add_waited_step(
            world,
            rank,
            group,
            step,
            t,
            duration_ms,
            sections,
            comms,
            &params,
        );
        let stages = j.straggler.take_stage_events();
        let links = j.straggler.take_link_events();
        for e in events {
            self.straggler_event(job, e);
        }
        for e in stages {
            self.stage_event(job, e);
        }
        for e in links {
            self.link_event(job, e);
        }
    }

    /// Collectives listed one by one in `job`'s open steps (0 for a job not
    /// tracked).
    pub fn pending_arrivals(&self, job: &str) -> usize {
        self.jobs
            .get(job)
            .map_or(0, |j| j.straggler.pending_arrivals())
    }

    fn link_event(&mut self, job: &str, e: LinkEvent) {
        let lowest = e.ranks.first().copied().unwrap_or(0);
        let subject = Subject::Rank(job.to_owned(), lowest);
        if e.edge == Edge::Cleared {
            self.alerts.resolve(AlertKind::SlowLink, &subject, e.t);
            return;
        }
        let mut a = subject.alert(AlertKind::SlowLink, e.t, Severity::Warning);
        let ranks: Vec<String> = e.ranks.iter().map(u32::to_string).collect();
        let extra_ms = e.floor_ms - e.baseline_floor_ms;
        a.slowdown = (e.baseline_floor_ms > 0.0).then(|| e.floor_ms / e.baseline_floor_ms);
        a.section = Some(format!("process group {}", e.group));
        a.message = format!(
            "the collectives of process group {} (ranks {}) of {job} take at least {:.0} ms per step for every member, against {:.0} ms before (+{:.0} ms, {:.0} % of a {:.0} ms step), while the members' own work is unchanged ({:.0} ms against {:.0} ms): the link between them is slow or congested",
            e.group,
            ranks.join(", "),
            e.floor_ms,
            e.baseline_floor_ms,
            extra_ms,
            extra_ms / e.step_ms.max(f64::MIN_POSITIVE) * 100.0,
            e.step_ms,
            e.busy_ms,
            e.baseline_busy_ms,
        );
        a.recommendation = Some(
            "check the network path between these ranks' nodes (link errors, a degraded NIC or switch port, congestion from other jobs) and the collective's size".into(),
        );
        self.alerts.raise(subject, a);
    }

    fn stage_event(&mut self, job: &str, e: StageEvent) {
        let subject = Subject::Rank(job.to_owned(), e.stage);
        if e.edge == Edge::Cleared {
            self.alerts
                .resolve(AlertKind::StageImbalance, &subject, e.t);
            return;
        }
        let mut a = subject.alert(AlertKind::StageImbalance, e.t, Severity::Warning);
        let ranks: Vec<String> = e.ranks.iter().map(u32::to_string).collect();
        let extra_ms = e.work_ms - e.others_ms;
        a.slowdown = (e.others_ms > 0.0).then(|| e.work_ms / e.others_ms);
        a.message = format!(
            "the pipeline stage of ranks {} of {job} does {:.0} ms of work per step against {:.0} ms on the other stages (+{:.0} ms, {:.0} % of a {:.0} ms step), and the other stages wait about {:.0} ms per step longer than it does",
            ranks.join(", "),
            e.work_ms,
            e.others_ms,
            extra_ms,
            extra_ms / e.step_ms.max(f64::MIN_POSITIVE) * 100.0,
            e.step_ms,
            e.wait_ms.max(0.0),
        );
        a.recommendation = Some(
            "move layers from this stage to the others (or give it fewer microbatch-heavy parts such as the loss or the embedding) so every stage does about the same work per step".into(),
        );
        self.alerts.raise(subject, a);
    }

    fn straggler_event(&mut self, job: &str, e: StragglerEvent) {
        let subject = Subject::Rank(job.to_owned(), e.rank);
        if e.edge == Edge::Cleared {
            self.alerts.resolve(AlertKind::Straggler, &subject, e.t);
            return;
        }
        let (node, gpu) = self
            .jobs
            .get(job)
            .and_then(|j| j.ranks.get(&e.rank))
            .map_or((None, None), |r| (r.node.clone(), r.gpu));
        // A fifth of every step lost to one rank is worth waking someone for.
        let severity = if e.excess_frac >= 0.2 {
            Severity::High
        } else {
            Severity::Warning
        };
        let mut a = subject.alert(AlertKind::Straggler, e.t, severity);
        a.node = node;
        a.gpu = gpu;
        a.slowdown = Some(e.section_slowdown());
        a.section = Some(e.section.clone());
        let extra_ms = e.section_ms - e.peer_section_ms;
        let stage = match e.peers.as_slice() {
            [] => String::new(),
            [one] => format!(" (rank {one}, in its pipeline stage)"),
            many => {
                let ranks: Vec<String> = many.iter().map(u32::to_string).collect();
                format!(" (ranks {}, in its pipeline stage)", ranks.join(", "))
            }
        };
        let mut message = format!(
            "rank {} of {job} is a straggler: its {} takes {:.0} ms against its peers' {:.0} ms (+{:.0} ms, +{:.0} %), and its peers{stage} wait about {:.0} ms per step for it in {} ({:.1} % of a {:.0} ms step)",
            e.rank,
            e.section,
            e.section_ms,
            e.peer_section_ms,
            extra_ms,
            (e.section_slowdown() - 1.0) * 100.0,
            e.excess_frac * e.step_ms,
            e.wait_in,
            e.excess_frac * 100.0,
            e.step_ms
        );
        if !e.groups.is_empty() {
            let parts: Vec<String> = e
                .groups
                .iter()
                .map(|(group, ms)| {
                    let arrived = e.arrivals.iter().find(|a| &a.group == group);
                    match (group.as_str(), arrived) {
                        (P2P_WAITS, _) => format!("in sends and receives ({ms:.0} ms per step)"),
                        (g, None) => format!("in process group {g} ({ms:.0} ms per step)"),
                        (g, Some(a)) => format!(
                            "in process group {g} ({ms:.0} ms per step; of the {} collectives there that one member entered {MIN_LATE_MS:.0} ms or more after all the others, it was that member in {}, {:.1} ms after the others, {:.0} % of all the lateness, on clocks aligned on the collectives' ends)",
                            a.decided, a.last, a.late_ms, a.late_share * 100.0
                        ),
                    }
                })
                .collect();
            message.push_str(": ");
            message.push_str(&parts.join(", "));
        }
        let cause = if e.section == "data" {
            Some(format!(
                "likely cause: waiting on its data loader ({extra_ms:.0} ms more per step in data)"
            ))
        } else {
            self.hardware_difference(job, e.rank)
                .map(|why| format!("likely cause: throttling, {why}"))
        };
        if let Some(cause) = cause {
            message.push_str("; ");
            message.push_str(&cause);
        }
        a.message = message;
        a.recommendation = Some(match e.section.as_str() {
            "data" => "check the input pipeline on this rank's node (dataloader workers, storage, CPU contention)".into(),
            _ => "check this rank's GPU (clocks, power and thermal throttling) and its node's neighbours".into(),
        });
        self.alerts.raise(subject, a);
    }

    /// How the rank's GPU clock and power differ from its peers', if they do
    /// by more than 3 %.
    fn hardware_difference(&self, job: &str, rank: u32) -> Option<String> {
        let j = self.jobs.get(job)?;
        let gpu_of =
            |r: &super::tracks::RankTrack| self.nodes.get(r.node.as_deref()?)?.get(&r.gpu?);
        let mine = gpu_of(j.ranks.get(&rank)?)?;
        let peers: Vec<_> = j
            .ranks
            .iter()
            .filter(|(k, r)| **k != rank && r.ended_t.is_none())
            .filter_map(|(_, r)| gpu_of(r))
            .collect();
        let mut scratch = Vec::new();
        let mut parts = Vec::new();
        if let (Some(c), Some(peer)) = (
            mine.clock_mhz,
            median_of(peers.iter().filter_map(|g| g.clock_mhz), &mut scratch),
        ) {
            if peer > 0.0 && (c / peer - 1.0).abs() > 0.03 {
                parts.push(format!(
                    "its GPU's SM clock is {c:.0} MHz against {peer:.0} MHz on its peers'"
                ));
            }
        }
        if let (Some(p), Some(peer)) = (
            mine.power_w,
            median_of(peers.iter().filter_map(|g| g.power_w), &mut scratch),
        ) {
            if peer > 0.0 && (p / peer - 1.0).abs() > 0.03 {
                parts.push(format!("its power draw is {p:.0} W against {peer:.0} W"));
            }
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }

    /// Compares the ranks' memory levels, at most once per window per job.
    pub(super) fn evaluate_imbalance(&mut self, job: &str, t: f64) {
        let params = self.cfg.for_job(job).imbalance;
        let window = (t / self.cfg.window_s).floor() as i64;
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        if j.imbalance_window >= window {
            return;
        }
        let levels = imbalance_levels(
            &self.nodes,
            j,
            params.level_points,
            &mut self.scratch.values,
        );
        let found = imbalanced(&levels, &params, &mut self.scratch.values);
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.imbalance_window = window;
        let mut raised = Vec::new();
        let mut cleared = Vec::new();
        for &(rank, _) in &levels {
            let hit = found.iter().find(|e| e.rank == rank).copied();
            let Some(r) = j.ranks.get_mut(&rank) else {
                continue;
            };
            match r
                .imbalance
                .update(hit.is_some(), params.raise_after, params.clear_after)
            {
                Edge::Raised => raised.push((rank, hit, r.node.clone(), r.gpu)),
                Edge::Cleared => cleared.push(rank),
                Edge::Steady => {}
            }
        }
        for rank in cleared {
            self.alerts.resolve(
                AlertKind::Imbalance,
                &Subject::Rank(job.to_owned(), rank),
                t,
            );
        }
        for (rank, hit, node, gpu) in raised {
            let Some(e) = hit else { continue };
            let subject = Subject::Rank(job.to_owned(), rank);
            let mut a = subject.alert(AlertKind::Imbalance, t, Severity::Warning);
            a.node = node;
            a.gpu = gpu;
            a.excess_bytes = Some(e.excess_bytes);
            a.excess_pct = Some(e.excess_frac * 100.0);
            a.message = format!(
                "rank {rank} of {job} holds {} more GPU memory than its peers' median of {} (+{:.0} %); every rank must fit the largest",
                fmt_bytes(e.excess_bytes as u64),
                fmt_bytes(e.median_bytes as u64),
                e.excess_frac * 100.0
            );
            a.recommendation = Some(
                "look for work only this rank does (logging, metrics, evaluation, embedding or vocabulary shards) and spread it"
                    .into(),
            );
            self.alerts.raise(subject, a);
        }
    }
}

/// The memory level (median of recent window peaks) of each live rank that
/// takes part in the imbalance comparison. A growing rank's level is a moving
/// target: it is neither judged nor part of the reference (its growth is the
/// leak detector's call).
pub(super) fn imbalance_levels(
    nodes: &GpuTracks,
    j: &JobTrack,
    level_points: usize,
    scratch: &mut Vec<f64>,
) -> Vec<(u32, f64)> {
    let mut levels = Vec::with_capacity(j.ranks.len());
    for (&rank, r) in &j.ranks {
        if r.ended_t.is_some() || r.levels.len() < level_points {
            continue;
        }
        let Some(level) = median_of(r.levels.iter().copied(), scratch) else {
            continue;
        };
        let gpu_growing = r
            .node
            .as_deref()
            .and_then(|n| nodes.get(n))
            .and_then(|n| n.get(&r.gpu?))
            .is_some_and(|g| g.growing || g.oom_latch.is_on());
        if !(gpu_growing || r.leak.is_on() || r.fragmentation.is_on()) {
            levels.push((rank, level));
        }
    }
    levels
}
