//! From a point's profile report to its line of the sweep: the numbers
//! ([`measures`]) and how the point ended ([`classify`]). Pure: the report
//! and how the process ended go in, nothing is read here.

use std::collections::BTreeMap;
use std::path::Path;

use crate::profile::report::{ProfileReport, PROFILE_VERSION};

use super::report::{Measures, Status};
use super::report_file::ReportFileError;

pub use super::report_file::MAX_REPORT_BYTES;

/// How the point's `gpumon profile` process ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when one ended it.
    pub signal: Option<i32>,
    /// Why the sweep stopped it, when it did.
    pub stopped: Option<Stopped>,
    /// Seconds it ran, to the millisecond.
    pub wall_s: f64,
}

/// Why the sweep stopped a point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stopped {
    /// It ran past `--point-timeout` (seconds).
    Timeout(u64),
    /// The sweep itself was asked to stop.
    Interrupted,
}

impl Ended {
    /// `exit 1`, `signal 9`, for people.
    pub fn how(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("signal {s}"),
            (None, None) => "no exit status".to_owned(),
        }
    }
}

/// Reads and checks a profile report.
pub fn read_report(path: &Path) -> Result<ProfileReport, ReportFileError> {
    report_from(read_json(path, "report")?, path)
}

/// Reads the JSON document at `path` (the `what` it should be, for the
/// errors), at most [`MAX_REPORT_BYTES`].
pub(crate) fn read_json(
    path: &Path,
    what: &'static str,
) -> Result<serde_json::Value, ReportFileError> {
    let owned = || path.to_owned();
    let size = std::fs::metadata(path)
        .map_err(|source| ReportFileError::Missing {
            what,
            path: owned(),
            source,
        })?
        .len();
    if size > MAX_REPORT_BYTES {
        return Err(ReportFileError::TooLarge {
            what,
            path: owned(),
            size,
        });
    }
    let bytes = std::fs::read(path).map_err(|source| ReportFileError::Read {
        path: owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| ReportFileError::NotJson {
        what,
        path: owned(),
        source,
    })
}

/// Checks a profile report's version and reads it from `value` (read
/// from `path`).
pub(crate) fn report_from(
    value: serde_json::Value,
    path: &Path,
) -> Result<ProfileReport, ReportFileError> {
    match value
        .get("gpumon_profile")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v) if v == u64::from(PROFILE_VERSION) => {}
        found => {
            return Err(ReportFileError::ReportFormat {
                path: path.to_owned(),
                found,
            })
        }
    }
    serde_json::from_value(value).map_err(|source| ReportFileError::ReportUnreadable {
        path: path.to_owned(),
        source,
    })
}

/// How the point ended, and why when it was not ok. An out-of-memory is
/// what the report says (`exit.oom`), whatever the exit code.
pub fn classify(ended: &Ended, report: &Result<ProfileReport, String>) -> (Status, Option<String>) {
    match ended.stopped {
        Some(Stopped::Timeout(secs)) => {
            return (
                Status::Timeout,
                Some(format!(
                    "still running after --point-timeout {secs} s; stopped"
                )),
            )
        }
        Some(Stopped::Interrupted) => {
            return (
                Status::Failed,
                Some("stopped: the sweep was interrupted".to_owned()),
            )
        }
        None => {}
    }
    match report {
        Err(why) => (Status::Failed, Some(format!("{}; {why}", ended.how()))),
        Ok(r) if r.exit.oom => (
            Status::Oom,
            Some(
                r.exit
                    .oom_reason
                    .clone()
                    .unwrap_or_else(|| "out of memory".to_owned()),
            ),
        ),
        Ok(_) if ended.code == Some(0) => (Status::Ok, None),
        Ok(_) => (Status::Failed, Some(ended.how())),
    }
}

/// The median of `v`'s finite values (the mean of the middle two when even).
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The report's numbers.
pub fn measures(r: &ProfileReport) -> Measures {
    let fullest = r
        .gpus
        .iter()
        .filter(|g| g.total_bytes > 0)
        .map(|g| {
            (
                g.peak_used_bytes as f64 / g.total_bytes as f64,
                g.total_bytes,
            )
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let mut alerts = BTreeMap::new();
    for a in &r.alerts {
        *alerts.entry(a.kind.as_str().to_owned()).or_insert(0) += 1;
    }
    Measures {
        peak_gpu_used_bytes: r.gpus.iter().map(|g| g.peak_used_bytes).max(),
        gpu_total_bytes: fullest.map(|f| f.1),
        peak_gpu_used_pct: fullest.map(|f| f.0 * 100.0),
        peak_allocated_bytes: r.ranks.iter().filter_map(|k| k.peak_allocated_bytes).max(),
        peak_reserved_bytes: r.ranks.iter().filter_map(|k| k.peak_reserved_bytes).max(),
        step_ms_p50: median(
            r.ranks
                .iter()
                .filter_map(|k| k.step_ms.map(|q| q.p50))
                .collect(),
        ),
        step_ms_p90: median(
            r.ranks
                .iter()
                .filter_map(|k| k.step_ms.map(|q| q.p90))
                .collect(),
        ),
        steps: r.ranks.iter().map(|k| k.steps).max().unwrap_or(0),
        alerts,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gpumon_core::engine::Risk;

    use super::*;
    use crate::profile::report::{ExitInfo, GpuReport, Quantiles, RankReport};

    const GIB: u64 = 1 << 30;

    fn gpu(gpu: u32, peak: u64, total: u64) -> GpuReport {
        GpuReport {
            node: "n".into(),
            gpu,
            uuid: format!("GPU-{gpu}"),
            name: "Fake".into(),
            total_bytes: total,
            peak_used_bytes: peak,
            avg_used_bytes: peak / 2,
            avg_util_pct: None,
            risk: Risk::default(),
            forecast: None,
            timeline: Vec::new(),
        }
    }

    fn rank(rank: u32, allocated: u64, steps: u64, step: Option<(f64, f64)>) -> RankReport {
        RankReport {
            job: "j".into(),
            rank,
            node: None,
            gpu: Some(rank),
            pid: None,
            peak_allocated_bytes: Some(allocated),
            avg_allocated_bytes: None,
            peak_reserved_bytes: Some(allocated + GIB),
            avg_reserved_bytes: None,
            floor_allocated_bytes: None,
            peak_used_bytes: 0,
            outside_allocator_bytes: None,
            outside_allocator_baseline_bytes: None,
            memory_limit: None,
            ooms: 0,
            steps,
            step_ms: step.map(|(p50, p90)| Quantiles { p50, p90 }),
            sections: BTreeMap::new(),
            step_verdict: None,
            leak: false,
            leak_bytes_per_s: None,
            fragmentation: false,
            imbalance: false,
            straggler: false,
            slowdown: None,
            risk: Risk::default(),
            forecast: None,
            timeline: Vec::new(),
        }
    }

    fn alert(id: u64, kind: &str) -> gpumon_core::engine::Alert {
        serde_json::from_value(serde_json::json!({
            "id": id, "kind": kind, "t": 1.0, "severity": "warning",
            "updated_t": 1.0, "message": "m"
        }))
        .unwrap()
    }

    /// A report of a run that ended as `exit`, with nothing else in it.
    fn report(exit: ExitInfo) -> ProfileReport {
        ProfileReport {
            exit,
            ..crate::profile::html::fixtures::empty()
        }
    }

    fn ended(code: Option<i32>, stopped: Option<Stopped>) -> Ended {
        Ended {
            code,
            signal: None,
            stopped,
            wall_s: 1.0,
        }
    }

    #[test]
    fn peaks_are_the_fullest_gpu_and_rank_step_times_the_median_rank() {
        let mut r = report(ExitInfo::default());
        // 60 of 80 GiB on one GPU, 30 of 40 (the same share) and 35 of 40 on others.
        r.gpus = vec![gpu(0, 60 * GIB, 80 * GIB), gpu(1, 35 * GIB, 40 * GIB)];
        r.ranks = vec![
            rank(0, 20 * GIB, 100, Some((300.0, 350.0))),
            rank(1, 25 * GIB, 98, Some((310.0, 400.0))),
            rank(2, 22 * GIB, 99, Some((500.0, 900.0))),
            rank(3, 21 * GIB, 97, None),
        ];
        r.alerts = vec![
            alert(1, "memory_level"),
            alert(2, "leak"),
            alert(3, "memory_level"),
        ];
        let m = measures(&r);
        assert_eq!(m.peak_gpu_used_bytes, Some(60 * GIB));
        assert_eq!(m.gpu_total_bytes, Some(40 * GIB), "the fullest by share");
        assert_eq!(m.peak_gpu_used_pct, Some(87.5));
        assert_eq!(m.peak_allocated_bytes, Some(25 * GIB));
        assert_eq!(m.peak_reserved_bytes, Some(26 * GIB));
        assert_eq!((m.step_ms_p50, m.step_ms_p90), (Some(310.0), Some(400.0)));
        assert_eq!(m.steps, 100);
        assert_eq!(
            m.alerts,
            BTreeMap::from([("leak".to_owned(), 1), ("memory_level".to_owned(), 2)])
        );
        assert_eq!(median(vec![1.0, 4.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN]), None);
        let empty = measures(&report(ExitInfo::default()));
        assert_eq!((empty.peak_gpu_used_pct, empty.step_ms_p50), (None, None));
    }

    #[test]
    fn out_of_memory_is_what_the_report_says_whatever_the_exit_code() {
        let oom = ExitInfo {
            code: Some(1),
            oom: true,
            oom_reason: Some("rank 0 of j counted an OOM".into()),
            ..ExitInfo::default()
        };
        let (status, why) = classify(&ended(Some(1), None), &Ok(report(oom)));
        assert_eq!(status, Status::Oom);
        assert_eq!(why.as_deref(), Some("rank 0 of j counted an OOM"));
        // Exit 3 without the report's verdict is a failure, not an OOM.
        let plain = report(ExitInfo {
            code: Some(3),
            ..ExitInfo::default()
        });
        let (status, why) = classify(&ended(Some(3), None), &Ok(plain.clone()));
        assert_eq!((status, why.as_deref()), (Status::Failed, Some("exit 3")));
        assert_eq!(
            classify(&ended(Some(0), None), &Ok(plain.clone())).0,
            Status::Ok
        );
        let (status, why) = classify(&ended(Some(2), None), &Err("no report at x".into()));
        assert_eq!(status, Status::Failed);
        assert_eq!(why.as_deref(), Some("exit 2; no report at x"));
        let (status, why) = classify(
            &ended(Some(130), Some(Stopped::Timeout(60))),
            &Ok(plain.clone()),
        );
        assert_eq!(status, Status::Timeout);
        assert!(why.unwrap().contains("--point-timeout 60 s"));
        let interrupted = classify(&ended(Some(0), Some(Stopped::Interrupted)), &Ok(plain));
        assert_eq!(interrupted.0, Status::Failed);
    }

    #[test]
    fn reports_of_another_format_or_truncated_are_reasons_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let good = serde_json::to_vec(&report(ExitInfo::default())).unwrap();
        std::fs::write(&path, &good).unwrap();
        assert!(read_report(&path).is_ok());
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert!(read_report(&path)
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        std::fs::write(&path, br#"{"gpumon_profile": 99}"#).unwrap();
        assert!(read_report(&path)
            .unwrap_err()
            .to_string()
            .contains("format Some(99)"));
        std::fs::write(&path, br#"{"gpumon_profile": 1}"#).unwrap();
        assert!(read_report(&path)
            .unwrap_err()
            .to_string()
            .contains("unreadable"));
        assert!(read_report(&dir.path().join("none.json"))
            .unwrap_err()
            .to_string()
            .contains("no report"));
    }
}
