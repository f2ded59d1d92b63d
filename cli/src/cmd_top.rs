//! `gpumon top`: a refreshing terminal view of the cluster by job and rank:
//! a memory bar per rank, the OOM forecast, step times, and the straggler,
//! imbalance, leak and fragmentation flags, with the active alerts below.
//!
//! It redraws every `--interval` seconds from the coordinator's read API
//! until Ctrl-C; `--once` prints one frame and exits (for scripts and pipes).
//! Colors only when stdout is a terminal, unless `--no-color`. A coordinator
//! that stops answering leaves the last frame with the error above it, and
//! top keeps retrying.

use std::fmt::Write;
use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::time::Duration;

use gpumon_core::units::{fmt_bytes, fmt_duration_ms};
use gpumon_proto::api::JobView;
use gpumon_proto::api::{Alert, JobSummary, RankSummary, Risk, Severity};

use crate::api_client::{ApiClient, ClusterSnapshot};
use crate::args::TopArgs;
use crate::client_settings;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::text::truncate;

/// Cells of a memory bar.
const BAR_CELLS: usize = 20;
/// Alerts listed under the jobs.
const MAX_ALERT_LINES: usize = 20;

/// Terminal escapes used; all empty without color.
#[derive(Debug, Clone, Copy)]
struct Style {
    color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

pub async fn run(args: TopArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    if !(args.interval.is_finite() && args.interval >= 0.2) {
        return Err(usage(format!(
            "--interval {} must be at least 0.2 seconds",
            args.interval
        )));
    }
    let settings = client_settings::resolve(args.coordinator.clone(), &args.tls, config_file)?;
    let client = ApiClient::new(&settings.coordinator, &settings.tls)
        .map_err(|e| usage(format!("{e:#}")))?;
    let tty = std::io::stdout().is_terminal();
    let style = Style {
        color: tty && !args.no_color && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    if args.once {
        let snap = client.snapshot().await?;
        print!(
            "{}",
            render(client.base(), &snap, args.job.as_deref(), style)
        );
        return Ok(());
    }
    let mut last_frame = String::new();
    let mut stdout = std::io::stdout();
    if tty {
        let _ = write!(stdout, "\x1b[?25l");
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(args.interval));
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = tick.tick() => {}
        }
        let frame = match client.snapshot().await {
            Ok(snap) => {
                last_frame = render(client.base(), &snap, args.job.as_deref(), style);
                last_frame.clone()
            }
            Err(e) => format!(
                "{}\n{last_frame}",
                style.paint(
                    "1;31",
                    &format!("{e:#}; retrying every {} s", args.interval)
                )
            ),
        };
        if tty {
            let _ = write!(stdout, "\x1b[H\x1b[2J{frame}");
        } else {
            let _ = writeln!(stdout, "{frame}");
        }
        let _ = stdout.flush();
    }
    if tty {
        let _ = writeln!(stdout, "\x1b[?25h");
    }
    Ok(())
}

/// One frame.
fn render(url: &str, snap: &ClusterSnapshot, only_job: Option<&str>, style: Style) -> String {
    let mut out = String::new();
    let c = &snap.cluster;
    let leader = c
        .coordinator
        .as_ref()
        .map(|r| match r.leader {
            Some(l) => format!("leader {l} (term {})", r.term),
            None => style.paint("1;31", "NO LEADER"),
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{}  {url}  {leader}  agents {}  nodes {}  GPUs {}  live jobs {}  live ranks {}  active alerts {}",
        style.paint("1", "gpumon top"),
        c.agents.len(),
        c.nodes,
        c.gpus,
        c.live_jobs,
        c.live_ranks,
        snap.alerts.len()
    );
    let jobs: Vec<&JobView> = snap
        .jobs
        .jobs
        .iter()
        .filter(|j| only_job.is_none_or(|name| j.job == name))
        .collect();
    if jobs.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            match only_job {
                Some(name) => format!("no job {name:?}"),
                None => "no jobs seen yet".into(),
            }
        );
    }
    for job in jobs {
        let analysis = snap.analysis.get(&job.job);
        out.push('\n');
        render_job(&mut out, job, analysis, style);
    }
    let alerts: Vec<&Alert> = snap
        .alerts
        .iter()
        .filter(|a| only_job.is_none_or(|name| a.job.as_deref() == Some(name)))
        .collect();
    if !alerts.is_empty() {
        let _ = writeln!(out, "\n{}", style.paint("1", "ACTIVE ALERTS"));
        let now = snap
            .analysis
            .values()
            .map(|j| j.last_t)
            .fold(f64::NAN, f64::max);
        for a in alerts.iter().rev().take(MAX_ALERT_LINES) {
            let subject = match (&a.job, a.rank, &a.node, a.gpu) {
                (Some(j), Some(r), _, _) => format!("{j} rank {r}"),
                (_, _, Some(n), Some(g)) => format!("{n} GPU {g}"),
                _ => String::new(),
            };
            let since = if now.is_finite() {
                format!(
                    "for {}",
                    fmt_duration_ms(((now - a.t).max(0.0) * 1000.0) as u64)
                )
            } else {
                String::new()
            };
            let sev = severity_name(a.severity);
            let _ = writeln!(
                out,
                "  {} {:<14} {:<24} {:<12} {}",
                style.paint(severity_color(a.severity), &format!("{sev:<8}")),
                a.kind.as_str(),
                subject,
                since,
                a.message
            );
        }
        if alerts.len() > MAX_ALERT_LINES {
            let _ = writeln!(out, "  … {} more", alerts.len() - MAX_ALERT_LINES);
        }
    }
    out
}

fn render_job(out: &mut String, job: &JobView, analysis: Option<&JobSummary>, style: Style) {
    let state = if job.live { "live" } else { "ended" };
    let forecast = analysis
        .and_then(|a| {
            let f = a.forecast.as_ref()?;
            let left = (f.forecast.predicted_oom_t - a.last_t).max(0.0);
            Some(style.paint(
                risk_color(f.risk_level),
                &format!(
                    "OOM in {} on rank {} ({}, confidence {:.0}%)",
                    fmt_duration_ms((left * 1000.0) as u64),
                    f.rank,
                    risk_name(f.risk_level),
                    f.forecast.confidence * 100.0
                ),
            ))
        })
        .unwrap_or_else(|| "no OOM forecast".into());
    let _ = writeln!(
        out,
        "{} {}  {} ranks  {state}  {forecast}",
        style.paint("1", "JOB"),
        style.paint("1", &job.job),
        job.world_size
    );
    let _ = writeln!(
        out,
        "  {:>5} {:<14} {:<22} {:>5} {:>21} {:>10} {:>10} {:>9} {:>6} {:<8} FLAGS",
        "RANK",
        "NODE/GPU",
        "MEMORY",
        "USE%",
        "USED/TOTAL",
        "ALLOC",
        "RESERVED",
        "STEP",
        "SLOW",
        "RISK"
    );
    for r in &job.ranks {
        let summary = analysis.and_then(|a| a.ranks.iter().find(|s| s.rank == r.rank));
        let frac = if r.total_bytes == 0 {
            0.0
        } else {
            r.used_bytes as f64 / r.total_bytes as f64
        };
        let opt_bytes = |v: Option<u64>| v.map_or("-".into(), fmt_bytes);
        let risk = summary.map_or(Risk::None, |s| s.risk);
        let ended = if r.ended_ms.is_some() { " ended" } else { "" };
        let _ = writeln!(
            out,
            "  {:>5} {:<14} {} {:>4.0}% {:>21} {:>10} {:>10} {:>9} {:>6} {} {}{ended}",
            r.rank,
            truncate(&format!("{}/{}", r.node, r.gpu), 14),
            bar(frac, style),
            frac * 100.0,
            format!("{}/{}", fmt_bytes(r.used_bytes), fmt_bytes(r.total_bytes)),
            opt_bytes(summary.and_then(|s| s.allocated_bytes)),
            opt_bytes(summary.and_then(|s| s.reserved_bytes)),
            summary
                .and_then(|s| s.last_step_ms)
                .map_or("-".into(), |ms| format!("{ms:.0}ms")),
            summary
                .and_then(|s| s.slowdown)
                .map_or("-".into(), |x| format!("{x:.2}x")),
            style.paint(risk_color(risk), &format!("{:<8}", risk_name(risk))),
            style.paint("1;31", &flags(summary)),
        );
    }
}

/// `[██████░░░░]`, colored by how full it is.
fn bar(frac: f64, style: Style) -> String {
    let frac = if frac.is_finite() {
        frac.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let filled = (frac * BAR_CELLS as f64).round() as usize;
    let cells = format!("{}{}", "█".repeat(filled), "░".repeat(BAR_CELLS - filled));
    let color = match frac {
        f if f >= 0.9 => "31",
        f if f >= 0.7 => "33",
        _ => "32",
    };
    format!("[{}]", style.paint(color, &cells))
}

fn flags(summary: Option<&RankSummary>) -> String {
    let Some(s) = summary else {
        return String::new();
    };
    let mut out = Vec::new();
    for (on, name) in [
        (s.straggler, "STRAGGLER"),
        (s.imbalance, "IMBALANCE"),
        (s.leak, "LEAK"),
        (s.fragmentation, "FRAGMENTATION"),
    ] {
        if on {
            out.push(name);
        }
    }
    out.join(" ")
}

fn risk_name(r: Risk) -> &'static str {
    match r {
        Risk::None => "none",
        Risk::Low => "low",
        Risk::Warning => "warning",
        Risk::High => "high",
        Risk::Critical => "critical",
    }
}

fn risk_color(r: Risk) -> &'static str {
    match r {
        Risk::None | Risk::Low => "0",
        Risk::Warning => "33",
        Risk::High | Risk::Critical => "1;31",
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "warning",
        Severity::High => "high",
        Severity::Critical => "critical",
    }
}

fn severity_color(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "33",
        Severity::High | Severity::Critical => "1;31",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_fills_with_memory_and_stays_in_bounds() {
        let plain = Style { color: false };
        let count = |s: &str| s.chars().filter(|&c| c == '█').count();
        assert_eq!(count(&bar(0.0, plain)), 0);
        assert_eq!(count(&bar(0.5, plain)), BAR_CELLS / 2);
        assert_eq!(count(&bar(1.7, plain)), BAR_CELLS);
        assert_eq!(count(&bar(f64::NAN, plain)), 0);
        assert_eq!(bar(0.25, plain).chars().count(), BAR_CELLS + 2);
    }

    #[test]
    fn without_color_there_are_no_escapes() {
        let plain = Style { color: false };
        assert!(!bar(0.95, plain).contains('\x1b'));
        let colored = Style { color: true };
        assert!(bar(0.95, colored).contains("\x1b[31m"));
    }
}
