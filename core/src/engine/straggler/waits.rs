//! Collective waits per process group: in which groups the others wait for
//! a straggler.
//!
//! A step record may carry how long its rank blocked in each process
//! group's collectives ([`gpumon_proto::GroupWait`]). A collective ends at
//! nearly the same instant on every member, so a member's wait is how long
//! before the last of them it arrived; comparing waits, each measured on
//! its own rank's clock, needs no agreement between nodes' clocks. Per
//! step and group, a rank's *deficit* is the median wait of the group's
//! other members less its own: how long they waited for it there. A
//! straggler's alert names the groups where that deficit, over the steps
//! that made its case, is worth naming.
//!
//! Group names are interned per job, at most [`MAX_WAIT_GROUPS`]; the
//! waits of further groups are left out (the sections still carry them).

use gpumon_proto::GroupWait;

use super::super::robust_stats::median_of;
use super::{peer_medians, Row, Score};

/// Process groups whose waits are compared per job.
pub const MAX_WAIT_GROUPS: usize = 6;

/// Process groups a straggler's alert names at most.
pub const MAX_NAMED_GROUPS: usize = 3;

/// The smallest wait per step worth naming a group for, ms.
const MIN_NAMED_WAIT_MS: f64 = 1.0;

/// The index of group `name` among `names`, interned when new and room is left.
pub(super) fn wait_index(names: &mut Vec<String>, name: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(i);
    }
    if names.len() == MAX_WAIT_GROUPS {
        return None;
    }
    names.push(name.to_owned());
    Some(names.len() - 1)
}

/// A row's waits by interned group (NaN where it reported none).
pub(super) fn row_waits(names: &mut Vec<String>, waits: &[GroupWait]) -> [f64; MAX_WAIT_GROUPS] {
    let mut out = [f64::NAN; MAX_WAIT_GROUPS];
    for w in waits {
        if !(w.wait_ms.is_finite() && w.wait_ms >= 0.0) {
            continue;
        }
        if let Some(i) = wait_index(names, &w.group) {
            out[i] = w.wait_ms;
        }
    }
    out
}

/// Per row of a step, per group: the median wait of the group's other
/// members in this step less the row's own (NaN where the row is not in
/// the group, or is its only member). O(groups x ranks log ranks).
pub(super) fn deficits(
    rows: &[Row],
    groups: usize,
    scratch: &mut Vec<f64>,
) -> Vec<[f64; MAX_WAIT_GROUPS]> {
    let mut out = vec![[f64::NAN; MAX_WAIT_GROUPS]; rows.len()];
    // `g` is a column of two tables (the rows' waits and `out`).
    #[allow(clippy::needless_range_loop)]
    for g in 0..groups.min(MAX_WAIT_GROUPS) {
        let members: Vec<usize> = (0..rows.len())
            .filter(|&i| !rows[i].waits[g].is_nan())
            .collect();
        if members.len() < 2 {
            continue;
        }
        let others = peer_medians(members.iter().map(|&i| rows[i].waits[g]), scratch);
        for (&i, m) in members.iter().zip(others) {
            out[i][g] = m - rows[i].waits[g];
        }
    }
    out
}

/// The groups in which the others waited for a rank over `evidence`, with
/// the median wait per step, longest first, a millisecond or more. A step
/// in which the rank met a group nowhere counts as no wait in it, so a
/// group met once in ten steps (a loss all-reduce, a stop check) is named
/// only if that one meeting costs every step.
pub(super) fn named_groups<'a>(
    evidence: impl Iterator<Item = &'a Score> + Clone,
    names: &[String],
    scratch: &mut Vec<f64>,
) -> Vec<(String, f64)> {
    let mut named: Vec<(String, f64)> = names
        .iter()
        .enumerate()
        .filter_map(|(g, name)| {
            let mut waits = evidence.clone().map(|s| s.group_deficit_ms[g]);
            if waits.clone().all(f64::is_nan) {
                return None;
            }
            let per_step = waits.by_ref().map(|v| if v.is_nan() { 0.0 } else { v });
            let ms = median_of(per_step, scratch)?;
            (ms >= MIN_NAMED_WAIT_MS).then(|| (name.clone(), ms))
        })
        .collect();
    named.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    named.truncate(MAX_NAMED_GROUPS);
    named
}
