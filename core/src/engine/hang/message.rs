//! The words of a `hang` alert.

use super::verdict::{Culprit, Hang, Why};

/// Ranks named one by one; the rest are counted.
const MAX_NAMED: usize = 8;

/// What to do about a hang.
pub const RECOMMENDATION: &str = "look at the named rank first: its stacks and flight recorder are saved by each stalled rank's hook (dump_evidence actions; their acks name the files); restart the job from its last checkpoint if it does not recover";

/// The alert's one line.
pub fn describe(job: &str, world: Option<u32>, hang: &Hang) -> String {
    let size = world.map_or_else(
        || format!("{} live ranks", hang.live),
        |w| format!("{w} ranks"),
    );
    let mut out = format!(
        "{job} ({size}) has finished no step for {:.0} s (a hang after {:.0} s: 10 median steps, at least 60 s)",
        hang.quiet_s, hang.threshold_s
    );
    match &hang.waited {
        Some(w) => {
            // torch names a group made by `new_group` "undefined".
            let group = if w.desc.is_empty() || w.desc == "undefined" {
                format!("process group {}", w.group)
            } else {
                format!("process group {} ({})", w.group, w.desc)
            };
            out.push_str(&format!(
                ": {} wait{} in {} #{} ({} element{}) of {group} for up to {:.0} s",
                ranks_phrase(&w.waiters),
                if w.waiters.len() == 1 { "s" } else { "" },
                w.op,
                w.seq,
                w.numel,
                if w.numel == 1 { "" } else { "s" },
                w.waited_s
            ));
            if hang.culprits.is_empty() {
                out.push_str("; every rank of the group is in it, none is missing (a lost connection, or a collective that never completes)");
            } else {
                out.push_str("; ");
                out.push_str(&culprits_phrase(&hang.culprits, &w.group));
            }
            if let Some(left) = w.timeout_left_s {
                out.push_str(&format!(
                    ". The process group's timeout ends the job in about {}",
                    fmt_duration(left)
                ));
            }
        }
        None if hang.culprits.is_empty() => {
            out.push_str(
                "; the hooks see no collective and every rank stopped after the same step",
            );
        }
        None => {
            out.push_str("; no collective information: ");
            out.push_str(&culprits_phrase(&hang.culprits, ""));
        }
    }
    out
}

/// Ranks whose evidence files are listed; the rest are counted.
const MAX_EVIDENCE: usize = 4;

/// Appends where the ranks saved their evidence (`rank`, the dump's files).
pub fn add_evidence(message: &mut String, evidence: &[(u32, String)]) {
    if evidence.is_empty() {
        return;
    }
    let mut parts: Vec<String> = evidence
        .iter()
        .take(MAX_EVIDENCE)
        .map(|(rank, files)| format!("rank {rank}: {files}"))
        .collect();
    if evidence.len() > MAX_EVIDENCE {
        parts.push(format!("and {} more ranks", evidence.len() - MAX_EVIDENCE));
    }
    message.push_str(". Evidence saved: ");
    message.push_str(&parts.join("; "));
}

fn ranks_phrase(ranks: &[u32]) -> String {
    let mut names: Vec<String> = ranks.iter().take(MAX_NAMED).map(u32::to_string).collect();
    if ranks.len() > MAX_NAMED {
        names.push(format!("{} more", ranks.len() - MAX_NAMED));
    }
    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", names.join(", "))
}

fn culprits_phrase(culprits: &[Culprit], group: &str) -> String {
    let mut parts: Vec<String> = culprits
        .iter()
        .take(MAX_NAMED)
        .map(|c| {
            let step = c
                .last_step
                .map_or_else(String::new, |s| format!(", last step {s}"));
            match &c.why {
                Why::NotEntered(Some(seq)) => format!(
                    "rank {} has not entered it (its last collective in group {group} is #{seq}{step})",
                    c.rank
                ),
                Why::NotEntered(None) => {
                    format!("rank {} has not entered it (no collective in group {group} yet{step})", c.rank)
                }
                Why::WaitsElsewhere { group: g, seq, op } => format!(
                    "rank {} waits in {op} #{seq} of process group {g} instead{step}",
                    c.rank
                ),
                Why::DifferentCall { op, numel } => format!(
                    "rank {} entered a different call under that number ({op} of {numel} elements{step})",
                    c.rank
                ),
                Why::Silent(Some(s)) => format!(
                    "rank {} has reported nothing for {:.0} s (its process is stopped, hung hard or gone{step})",
                    c.rank, s
                ),
                Why::Silent(None) => format!(
                    "rank {} has reported nothing (its process is stopped, hung hard or gone{step})",
                    c.rank
                ),
                Why::Behind => format!("rank {} is the furthest behind{step}", c.rank),
                Why::Exited => format!("rank {}'s process has exited{step}", c.rank),
            }
        })
        .collect();
    if culprits.len() > MAX_NAMED {
        parts.push(format!("and {} more ranks", culprits.len() - MAX_NAMED));
    }
    parts.join("; ")
}

fn fmt_duration(s: f64) -> String {
    if s >= 120.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}
