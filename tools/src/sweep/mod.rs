//! `gpumon sweep --param NAME=V1,V2,... [--param ...] -- CMD {NAME}...`:
//! runs a training command once per point of a parameter grid (`grid`,
//! `plan`), each point through `gpumon profile` as a child of this binary
//! (`point`), one after the other so that points never share a GPU. Per
//! point it keeps the parameters, how it ended (`ok`, `oom`, `timeout`,
//! `failed`) and the numbers of its profile report (`measures`), and
//! after each point rewrites the results as JSON (`report`), CSV
//! (`csv`) and, when asked, an HTML heatmap (`html`).
//!
//! A point that runs out of memory is a result, not a failure: the sweep
//! exits 0 when every point ran, 1 when one failed or timed out (or the
//! sweep was stopped), 2 on bad usage.

mod bounds;
mod csv;
mod error;
pub(crate) mod grid;
mod html;
pub(crate) mod measures;
mod outputs;
mod plan;
mod point;
mod progress;
pub(crate) mod report;
pub(crate) mod report_file;
mod template;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::args::SweepArgs;
use crate::failure::{usage, Failure};
use crate::profile::signals::Signals;
use grid::Point;
use measures::{Ended, Stopped};
use outputs::Paths;
use plan::Plan;
use point::Launch;
use report::{PointResult, Skipped, Status, SweepReport, SWEEP_VERSION};

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `gpumon [--config FILE] profile --quiet --json REPORT [options]`: what
/// each point runs before `--`, the sweep's profile options passed on.
fn profile_args(args: &SweepArgs, config_file: Option<&Path>, report: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    if let Some(c) = config_file {
        a.extend(["--config".into(), c.into()]);
    }
    a.extend([
        "profile".into(),
        "--quiet".into(),
        "--json".into(),
        report.into(),
        "--html".into(),
        report.with_extension("html").into(),
    ]);
    let text = |v: Option<f64>| v.map(|v| v.to_string());
    let passed = [
        ("--source", args.source.clone()),
        ("--interval-ms", args.interval_ms.map(|v| v.to_string())),
        ("--window-ms", args.window_ms.map(|v| v.to_string())),
        ("--gpu-warning-pct", text(args.gpu_warning_pct)),
        ("--gpu-critical-pct", text(args.gpu_critical_pct)),
        ("--host-warning-pct", text(args.host_warning_pct)),
        ("--host-critical-pct", text(args.host_critical_pct)),
    ];
    for (flag, value) in passed {
        if let Some(v) = value {
            a.extend([flag.into(), v.into()]);
        }
    }
    a
}

/// Runs one point and reads what it left; `Err` is the sweep's own failure.
async fn run_point(
    args: &SweepArgs,
    config_file: Option<&Path>,
    plan: &Plan,
    paths: &Paths,
    n: usize,
    point: &Point,
    stops: &mut Signals,
) -> anyhow::Result<(PointResult, Ended, bool)> {
    let report_path = paths.work.join(format!("point-{n:03}.json"));
    let log_path = paths.work.join(format!("point-{n:03}.log"));
    // A report an earlier sweep left here must not pass for this point's.
    match std::fs::remove_file(&report_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot remove {}", report_path.display()))
        }
        _ => {}
    }
    let launch = Launch {
        exe: std::env::current_exe().context("cannot find the gpumon binary")?,
        profile_args: profile_args(args, config_file, &report_path),
        command: plan.at(point),
        log: log_path.clone(),
        timeout_s: args.point_timeout,
    };
    let ended = point::run(&launch, stops).await?;
    let read = measures::read_report(&report_path).map_err(|e| e.to_string());
    let no_report = read.is_err();
    let (status, mut reason) = measures::classify(&ended, &read);
    if matches!(status, Status::Failed | Status::Timeout) {
        if let Some(words) = point::last_words(&log_path, no_report) {
            reason = Some(match reason {
                Some(r) => format!("{r}; last output: {words}"),
                None => words,
            });
        }
    }
    let keep = args.keep_reports || matches!(status, Status::Failed | Status::Timeout);
    if !keep {
        let _ = std::fs::remove_file(&report_path);
        let _ = std::fs::remove_file(report_path.with_extension("html"));
        let _ = std::fs::remove_file(&log_path);
    }
    let shown = |p: &Path, exists: bool| (keep && exists).then(|| p.display().to_string());
    let result = PointResult {
        point: n,
        params: plan
            .grid()
            .values(point)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        status,
        exit_code: ended.code,
        exit_signal: ended.signal,
        reason,
        measures: read.as_ref().map(measures::measures).unwrap_or_default(),
        report: shown(&report_path, !no_report),
        log: shown(&log_path, true),
        wall_s: ended.wall_s,
    };
    Ok((result, ended, no_report))
}

pub async fn run(args: SweepArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    if args.command.is_empty() {
        return Err(usage(
            "give the command after --, e.g. gpumon sweep --param bs=8,16 -- python train.py --batch-size {bs}",
        ));
    }
    let plan = Plan::new(&args.params, &args.command, &args.env).map_err(usage)?;
    let paths = Paths::new(&args);
    std::fs::create_dir_all(&paths.work)
        .with_context(|| format!("cannot create {}", paths.work.display()))?;
    let grid = plan.grid();
    let mut sweep = SweepReport {
        gpumon_sweep: SWEEP_VERSION,
        command: args.command.clone(),
        env: args.env.clone(),
        params: grid.params().to_vec(),
        grid_points: grid.len(),
        started_t: unix_now(),
        ended_t: unix_now(),
        points: Vec::new(),
        skipped: Vec::new(),
        interrupted: false,
    };
    let mut stops = Signals::new();
    let mut ooms: Vec<Point> = Vec::new();
    for i in 0..grid.len() {
        let point = grid.point(i);
        let values = grid.values(&point);
        let head = progress::head(i + 1, grid.len(), &values);
        if let Some(oom) = grid::beyond_oom(&point, &ooms).filter(|_| args.stop_after_oom) {
            let first = &grid.params()[0];
            eprintln!(
                "{head}: skipped ({}={} ran out of memory)",
                first.name, first.values[oom[0]]
            );
            sweep.skipped.push(Skipped {
                point: i + 1,
                params: values
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            });
            continue;
        }
        let (result, ended, no_report) =
            run_point(&args, config_file, &plan, &paths, i + 1, &point, &mut stops).await?;
        eprintln!("{}", progress::line(&head, &result));
        if result.status == Status::Oom {
            ooms.push(point);
        }
        let refused = (sweep.points.is_empty() && no_report && ended.code == Some(2)).then(|| {
            let log = result.log.as_deref().map(Path::new);
            log.and_then(|l| point::last_words(l, true))
                .map(|w| w.trim_start_matches("gpumon: ").to_owned())
                .or_else(|| result.reason.clone())
                .unwrap_or_default()
        });
        sweep.points.push(result);
        sweep.ended_t = unix_now();
        sweep.interrupted = ended.stopped == Some(Stopped::Interrupted);
        outputs::write(&sweep, &paths).map_err(Failure::Runtime)?;
        if let Some(why) = refused {
            // gpumon profile refused its arguments: every point would.
            return Err(usage(format!(
                "gpumon profile refused the first point, so the sweep stops: {why}"
            )));
        }
        if sweep.interrupted {
            break;
        }
    }
    // Skipped points after the last point run are in no file yet.
    sweep.ended_t = unix_now();
    outputs::write(&sweep, &paths).map_err(Failure::Runtime)?;
    // Only an empty directory goes; kept reports and logs stay in it.
    let _ = std::fs::remove_dir(&paths.work);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &sweep.points {
        *counts.entry(p.status.as_str()).or_insert(0) += 1;
    }
    if !sweep.skipped.is_empty() {
        counts.insert("skipped", sweep.skipped.len());
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!(
        "gpumon: {} of {} points run ({}); results in {}",
        sweep.points.len(),
        sweep.grid_points,
        counts.join(", "),
        paths.written()
    );
    let bad = sweep
        .points
        .iter()
        .filter(|p| matches!(p.status, Status::Failed | Status::Timeout))
        .count();
    if sweep.interrupted {
        Err(Failure::Exit(
            1,
            "the sweep was stopped before its end".into(),
        ))
    } else if bad > 0 {
        Err(Failure::Exit(
            1,
            format!(
                "{bad} point(s) failed or timed out; their reports and output are in {}",
                paths.work.display()
            ),
        ))
    } else {
        Ok(())
    }
}
