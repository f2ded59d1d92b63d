//! What a comparison says: one row per measure, the verdict, and the exit
//! status a CI job gates on. Shared by the profile and the sweep
//! comparisons; serialized as `gpumon compare --json`.

use serde::Serialize;

/// Format version of `gpumon compare --json`, in its `gpumon_compare` field.
pub const COMPARE_VERSION: u32 = 1;

/// The verdict on B against A.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A gated measure improved past its limit and none got worse past it.
    Better,
    /// A gated measure got worse past its limit, or B ran out of memory.
    Worse,
    /// Every gated measure is within its limit.
    Same,
    /// The two cannot be compared (different ranks or points, a failed
    /// run, nothing measured in common).
    NotComparable,
}

impl Verdict {
    /// The exit status: 0 within the limits, 1 past them, 2 not comparable.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Better | Verdict::Same => 0,
            Verdict::Worse => 1,
            Verdict::NotComparable => 2,
        }
    }

    /// Its name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::Same => "same",
            Verdict::NotComparable => "not comparable",
        }
    }
}

/// The regression limits, percent of A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// Largest step time increase accepted.
    pub step_time_pct: f64,
    /// Largest peak memory increase accepted.
    pub peak_memory_pct: f64,
}

/// How a measure is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Milliseconds.
    Ms,
    /// Bytes.
    Bytes,
}

/// One measure of A and B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// What it measures (`step time (median)`, `peak memory`, ...).
    pub name: String,
    /// Its unit.
    pub unit: Unit,
    /// A's value.
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// B against A, percent (`None` when either is missing or A is zero).
    pub change_pct: Option<f64>,
    /// The limit it is gated on, percent; `None`: shown, not gated.
    pub limit_pct: Option<f64>,
}

impl Row {
    /// A row of `a` and `b`, gated on `limit_pct` when given.
    pub fn new(name: &str, unit: Unit, a: Option<f64>, b: Option<f64>, limit: Option<f64>) -> Self {
        let change_pct = match (a, b) {
            (Some(a), Some(b)) if a > 0.0 && a.is_finite() && b.is_finite() => {
                Some((b - a) / a * 100.0)
            }
            _ => None,
        };
        Self {
            name: name.to_owned(),
            unit,
            a,
            b,
            change_pct,
            limit_pct: limit,
        }
    }

    /// Gated and worse by more than its limit.
    pub fn past_limit(&self) -> bool {
        matches!((self.change_pct, self.limit_pct), (Some(c), Some(l)) if c > l)
    }

    /// Gated and better by more than its limit.
    pub fn improved(&self) -> bool {
        matches!((self.change_pct, self.limit_pct), (Some(c), Some(l)) if c < -l)
    }

    /// `step time (median) +12.3 % is past the 5 % limit`.
    pub fn said(&self) -> String {
        let change = self
            .change_pct
            .map_or("?".to_owned(), |c| format!("{c:+.1} %"));
        let limit = self
            .limit_pct
            .map_or(String::new(), |l| format!(" (limit {l} %)"));
        format!("{} {change}{limit}", self.name)
    }
}

/// The verdict of gated rows: worse when one is past its limit (or
/// `forced_worse` says why), better when one improved past it and none is
/// worse, same otherwise; the reason names the rows that decided.
pub fn judge(rows: &[Row], forced_worse: Option<String>) -> (Verdict, String) {
    let worse: Vec<String> = rows
        .iter()
        .filter(|r| r.past_limit())
        .map(Row::said)
        .collect();
    if let Some(why) = forced_worse {
        let mut all = vec![why];
        all.extend(worse);
        return (Verdict::Worse, all.join("; "));
    }
    if !worse.is_empty() {
        return (Verdict::Worse, worse.join("; "));
    }
    let better: Vec<String> = rows
        .iter()
        .filter(|r| r.improved())
        .map(Row::said)
        .collect();
    if !better.is_empty() {
        return (Verdict::Better, better.join("; "));
    }
    let gated = rows
        .iter()
        .filter(|r| r.limit_pct.is_some() && r.change_pct.is_some());
    let within: Vec<String> = gated.map(Row::said).collect();
    (
        Verdict::Same,
        format!("within the limits: {}", within.join("; ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(a: f64, b: f64) -> Row {
        Row::new("step time", Unit::Ms, Some(a), Some(b), Some(5.0))
    }

    #[test]
    fn a_gated_row_past_its_limit_makes_it_worse_and_exit_1() {
        let (v, why) = judge(&[step(100.0, 106.0)], None);
        assert_eq!((v, v.exit_code()), (Verdict::Worse, 1));
        assert!(why.contains("step time +6.0 % (limit 5 %)"), "{why}");
    }

    #[test]
    fn better_same_and_what_is_not_gated() {
        assert_eq!(judge(&[step(100.0, 90.0)], None).0, Verdict::Better);
        assert_eq!(judge(&[step(100.0, 104.0)], None).0, Verdict::Same);
        let shown = Row::new("mean", Unit::Bytes, Some(1.0), Some(9.0), None);
        assert_eq!(judge(&[step(100.0, 100.0), shown], None).0, Verdict::Same);
        let (v, why) = judge(&[step(100.0, 90.0)], Some("B ran out of memory".into()));
        assert_eq!(v, Verdict::Worse, "{why}");
        assert_eq!(Verdict::NotComparable.exit_code(), 2);
    }

    #[test]
    fn a_missing_or_zero_side_has_no_change() {
        assert_eq!(
            Row::new("x", Unit::Ms, None, Some(1.0), Some(5.0)).change_pct,
            None
        );
        assert_eq!(
            Row::new("x", Unit::Ms, Some(0.0), Some(1.0), Some(5.0)).change_pct,
            None
        );
    }
}
