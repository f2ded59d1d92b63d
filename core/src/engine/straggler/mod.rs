//! Straggler: the rank its peers wait for, step after step.
//!
//! In synchronous training the collectives make every rank's step last the
//! same: a slow rank does not show a longer step, its peers show a longer
//! *wait* (see [`roles`] for where the wait lands: a collective section,
//! `backward` under DDP, or the untimed rest of the step). So the detector
//! compares like with like: per job, per step, per section, across ranks.
//! Each rank's *busy* time is its sections minus the wait-bearing part; its
//! deviation in a step is its busy time minus the ranks' median busy time,
//! as a fraction of the step (how much of the step the others wait for it).
//! A slowdown of every rank moves the median with it and is no straggler.
//!
//! Per-step deviations are noisy (a few percent, independent from step to
//! step), so a slowdown of a few percent shows only in many steps. Each rank
//! runs a one-sided CUSUM (Page 1954), the quickest detector of a persistent
//! shift for a given false-alarm rate: `S = max(0, S + min(d, clip) - k)`
//! with `k` half the smallest slowdown of interest (but not below a fraction
//! of the job's noise: four-rank jobs with a collective section are noisy
//! per step, and their slow outlier steps are no straggler), `clip` bounding what one
//! outlier step can add, and an alarm at `S >= h`. `h` and `clip` scale with
//! the job's noise `sigma` (scaled MAD of recent deviations of all ranks, each
//! about its rank's own recent level: a straggler's steady excess is no noise), so
//! clean jobs alarm fast and noisy ones do not alarm on noise. A mirrored
//! CUSUM clears the alert once the rank is back with its peers. The alert
//! names the busy section with the largest median excess over its peers in
//! the steps that made the case, in ms and percent, and how much shorter
//! the rank's wait is than its peers' (the confirmation that they wait for
//! it).
//!
//! Memory: `max_pending_steps` open steps ([`PENDING_ROWS`] rows at most),
//! `window_steps` scores per rank,
//! [`NOISE_SAMPLES`] deviations per job, at most [`MAX_SECTIONS`] section names.

pub mod arrivals;
mod classes;
pub mod legacy;
pub mod links;
pub mod roles;
mod row_index;
pub mod stages;
mod waits;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::latch::{Edge, Latch};
use super::robust_stats::{median_of, scaled_mad, Scratch};
use crate::not_state::NotState;
use crate::shared::Shared;
use arrivals::{ArrivalBook, ArrivalScore, GroupArrivals, StepArrivals};
use classes::peer_groups;
use gpumon_proto::{CollectiveArrival, GroupWait, P2P_WAITS};
use links::{LinkEvent, LinkStep, LinkTracker};
use roles::{WaitIn, WaitInCache};
use row_index::RowIndex;
use stages::{StageEvent, StageStep, StageTracker};
pub use waits::MAX_WAIT_GROUPS;

/// Section names tracked per job; more are ignored.
pub const MAX_SECTIONS: usize = 8;

/// Tuning of the straggler detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerParams {
    /// Smallest slowdown of interest, as a fraction of the step the others
    /// wait (0.03 = 3 %); the CUSUM's reference value is half of it.
    pub min_slowdown: f64,
    /// Smallest CUSUM reference value, in units of the job's noise: in a
    /// noisy job a shift smaller than twice this is not told from noise.
    pub k_sigma: f64,
    /// Alarm threshold in units of the job's noise.
    pub h_sigma: f64,
    /// Largest contribution of one step, in units of the job's noise.
    pub clip_sigma: f64,
    /// Smallest noise assumed, as a fraction of the step.
    pub min_sigma: f64,
    /// Scored steps per rank kept to explain an alert.
    pub window_steps: usize,
    /// Scored steps a rank needs before it can be flagged.
    pub min_steps: usize,
    /// First steps of a job not scored (compilation, warm-up).
    pub warmup_steps: u64,
    /// Ranks a step needs to be scored.
    pub min_ranks: usize,
    /// Steps kept open waiting for late ranks. Ranks report their steps in
    /// batches (a hook every second, an agent every window, a CUDA clock up
    /// to 128 steps late), so a job of short steps needs many open; a large
    /// job gets fewer, [`PENDING_ROWS`] rows in all.
    pub max_pending_steps: usize,
    /// Seconds a step stays open for its late ranks: a rank whose record
    /// is lost, or that reports no steps, delays the scoring of every step
    /// by this much, not by `max_pending_steps` steps.
    pub max_pending_s: f64,
    /// Smallest loss worth an alert, as a fraction of the step: however
    /// regular the job, a rank its peers wait for less than this is not
    /// named.
    pub min_loss_frac: f64,
    /// Smallest loss worth an alert, ms per step.
    pub min_loss_ms: f64,
    /// Seconds a rank must stay slower than its peers before it is named:
    /// a rank that loses the CPU or its input for a few seconds (a busy
    /// host, a page-cache flush, a collector pause) is not a straggler.
    pub min_duration_s: f64,
    /// Smallest stage imbalance worth a finding, as a fraction of the step:
    /// how much more work per step the heaviest pipeline stage does than
    /// the others (see [`stages`]).
    pub stage_min_frac: f64,
}

impl Default for StragglerParams {
    fn default() -> Self {
        Self {
            min_slowdown: 0.01,
            k_sigma: 0.75,
            h_sigma: 10.0,
            clip_sigma: 3.0,
            min_sigma: 0.004,
            window_steps: 16,
            min_steps: 8,
            warmup_steps: 3,
            min_ranks: 3,
            max_pending_steps: 128,
            max_pending_s: 5.0,
            min_loss_frac: 0.01,
            min_loss_ms: 1.0,
            min_duration_s: 10.0,
            stage_min_frac: 0.1,
        }
    }
}

/// Rows of open steps kept per job at most: `max_pending_steps` open steps
/// of a job of up to 512 ranks, fewer for larger jobs (but at least two).
pub const PENDING_ROWS: usize = 1 << 16;

/// Deviations kept per job to estimate its noise.
pub const NOISE_SAMPLES: usize = 1024;
/// Deviations needed before the noise estimate is trusted.
const MIN_NOISE_SAMPLES: usize = 64;

/// Why a rank is (or no longer is) a straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerEvent {
    /// The rank.
    pub rank: u32,
    /// Trace time of the step that decided, seconds.
    pub t: f64,
    /// Raised or cleared; `Steady` for a fresh explanation of a rank that
    /// keeps firing (the engine updates its open episode with it).
    pub edge: Edge,
    /// The busy section with the largest median excess over its peers.
    pub section: String,
    /// That section's median time on this rank, ms.
    pub section_ms: f64,
    /// That section's median time on its peers (per step, the median of the others), ms.
    pub peer_section_ms: f64,
    /// The rank's median busy time over its peers'.
    pub slowdown: f64,
    /// Median share of the step the others wait for the rank.
    pub excess_frac: f64,
    /// Where the wait shows (a collective section, `backward`, or the rest).
    pub wait_in: String,
    /// How much shorter the rank's wait is than its peers', median, ms.
    pub wait_deficit_ms: f64,
    /// Median step duration of the job, ms.
    pub step_ms: f64,
    /// The other ranks of its peer group (at most [`stages::MAX_NAMED_RANKS`]),
    /// when the job has several (a pipeline's stages); empty otherwise.
    pub peers: Vec<u32>,
    /// The process groups in which the others wait for it, with the median
    /// wait per step, ms, longest first (from the hook's collective waits;
    /// empty without them).
    pub groups: Vec<(String, f64)>,
    /// For those groups where the rank listed its collectives one by one:
    /// how often it arrived last, and how late (clocks aligned; see
    /// [`arrivals`]).
    pub arrivals: Vec<GroupArrivals>,
}

/// What a step record says of its rank's collectives: the waits per
/// process group and, where listed, each collective (CPU clock only).
#[derive(Debug, Clone, Copy, Default)]
pub struct Comms<'a> {
    /// Time blocked per process group.
    pub waits: &'a [GroupWait],
    /// The collectives entered, one by one.
    pub collectives: &'a [CollectiveArrival],
}

impl StragglerEvent {
    /// How many times its peers' time the slow section takes.
    pub fn section_slowdown(&self) -> f64 {
        if self.peer_section_ms > 0.0 {
            self.section_ms / self.peer_section_ms
        } else {
            self.slowdown
        }
    }
}

/// Missing sections are NaN, so equality compares bit patterns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Row {
    rank: u32,
    /// The rank's peer group (see [`classes`]).
    group: u32,
    t: f64,
    duration_ms: f64,
    sections: [f64; MAX_SECTIONS],
    /// Its collective waits per interned process group (NaN when absent).
    waits: [f64; MAX_WAIT_GROUPS],
}

/// One rank's comparison with its peers in one step.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Score {
    /// Busy time over the median busy time, as a fraction of the step.
    excess: f64,
    /// Busy time over the median busy time.
    ratio: f64,
    /// The median wait minus this rank's wait, ms.
    wait_deficit_ms: f64,
    step_ms: f64,
    /// Per section: this rank's time, ms (NaN when absent).
    section_ms: [f64; MAX_SECTIONS],
    /// Per section: its peers' median time, ms (NaN when absent).
    section_median_ms: [f64; MAX_SECTIONS],
    /// Per interned process group: how long the group's other members
    /// waited for it, ms (NaN when it is not in the group).
    group_deficit_ms: [f64; MAX_WAIT_GROUPS],
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl PartialEq for Row {
    fn eq(&self, o: &Self) -> bool {
        self.rank == o.rank
            && self.group == o.group
            && same_bits(&[self.t, self.duration_ms], &[o.t, o.duration_ms])
            && same_bits(&self.sections, &o.sections)
            && same_bits(&self.waits, &o.waits)
    }
}

impl PartialEq for Score {
    fn eq(&self, o: &Self) -> bool {
        same_bits(
            &[self.excess, self.ratio, self.wait_deficit_ms, self.step_ms],
            &[o.excess, o.ratio, o.wait_deficit_ms, o.step_ms],
        ) && same_bits(&self.section_ms, &o.section_ms)
            && same_bits(&self.section_median_ms, &o.section_median_ms)
            && same_bits(&self.group_deficit_ms, &o.group_deficit_ms)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankScores {
    scores: VecDeque<Score>,
    scored: u64,
    /// Steps since the CUSUM rose past half its threshold: the evidence of
    /// this episode.
    run: usize,
    /// CUSUM towards "slower than its peers".
    up: f64,
    /// CUSUM towards "back with its peers", while flagged.
    down: f64,
    latch: Latch,
}

/// Per-job straggler state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StragglerTracker {
    sections: Vec<String>,
    pending: BTreeMap<u64, Vec<Row>>,
    /// Per rank, copied on write: after a snapshot shares the tracker, a
    /// step record copies its own rank's scores, not every rank's (40 MB
    /// in a job of 16k ranks).
    ranks: BTreeMap<u32, Shared<RankScores>>,
    scored_steps: u64,
    dropped_steps: u64,
    noise: VecDeque<f64>,
    sigma: Option<f64>,
    stages: StageTracker,
    /// Interned process group names of the collective waits.
    wait_groups: Vec<String>,
    /// Per interned group, its slow-link state.
    links: Vec<LinkTracker>,
    /// The collectives listed one by one, and who arrived last.
    arrivals: ArrivalBook,
    #[serde(skip)]
    scratch: NotState<Scratch>,
    #[serde(skip)]
    index: NotState<RowIndex>,
    #[serde(skip)]
    wait_in: NotState<WaitInCache>,
    /// Stage events of the latest step record, until taken.
    #[serde(skip)]
    stage_events: Vec<StageEvent>,
    /// Slow-link events of the latest step record, until taken.
    #[serde(skip)]
    link_events: Vec<LinkEvent>,
}

impl StragglerTracker {
    /// Adds one rank's finished step; returns the straggler alerts it
    /// raised or cleared (its stage events wait in [`Self::take_stage_events`]).
    /// `group` is the rank's peer group (0 when it reports none).
    #[allow(clippy::too_many_arguments)]
    pub fn add_step<'s>(
        &mut self,
        world_size: u32,
        rank: u32,
        group: u32,
        step: u64,
        t: f64,
        duration_ms: f64,
        sections: impl IntoIterator<Item = (&'s str, f64)>,
        p: &StragglerParams,
    ) -> Vec<StragglerEvent> {
        self.add_waited_step(
            world_size,
            rank,
            group,
            step,
            t,
            duration_ms,
            sections,
            Comms::default(),
            p,
        )
    }

    /// [`Self::add_step`] with the step's collective waits per process
    /// group and its collectives one by one (its slow-link events wait in
    /// [`Self::take_link_events`]).
    #[allow(clippy::too_many_arguments)]
    pub fn add_waited_step<'s>(
        &mut self,
        world_size: u32,
        rank: u32,
        group: u32,
        step: u64,
        t: f64,
        duration_ms: f64,
        sections: impl IntoIterator<Item = (&'s str, f64)>,
        comms: Comms<'_>,
        p: &StragglerParams,
    ) -> Vec<StragglerEvent> {
        let mut row = Row {
            rank,
            group,
            t,
            duration_ms,
            sections: [f64::NAN; MAX_SECTIONS],
            waits: waits::row_waits(&mut self.wait_groups, comms.waits),
        };
        for (name, ms) in sections {
            if let Some(i) = self.section_index(name) {
                row.sections[i] = ms;
            }
        }
        let max_pending = p
            .max_pending_steps
            .min(PENDING_ROWS / world_size.max(1) as usize)
            .max(2);
        if self
            .pending
            .first_key_value()
            .is_some_and(|(&oldest, _)| step < oldest)
            && self.pending.len() >= max_pending
        {
            return Vec::new();
        }
        let start_ms = t * 1000.0 - duration_ms;
        self.arrivals.put(
            step,
            rank,
            start_ms,
            comms.collectives,
            &mut self.wait_groups,
        );
        self.index.ensure(&self.pending);
        let rows = self.pending.entry(step).or_default();
        self.index.put(step, rows, row);
        let mut events = Vec::new();
        if rows.len() >= world_size as usize {
            if let Some(rows) = self.pending.remove(&step) {
                self.index.forget(step, &rows);
                self.score(step, rows, p, &mut events);
            }
        }
        while self.pending.len() > max_pending
            || self
                .pending
                .first_key_value()
                .is_some_and(|(_, rows)| rows.first().is_some_and(|r| r.t < t - p.max_pending_s))
        {
            if let Some((oldest, rows)) = self.pending.pop_first() {
                self.index.forget(oldest, &rows);
                self.score(oldest, rows, p, &mut events);
            }
        }
        events
    }

    /// The slow-link findings raised or cleared since last taken.
    pub fn take_link_events(&mut self) -> Vec<LinkEvent> {
        std::mem::take(&mut self.link_events)
    }

    /// The stage imbalance findings raised or cleared since last taken.
    pub fn take_stage_events(&mut self) -> Vec<StageEvent> {
        std::mem::take(&mut self.stage_events)
    }

    /// The peer group key of the pipeline stage flagged as the heaviest, if one is.
    pub fn heavy_stage(&self) -> Option<u32> {
        self.stages.flagged()
    }

    /// Whether `rank` is currently flagged.
    pub fn is_straggling(&self, rank: u32) -> bool {
        self.ranks.get(&rank).is_some_and(|r| r.latch.is_on())
    }

    /// How many times longer than its peers' the rank's own work (its
    /// sections less the wait) takes, the median over its recent scored
    /// steps; `None` before it was scored.
    pub fn slowdown(&self, rank: u32) -> Option<f64> {
        let ratios = self.ranks.get(&rank)?.scores.iter().map(|s| s.ratio);
        median_of(ratios.filter(|r| r.is_finite()), &mut Vec::new())
    }

    /// Forgets a rank that ended.
    pub fn remove_rank(&mut self, rank: u32) {
        self.ranks.remove(&rank);
        self.arrivals.remove_rank(rank);
    }

    /// Collectives listed one by one that wait for their steps to be scored.
    pub fn pending_arrivals(&self) -> usize {
        self.arrivals.pending()
    }

    /// Collectives listed one by one that were left out (see [`arrivals`]).
    pub fn dropped_arrivals(&self) -> u64 {
        self.arrivals.dropped()
    }

    /// Steps that could not be scored (too few ranks reported them).
    pub fn dropped_steps(&self) -> u64 {
        self.dropped_steps
    }

    fn section_index(&mut self, name: &str) -> Option<usize> {
        if let Some(i) = self.sections.iter().position(|s| s == name) {
            return Some(i);
        }
        if self.sections.len() == MAX_SECTIONS {
            return None;
        }
        self.sections.push(name.to_owned());
        Some(self.sections.len() - 1)
    }

    fn wait_in(&mut self) -> WaitIn {
        self.wait_in.get(&self.sections)
    }

    fn score(
        &mut self,
        step: u64,
        rows: Vec<Row>,
        p: &StragglerParams,
        events: &mut Vec<StragglerEvent>,
    ) {
        let taken = self.arrivals.take_step(step);
        if rows.len() < p.min_ranks.max(2) {
            self.dropped_steps += 1;
            return;
        }
        self.scored_steps += 1;
        if self.scored_steps <= p.warmup_steps {
            return;
        }
        let wait_in = self.wait_in();
        let first_event = events.len();
        let step_ms =
            median_of(rows.iter().map(|r| r.duration_ms), &mut self.scratch.0).unwrap_or(0.0);
        if step_ms <= 0.0 {
            return;
        }
        let groups = peer_groups(&rows);
        let scored = self.observe_step(&rows, taken, &groups, wait_in, step_ms, p);
        if self.noise.len() < MIN_NOISE_SAMPLES {
            return;
        }
        let cusum = self.cusum(p);
        for &i in &scored {
            self.advance_rank(&rows[i], cusum, step_ms, p, wait_in, events);
        }
        if groups.len() > 1 {
            for e in &mut events[first_event..] {
                e.peers = group_peers(&rows, &groups, e.rank);
            }
        }
    }

    /// Splits each row's step into its own work and its wait, feeds the
    /// stage tracker (several peer groups) and the link tracker (named
    /// groups), and scores every peer group of two or more ranks against
    /// its members' median; returns the indices of the rows scored.
    fn observe_step(
        &mut self,
        rows: &[Row],
        taken: StepArrivals,
        groups: &[Vec<usize>],
        wait_in: WaitIn,
        step_ms: f64,
        p: &StragglerParams,
    ) -> Vec<usize> {
        let split: Vec<(f64, f64)> = rows.iter().map(|r| busy_and_wait(r, wait_in)).collect();
        if groups.len() > 1 {
            self.observe_stages(rows, &split, groups, step_ms, p);
        }
        let deficits = waits::deficits(rows, self.wait_groups.len(), &mut self.scratch.0);
        let arrived = if taken.is_empty() {
            Vec::new()
        } else {
            self.arrivals.score(rows, taken, &mut self.scratch.0)
        };
        if !self.wait_groups.is_empty() {
            self.observe_links(rows, &split, step_ms, p);
        }
        // The rows scored in this step: those of groups of two or more.
        let mut scored = Vec::with_capacity(rows.len());
        for group in groups.iter().filter(|g| g.len() >= 2) {
            let at = (step_ms, p.window_steps);
            let per_row = (&deficits[..], &arrived[..]);
            self.score_group(rows, &split, per_row, group, at, &mut scored);
        }
        scored
    }

    /// The CUSUM's constants for this step from the noise of the scores
    /// (its robust sigma, estimated again every 16 scored steps).
    fn cusum(&mut self, p: &StragglerParams) -> Cusum {
        if self.sigma.is_none() || self.scored_steps % 16 == 0 {
            let center = median_of(self.noise.iter().copied(), &mut self.scratch.0).unwrap_or(0.0);
            let mad = scaled_mad(self.noise.iter().copied(), center, &mut self.scratch.0);
            self.sigma = mad.map(|m| m.max(p.min_sigma));
        }
        let sigma = self.sigma.unwrap_or(p.min_sigma);
        let k = (p.min_slowdown / 2.0).max(p.k_sigma * sigma);
        let clip = (p.clip_sigma * sigma).max(2.0 * k);
        let h = (p.h_sigma * sigma).max(4.0 * k);
        Cusum { k, clip, h }
    }

    /// Adds a scored row's newest excess to its rank's CUSUM and moves the
    /// rank's latch: an episode raises once the sum reaches the threshold
    /// for long enough and costs enough, and clears once the opposite sum
    /// does. An edge, or every [`REEXPLAIN_EVERY`] scored steps while it
    /// fires, pushes an event that explains the rank.
    fn advance_rank(
        &mut self,
        row: &Row,
        Cusum { k, clip, h }: Cusum,
        step_ms: f64,
        p: &StragglerParams,
        wait_in: WaitIn,
        events: &mut Vec<StragglerEvent>,
    ) {
        let Some(entry) = self.ranks.get_mut(&row.rank) else {
            return;
        };
        let Some(d) = entry.scores.back().map(|s| s.excess) else {
            return;
        };
        let d = d.clamp(-clip, clip);
        // Capped at the threshold: the case must keep being made, so a
        // burst that has passed stops counting at once instead of
        // holding the sum up while it drains.
        entry.up = (entry.up + d - k).clamp(0.0, h);
        // The episode's steps: since the sum rose past half the
        // threshold, which noise alone seldom reaches and a passed
        // burst leaves within a few steps.
        entry.run = if entry.up >= h / 2.0 {
            entry.run + 1
        } else {
            0
        };
        let was_on = entry.latch.is_on();
        entry.down = if was_on {
            (entry.down + k - d).max(0.0)
        } else {
            0.0
        };
        let lasted_s = entry.run as f64 * step_ms / 1000.0;
        let mut raise = !was_on
            && entry.up >= h
            && entry.scores.len() >= p.min_steps
            && lasted_s >= p.min_duration_s;
        if raise {
            let evidence = entry
                .scores
                .iter()
                .skip(entry.scores.len() - evidence_len(entry, p));
            let loss = median_of(evidence.map(|s| s.excess), &mut self.scratch.0).unwrap_or(0.0);
            raise = loss >= p.min_loss_frac && loss * step_ms >= p.min_loss_ms;
        }
        let clear = was_on && entry.down >= h;
        let edge = entry
            .latch
            .update(if was_on { !clear } else { raise }, 1, 1);
        if edge == Edge::Steady {
            // While it fires, the explanation follows the rank: a rank
            // first slow in one section and then in another is named
            // by the one that costs most now, not the one it began with.
            if entry.latch.is_on() && self.scored_steps % REEXPLAIN_EVERY == 0 {
                let recent = entry.scores.len().min(p.min_steps.max(1));
                let evidence = entry.scores.iter().skip(entry.scores.len() - recent);
                let e = explain(
                    row.rank,
                    row.t,
                    Edge::Steady,
                    evidence,
                    [&self.sections, &self.wait_groups],
                    wait_in,
                    &mut self.scratch.0,
                );
                events.push(self.with_arrivals(e, recent));
            }
            return;
        }
        if edge == Edge::Cleared {
            entry.up = 0.0;
        }
        entry.down = 0.0;
        let steps = evidence_len(entry, p);
        let evidence = entry.scores.iter().skip(entry.scores.len() - steps);
        let e = explain(
            row.rank,
            row.t,
            edge,
            evidence,
            [&self.sections, &self.wait_groups],
            wait_in,
            &mut self.scratch.0,
        );
        events.push(self.with_arrivals(e, steps));
    }

    /// `e` with how its rank arrived at the collectives of the groups it
    /// names, over its latest `steps` scored steps.
    fn with_arrivals(&mut self, mut e: StragglerEvent, steps: usize) -> StragglerEvent {
        e.arrivals = self.arrivals.named(
            e.rank,
            steps,
            &self.wait_groups,
            e.groups.iter().map(|g| g.0.as_str()),
            &mut self.scratch.0,
        );
        e
    }

    /// Scores the rows `group` (indices into `rows`) against each other;
    /// appends the indices it scored to `scored`.
    fn score_group(
        &mut self,
        rows: &[Row],
        split: &[(f64, f64)],
        (deficits, arrived): (&[[f64; MAX_WAIT_GROUPS]], &[Option<ArrivalScore>]),
        group: &[usize],
        (step_ms, window): (f64, usize),
        scored: &mut Vec<usize>,
    ) {
        let scratch = &mut self.scratch.0;
        let peer_busy = peer_medians(group.iter().map(|&i| split[i].0), scratch);
        let peer_wait = peer_medians(group.iter().map(|&i| split[i].1), scratch);
        if peer_busy.iter().any(|&m| m <= 0.0) {
            return;
        }
        // Per row and section, the median of its peers' times (NaN where
        // the row or all its peers lack the section).
        let mut section_peers = vec![[f64::NAN; MAX_SECTIONS]; group.len()];
        for (s, _) in self.sections.iter().enumerate().take(MAX_SECTIONS) {
            let present: Vec<usize> = (0..group.len())
                .filter(|&j| !rows[group[j]].sections[s].is_nan())
                .collect();
            if present.len() < 2 {
                continue;
            }
            let medians =
                peer_medians(present.iter().map(|&j| rows[group[j]].sections[s]), scratch);
            for (&j, m) in present.iter().zip(medians) {
                section_peers[j][s] = m;
            }
        }
        for (j, &i) in group.iter().enumerate() {
            let (row, (busy, wait)) = (&rows[i], split[i]);
            let score = Score {
                excess: (busy - peer_busy[j]) / step_ms,
                ratio: busy / peer_busy[j],
                wait_deficit_ms: peer_wait[j] - wait,
                step_ms,
                section_ms: row.sections,
                section_median_ms: section_peers[j],
                group_deficit_ms: deficits[i],
            };
            let entry = self.ranks.entry(row.rank).or_default();
            if entry.scores.len() == window.max(1) {
                entry.scores.pop_front();
            }
            entry.scores.push_back(score);
            entry.scored += 1;
            let arrived = arrived.get(i).copied().flatten();
            self.arrivals.record(row.rank, arrived, window);
            // The noise is each rank's scatter about its own recent level:
            // a straggler's steady excess is a level, not noise (in a job of
            // two or three ranks it would otherwise be most of the spread,
            // and hide itself).
            let level = median_of(entry.scores.iter().map(|s| s.excess), scratch).unwrap_or(0.0);
            if self.noise.len() == NOISE_SAMPLES {
                self.noise.pop_front();
            }
            self.noise.push_back(score.excess - level);
            scored.push(i);
        }
    }

    /// Feeds each process group's floor (its members' least wait) and its
    /// members' median busy time to its link tracker (see [`links`]).
    fn observe_links(
        &mut self,
        rows: &[Row],
        split: &[(f64, f64)],
        step_ms: f64,
        p: &StragglerParams,
    ) {
        let t = rows.iter().map(|r| r.t).fold(f64::NEG_INFINITY, f64::max);
        let scratch = &mut self.scratch.0;
        self.links
            .resize_with(self.wait_groups.len(), LinkTracker::default);
        for (g, name) in self.wait_groups.iter().enumerate() {
            if name == P2P_WAITS {
                continue;
            }
            let members = || (0..rows.len()).filter(move |&i| !rows[i].waits[g].is_nan());
            if members().nth(1).is_none() {
                continue;
            }
            let floor_ms = members()
                .map(|i| rows[i].waits[g])
                .fold(f64::INFINITY, f64::min);
            let Some(busy_ms) = median_of(members().map(|i| split[i].0), scratch) else {
                continue;
            };
            let step = LinkStep {
                floor_ms,
                busy_ms,
                step_ms,
            };
            let ranks = || members().map(|i| rows[i].rank).collect();
            if let Some(e) = self.links[g].observe(t, name, ranks, step, p, scratch) {
                self.link_events.push(e);
            }
        }
    }

    /// Feeds the step's pipeline stages (its peer groups) to the stage
    /// tracker: each stage's least busy time and median wait.
    fn observe_stages(
        &mut self,
        rows: &[Row],
        split: &[(f64, f64)],
        groups: &[Vec<usize>],
        step_ms: f64,
        p: &StragglerParams,
    ) {
        let scratch = &mut self.scratch.0;
        let stages: Vec<StageStep> = groups
            .iter()
            .map(|g| StageStep {
                key: g.iter().map(|&i| rows[i].rank).min().unwrap_or(0),
                work_ms: g.iter().map(|&i| split[i].0).fold(f64::INFINITY, f64::min),
                wait_ms: median_of(g.iter().map(|&i| split[i].1), scratch).unwrap_or(0.0),
            })
            .collect();
        let ranks_of = |key: u32| {
            let group = groups
                .iter()
                .find(|g| g.iter().map(|&i| rows[i].rank).min() == Some(key));
            let mut ranks: Vec<u32> = group
                .map(|g| g.iter().map(|&i| rows[i].rank).collect())
                .unwrap_or_default();
            ranks.sort_unstable();
            ranks
        };
        let t = rows.iter().map(|r| r.t).fold(f64::NEG_INFINITY, f64::max);
        if let Some(e) = self
            .stages
            .observe(t, step_ms, &stages, ranks_of, p, scratch)
        {
            self.stage_events.push(e);
        }
    }
}

/// A step's CUSUM constants: the allowance `k` a rank's excess must beat
/// each step, the `clip` on one step's excess, the threshold `h`.
#[derive(Debug, Clone, Copy)]
struct Cusum {
    k: f64,
    clip: f64,
    h: f64,
}

/// The ranks of `rank`'s group in this step other than itself, sorted, at
/// most [`stages::MAX_NAMED_RANKS`].
fn group_peers(rows: &[Row], groups: &[Vec<usize>], rank: u32) -> Vec<u32> {
    let Some(group) = groups
        .iter()
        .find(|g| g.iter().any(|&i| rows[i].rank == rank))
    else {
        return Vec::new();
    };
    let mut peers: Vec<u32> = group
        .iter()
        .map(|&i| rows[i].rank)
        .filter(|&r| r != rank)
        .collect();
    peers.sort_unstable();
    peers.truncate(stages::MAX_NAMED_RANKS);
    peers
}

/// How many of a rank's latest scores explain its episode: the steps that
/// made the case, not the ones before.
fn evidence_len(entry: &RankScores, p: &StragglerParams) -> usize {
    entry
        .scores
        .len()
        .min(entry.run.max(p.min_steps / 2).max(1))
}

/// Scored steps between two explanations of a rank that keeps firing.
const REEXPLAIN_EVERY: u64 = 16;

/// For each value, the median of the others: a rank is compared with its
/// peers, not with a median it helps make (in a job of four, the two middle
/// ranks would otherwise always sit close to it).
fn peer_medians(values: impl Iterator<Item = f64>, scratch: &mut Vec<f64>) -> Vec<f64> {
    scratch.clear();
    scratch.extend(values);
    let n = scratch.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scratch[a].total_cmp(&scratch[b]));
    let mut position = vec![0; n];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    // The value at place `j` of the sorted others, skipping place `skip`.
    let nth_other = |j: usize, skip: usize| scratch[order[if j < skip { j } else { j + 1 }]];
    (0..n)
        .map(|i| {
            let m = n - 1;
            match m {
                0 => scratch[i],
                _ if m % 2 == 1 => nth_other(m / 2, position[i]),
                _ => (nth_other(m / 2 - 1, position[i]) + nth_other(m / 2, position[i])) / 2.0,
            }
        })
        .collect()
}

/// A rank's busy time (its sections less the wait-bearing part) and its
/// wait, ms.
fn busy_and_wait(row: &Row, wait_in: WaitIn) -> (f64, f64) {
    let mut busy = 0.0;
    let mut wait = 0.0;
    for (i, &ms) in row.sections.iter().enumerate() {
        if ms.is_nan() {
            continue;
        }
        if wait_in.holds(i) {
            wait += ms;
        } else {
            busy += ms;
        }
    }
    if wait_in == WaitIn::Remainder {
        wait = (row.duration_ms - busy).max(0.0);
    }
    (busy, wait)
}

/// The event for a rank's edge, from the scores that made the case.
fn explain<'a>(
    rank: u32,
    t: f64,
    edge: Edge,
    evidence: impl Iterator<Item = &'a Score> + Clone,
    [names, wait_groups]: [&[String]; 2],
    wait_in: WaitIn,
    scratch: &mut Vec<f64>,
) -> StragglerEvent {
    let excess = median_of(evidence.clone().map(|s| s.excess), scratch).unwrap_or(0.0);
    let ratio = median_of(evidence.clone().map(|s| s.ratio), scratch).unwrap_or(1.0);
    let step_ms = median_of(evidence.clone().map(|s| s.step_ms), scratch).unwrap_or(0.0);
    let wait_deficit_ms =
        median_of(evidence.clone().map(|s| s.wait_deficit_ms), scratch).unwrap_or(0.0);
    let mut worst: Option<(usize, f64)> = None;
    for i in (0..names.len()).filter(|&i| !wait_in.holds(i)) {
        let over = evidence
            .clone()
            .map(|s| s.section_ms[i] - s.section_median_ms[i])
            .filter(|v| !v.is_nan());
        if let Some(e) = median_of(over, scratch) {
            if worst.is_none_or(|(_, w)| e > w) {
                worst = Some((i, e));
            }
        }
    }
    let (section, section_ms, peer_section_ms) = match worst {
        Some((i, _)) => {
            let mine = evidence.clone().map(|s| s.section_ms[i]);
            let peers = evidence.clone().map(|s| s.section_median_ms[i]);
            (
                names[i].clone(),
                median_of(mine.filter(|v| !v.is_nan()), scratch).unwrap_or(0.0),
                median_of(peers.filter(|v| !v.is_nan()), scratch).unwrap_or(0.0),
            )
        }
        None => ("sections".to_owned(), 0.0, 0.0),
    };
    StragglerEvent {
        rank,
        t,
        edge,
        section,
        section_ms,
        peer_section_ms,
        slowdown: ratio,
        excess_frac: excess,
        wait_in: wait_in.describe(names),
        wait_deficit_ms,
        step_ms,
        peers: Vec::new(),
        groups: waits::named_groups(evidence, wait_groups, scratch),
        arrivals: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
