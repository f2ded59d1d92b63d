//! Hung jobs: a job whose live ranks stop finishing steps while they wait
//! in a collective for one of them.
//!
//! Every stalled rank's hook reports, from its own thread, the collective
//! it waits in and the last one it entered per process group
//! ([`gpumon_proto::StallRecord`]). [`HangWatch`] keeps, per job, when its
//! newest step ended, its recent step times and each rank's latest report,
//! and judges the job ([`verdict::judge`]) when a report comes, at most once
//! per [`JUDGE_EVERY_S`] of data time: a scan of the job's ranks, never per
//! step. A hang raises a critical `hang` alert about the rank the others
//! wait for; the job's next step resolves it. Where no NVML sees a rank's
//! process (a job on CPUs), its agent says when the process behind a hook
//! session has exited with a report of source [`PROCESS_EXIT`]: the rank
//! counts as ended until it steps again (a restarted process). The state
//! lives beside the
//! engine in the replicated data and takes its time from the records, so
//! every replica and `gpumon replay` judge alike.

mod message;
pub mod verdict;

use std::collections::{BTreeMap, VecDeque};

use gpumon_proto::{ActionKind, HookRecord, StallRecord};
use serde::{Deserialize, Serialize};

use super::alerts::{AlertKind, Severity, Subject};
use super::Engine;
use crate::actions::{ActionBook, ActionState};
use crate::hook_records::check_record;
use verdict::{judge, RankView, Verdict};

/// The source of a stall report that a rank's agent sends when the process
/// behind its hook session has exited (the hooks themselves never send it).
pub const PROCESS_EXIT: &str = "process_exit";

/// Data time between two judgements of one job, seconds.
pub const JUDGE_EVERY_S: f64 = 5.0;

/// Step times kept per job for its median.
const RECENT_STEPS: usize = 32;

/// Stall reports kept at once, all jobs together: a report is at most a few
/// KiB (16 groups, names of 128 bytes), so this bounds the watch to about
/// 200 MiB whatever the hooks send; a report past it is counted and not kept.
pub const MAX_REPORTS: usize = 65_536;

/// One rank as the watch knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RankHang {
    last_step: Option<u64>,
    last_heard_t: f64,
    report: Option<(f64, StallRecord)>,
    /// The node whose agent forwarded its stall reports.
    node: Option<String>,
}

/// A hang episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// Data time it was found, seconds.
    pub since_t: f64,
    /// The rank its alert is about.
    pub rank: u32,
}

/// One job as the watch knows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct JobHang {
    newest_step_t: Option<f64>,
    recent_step_ms: VecDeque<f64>,
    ranks: BTreeMap<u32, RankHang>,
    judged_t: Option<f64>,
    episode: Option<Episode>,
}

/// The hang detector's replicated state: bounded by the engine's jobs and
/// ranks (a record about a job or rank the engine does not track is not
/// kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HangWatch {
    jobs: BTreeMap<String, JobHang>,
    /// Reports kept at most ([`MAX_REPORTS`]).
    max_reports: usize,
    /// Ranks holding a report now.
    reports: usize,
    /// Reports not kept for [`MAX_REPORTS`].
    reports_refused: u64,
}

impl Default for HangWatch {
    fn default() -> Self {
        Self::with_max_reports(MAX_REPORTS)
    }
}

impl HangWatch {
    /// An empty watch keeping at most `max` stall reports.
    pub fn with_max_reports(max: usize) -> Self {
        Self {
            jobs: BTreeMap::new(),
            max_reports: max,
            reports: 0,
            reports_refused: 0,
        }
    }

    /// Takes an applied batch's hook records (the engine has seen them);
    /// `node` pushed them, `actions` holds the evidence dumps done so far.
    pub fn observe(
        &mut self,
        engine: &mut Engine,
        node: &str,
        records: &[HookRecord],
        actions: &ActionBook,
    ) {
        for record in records {
            if check_record(record).is_err() {
                continue;
            }
            match record {
                HookRecord::Step(s) => {
                    let t = s.t_ms as f64 / 1000.0;
                    self.observe_step(engine, t, &s.job, s.rank, s.step, s.duration_ms);
                }
                HookRecord::Stall(s) => self.observe_stall(engine, node, s, actions),
                _ => {}
            }
        }
        let reports = &mut self.reports;
        self.jobs.retain(|job, j| {
            let keep = engine.live_job(job);
            if !keep {
                *reports -= j.ranks.values().filter(|r| r.report.is_some()).count();
                if let Some(e) = j.episode.take() {
                    let t = engine.now();
                    engine.alerts_mut().resolve(
                        AlertKind::Hang,
                        &Subject::Rank(job.clone(), e.rank),
                        t,
                    );
                }
            }
            keep
        });
    }

    /// Stall reports not kept because the bound was reached.
    pub fn reports_refused(&self) -> u64 {
        self.reports_refused
    }

    /// The open episodes, by job.
    pub fn episodes(&self) -> impl Iterator<Item = (&str, &Episode)> {
        self.jobs
            .iter()
            .filter_map(|(job, j)| j.episode.as_ref().map(|e| (job.as_str(), e)))
    }

    /// The ranks of `job` whose hooks reported a stall since `t`: they can
    /// carry out an evidence dump (their hooks and agents know it).
    pub fn reporting_since(&self, job: &str, t: f64) -> Vec<u32> {
        self.jobs.get(job).map_or_else(Vec::new, |j| {
            j.ranks
                .iter()
                .filter(|(_, r)| r.report.as_ref().is_some_and(|(rt, _)| *rt >= t))
                .map(|(&rank, _)| rank)
                .collect()
        })
    }

    fn observe_step(
        &mut self,
        engine: &mut Engine,
        t: f64,
        job: &str,
        rank: u32,
        step: u64,
        ms: f64,
    ) {
        if !engine.tracks_rank(job, rank) {
            return;
        }
        let j = self.jobs.entry(job.to_owned()).or_default();
        j.newest_step_t = Some(j.newest_step_t.map_or(t, |n| n.max(t)));
        if j.recent_step_ms.len() == RECENT_STEPS {
            j.recent_step_ms.pop_front();
        }
        j.recent_step_ms.push_back(ms);
        let r = j.ranks.entry(rank).or_insert(RankHang {
            last_step: None,
            last_heard_t: t,
            report: None,
            node: None,
        });
        r.last_step = Some(r.last_step.map_or(step, |s| s.max(step)));
        r.last_heard_t = r.last_heard_t.max(t);
        if r.report.take().is_some() {
            self.reports -= 1;
        }
        if let Some(e) = j.episode.take_if(|e| t > e.since_t) {
            let subject = Subject::Rank(job.to_owned(), e.rank);
            engine.alerts_mut().resolve(AlertKind::Hang, &subject, t);
        }
    }

    /// The node whose agent forwarded the rank's stall reports: where an
    /// evidence dump goes when the cluster view has not placed the rank
    /// (a job on CPUs, or an agent without NVML).
    pub fn node_of(&self, job: &str, rank: u32) -> Option<&str> {
        self.jobs.get(job)?.ranks.get(&rank)?.node.as_deref()
    }

    fn observe_stall(
        &mut self,
        engine: &mut Engine,
        node: &str,
        s: &StallRecord,
        actions: &ActionBook,
    ) {
        if !engine.tracks_rank(&s.job, s.rank) {
            return;
        }
        let t = s.t_ms as f64 / 1000.0;
        let j = self.jobs.entry(s.job.clone()).or_default();
        let r = j.ranks.entry(s.rank).or_insert(RankHang {
            last_step: None,
            last_heard_t: t,
            report: None,
            node: None,
        });
        r.last_heard_t = r.last_heard_t.max(t);
        r.last_step = Some(r.last_step.map_or(s.step, |n| n.max(s.step)));
        if r.node.as_deref() != Some(node) {
            r.node = Some(node.to_owned());
        }
        match &r.report {
            Some((rt, _)) if t < *rt => {}
            Some(_) => r.report = Some((t, s.clone())),
            None if self.reports >= self.max_reports => {
                self.reports_refused += 1;
                return;
            }
            None => {
                r.report = Some((t, s.clone()));
                self.reports += 1;
            }
        }
        // While a hang is named, an exit is judged at once, so that the
        // last rank's ends the episode (a scan per exit, in a hung job only).
        let exit_in_hang = s.source == PROCESS_EXIT && j.episode.is_some();
        if !exit_in_hang && j.judged_t.is_some_and(|last| t < last + JUDGE_EVERY_S) {
            return;
        }
        j.judged_t = Some(t);
        // A job with no step yet has nothing to be quiet after.
        let Some(newest) = j.newest_step_t else {
            return;
        };
        let ranks = engine.ranks_ended(&s.job);
        let mut exits = Vec::new();
        let views: Vec<RankView<'_>> = ranks
            .iter()
            .map(|&(rank, ended_t)| {
                let known = j.ranks.get(&rank);
                let report = known.and_then(|k| k.report.as_ref().map(|(rt, r)| (*rt, r)));
                let exit_report = report.filter(|(_, r)| r.source == PROCESS_EXIT);
                let exited_t = match (ended_t, exit_report) {
                    (Some(e), Some((rt, _))) => Some(e.min(rt)),
                    (e, r) => e.or(r.map(|(rt, _)| rt)),
                };
                exits.extend(exited_t);
                RankView {
                    rank,
                    ended: exited_t.is_some(),
                    last_step: known.and_then(|k| k.last_step),
                    report: report.filter(|_| exit_report.is_none()),
                    last_heard_t: known.map(|k| k.last_heard_t),
                }
            })
            .collect();
        // Ranks that exit once a hang is named are the job being torn down
        // (the user's kill, the launcher's): the alert keeps the diagnosis
        // it had, until every rank is gone.
        let torn_down = j
            .episode
            .as_ref()
            .is_some_and(|e| exits.iter().any(|&x| x >= e.since_t));
        if torn_down && views.iter().any(|v| !v.ended) {
            return;
        }
        let verdict = judge(t, newest, median_s(&j.recent_step_ms), &views);
        let Verdict::Hung(hang) = verdict else {
            if let Some(e) = j.episode.take() {
                let subject = Subject::Rank(s.job.clone(), e.rank);
                engine.alerts_mut().resolve(AlertKind::Hang, &subject, t);
            }
            return;
        };
        let rank = j.episode.as_ref().map_or_else(
            || hang.culprits.first().map_or(ranks[0].0, |c| c.rank),
            |e| e.rank,
        );
        j.episode.get_or_insert(Episode { since_t: t, rank });
        let subject = Subject::Rank(s.job.clone(), rank);
        let mut a = subject.alert(AlertKind::Hang, t, Severity::Critical);
        let since = j.episode.as_ref().map_or(t, |e| e.since_t);
        a.message = message::describe(&s.job, engine.world_size(&s.job), &hang);
        message::add_evidence(&mut a.message, &evidence(actions, &s.job, since));
        a.recommendation = Some(message::RECOMMENDATION.into());
        engine.alerts_mut().raise(subject, a);
    }
}

/// The files each rank's evidence dump wrote in this episode, by rank.
fn evidence(actions: &ActionBook, job: &str, since_t: f64) -> Vec<(u32, String)> {
    actions
        .entries()
        .filter(|e| {
            e.kind == ActionKind::DumpEvidence
                && e.job == job
                && e.state == ActionState::Done
                && e.planned_t >= since_t
        })
        .map(|e| (e.rank, e.response.clone().unwrap_or_default()))
        .collect()
}

/// The median of recent step times, seconds.
fn median_s(ms: &VecDeque<f64>) -> Option<f64> {
    let mut v: Vec<f64> = ms.iter().copied().filter(|m| m.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2] / 1000.0)
}

#[cfg(test)]
mod tests;
