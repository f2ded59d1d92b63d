//! Collectives one by one: which rank arrives last, on aligned clocks.
//!
//! A step record may list the collectives its rank entered
//! ([`gpumon_proto::CollectiveArrival`]): process group, number, when the
//! rank entered it and when it stopped waiting, on its own clock. The rank
//! its peers wait for is the one that arrives last. Nodes' clocks disagree
//! by more than a collective lasts, so entry times are not compared as
//! they are. A collective ends at nearly the same instant on every member
//! that was there to see it end, that is every member that blocked in it
//! (one that came back to an asynchronous call after it had ended says
//! only when it came back). So each rank's clock is first aligned on the
//! ends of the collectives it blocked in beside at least one other member:
//! its *offset* is the median, over those, of how much later than the
//! blocked members' median end it says the collective ended. A rank that
//! blocked in none in a step keeps the median offset of its recent steps,
//! moved as much as those measured in this step moved from theirs (the
//! reference, the blocked members' median, is not the same ranks every
//! step); with no recent offset its clock is taken as it is, as on one
//! node. Then the
//! entries are compared: a collective is *decided* when its latest member
//! arrived [`MIN_LATE_MS`] or more after every other one, and that member
//! arrived *last*, later than the others' median by its *lateness*.
//! Back-to-back collectives after a late one are entered together and
//! decide nothing, so the count that matters is of decided collectives.
//!
//! Per step, rank and process group this gives the decided collectives it
//! met, at how many of them it was the late one, its median lateness
//! there, and its share of all the lateness in them. A rank that loses the
//! CPU for a moment (four ranks on two cores) is now and then the late one
//! by a few ms; the straggler is late by its whole slowdown, so the share
//! of the lateness, not the count, says who the others wait for. The
//! straggler alert names these for the groups in which the others wait for
//! it.
//!
//! Cost: a step's collectives are sorted once by (group, number), so
//! scoring a step is O(n log n) in the collectives it lists. Memory:
//! at most [`PENDING_ARRIVALS`] collectives wait for their step to be
//! scored per job (more are counted and left out), and each rank that
//! listed any keeps one summary per scored step, `window_steps` at most.

use std::collections::{BTreeMap, VecDeque};

use gpumon_proto::CollectiveArrival;
use serde::{Deserialize, Serialize};

use super::super::robust_stats::median_of;
use super::waits::wait_index;
use super::{peer_medians, Row, MAX_WAIT_GROUPS};
use crate::shared::Shared;

/// Collectives kept per job while their steps wait for late ranks.
pub const PENDING_ARRIVALS: usize = 1 << 15;

/// How much after every other member the latest must arrive for a
/// collective to be decided, ms.
pub const MIN_LATE_MS: f64 = 1.0;

/// How long a member must block in a collective for its exit to say when
/// the collective ended, ms.
const MIN_BLOCKED_MS: f64 = 0.1;

/// One collective of one rank's step, times in ms after its step began.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Arrival {
    /// The interned process group.
    group: u8,
    seq: u64,
    entered_ms: f64,
    left_ms: f64,
    wait_ms: f64,
}

impl PartialEq for Arrival {
    fn eq(&self, o: &Self) -> bool {
        let bits = |a: &Self| [a.entered_ms, a.left_ms, a.wait_ms].map(f64::to_bits);
        (self.group, self.seq) == (o.group, o.seq) && bits(self) == bits(o)
    }
}

/// One rank's arrivals in one scored step, per interned process group.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct ArrivalScore {
    /// Decided collectives it met.
    decided: [u16; MAX_WAIT_GROUPS],
    /// Of those, the ones at which it was the late member.
    last: [u16; MAX_WAIT_GROUPS],
    /// Its median lateness at those, ms (NaN where it was never late).
    late_ms: [f64; MAX_WAIT_GROUPS],
    /// Its lateness summed over those, ms.
    own_late_ms: [f64; MAX_WAIT_GROUPS],
    /// The late members' lateness summed over the decided collectives it
    /// met, its own included, ms.
    all_late_ms: [f64; MAX_WAIT_GROUPS],
    /// Its clock's offset in the step, ms (NaN when none was measured).
    offset_ms: f64,
}

impl Default for ArrivalScore {
    fn default() -> Self {
        Self {
            decided: [0; MAX_WAIT_GROUPS],
            last: [0; MAX_WAIT_GROUPS],
            late_ms: [f64::NAN; MAX_WAIT_GROUPS],
            own_late_ms: [0.0; MAX_WAIT_GROUPS],
            all_late_ms: [0.0; MAX_WAIT_GROUPS],
            offset_ms: f64::NAN,
        }
    }
}

impl PartialEq for ArrivalScore {
    fn eq(&self, o: &Self) -> bool {
        let bits =
            |a: &Self| [a.late_ms, a.own_late_ms, a.all_late_ms].map(|v| v.map(f64::to_bits));
        self.decided == o.decided
            && self.last == o.last
            && bits(self) == bits(o)
            && self.offset_ms.to_bits() == o.offset_ms.to_bits()
    }
}

/// How a rank arrived at one process group's collectives over the steps
/// that made its case.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupArrivals {
    /// The process group's name.
    pub group: String,
    /// Decided collectives it met (see the module docs).
    pub decided: u32,
    /// Of those, the ones at which it was the late member.
    pub last: u32,
    /// Its median lateness at those, ms.
    pub late_ms: f64,
    /// Its share of all the lateness at the decided collectives, 0 to 1.
    pub late_share: f64,
}

/// A step's collectives taken for scoring: per rank, its step's start (ms,
/// its own clock) and its collectives.
pub(super) type StepArrivals = Vec<(u32, f64, Vec<Arrival>)>;

/// Per-job arrival state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrivalBook {
    /// Per open (step, rank): the step's start on the rank's clock, ms,
    /// and its collectives.
    pending: BTreeMap<(u64, u32), (f64, Vec<Arrival>)>,
    /// Collectives in `pending`.
    pending_len: usize,
    /// Collectives left out: past [`PENDING_ARRIVALS`], or in a process
    /// group past the interned ones.
    dropped: u64,
    /// Per rank that listed collectives, its latest scored steps' arrivals
    /// (copied on write, as the straggler scores are).
    ranks: BTreeMap<u32, Shared<VecDeque<ArrivalScore>>>,
}

impl ArrivalBook {
    /// Keeps a rank's collectives of `step` until the step is scored.
    pub(super) fn put(
        &mut self,
        step: u64,
        rank: u32,
        start_ms: f64,
        list: &[CollectiveArrival],
        groups: &mut Vec<String>,
    ) {
        if list.is_empty() || !start_ms.is_finite() {
            return;
        }
        let mut kept = Vec::with_capacity(list.len());
        for c in list {
            let usable = [c.entered_ms, c.left_ms, c.wait_ms]
                .iter()
                .all(|v| v.is_finite());
            match wait_index(groups, &c.group).filter(|_| usable) {
                Some(g) => kept.push(Arrival {
                    group: g as u8,
                    seq: c.seq,
                    entered_ms: c.entered_ms,
                    left_ms: c.left_ms,
                    wait_ms: c.wait_ms,
                }),
                None => self.dropped += 1,
            }
        }
        let replaced = self
            .pending
            .remove(&(step, rank))
            .map_or(0, |(_, l)| l.len());
        self.pending_len -= replaced;
        if self.pending_len + kept.len() > PENDING_ARRIVALS {
            self.dropped += kept.len() as u64;
            return;
        }
        self.pending_len += kept.len();
        self.pending.insert((step, rank), (start_ms, kept));
    }

    /// Takes the collectives of `step`, whether it is scored or dropped.
    pub(super) fn take_step(&mut self, step: u64) -> StepArrivals {
        let keys: Vec<(u64, u32)> = self
            .pending
            .range((step, 0)..=(step, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let (start, list) = self.pending.remove(&k)?;
                self.pending_len -= list.len();
                Some((k.1, start, list))
            })
            .collect()
    }

    /// Per row of a step, its arrivals (`None` for a row that listed no
    /// collective, or met no peer in any); a rank whose clock the step
    /// cannot align keeps its recent offset.
    pub(super) fn score(
        &self,
        rows: &[Row],
        taken: StepArrivals,
        scratch: &mut Vec<f64>,
    ) -> Vec<Option<ArrivalScore>> {
        let recent = |rank: u32, scratch: &mut Vec<f64>| {
            let scores = self.ranks.get(&rank)?;
            median_of(
                scores.iter().map(|s| s.offset_ms).filter(|v| v.is_finite()),
                scratch,
            )
        };
        let fallback: Vec<Option<f64>> = taken
            .iter()
            .map(|(rank, _, _)| recent(*rank, scratch))
            .collect();
        score_step(rows, taken, &fallback, scratch)
    }

    /// Keeps a scored row's arrivals, in step with its straggler scores: a
    /// rank that never listed a collective gets no entry.
    pub(super) fn record(&mut self, rank: u32, score: Option<ArrivalScore>, window: usize) {
        let entry = match (self.ranks.get_mut(&rank), score) {
            (Some(entry), _) => entry,
            (None, Some(_)) => self.ranks.entry(rank).or_default(),
            (None, None) => return,
        };
        if entry.len() == window.max(1) {
            entry.pop_front();
        }
        entry.push_back(score.unwrap_or_default());
    }

    /// How `rank` arrived at the collectives of each of `named` over its
    /// latest `steps` scored steps; groups with no decided collective are
    /// left out.
    pub(super) fn named<'n>(
        &self,
        rank: u32,
        steps: usize,
        groups: &[String],
        named: impl Iterator<Item = &'n str>,
        scratch: &mut Vec<f64>,
    ) -> Vec<GroupArrivals> {
        let Some(scores) = self.ranks.get(&rank) else {
            return Vec::new();
        };
        let recent = || scores.iter().skip(scores.len().saturating_sub(steps));
        named
            .filter_map(|name| {
                let g = groups.iter().position(|n| n == name)?;
                let decided: u32 = recent().map(|s| u32::from(s.decided[g])).sum();
                if decided == 0 {
                    return None;
                }
                let late = recent().map(|s| s.late_ms[g]).filter(|v| !v.is_nan());
                let own: f64 = recent().map(|s| s.own_late_ms[g]).sum();
                let all: f64 = recent().map(|s| s.all_late_ms[g]).sum();
                Some(GroupArrivals {
                    group: name.to_owned(),
                    decided,
                    last: recent().map(|s| u32::from(s.last[g])).sum(),
                    late_ms: median_of(late, scratch).unwrap_or(0.0),
                    late_share: if all > 0.0 { own / all } else { 0.0 },
                })
            })
            .collect()
    }

    /// Forgets a rank that ended.
    pub(super) fn remove_rank(&mut self, rank: u32) {
        self.ranks.remove(&rank);
    }

    /// Collectives waiting for their steps to be scored.
    pub fn pending(&self) -> usize {
        self.pending_len
    }

    /// Collectives left out so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// A call: its (group, number), and the taken entry and place in its list.
type Call = (u8, u64, usize, usize);

/// [`ArrivalBook::score`] with each taken rank's recent offset.
fn score_step(
    rows: &[Row],
    taken: StepArrivals,
    fallback: &[Option<f64>],
    scratch: &mut Vec<f64>,
) -> Vec<Option<ArrivalScore>> {
    let mut out = vec![None; rows.len()];
    let row_of: BTreeMap<u32, usize> = rows.iter().enumerate().map(|(i, r)| (r.rank, i)).collect();
    let taken: Vec<(usize, f64, Vec<Arrival>, Option<f64>)> = taken
        .into_iter()
        .zip(fallback)
        .filter_map(|((rank, start, list), recent)| {
            Some((*row_of.get(&rank)?, start, list, *recent))
        })
        .collect();
    if taken.len() < 2 {
        return out;
    }
    let mut calls: Vec<Call> = Vec::new();
    for (e, (_, _, list, _)) in taken.iter().enumerate() {
        calls.extend(list.iter().enumerate().map(|(k, a)| (a.group, a.seq, e, k)));
    }
    calls.sort_unstable();
    let runs: Vec<&[Call]> = calls
        .chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
        .filter(|run| run.len() >= 2)
        .collect();
    let call = |&(_, _, e, k): &Call| &taken[e].2[k];
    // Clocks: each blocked member's end less the blocked members' median end.
    let mut residuals: Vec<Vec<f64>> = vec![Vec::new(); taken.len()];
    for run in &runs {
        let ends: Vec<(usize, f64)> = run
            .iter()
            .filter(|c| call(c).wait_ms >= MIN_BLOCKED_MS)
            .map(|c| (c.2, taken[c.2].1 + call(c).left_ms))
            .collect();
        if ends.len() < 2 {
            continue;
        }
        let Some(median_end) = median_of(ends.iter().map(|e| e.1), scratch) else {
            continue;
        };
        for (e, end) in ends {
            residuals[e].push(end - median_end);
        }
    }
    let measured: Vec<Option<f64>> = residuals
        .iter()
        .map(|r| median_of(r.iter().copied(), scratch))
        .collect();
    let moved = measured
        .iter()
        .zip(&taken)
        .filter_map(|(m, t)| Some(m.as_ref()? - t.3?));
    let moved = median_of(moved, scratch).unwrap_or(0.0);
    // Per entry: the offset used, and the one measured (NaN: none).
    let offsets: Vec<(f64, f64)> = measured
        .iter()
        .zip(&taken)
        .map(|(m, t)| match m {
            Some(m) => (*m, *m),
            None => (t.3.map_or(0.0, |recent| recent + moved), f64::NAN),
        })
        .collect();
    let mut scores = vec![ArrivalScore::default(); taken.len()];
    let mut lates: Vec<[Vec<f64>; MAX_WAIT_GROUPS]> = vec![Default::default(); taken.len()];
    let mut met = vec![false; taken.len()];
    for run in &runs {
        let g = run[0].0 as usize;
        let aligned: Vec<(usize, f64)> = run
            .iter()
            .map(|c| (c.2, taken[c.2].1 + call(c).entered_ms - offsets[c.2].0))
            .collect();
        for &(e, _) in &aligned {
            met[e] = true;
        }
        let mut order: Vec<usize> = (0..aligned.len()).collect();
        order.sort_by(|&a, &b| aligned[b].1.total_cmp(&aligned[a].1));
        let (latest, next) = (aligned[order[0]], aligned[order[1]]);
        if latest.1 - next.1 < MIN_LATE_MS {
            continue;
        }
        let others = peer_medians(aligned.iter().map(|a| a.1), scratch);
        let lateness = latest.1 - others[order[0]];
        for &(e, _) in &aligned {
            let s = &mut scores[e];
            s.decided[g] = s.decided[g].saturating_add(1);
            s.all_late_ms[g] += lateness;
        }
        let s = &mut scores[latest.0];
        s.last[g] = s.last[g].saturating_add(1);
        s.own_late_ms[g] += lateness;
        lates[latest.0][g].push(lateness);
    }
    for (e, (row, _, _, _)) in taken.iter().enumerate() {
        if !met[e] {
            continue;
        }
        let s = &mut scores[e];
        s.offset_ms = offsets[e].1;
        for (g, late) in lates[e].iter().enumerate() {
            s.late_ms[g] = median_of(late.iter().copied(), scratch).unwrap_or(f64::NAN);
        }
        out[*row] = Some(*s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rank: u32) -> Row {
        Row {
            rank,
            group: 0,
            t: 10.0,
            duration_ms: 100.0,
            sections: [f64::NAN; super::super::MAX_SECTIONS],
            waits: [f64::NAN; MAX_WAIT_GROUPS],
        }
    }

    fn call(group: &str, seq: u64, entered_ms: f64, left_ms: f64) -> CollectiveArrival {
        CollectiveArrival {
            group: group.into(),
            seq,
            op: "all_gather_into_tensor".into(),
            entered_ms,
            left_ms,
            wait_ms: left_ms - entered_ms,
        }
    }

    /// Four ranks, eight collectives in group "1" in step `step`: rank 2
    /// arrives `late_ms` after the others and, when `comes_back_ms` is
    /// set, returns that long after each collective ended without blocking
    /// (an asynchronous call it waited for late); each rank's clock is
    /// `skew_ms[rank]` off.
    fn step_of(
        book: &mut ArrivalBook,
        groups: &mut Vec<String>,
        step: u64,
        (late_ms, comes_back_ms): (f64, Option<f64>),
        skew_ms: [f64; 4],
    ) {
        for rank in 0..4u32 {
            let list: Vec<CollectiveArrival> = (1..=8u64)
                .map(|k| {
                    let end = k as f64 * 10.0 + 8.0;
                    let entered = if rank == 2 {
                        end - 1.0
                    } else {
                        end - 1.0 - late_ms
                    };
                    match comes_back_ms.filter(|_| rank == 2) {
                        Some(after) => CollectiveArrival {
                            wait_ms: 0.0,
                            ..call("1", step * 8 + k, entered, end + after)
                        },
                        None => call("1", step * 8 + k, entered, end),
                    }
                })
                .collect();
            // The step's start on the rank's clock.
            book.put(
                step,
                rank,
                1_000_000.0 + skew_ms[rank as usize],
                &list,
                groups,
            );
        }
    }

    fn scored(book: &mut ArrivalBook, step: u64) -> Vec<ArrivalScore> {
        let rows: Vec<Row> = (0..4).map(row).collect();
        let taken = book.take_step(step);
        let scores = book.score(&rows, taken, &mut Vec::new());
        for (rank, s) in scores.iter().enumerate() {
            book.record(rank as u32, *s, 16);
        }
        scores.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn the_rank_that_arrives_last_is_found_whatever_the_clocks_say() {
        let mut groups = Vec::new();
        let mut book = ArrivalBook::default();
        // Rank 2's clock runs 40 ms ahead: compared as they are, its entries
        // would be the latest by far even with no lateness, and rank 3's
        // (30 ms behind) the earliest.
        let skew = [0.0, 3.0, 40.0, -30.0];
        step_of(&mut book, &mut groups, 7, (6.0, None), skew);
        let scores = scored(&mut book, 7);
        let s2 = scores[2];
        assert_eq!((s2.decided[0], s2.last[0]), (8, 8));
        assert!((s2.late_ms[0] - 6.0).abs() < 1e-9, "{}", s2.late_ms[0]);
        assert!((s2.offset_ms - 40.0).abs() < 10.0, "{s2:?}");
        for r in [0, 1, 3] {
            let s = scores[r];
            assert_eq!((s.decided[0], s.last[0]), (8, 0), "rank {r}");
            assert!(s.late_ms[0].is_nan());
        }
        assert_eq!(book.pending_len, 0);
    }

    #[test]
    fn a_rank_back_late_from_asynchronous_calls_is_aligned_on_its_recent_steps() {
        let mut groups = Vec::new();
        let mut book = ArrivalBook::default();
        let skew = [0.0, 3.0, 40.0, -30.0];
        step_of(&mut book, &mut groups, 1, (0.0, None), skew);
        scored(&mut book, 1);
        // Now it never blocks and comes back 25 ms after each end: its
        // exits say nothing of the ends, its clock is the one it had.
        step_of(&mut book, &mut groups, 2, (6.0, Some(25.0)), skew);
        let s2 = scored(&mut book, 2)[2];
        assert_eq!((s2.decided[0], s2.last[0]), (8, 8));
        assert!((s2.late_ms[0] - 6.0).abs() < 1e-9, "{s2:?}");
        assert!(s2.offset_ms.is_nan(), "nothing measured in this step");
    }

    #[test]
    fn ranks_that_arrive_together_decide_nothing() {
        let mut groups = Vec::new();
        let mut book = ArrivalBook::default();
        step_of(
            &mut book,
            &mut groups,
            7,
            (0.0, None),
            [5.0, -7.0, 11.0, 0.0],
        );
        for s in scored(&mut book, 7) {
            assert_eq!((s.decided[0], s.last[0]), (0, 0));
        }
    }

    #[test]
    fn collectives_past_the_bound_are_counted_not_kept() {
        let mut groups = Vec::new();
        let mut book = ArrivalBook::default();
        let list: Vec<CollectiveArrival> = (1..=32).map(|s| call("0", s, 1.0, 2.0)).collect();
        let fits = PENDING_ARRIVALS / 32;
        for step in 0..fits as u64 + 3 {
            book.put(step, 0, 0.0, &list, &mut groups);
        }
        assert_eq!(book.pending_len, PENDING_ARRIVALS);
        assert_eq!(book.dropped(), 3 * 32);
        // The same step and rank again replaces, not adds.
        book.put(0, 0, 0.0, &list, &mut groups);
        assert_eq!(book.pending_len, PENDING_ARRIVALS);
        assert_eq!(book.take_step(0).len(), 1);
        assert_eq!(book.pending_len, PENDING_ARRIVALS - 32);
    }

    #[test]
    fn a_rank_keeps_one_summary_per_scored_step_up_to_the_window() {
        let mut book = ArrivalBook::default();
        book.record(3, None, 4);
        assert!(book.ranks.is_empty());
        for _ in 0..10 {
            book.record(3, Some(ArrivalScore::default()), 4);
        }
        book.record(3, None, 4);
        assert_eq!(book.ranks[&3].len(), 4);
        book.remove_rank(3);
        assert!(book.ranks.is_empty());
    }
}
