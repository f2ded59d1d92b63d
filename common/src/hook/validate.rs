//! Checks on hook records before they are applied: anything absurd is
//! skipped and counted. The agent checks the same things against its
//! sessions; this is the coordinator's own line, since it trusts no agent.

use gpumon_proto::{AllocStats, HookRecord};
use thiserror::Error;

use crate::view::MAX_NAME_BYTES;

/// Longest marker, snapshot or section name, bytes.
pub const MAX_LABEL_BYTES: usize = 128;
/// Longest free-text detail, bytes.
pub const MAX_DETAIL_BYTES: usize = 1024;
/// Most sections in one step.
pub const MAX_SECTIONS: usize = 32;
/// Largest byte count believed (1 PiB).
const MAX_BYTES: u64 = 1 << 50;
/// Longest step believed, ms (one day).
const MAX_STEP_MS: f64 = 86_400_000.0;
/// Largest rank believed.
const MAX_RANK: u32 = 1 << 20;

/// Why a record was skipped.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvalidRecord {
    /// A job, marker, snapshot or section name is empty, too long or holds control characters.
    #[error("{field} is empty, longer than {max} bytes or holds control characters")]
    BadName {
        /// Which name.
        field: &'static str,
        /// Its limit.
        max: usize,
    },
    /// A rank beyond belief.
    #[error("rank {0} is beyond belief")]
    BadRank(u32),
    /// Allocator bytes that contradict each other.
    #[error("allocator statistics are inconsistent: {0}")]
    BadStats(&'static str),
    /// A step time that is negative, not finite or over a day.
    #[error("step time {0} ms is not a plausible duration")]
    BadDuration(String),
    /// Too many sections in one step.
    #[error("{0} sections in one step (at most {MAX_SECTIONS})")]
    TooManySections(usize),
    /// A detail over the limit.
    #[error("detail longer than {MAX_DETAIL_BYTES} bytes")]
    LongDetail,
}

fn label(field: &'static str, name: &str, max: usize) -> Result<(), InvalidRecord> {
    if name.is_empty() || name.len() > max || name.chars().any(char::is_control) {
        return Err(InvalidRecord::BadName { field, max });
    }
    Ok(())
}

fn stats(s: &AllocStats) -> Result<(), InvalidRecord> {
    if s.allocated > s.reserved {
        return Err(InvalidRecord::BadStats("allocated > reserved"));
    }
    if s.reserved > MAX_BYTES {
        return Err(InvalidRecord::BadStats("reserved above 1 PiB"));
    }
    if s.inactive_split.is_some_and(|v| v > s.reserved) {
        return Err(InvalidRecord::BadStats("inactive_split > reserved"));
    }
    Ok(())
}

fn duration(ms: f64) -> Result<(), InvalidRecord> {
    if !(ms.is_finite() && (0.0..=MAX_STEP_MS).contains(&ms)) {
        return Err(InvalidRecord::BadDuration(ms.to_string()));
    }
    Ok(())
}

/// Checks one record.
pub fn check_record(r: &HookRecord) -> Result<(), InvalidRecord> {
    let (job, rank) = r.subject();
    label("job", job, MAX_NAME_BYTES)?;
    if rank >= MAX_RANK {
        return Err(InvalidRecord::BadRank(rank));
    }
    match r {
        HookRecord::Alloc(a) => stats(&a.stats),
        HookRecord::Step(s) => {
            duration(s.duration_ms)?;
            if s.sections.len() > MAX_SECTIONS {
                return Err(InvalidRecord::TooManySections(s.sections.len()));
            }
            for (name, ms) in &s.sections {
                label("section", name, MAX_LABEL_BYTES)?;
                duration(*ms)?;
            }
            Ok(())
        }
        HookRecord::Event(e) => {
            label(
                if e.snapshot.is_some() {
                    "snapshot"
                } else {
                    "marker"
                },
                &e.name,
                MAX_LABEL_BYTES,
            )?;
            if e.detail
                .as_ref()
                .is_some_and(|d| d.len() > MAX_DETAIL_BYTES)
            {
                return Err(InvalidRecord::LongDetail);
            }
            e.snapshot.as_ref().map_or(Ok(()), stats)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::{EventRecord, StepRecord};

    fn step(duration_ms: f64, sections: Vec<(String, f64)>) -> HookRecord {
        HookRecord::Step(StepRecord {
            t_ms: 1,
            job: "j".into(),
            rank: 0,
            step: 1,
            duration_ms,
            sections,
        })
    }

    #[test]
    fn refuses_what_cannot_be_true() {
        assert!(check_record(&step(10.0, vec![("data".into(), 1.0)])).is_ok());
        assert!(matches!(
            check_record(&step(f64::NAN, vec![])),
            Err(InvalidRecord::BadDuration(_))
        ));
        assert!(matches!(
            check_record(&step(1.0, vec![("x".into(), -1.0)])),
            Err(InvalidRecord::BadDuration(_))
        ));
        let many = (0..40).map(|i| (format!("s{i}"), 1.0)).collect();
        assert_eq!(
            check_record(&step(1.0, many)),
            Err(InvalidRecord::TooManySections(40))
        );
        let event = |name: &str, detail: Option<String>| {
            HookRecord::Event(EventRecord {
                t_ms: 1,
                job: "j".into(),
                rank: 0,
                name: name.into(),
                detail,
                snapshot: None,
            })
        };
        assert!(check_record(&event("eval", None)).is_ok());
        assert!(matches!(
            check_record(&event("", None)),
            Err(InvalidRecord::BadName {
                field: "marker",
                ..
            })
        ));
        assert!(matches!(
            check_record(&event("bad\nname", None)),
            Err(InvalidRecord::BadName { .. })
        ));
        assert_eq!(
            check_record(&event("x", Some("d".repeat(2000)))),
            Err(InvalidRecord::LongDetail)
        );
    }
}
