//! The one-line live status on a terminal: elapsed time, each GPU's memory,
//! host RAM, the first rank's steps and the active alerts. Redrawn in place;
//! nothing is printed when standard error is not a terminal.

use std::io::Write;

use gpumon_core::units::fmt_bytes;

use super::embedded::Embedded;

/// GPUs shown at most.
const GPUS_SHOWN: usize = 4;
/// Columns used when the terminal's width is unknown.
const DEFAULT_COLUMNS: usize = 100;

/// The line for the run so far.
pub fn line(engine: &Embedded, elapsed_s: f64, host: Option<(u64, u64)>) -> String {
    let observed = engine.observed();
    let mut parts = vec![format!("gpumon {}", clock(elapsed_s))];
    for (index, g) in observed.gpus.iter().take(GPUS_SHOWN) {
        let used = g.timeline.points().last().map_or(0, |p| p.1[0]);
        parts.push(format!(
            "GPU{index} {}/{}",
            fmt_bytes(used),
            fmt_bytes(g.info.total_bytes)
        ));
    }
    if observed.gpus.len() > GPUS_SHOWN {
        parts.push(format!("+{} GPUs", observed.gpus.len() - GPUS_SHOWN));
    }
    if let Some((used, total)) = host.filter(|h| h.1 > 0) {
        parts.push(format!("host {:.0}%", 100.0 * used as f64 / total as f64));
    }
    if let Some(((_, rank), r)) = observed.ranks.iter().next() {
        let step = r
            .step_ms
            .quantiles()
            .map_or(String::new(), |q| format!(" {:.0} ms", q.p50));
        parts.push(format!("rank {rank} step {}{step}", r.steps));
    }
    let active = engine.state().engine.alert_book().active().count();
    if active > 0 {
        parts.push(format!(
            "{active} alert{}",
            if active == 1 { "" } else { "s" }
        ));
    }
    parts.join(" | ")
}

/// `H:MM:SS`.
fn clock(s: f64) -> String {
    let s = s.max(0.0) as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Draws `text` over the previous line, cut to the terminal's width.
pub fn draw(text: &str) {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|&c| c >= 20)
        .unwrap_or(DEFAULT_COLUMNS);
    let cut: String = text.chars().take(columns - 1).collect();
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{cut}");
    let _ = err.flush();
}

/// Clears the line before other output.
pub fn clear() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_hours_minutes_seconds() {
        assert_eq!(clock(0.0), "0:00:00");
        assert_eq!(clock(3_725.9), "1:02:05");
        assert_eq!(clock(-3.0), "0:00:00");
    }
}
