//! The hang rule, pure: given what is known of a job's ranks at one data
//! time, is the job hung, paused on purpose, or neither, and which ranks do
//! the others wait for.
//!
//! A job is quiet when none of its live ranks has finished a step for
//! [`threshold_s`]. A quiet job is *paused*, not hung, when a rank marked a
//! planned pause (`gpumon.mark("eval")`, `"checkpoint"`, ...) since its last
//! step, or when the hooks see collectives and no rank waits in one: every
//! rank is busy in its own work (a checkpoint every rank writes, a long
//! evaluation). Otherwise it is hung: the ranks wait in a collective, and
//! the rank the others wait for is the one that has not entered it (its
//! last sequence number in that process group is lower), entered a
//! different call under the same number, waits in another group, or whose
//! hook says nothing at all (a process stopped, hung hard, or gone).

use std::collections::BTreeMap;

use gpumon_proto::{CollectiveWait, StallRecord};

/// The floor of the quiet time that makes a hang, seconds.
pub const MIN_QUIET_S: f64 = 60.0;

/// The quiet time, in median steps, that makes a hang.
pub const QUIET_STEPS: f64 = 10.0;

/// A stall report older than this, seconds, no longer speaks for its rank
/// (hooks report every 10 s while stalled).
pub const FRESH_S: f64 = 30.0;

/// Marker names (by prefix, case-insensitive) that announce a planned pause.
pub const PAUSE_MARKERS: [&str; 6] = ["eval", "valid", "test", "checkpoint", "ckpt", "save"];

/// The quiet time that makes a hang for a job whose median step is
/// `median_step_s`: 10 median steps, and at least a minute.
pub fn threshold_s(median_step_s: Option<f64>) -> f64 {
    median_step_s
        .filter(|s| s.is_finite())
        .map_or(MIN_QUIET_S, |s| (s * QUIET_STEPS).max(MIN_QUIET_S))
}

/// What is known of one rank of the job.
#[derive(Debug, Clone, Copy)]
pub struct RankView<'a> {
    /// Its global rank.
    pub rank: u32,
    /// Its process has exited (NVML saw it leave its GPU).
    pub ended: bool,
    /// Its last finished step number, if any.
    pub last_step: Option<u64>,
    /// Its latest stall report and when it came, if fresh.
    pub report: Option<(f64, &'a StallRecord)>,
    /// Data time it was last heard of by its hook (a step or a report).
    pub last_heard_t: Option<f64>,
}

/// Why a rank is named as the one the others wait for.
#[derive(Debug, Clone, PartialEq)]
pub enum Why {
    /// It has not entered the collective: its last number in the group.
    NotEntered(Option<u64>),
    /// It waits in another collective.
    WaitsElsewhere {
        /// The group it waits in.
        group: String,
        /// The number there.
        seq: u64,
        /// The operation.
        op: String,
    },
    /// It entered a different call under the same number.
    DifferentCall {
        /// Its operation.
        op: String,
        /// Its input's elements.
        numel: u64,
    },
    /// Its hook reports nothing: seconds since it was last heard of.
    Silent(Option<f64>),
    /// No collective information: its last step is the oldest.
    Behind,
    /// Its process has exited while the job's other ranks live on.
    Exited,
}

/// A rank the others wait for.
#[derive(Debug, Clone, PartialEq)]
pub struct Culprit {
    /// Its global rank.
    pub rank: u32,
    /// Why.
    pub why: Why,
    /// Its last finished step, if known.
    pub last_step: Option<u64>,
}

/// The collective most ranks wait in.
#[derive(Debug, Clone, PartialEq)]
pub struct Waited {
    /// Process group name.
    pub group: String,
    /// Its description (`default_pg`), possibly empty.
    pub desc: String,
    /// Sequence number.
    pub seq: u64,
    /// Operation.
    pub op: String,
    /// Input elements.
    pub numel: u64,
    /// The ranks waiting in it.
    pub waiters: Vec<u32>,
    /// The longest wait, seconds.
    pub waited_s: f64,
    /// Seconds left before the process group's timeout, where known.
    pub timeout_left_s: Option<f64>,
}

/// A hung job.
#[derive(Debug, Clone, PartialEq)]
pub struct Hang {
    /// Seconds since the job's newest step.
    pub quiet_s: f64,
    /// The quiet time that made it a hang.
    pub threshold_s: f64,
    /// The collective the others wait in, if the hooks see collectives.
    pub waited: Option<Waited>,
    /// The ranks waited for (empty when every member waits).
    pub culprits: Vec<Culprit>,
    /// Live ranks.
    pub live: usize,
}

/// The rule's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Steps are recent enough.
    Running,
    /// Quiet on purpose; why.
    Paused(String),
    /// Hung.
    Hung(Hang),
}

/// Judges a job at data time `t`: `newest_step_t` is its newest step's
/// time, `ranks` its ranks in rank order (an exited one, among live ones,
/// is named first: its peers wait for a process that is gone).
pub fn judge<'a>(
    t: f64,
    newest_step_t: f64,
    median_step_s: Option<f64>,
    ranks: &[RankView<'a>],
) -> Verdict {
    let threshold = threshold_s(median_step_s);
    let quiet = t - newest_step_t;
    let live = ranks.iter().filter(|v| !v.ended).count();
    if quiet.is_nan() || quiet < threshold || live == 0 {
        return Verdict::Running;
    }
    let exited = ranks.iter().filter(|v| v.ended).map(|v| Culprit {
        rank: v.rank,
        why: Why::Exited,
        last_step: v.last_step,
    });
    let fresh = |v: &RankView<'a>| fresh_report(t, v);
    for v in ranks {
        if let Some(marker) = fresh(v).and_then(|r| r.marker.as_deref()) {
            if is_pause_marker(marker) {
                return Verdict::Paused(format!("rank {} marked {marker:?}", v.rank));
            }
        }
    }
    let hang = |waited, culprits: Vec<Culprit>| {
        Verdict::Hung(Hang {
            quiet_s: quiet,
            threshold_s: threshold,
            waited,
            culprits: exited.clone().chain(culprits).collect(),
            live,
        })
    };
    let Some((source, target)) = most_waited(ranks.iter().filter_map(fresh)) else {
        if exited.clone().next().is_none()
            && ranks.iter().filter_map(fresh).any(|r| r.source != "none")
        {
            return Verdict::Paused(
                "no rank waits in a collective: every rank is busy in its own work".into(),
            );
        }
        return hang(None, behind(t, ranks));
    };
    let mut culprits = Vec::new();
    let mut waiters = Vec::new();
    let mut waited_s: f64 = 0.0;
    let mut timeout_left_s: Option<f64> = None;
    for v in ranks.iter().filter(|v| !v.ended) {
        let Some(r) = fresh(v) else {
            culprits.push(Culprit {
                rank: v.rank,
                why: Why::Silent(v.last_heard_t.map(|h| t - h)),
                last_step: v.last_step,
            });
            continue;
        };
        if r.source != source {
            continue;
        }
        let why = match &r.waiting {
            Some(w) if w.group == target.group && w.seq == target.seq => {
                if w.op == target.op && w.numel == target.numel {
                    waiters.push(v.rank);
                    let s = w.waited_ms as f64 / 1000.0;
                    waited_s = waited_s.max(s);
                    if let Some(timeout) = w.timeout_ms {
                        let left = timeout as f64 / 1000.0 - s;
                        timeout_left_s = Some(timeout_left_s.map_or(left, |l| l.min(left)));
                    }
                    continue;
                }
                Why::DifferentCall {
                    op: w.op.clone(),
                    numel: w.numel,
                }
            }
            Some(w) if w.group == target.group && w.seq > target.seq => continue,
            waiting => {
                let entered = r
                    .entered
                    .iter()
                    .find(|(g, _)| *g == target.group)
                    .map(|&(_, s)| s);
                let member = entered.is_some() || target.group == "0";
                if !member || entered.is_some_and(|s| s >= target.seq) {
                    continue;
                }
                match waiting {
                    Some(w) => Why::WaitsElsewhere {
                        group: w.group.clone(),
                        seq: w.seq,
                        op: w.op.clone(),
                    },
                    None => Why::NotEntered(entered),
                }
            }
        };
        culprits.push(Culprit {
            rank: v.rank,
            why,
            last_step: v.last_step,
        });
    }
    hang(
        Some(Waited {
            group: target.group.clone(),
            desc: target.desc.clone(),
            seq: target.seq,
            op: target.op.clone(),
            numel: target.numel,
            waiters,
            waited_s,
            timeout_left_s: timeout_left_s.map(|l| l.max(0.0)),
        }),
        culprits,
    )
}

/// A rank's stall report, if it is fresh at `t`.
fn fresh_report<'a>(t: f64, v: &RankView<'a>) -> Option<&'a StallRecord> {
    v.report.filter(|(rt, _)| t - rt <= FRESH_S).map(|(_, r)| r)
}

/// Whether a marker name announces a planned pause.
pub fn is_pause_marker(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    PAUSE_MARKERS.iter().any(|p| lower.starts_with(p))
}

/// A call as the waiters name it: source, group, number, operation, elements.
type CallKey<'r> = (&'r str, &'r str, u64, &'r str, u64);

/// The collective most reports wait in, and the call most of its waiters
/// made (ties: the longest wait), with the source of its numbering.
fn most_waited<'r>(
    reports: impl Iterator<Item = &'r StallRecord>,
) -> Option<(&'r str, &'r CollectiveWait)> {
    let mut counts: BTreeMap<CallKey<'r>, (usize, u64, &CollectiveWait)> = BTreeMap::new();
    for r in reports {
        if let Some(w) = &r.waiting {
            let key = (
                r.source.as_str(),
                w.group.as_str(),
                w.seq,
                w.op.as_str(),
                w.numel,
            );
            let e = counts.entry(key).or_insert((0, 0, w));
            e.0 += 1;
            e.1 = e.1.max(w.waited_ms);
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| (a.1 .0, a.1 .1).cmp(&(b.1 .0, b.1 .1)).then(b.0.cmp(&a.0)))
        .map(|((source, ..), (_, _, w))| (source, w))
}

/// Without collective information: the ranks with the fewest finished
/// steps when they differ, then those whose hooks went silent.
fn behind(t: f64, ranks: &[RankView<'_>]) -> Vec<Culprit> {
    let lowest = ranks.iter().filter_map(|v| v.last_step).min();
    let highest = ranks.iter().filter_map(|v| v.last_step).max();
    ranks
        .iter()
        .filter(|v| !v.ended)
        .filter_map(|v| {
            let why = if fresh_report(t, v).is_none() {
                Why::Silent(v.last_heard_t.map(|h| t - h))
            } else if lowest < highest && v.last_step == lowest {
                Why::Behind
            } else {
                return None;
            };
            Some(Culprit {
                rank: v.rank,
                why,
                last_step: v.last_step,
            })
        })
        .collect()
}
