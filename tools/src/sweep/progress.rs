//! The one line per point the sweep prints on stderr as it goes, e.g.
//! `[3/8] batch_size=32 seq_len=512: peak 61.2 GiB (76 %), step 312 ms, ok`.

use super::report::{PointResult, Status};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// `61.2 GiB`, or `640 MiB` under a GiB.
pub fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.0} MiB", b / MIB)
    }
}

/// `[n/total] a=1 b=2`.
pub fn head(n: usize, total: usize, params: &[(&str, &str)]) -> String {
    let values: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("[{n}/{total}] {}", values.join(" "))
}

/// The line of a point run.
pub fn line(head: &str, p: &PointResult) -> String {
    let m = &p.measures;
    let mut parts = Vec::new();
    if let Some(peak) = m.peak_gpu_used_bytes {
        parts.push(match m.peak_gpu_used_pct {
            Some(pct) => format!("peak {} ({pct:.0} %)", bytes(peak)),
            None => format!("peak {}", bytes(peak)),
        });
    }
    if let Some(ms) = m.step_ms_p50 {
        parts.push(format!("step {ms:.0} ms"));
    }
    parts.push(match p.status {
        Status::Ok => "ok".to_owned(),
        Status::Oom => "OOM".to_owned(),
        Status::Timeout => "timeout".to_owned(),
        Status::Failed => match (p.exit_code, p.exit_signal) {
            (Some(c), _) => format!("failed (exit {c})"),
            (None, Some(s)) => format!("failed (signal {s})"),
            (None, None) => "failed".to_owned(),
        },
    });
    let mut line = format!("{head}: {}", parts.join(", "));
    if matches!(p.status, Status::Failed | Status::Timeout) {
        if let Some(log) = &p.log {
            line.push_str(&format!("; output in {log}"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sweep::report::Measures;

    fn point(status: Status, exit_code: Option<i32>, measures: Measures) -> PointResult {
        PointResult {
            point: 3,
            params: BTreeMap::new(),
            status,
            exit_code,
            exit_signal: None,
            reason: None,
            measures,
            report: None,
            log: Some("gpumon-sweep/point-003.log".into()),
            wall_s: 1.0,
        }
    }

    #[test]
    fn a_line_says_peak_share_step_time_and_status() {
        let head = head(3, 8, &[("batch_size", "32"), ("seq_len", "512")]);
        let measured = Measures {
            peak_gpu_used_bytes: Some((61.2 * GIB) as u64),
            peak_gpu_used_pct: Some(76.4),
            step_ms_p50: Some(312.3),
            ..Measures::default()
        };
        assert_eq!(
            line(&head, &point(Status::Ok, Some(0), measured.clone())),
            "[3/8] batch_size=32 seq_len=512: peak 61.2 GiB (76 %), step 312 ms, ok"
        );
        assert!(line(&head, &point(Status::Oom, Some(3), measured)).ends_with(", OOM"));
        assert_eq!(
            line(&head, &point(Status::Failed, Some(1), Measures::default())),
            "[3/8] batch_size=32 seq_len=512: failed (exit 1); output in gpumon-sweep/point-003.log"
        );
        assert_eq!(bytes(640 << 20), "640 MiB");
    }
}
