//! Two sweeps, point by point: each point of A that B also ran (the same
//! parameter values) is compared as two runs are (step time and peak
//! memory, gated on the limits; an out-of-memory counts), and the sweep is
//! worse when any point is. Pure.

use std::collections::BTreeMap;

use crate::sweep::report::{Measures, PointResult, Status, SweepReport};

use super::verdict::{judge, Limits, Row, Unit, Verdict};
use super::{Outcome, PointRow};

/// Compares B against A.
pub fn compare(a: &SweepReport, b: &SweepReport, limits: Limits) -> Outcome {
    let mut out = Outcome::default();
    let in_b: BTreeMap<&BTreeMap<String, String>, &PointResult> =
        b.points.iter().map(|p| (&p.params, p)).collect();
    for pa in &a.points {
        match in_b.get(&pa.params) {
            Some(pb) => out.points.push(point(pa, pb, limits)),
            None => out
                .notes
                .push(format!("point {} of A was not run in B", said(&pa.params))),
        }
    }
    let judged: Vec<&PointRow> = out
        .points
        .iter()
        .filter(|p| p.verdict != Verdict::NotComparable)
        .collect();
    if judged.is_empty() {
        out.verdict = Verdict::NotComparable;
        out.reason = if out.points.is_empty() {
            "no point of A was run in B".into()
        } else {
            "no point ran to its end in both".into()
        };
        return out;
    }
    let with = |v: Verdict| -> Vec<String> {
        judged
            .iter()
            .filter(|p| p.verdict == v)
            .map(|p| format!("{}: {}", said(&p.params), p.reason))
            .collect()
    };
    let (worse, better) = (with(Verdict::Worse), with(Verdict::Better));
    (out.verdict, out.reason) = if !worse.is_empty() {
        (Verdict::Worse, worse.join("; "))
    } else if !better.is_empty() {
        (Verdict::Better, better.join("; "))
    } else {
        (
            Verdict::Same,
            format!("{} points within the limits", judged.len()),
        )
    };
    out
}

fn point(a: &PointResult, b: &PointResult, limits: Limits) -> PointRow {
    let (ma, mb) = (&a.measures, &b.measures);
    let reserved = ma.peak_reserved_bytes.is_some() && mb.peak_reserved_bytes.is_some();
    let peak = |m: &Measures| {
        if reserved {
            m.peak_reserved_bytes
        } else {
            m.peak_gpu_used_bytes
        }
        .map(|v| v as f64)
    };
    let rows = vec![
        Row::new(
            "step time (median)",
            Unit::Ms,
            ma.step_ms_p50,
            mb.step_ms_p50,
            Some(limits.step_time_pct),
        ),
        Row::new(
            "peak memory",
            Unit::Bytes,
            peak(ma),
            peak(mb),
            Some(limits.peak_memory_pct),
        ),
    ];
    let (verdict, reason) = match (a.status, b.status) {
        (Status::Ok, Status::Oom) => (Verdict::Worse, "B ran out of memory, A did not".into()),
        (Status::Oom, Status::Ok) => (Verdict::Better, "A ran out of memory, B did not".into()),
        (Status::Ok, Status::Ok) if rows.iter().any(|r| r.change_pct.is_some()) => {
            judge(&rows, None)
        }
        (Status::Ok, Status::Ok) => (Verdict::NotComparable, "nothing measured in both".into()),
        (sa, sb) => (
            Verdict::NotComparable,
            format!("A {}, B {}", sa.as_str(), sb.as_str()),
        ),
    };
    PointRow {
        params: a.params.clone(),
        verdict,
        reason,
        rows,
    }
}

/// `batch=64 seq=2048`.
fn said(params: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(" ")
}
