//! `gpumon compare A.json B.json`: two profile reports (or two sweeps) of
//! the same command side by side, a verdict on B against A (better, worse,
//! same, not comparable, with the reason) and an exit status a CI job can
//! gate on: 0 within the limits, 1 past them, 2 not comparable. The limits
//! are on the step time and the peak memory, percent of A
//! (`--max-step-time-regression-pct`, `--max-peak-memory-regression-pct`,
//! 5 % each by default). `profiles` and `sweeps` compare; this module
//! reads, prints and writes the JSON.

mod profiles;
mod sweeps;
mod verdict;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::args::CompareArgs;
use crate::failure::{usage, Failure};
use crate::sweep::measures::{read_json, report_from};
use crate::sweep::report::{SweepReport, SWEEP_VERSION};
use crate::sweep::report_file::ReportFileError;
use verdict::{Limits, Row, Unit, Verdict, COMPARE_VERSION};

/// One rank of a profile comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankRow {
    /// Global rank.
    pub rank: u32,
    /// Its peak memory (reserved, else used on its GPU).
    pub peak_memory: Row,
    /// Its mean reserved memory.
    pub mean_memory: Row,
    /// Its median step.
    pub step_time: Row,
}

/// One point of a sweep comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointRow {
    /// The point's parameter values.
    pub params: BTreeMap<String, String>,
    /// The point's own verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: String,
    /// Step time and peak memory.
    pub rows: Vec<Row>,
}

/// Alert episodes of one kind in each run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlertCount {
    /// The alert kind.
    pub kind: String,
    /// In A.
    pub a: u64,
    /// In B.
    pub b: u64,
}

/// What a comparison found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, for people.
    pub reason: String,
    /// The job's measures (profiles).
    pub rows: Vec<Row>,
    /// Per rank (profiles).
    pub ranks: Vec<RankRow>,
    /// Per point (sweeps).
    pub points: Vec<PointRow>,
    /// Alerts by kind (profiles).
    pub alerts: Vec<AlertCount>,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
}

impl Default for Outcome {
    fn default() -> Self {
        Self {
            verdict: Verdict::Same,
            reason: String::new(),
            rows: Vec::new(),
            ranks: Vec::new(),
            points: Vec::new(),
            alerts: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// `gpumon compare --json`.
#[derive(Debug, Serialize)]
struct CompareJson<'a> {
    gpumon_compare: u32,
    /// `profile` or `sweep`.
    kind: &'a str,
    a: String,
    b: String,
    limits: Limits,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// A report as read: a profile, or a sweep.
enum Report {
    Profile(Box<crate::profile::report::ProfileReport>),
    Sweep(Box<SweepReport>),
}

pub fn run(args: CompareArgs) -> Result<(), Failure> {
    let limits = Limits {
        step_time_pct: pct(
            args.max_step_time_regression_pct,
            "--max-step-time-regression-pct",
        )?,
        peak_memory_pct: pct(
            args.max_peak_memory_regression_pct,
            "--max-peak-memory-regression-pct",
        )?,
    };
    let read = read(&args.a).and_then(|a| Ok((a, read(&args.b)?)));
    let (kind, outcome) = match read {
        Err(why) => ("unknown", not_comparable(why.to_string())),
        Ok((Report::Profile(a), Report::Profile(b))) => {
            ("profile", profiles::compare(&a, &b, limits))
        }
        Ok((Report::Sweep(a), Report::Sweep(b))) => ("sweep", sweeps::compare(&a, &b, limits)),
        Ok(_) => (
            "mixed",
            not_comparable("one is a profile report and the other a sweep".into()),
        ),
    };
    print!("{}", show(&args.a, &args.b, &outcome));
    if let Some(path) = &args.json {
        let json = CompareJson {
            gpumon_compare: COMPARE_VERSION,
            kind,
            a: args.a.display().to_string(),
            b: args.b.display().to_string(),
            limits,
            outcome: &outcome,
        };
        let text = serde_json::to_vec_pretty(&json).context("cannot encode the comparison")?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    match outcome.verdict.exit_code() {
        0 => Ok(()),
        code => Err(Failure::Exit(
            code,
            format!("{}: {}", outcome.verdict.as_str(), outcome.reason),
        )),
    }
}

fn pct(v: f64, flag: &str) -> Result<f64, Failure> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(usage(format!(
            "{flag} must be a percentage of 0 or more, not {v}"
        )))
    }
}

fn not_comparable(reason: String) -> Outcome {
    Outcome {
        verdict: Verdict::NotComparable,
        reason,
        ..Outcome::default()
    }
}

/// Reads a profile report or a sweep, by its version field.
fn read(path: &Path) -> Result<Report, ReportFileError> {
    let value = read_json(path, "file")?;
    if value.get("gpumon_profile").is_some() {
        return report_from(value, path).map(|r| Report::Profile(Box::new(r)));
    }
    let path = path.to_owned();
    match value
        .get("gpumon_sweep")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v) if v == u64::from(SWEEP_VERSION) => serde_json::from_value(value)
            .map(|s| Report::Sweep(Box::new(s)))
            .map_err(|source| ReportFileError::SweepUnreadable { path, source }),
        Some(found) => Err(ReportFileError::SweepFormat { path, found }),
        None => Err(ReportFileError::Neither { path }),
    }
}

fn value(unit: Unit, v: Option<f64>) -> String {
    match (unit, v) {
        (_, None) => "-".into(),
        (Unit::Ms, Some(ms)) => format!("{ms:.1} ms"),
        (Unit::Bytes, Some(b)) => gpumon_core::units::fmt_bytes(b.max(0.0) as u64),
    }
}

fn line(label: &str, row: &Row) -> String {
    let change = row
        .change_pct
        .map_or("-".to_owned(), |c| format!("{c:+.1} %"));
    let limit = match row.limit_pct {
        Some(l) if row.past_limit() => format!("past {l} %"),
        Some(l) => format!("limit {l} %"),
        None => String::new(),
    };
    let text = format!(
        "{label:<28} {:>12} {:>12} {change:>9}  {limit}",
        value(row.unit, row.a),
        value(row.unit, row.b)
    );
    format!("{}\n", text.trim_end())
}

/// The comparison for people.
fn show(a: &Path, b: &Path, o: &Outcome) -> String {
    let mut s = format!("A: {}\nB: {}\n", a.display(), b.display());
    if !o.rows.is_empty() {
        s += &format!("\n{:<28} {:>12} {:>12} {:>9}\n", "", "A", "B", "change");
        for row in &o.rows {
            s += &line(&row.name, row);
        }
    }
    if !o.ranks.is_empty() {
        s += "\nper rank\n";
        for r in &o.ranks {
            s += &line(&format!("rank {} peak memory", r.rank), &r.peak_memory);
            s += &line(&format!("rank {} mean memory", r.rank), &r.mean_memory);
            s += &line(&format!("rank {} step time", r.rank), &r.step_time);
        }
    }
    for p in &o.points {
        let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s += &format!(
            "\npoint {}: {}: {}\n",
            params.join(" "),
            p.verdict.as_str(),
            p.reason
        );
        for row in &p.rows {
            s += &line(&format!("  {}", row.name), row);
        }
    }
    if !o.alerts.is_empty() {
        let counts: Vec<String> = o
            .alerts
            .iter()
            .map(|c| format!("{} {} -> {}", c.kind, c.a, c.b))
            .collect();
        s += &format!("\nalerts (A -> B): {}\n", counts.join(", "));
    }
    for note in &o.notes {
        s += &format!("note: {note}\n");
    }
    s += &format!("\nverdict: {}: {}\n", o.verdict.as_str(), o.reason);
    s
}
