//! The sweep as CSV (`--csv FILE`): a header, then one row per point run:
//! each parameter's value, then the fixed columns of [`COLUMNS`]. RFC 4180:
//! CRLF line ends, a field holding a comma, quote or line break is quoted
//! and its quotes doubled. Empty fields are values the point's report did
//! not have.

use super::report::{PointResult, SweepReport};

/// The columns after the parameters'.
pub const COLUMNS: [&str; 17] = [
    "point",
    "status",
    "exit_code",
    "exit_signal",
    "peak_gpu_used_bytes",
    "gpu_total_bytes",
    "peak_gpu_used_pct",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "step_ms_p50",
    "step_ms_p90",
    "steps",
    "alerts",
    "wall_s",
    "report",
    "log",
    "reason",
];

/// One field, quoted when it must be.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The fixed columns of `p`, in [`COLUMNS`]' order.
fn fixed(p: &PointResult) -> [String; 17] {
    let m = &p.measures;
    let alerts: Vec<String> = m.alerts.iter().map(|(k, n)| format!("{k}={n}")).collect();
    [
        p.point.to_string(),
        p.status.as_str().to_owned(),
        opt(p.exit_code),
        opt(p.exit_signal),
        opt(m.peak_gpu_used_bytes),
        opt(m.gpu_total_bytes),
        opt(m.peak_gpu_used_pct),
        opt(m.peak_allocated_bytes),
        opt(m.peak_reserved_bytes),
        opt(m.step_ms_p50),
        opt(m.step_ms_p90),
        m.steps.to_string(),
        alerts.join(";"),
        p.wall_s.to_string(),
        opt(p.report.as_deref()),
        opt(p.log.as_deref()),
        opt(p.reason.as_deref()),
    ]
}

fn line(fields: impl IntoIterator<Item = String>) -> String {
    let fields: Vec<String> = fields.into_iter().map(|f| field(&f)).collect();
    fields.join(",") + "\r\n"
}

/// The whole file.
pub fn render(r: &SweepReport) -> String {
    let names = r.params.iter().map(|p| p.name.clone());
    let mut out = line(names.chain(COLUMNS.iter().map(|c| (*c).to_owned())));
    for p in &r.points {
        let values = r
            .params
            .iter()
            .map(|q| p.params.get(&q.name).cloned().unwrap_or_default());
        out.push_str(&line(values.chain(fixed(p))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_with_commas_quotes_or_line_breaks_are_quoted() {
        assert_eq!(field("plain 1.5"), "plain 1.5");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        assert_eq!(field(""), "");
    }
}
