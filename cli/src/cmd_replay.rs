//! `gpumon replay`: a trace file through the replicas' own transition,
//! offline and deterministic; the report goes to a file or standard output, progress to
//! standard error.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_core::units::fmt_duration_ms;
use gpumon_runtime::config::{resolve_limits, FileConfig, LimitsFile};
use gpumon_trace::replay;

use crate::args::ReplayArgs;
use gpumon_tools::failure::{usage, Failure};

/// Records between checks of whether a progress line is due.
const PROGRESS_CHECK_RECORDS: u64 = 65_536;
/// Wall time between progress lines.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(2);

/// The bounds and engine tunables of the `--config` file (its `[limits]`,
/// `[engine]` and `[coordinator] history_windows`), so that a replay
/// computes what a cluster with that file computed; the defaults without one.
fn settings(config_file: Option<&Path>) -> Result<(Limits, EngineConfig), Failure> {
    let mut limits = Limits::default();
    let Some(path) = config_file else {
        return Ok((limits, EngineConfig::default()));
    };
    let file = FileConfig::load(path).map_err(usage)?;
    let mut engine = file.engine;
    if let Some(h) = file.coordinator.history_windows {
        limits.history_windows = h;
    }
    resolve_limits(
        &LimitsFile::default(),
        &file.limits,
        &mut limits,
        &mut engine,
    )
    .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    Ok((limits, engine))
}

pub fn run(args: ReplayArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let started = Instant::now();
    let (limits, engine) = settings(config_file)?;
    let mut reader = gpumon_trace::open(&args.trace)
        .with_context(|| format!("cannot replay {}", args.trace.display()))
        .map_err(Failure::Runtime)?;
    let mut replay = replay::Replay::with_limits(limits, &engine);
    let mut last_line = Instant::now();
    let quiet = args.quiet;
    replay
        .run(&mut reader, PROGRESS_CHECK_RECORDS, |p| {
            if !quiet && last_line.elapsed() >= PROGRESS_INTERVAL {
                last_line = Instant::now();
                eprintln!(
                    "replay: {} records, trace time {}, {} alerts",
                    p.records,
                    fmt_duration_ms((p.t.max(0.0) * 1000.0) as u64),
                    p.alerts
                );
            }
        })
        .with_context(|| format!("cannot replay {}", args.trace.display()))
        .map_err(Failure::Runtime)?;
    for refused in replay.settings_refused() {
        eprintln!("replay: a settings change was refused, as a replica would have: {refused}");
    }
    let report = replay.report(reader.stats(), reader.source());
    write_report(&report, args.output.as_deref()).map_err(Failure::Runtime)?;
    if !quiet {
        let s = &report.summary;
        let records = s.records_read;
        eprintln!(
            "replay: {records} records ({} of trace) in {:.2} s: {} alerts; {} skipped as invalid, {} of unknown types",
            fmt_duration_ms((s.end_t.max(0.0) * 1000.0) as u64),
            started.elapsed().as_secs_f64(),
            report.alerts.len(),
            s.invalid_records,
            s.unknown_types.values().sum::<u64>(),
        );
    }
    Ok(())
}

fn write_report(report: &replay::Report, output: Option<&Path>) -> anyhow::Result<()> {
    match output {
        Some(path) => {
            let tmp = path.with_extension("json.partial");
            let file =
                File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
            let mut out = BufWriter::new(file);
            serde_json::to_writer_pretty(&mut out, report)?;
            out.write_all(b"\n")?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(&tmp, path)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            serde_json::to_writer_pretty(&mut out, report)?;
            out.write_all(b"\n")?;
            out.flush()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_files_limits_engine_and_history_shape_the_replay_and_a_missing_file_stops_it() {
        let (limits, engine) = settings(None).unwrap();
        assert_eq!(limits, Limits::default());
        assert_eq!(engine, EngineConfig::default());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpumon.toml");
        std::fs::write(
            &file,
            "[coordinator]\nhistory_windows = 64\n[limits]\nmax_gpus = 100\n[engine]\nwindow_s = 20.0\n",
        )
        .unwrap();
        let (limits, engine) = settings(Some(&file)).unwrap();
        assert_eq!((limits.history_windows, limits.max_gpus), (64, 100));
        assert_eq!((engine.max_gpus, engine.window_s), (100, 20.0));
        assert!(settings(Some(&dir.path().join("missing.toml"))).is_err());
    }
}
