//! Step and section times per rank, as the hooks report them: the latest
//! step and a smoothed mean, per section. The dashboard draws them and
//! `/metrics` exports them; the straggler detector keeps its own statistics.
//!
//! The mean is an exponentially weighted moving average with weight
//! [`MEAN_WEIGHT`] for the newest step: recent enough to follow a slowdown
//! within tens of steps, smooth enough not to jump with every step's noise.
//! A step older than the rank's newest is ignored (steps arrive in order per
//! rank; a re-sent batch would otherwise count twice).
//!
//! Bounded: at most [`MAX_SECTIONS_PER_RANK`] section names per rank (a
//! record with names beyond it counts once as skipped), and by the
//! cluster's configured limits ([`StepBounds`], from the engine's
//! configuration): `max_jobs` jobs, `max_ranks` ranks per job and in all,
//! each at most its constant ([`MAX_JOBS`], [`MAX_RANKS_PER_JOB`],
//! [`MAX_RANKS`], the cluster's own defaults); the caller forgets jobs the
//! engine no longer tracks.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use gpumon_proto::api;
use gpumon_proto::hook::StepRecord;
use serde::{Deserialize, Serialize};

use crate::derived_count::DerivedCount;
use crate::not_state::NotState;

/// One rank's latest step and smoothed times, as the step book keeps them
/// (and snapshots encode them); the API's `gpumon_proto::api::RankSteps`
/// is converted from it where read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSteps {
    /// Latest step number.
    pub step: u64,
    /// When it finished, seconds since the Unix epoch.
    pub t: f64,
    /// Its duration, ms.
    pub duration_ms: f64,
    /// Smoothed step duration, ms.
    pub mean_duration_ms: f64,
    /// Per section, by name.
    pub sections: BTreeMap<String, SectionTime>,
}

/// One section's times, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SectionTime {
    /// In the latest step that had it.
    pub last_ms: f64,
    /// Smoothed over recent steps.
    pub mean_ms: f64,
}

impl From<SectionTime> for api::SectionTime {
    fn from(s: SectionTime) -> Self {
        Self {
            last_ms: s.last_ms,
            mean_ms: s.mean_ms,
        }
    }
}

impl From<&RankSteps> for api::RankSteps {
    fn from(r: &RankSteps) -> Self {
        Self {
            step: r.step,
            t: r.t,
            duration_ms: r.duration_ms,
            mean_duration_ms: r.mean_duration_ms,
            sections: r
                .sections
                .iter()
                .map(|(name, s)| (name.clone(), (*s).into()))
                .collect(),
        }
    }
}

/// Weight of the newest step in the means.
pub const MEAN_WEIGHT: f64 = 0.2;
/// Section names kept per rank.
pub const MAX_SECTIONS_PER_RANK: usize = 16;
/// Ranks kept per job.
pub const MAX_RANKS_PER_JOB: usize = 16_384;
/// Jobs kept.
pub const MAX_JOBS: usize = 1024;
/// Ranks kept in all jobs together.
pub const MAX_RANKS: usize = 131_072;

/// The bounds [`StepTimes`] keeps, from the configured limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepBounds {
    /// Jobs.
    pub jobs: usize,
    /// Ranks in one job.
    pub ranks_per_job: usize,
    /// Ranks in all jobs together.
    pub ranks: usize,
}

impl StepBounds {
    /// The bounds for an engine's `max_jobs` and `max_ranks_per_job` (the
    /// cluster's `[limits] max_jobs` and `max_ranks`).
    pub fn for_limits(max_jobs: usize, max_ranks: usize) -> Self {
        Self {
            jobs: max_jobs.clamp(1, MAX_JOBS),
            ranks_per_job: max_ranks.clamp(1, MAX_RANKS_PER_JOB),
            ranks: max_ranks.clamp(1, MAX_RANKS),
        }
    }
}

impl Default for StepBounds {
    /// The constants alone.
    fn default() -> Self {
        Self::for_limits(MAX_JOBS, MAX_RANKS)
    }
}

/// Step times of every rank of every job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    jobs: BTreeMap<String, BTreeMap<u32, RankSteps>>,
    /// Steps or sections left out by a bound, or out of order.
    skipped: u64,
    /// Ranks in all.
    #[serde(skip)]
    ranks: NotState<DerivedCount>,
}

fn smooth(mean: f64, x: f64) -> f64 {
    mean + MEAN_WEIGHT * (x - mean)
}

impl StepTimes {
    /// One job's ranks, if any reported a step.
    pub fn job(&self, job: &str) -> Option<&BTreeMap<u32, RankSteps>> {
        self.jobs.get(job)
    }

    /// Every job's ranks.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &BTreeMap<u32, RankSteps>)> {
        self.jobs.iter().map(|(name, ranks)| (name.as_str(), ranks))
    }

    /// Steps or sections set aside by a bound, or older than one already seen.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Folds in one valid step record (see `check_record`) within `bounds`.
    pub fn observe(&mut self, bounds: StepBounds, s: &StepRecord) {
        if !self.jobs.contains_key(&s.job) && self.jobs.len() >= bounds.jobs {
            self.skipped += 1;
            return;
        }
        let total = self.ranks();
        let ranks = self.jobs.entry(s.job.clone()).or_default();
        let new_rank = !ranks.contains_key(&s.rank);
        if new_rank && (ranks.len() >= bounds.ranks_per_job || total >= bounds.ranks) {
            self.ranks.set(total);
            self.skipped += 1;
            return;
        }
        self.ranks.set(total + usize::from(new_rank));
        let t = s.t_ms as f64 / 1000.0;
        let r = match ranks.entry(s.rank) {
            Entry::Vacant(v) => v.insert(RankSteps {
                step: s.step,
                t,
                duration_ms: s.duration_ms,
                mean_duration_ms: s.duration_ms,
                sections: BTreeMap::new(),
            }),
            Entry::Occupied(o) if s.step <= o.get().step => {
                self.skipped += 1;
                return;
            }
            Entry::Occupied(o) => {
                let r = o.into_mut();
                r.step = s.step;
                r.t = t;
                r.duration_ms = s.duration_ms;
                r.mean_duration_ms = smooth(r.mean_duration_ms, s.duration_ms);
                r
            }
        };
        let mut left_out = false;
        for (name, ms) in s.sections.iter().map(|(n, ms)| (n, *ms)) {
            let room = r.sections.len() < MAX_SECTIONS_PER_RANK;
            match r.sections.get_mut(name) {
                Some(sec) => {
                    sec.last_ms = ms;
                    sec.mean_ms = smooth(sec.mean_ms, ms);
                }
                None if room => {
                    let first = SectionTime {
                        last_ms: ms,
                        mean_ms: ms,
                    };
                    r.sections.insert(name.clone(), first);
                }
                None => left_out = true,
            }
        }
        // Counted once per record, however many of its sections were left out.
        self.skipped += u64::from(left_out);
    }

    /// Forgets the jobs `keep` says no to.
    pub fn retain_jobs(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let before = self.jobs.len();
        self.jobs.retain(|name, _| keep(name));
        if self.jobs.len() != before {
            self.ranks.forget();
        }
    }

    /// Ranks in all jobs.
    pub fn ranks(&self) -> usize {
        self.ranks
            .get_or(|| self.jobs.values().map(BTreeMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rank: u32, step: u64, forward_ms: f64) -> StepRecord {
        StepRecord {
            group: None,
            waits: Default::default(),
            collectives: Vec::new(),
            t_ms: 1_000 * step,
            job: "j".into(),
            rank,
            step,
            duration_ms: forward_ms + 10.0,
            sections: vec![("forward".into(), forward_ms), ("data".into(), 10.0)],
        }
    }

    #[test]
    fn keeps_the_latest_step_and_a_mean_that_follows_a_slowdown() {
        let mut times = StepTimes::default();
        times.observe(StepBounds::default(), &step(1, 1, 100.0));
        let r = &times.job("j").unwrap()[&1];
        assert_eq!(r.sections["forward"].mean_ms, 100.0);
        for n in 2..=40 {
            times.observe(StepBounds::default(), &step(1, n, 150.0));
        }
        let r = &times.job("j").unwrap()[&1];
        assert_eq!(r.step, 40);
        assert_eq!(r.t, 40.0);
        assert_eq!(r.sections["forward"].last_ms, 150.0);
        let mean = r.sections["forward"].mean_ms;
        assert!(mean > 149.0 && mean < 150.0, "{mean}");
        assert!(r.mean_duration_ms > 159.0, "{}", r.mean_duration_ms);
    }

    #[test]
    fn a_repeated_or_older_step_is_skipped_not_counted_twice() {
        let mut times = StepTimes::default();
        times.observe(StepBounds::default(), &step(0, 5, 100.0));
        times.observe(StepBounds::default(), &step(0, 5, 900.0));
        times.observe(StepBounds::default(), &step(0, 4, 900.0));
        let r = &times.job("j").unwrap()[&0];
        assert_eq!(r.sections["forward"].mean_ms, 100.0);
        assert_eq!(times.skipped(), 2);
    }

    #[test]
    fn section_names_per_rank_are_bounded() {
        let mut times = StepTimes::default();
        let mut s = step(0, 1, 1.0);
        s.sections = (0..MAX_SECTIONS_PER_RANK + 3)
            .map(|i| (format!("s{i}"), 1.0))
            .collect();
        times.observe(StepBounds::default(), &s);
        assert_eq!(
            times.job("j").unwrap()[&0].sections.len(),
            MAX_SECTIONS_PER_RANK
        );
        assert_eq!(times.skipped(), 1);
    }

    #[test]
    fn forgotten_jobs_are_gone() {
        let mut times = StepTimes::default();
        times.observe(StepBounds::default(), &step(0, 1, 1.0));
        times.retain_jobs(|j| j != "j");
        assert!(times.job("j").is_none());
        assert_eq!(times.jobs().count(), 0);
    }

    #[test]
    fn ranks_in_all_jobs_are_bounded_and_room_comes_back_with_a_forgotten_job() {
        let mut times = StepTimes::default();
        let jobs = MAX_RANKS / MAX_RANKS_PER_JOB + 1;
        for j in 0..jobs {
            for rank in 0..MAX_RANKS_PER_JOB as u32 {
                let mut s = step(rank, 1, 1.0);
                s.job = format!("job-{j}");
                times.observe(StepBounds::default(), &s);
            }
        }
        assert_eq!(times.ranks(), MAX_RANKS);
        assert_eq!(
            times.skipped() as usize,
            jobs * MAX_RANKS_PER_JOB - MAX_RANKS
        );
        let back: StepTimes =
            postcard::from_bytes(&postcard::to_allocvec(&times).unwrap()).unwrap();
        assert_eq!(back.ranks(), MAX_RANKS, "counted again after a restore");
        times.retain_jobs(|job| job != "job-0");
        assert_eq!(times.ranks(), MAX_RANKS - MAX_RANKS_PER_JOB);
        let mut s = step(0, 1, 1.0);
        s.job = "new".into();
        times.observe(StepBounds::default(), &s);
        assert!(times.job("new").is_some_and(|ranks| ranks.len() == 1));
    }

    #[test]
    fn the_api_steps_say_what_the_book_holds() {
        let steps = RankSteps {
            step: 40,
            t: 1_700_000_000.5,
            duration_ms: 250.0,
            mean_duration_ms: 240.0,
            sections: BTreeMap::from([(
                "backward".to_owned(),
                SectionTime {
                    last_ms: 120.0,
                    mean_ms: 118.0,
                },
            )]),
        };
        assert_eq!(
            serde_json::to_value(api::RankSteps::from(&steps)).unwrap(),
            serde_json::to_value(&steps).unwrap()
        );
    }
}
