//! Two profile reports of the same command, side by side: the job's step
//! time and peak memory (gated on the limits), mean memory and each
//! section's time (shown), every rank's peak and step, and the alerts each
//! run raised. Pure: the reports go in, the comparison comes out.

use std::collections::{BTreeMap, BTreeSet};

use crate::profile::report::{ProfileReport, RankReport};
use crate::sweep::measures::{measures, median};

use super::verdict::{judge, Limits, Row, Unit, Verdict};
use super::{AlertCount, Outcome, RankRow};

/// Compares B against A.
pub fn compare(a: &ProfileReport, b: &ProfileReport, limits: Limits) -> Outcome {
    let mut out = Outcome {
        alerts: alert_counts(a, b),
        ..Outcome::default()
    };
    if let Some(why) = not_comparable(a, b) {
        out.verdict = Verdict::NotComparable;
        out.reason = why;
        return out;
    }
    let (ma, mb) = (measures(a), measures(b));
    out.rows.push(Row::new(
        "step time (median)",
        Unit::Ms,
        ma.step_ms_p50,
        mb.step_ms_p50,
        Some(limits.step_time_pct),
    ));
    out.rows.push(Row::new(
        "step time (p90)",
        Unit::Ms,
        ma.step_ms_p90,
        mb.step_ms_p90,
        None,
    ));
    let reserved = ma.peak_reserved_bytes.is_some() && mb.peak_reserved_bytes.is_some();
    let (peak_name, peak_a, peak_b) = if reserved {
        (
            "peak reserved memory",
            ma.peak_reserved_bytes,
            mb.peak_reserved_bytes,
        )
    } else {
        (
            "peak GPU memory",
            ma.peak_gpu_used_bytes,
            mb.peak_gpu_used_bytes,
        )
    };
    let as_f64 = |v: Option<u64>| v.map(|v| v as f64);
    out.rows.push(Row::new(
        peak_name,
        Unit::Bytes,
        as_f64(peak_a),
        as_f64(peak_b),
        Some(limits.peak_memory_pct),
    ));
    out.rows.push(Row::new(
        "mean reserved memory",
        Unit::Bytes,
        mean_reserved(a),
        mean_reserved(b),
        None,
    ));
    for section in sections(a).union(&sections(b)) {
        out.rows.push(Row::new(
            &format!("section {section}"),
            Unit::Ms,
            section_ms(a, section),
            section_ms(b, section),
            None,
        ));
    }
    if out.rows.iter().all(|r| r.change_pct.is_none()) {
        out.verdict = Verdict::NotComparable;
        out.reason = "nothing measured in both: no step time and no memory in common".into();
        return out;
    }
    out.ranks = rank_rows(a, b, reserved);
    for c in &out.alerts {
        if c.b > c.a {
            out.notes
                .push(format!("B raised {} {} alert(s), A {}", c.b, c.kind, c.a));
        }
    }
    if a.exit.interrupted || b.exit.interrupted {
        out.notes
            .push("a run was interrupted: its numbers cover part of it".into());
    }
    let forced = (b.exit.oom && !a.exit.oom).then(|| {
        let why = b.exit.oom_reason.as_deref().unwrap_or("out of memory");
        format!("B ran out of memory ({why}) and A did not")
    });
    (out.verdict, out.reason) = if a.exit.oom && !b.exit.oom {
        (Verdict::Better, "A ran out of memory and B did not".into())
    } else {
        judge(&out.rows, forced)
    };
    out
}

/// Why the two cannot be compared, if so.
fn not_comparable(a: &ProfileReport, b: &ProfileReport) -> Option<String> {
    for (name, r) in [("A", a), ("B", b)] {
        let failed = r.exit.code.is_some_and(|c| c != 0) && !r.exit.oom && !r.exit.interrupted;
        if failed {
            return Some(format!(
                "{name}'s command exited with {}: its numbers are not a run's",
                r.exit.code.unwrap_or(-1)
            ));
        }
        if r.jobs.len() > 1 {
            return Some(format!(
                "{name} holds {} jobs; compare reports of one job each",
                r.jobs.len()
            ));
        }
    }
    if a.exit.oom && b.exit.oom {
        return Some("both ran out of memory".into());
    }
    let (ra, rb) = (rank_set(a), rank_set(b));
    if ra != rb {
        return Some(format!(
            "A has {} and B has {}: not the same job",
            ranks_said(&ra),
            ranks_said(&rb)
        ));
    }
    None
}

fn rank_set(r: &ProfileReport) -> BTreeSet<u32> {
    r.ranks.iter().map(|k| k.rank).collect()
}

/// `ranks 0-3`, `no ranks`, `ranks 0, 2`.
fn ranks_said(ranks: &BTreeSet<u32>) -> String {
    let (Some(first), Some(last)) = (ranks.first(), ranks.last()) else {
        return "no ranks".into();
    };
    if (last - first) as usize + 1 == ranks.len() && ranks.len() > 1 {
        format!("ranks {first}-{last}")
    } else {
        let all: Vec<String> = ranks.iter().map(u32::to_string).collect();
        format!(
            "rank{} {}",
            if ranks.len() > 1 { "s" } else { "" },
            all.join(", ")
        )
    }
}

fn mean_reserved(r: &ProfileReport) -> Option<f64> {
    let v: Vec<f64> = r
        .ranks
        .iter()
        .filter_map(|k| k.avg_reserved_bytes.map(|b| b as f64))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn sections(r: &ProfileReport) -> BTreeSet<String> {
    r.ranks
        .iter()
        .flat_map(|k| k.sections.keys().cloned())
        .collect()
}

/// The median over ranks of each rank's median time in `section`.
fn section_ms(r: &ProfileReport, section: &str) -> Option<f64> {
    median(
        r.ranks
            .iter()
            .filter_map(|k| k.sections.get(section).map(|q| q.p50))
            .collect(),
    )
}

fn rank_rows(a: &ProfileReport, b: &ProfileReport, reserved: bool) -> Vec<RankRow> {
    let by_rank = |r: &ProfileReport| -> BTreeMap<u32, RankReport> {
        r.ranks.iter().map(|k| (k.rank, k.clone())).collect()
    };
    let (ka, kb) = (by_rank(a), by_rank(b));
    let peak = |k: &RankReport| {
        if reserved {
            k.peak_reserved_bytes.map(|b| b as f64)
        } else {
            Some(k.peak_used_bytes as f64)
        }
    };
    ka.iter()
        .filter_map(|(rank, x)| {
            let y = kb.get(rank)?;
            Some(RankRow {
                rank: *rank,
                peak_memory: Row::new("peak memory", Unit::Bytes, peak(x), peak(y), None),
                mean_memory: Row::new(
                    "mean reserved memory",
                    Unit::Bytes,
                    x.avg_reserved_bytes.map(|b| b as f64),
                    y.avg_reserved_bytes.map(|b| b as f64),
                    None,
                ),
                step_time: Row::new(
                    "step time (median)",
                    Unit::Ms,
                    x.step_ms.map(|q| q.p50),
                    y.step_ms.map(|q| q.p50),
                    None,
                ),
            })
        })
        .collect()
}

fn alert_counts(a: &ProfileReport, b: &ProfileReport) -> Vec<AlertCount> {
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for x in &a.alerts {
        counts.entry(x.kind.as_str().to_owned()).or_default().0 += 1;
    }
    for x in &b.alerts {
        counts.entry(x.kind.as_str().to_owned()).or_default().1 += 1;
    }
    counts
        .into_iter()
        .map(|(kind, (a, b))| AlertCount { kind, a, b })
        .collect()
}
