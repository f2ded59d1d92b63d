//! The one check of a hook record: the agent runs it on every record its
//! hooks report (and answers the hook with the reason), and the
//! coordinator's state runs it again on every pushed record, since it trusts
//! no agent. Anything absurd is skipped and counted, never applied. The
//! bounds are in [`crate::limits`].

use gpumon_proto::{
    AllocStats, CollectiveArrival, DeviceLimit, HookRecord, StallRecord, MAX_STEP_COLLECTIVES,
};
use thiserror::Error;

use crate::limits::{
    MAX_DETAIL_BYTES, MAX_DEVICE_BYTES, MAX_LABEL_BYTES, MAX_NAME_BYTES, MAX_SECTIONS, MAX_STEP_MS,
    MAX_WAIT_CALLS, MAX_WAIT_GROUPS, MAX_WORLD_SIZE,
};

/// Why a record was skipped; the text is what the agent answers the hook.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvalidRecord {
    /// A job, marker, snapshot or section name is empty.
    #[error("{0} is empty")]
    EmptyName(&'static str),
    /// A name over its limit.
    #[error("{field} is {bytes} bytes; the limit is {max}")]
    LongName {
        /// Which name.
        field: &'static str,
        /// Its length.
        bytes: usize,
        /// Its limit.
        max: usize,
    },
    /// A name holding control characters.
    #[error("{0} holds control characters")]
    ControlInName(&'static str),
    /// A rank beyond belief.
    #[error("rank {0} is beyond belief (below {MAX_WORLD_SIZE})")]
    BadRank(u32),
    /// More bytes in live tensors than the allocator holds.
    #[error("allocated > reserved ({allocated} > {reserved})")]
    AllocatedOverReserved {
        /// `allocated`.
        allocated: u64,
        /// `reserved`.
        reserved: u64,
    },
    /// More bytes reserved than any device has.
    #[error("reserved {0} bytes is above 1 PiB")]
    ReservedBeyondBelief(u64),
    /// More free bytes in split blocks than the allocator holds.
    #[error("inactive_split > reserved ({inactive_split} > {reserved})")]
    InactiveSplitOverReserved {
        /// `inactive_split`.
        inactive_split: u64,
        /// `reserved`.
        reserved: u64,
    },
    /// A device limit of no bytes or more than any device has.
    #[error("{what} {bytes} bytes is not a plausible device limit (1 byte to 1 PiB)")]
    BadLimit {
        /// `device_total` or `cap`.
        what: &'static str,
        /// Its value.
        bytes: u64,
    },
    /// A cap above the device it caps.
    #[error("cap > device_total ({cap} > {device_total})")]
    CapOverDevice {
        /// `cap`.
        cap: u64,
        /// `device_total`.
        device_total: u64,
    },
    /// A snapshot whose statistics fail the checks above.
    #[error("stats: {0}")]
    SnapshotStats(Box<InvalidRecord>),
    /// A step or section time that is negative, not finite or over a day.
    #[error("{what} {ms} ms is not a plausible duration (0 to one day)")]
    BadDuration {
        /// `duration_ms` or the section.
        what: String,
        /// The time, as sent.
        ms: String,
    },
    /// Too many sections in one step.
    #[error("{0} sections; the limit is {MAX_SECTIONS}")]
    TooManySections(usize),
    /// Too many process groups in one step's collective waits.
    #[error("{0} process groups in waits; the limit is {MAX_WAIT_GROUPS}")]
    TooManyWaitGroups(usize),
    /// A process group named twice in one step's collective waits.
    #[error("process group {0:?} is named twice in waits")]
    RepeatedWaitGroup(String),
    /// More collective calls in one group and step than believed.
    #[error(
        "{0} calls in one process group in one step is beyond belief (above {MAX_WAIT_CALLS})"
    )]
    TooManyWaitCalls(u32),
    /// Too many collectives listed one by one in one step.
    #[error("{0} collectives listed; the limit is {MAX_STEP_COLLECTIVES}")]
    TooManyCollectives(usize),
    /// A collective listed with a number no hook counts (from 1).
    #[error("collective {op:?} of process group {group:?} has number 0; numbers count from 1")]
    ZeroCollectiveNumber {
        /// Its process group.
        group: String,
        /// Its operation.
        op: String,
    },
    /// A collective left before it was entered.
    #[error("collective #{seq} of process group {group:?} was left ({left_ms} ms) before it was entered ({entered_ms} ms)")]
    LeftBeforeEntered {
        /// Its process group.
        group: String,
        /// Its number.
        seq: u64,
        /// When it was entered, as sent.
        entered_ms: String,
        /// When it was left, as sent.
        left_ms: String,
    },
    /// A detail over the limit.
    #[error("detail is {0} bytes; the limit is {MAX_DETAIL_BYTES}")]
    LongDetail(usize),
    /// More process groups in a stall than the limit.
    #[error("{0} process groups in entered; the limit is {MAX_STALL_GROUPS}")]
    TooManyGroups(usize),
    /// A stall's wait or quiet time beyond belief.
    #[error("{what} {ms} ms is beyond belief (above {MAX_STALL_MS} ms)")]
    BadStallTime {
        /// `quiet_ms`, `waited_ms` or `timeout_ms`.
        what: &'static str,
        /// The time, as sent.
        ms: u64,
    },
    /// A stall source this build does not know.
    #[error("source {0:?} is not flight_recorder, wrappers, none or process_exit")]
    UnknownSource(String),
}

/// Process groups one stall record may list.
pub const MAX_STALL_GROUPS: usize = 16;

/// Longest quiet, wait or timeout a stall may report: 30 days, ms.
pub const MAX_STALL_MS: u64 = 30 * 24 * 3600 * 1000;

/// The sources of collective sequence numbers a stall may name, and
/// `process_exit`: the agent's word that the rank's process has exited.
pub const STALL_SOURCES: [&str; 4] = ["flight_recorder", "wrappers", "none", "process_exit"];

fn label(field: &'static str, name: &str, max: usize) -> Result<(), InvalidRecord> {
    if name.is_empty() {
        return Err(InvalidRecord::EmptyName(field));
    }
    if name.len() > max {
        return Err(InvalidRecord::LongName {
            field,
            bytes: name.len(),
            max,
        });
    }
    if name.chars().any(char::is_control) {
        return Err(InvalidRecord::ControlInName(field));
    }
    Ok(())
}

fn stats(s: &AllocStats) -> Result<(), InvalidRecord> {
    if s.allocated > s.reserved {
        return Err(InvalidRecord::AllocatedOverReserved {
            allocated: s.allocated,
            reserved: s.reserved,
        });
    }
    if s.reserved > MAX_DEVICE_BYTES {
        return Err(InvalidRecord::ReservedBeyondBelief(s.reserved));
    }
    match s.inactive_split {
        Some(split) if split > s.reserved => Err(InvalidRecord::InactiveSplitOverReserved {
            inactive_split: split,
            reserved: s.reserved,
        }),
        _ => Ok(()),
    }
}

/// A device limit: each figure plausible, and a cap within its device.
fn device_limit(l: &DeviceLimit) -> Result<(), InvalidRecord> {
    let cap = l.cap.map(|c| c.bytes);
    for (what, bytes) in [("device_total", l.device_total), ("cap", cap)] {
        match bytes {
            Some(bytes) if bytes == 0 || bytes > MAX_DEVICE_BYTES => {
                return Err(InvalidRecord::BadLimit { what, bytes });
            }
            _ => {}
        }
    }
    match (cap, l.device_total) {
        (Some(cap), Some(device_total)) if cap > device_total => {
            Err(InvalidRecord::CapOverDevice { cap, device_total })
        }
        _ => Ok(()),
    }
}

fn stall_time(what: &'static str, ms: u64) -> Result<(), InvalidRecord> {
    if ms > MAX_STALL_MS {
        return Err(InvalidRecord::BadStallTime { what, ms });
    }
    Ok(())
}

fn stall(s: &StallRecord) -> Result<(), InvalidRecord> {
    stall_time("quiet_ms", s.quiet_ms)?;
    if !STALL_SOURCES.contains(&s.source.as_str()) {
        return Err(InvalidRecord::UnknownSource(s.source.clone()));
    }
    if s.entered.len() > MAX_STALL_GROUPS {
        return Err(InvalidRecord::TooManyGroups(s.entered.len()));
    }
    for (group, _) in &s.entered {
        label("group", group, MAX_LABEL_BYTES)?;
    }
    if let Some(marker) = &s.marker {
        label("marker", marker, MAX_LABEL_BYTES)?;
    }
    if let Some(w) = &s.waiting {
        label("group", &w.group, MAX_LABEL_BYTES)?;
        label("op", &w.op, MAX_LABEL_BYTES)?;
        if !w.desc.is_empty() {
            label("desc", &w.desc, MAX_LABEL_BYTES)?;
        }
        stall_time("waited_ms", w.waited_ms)?;
        if let Some(timeout) = w.timeout_ms {
            stall_time("timeout_ms", timeout)?;
        }
    }
    Ok(())
}

fn duration(what: impl FnOnce() -> String, ms: f64) -> Result<(), InvalidRecord> {
    if !(ms.is_finite() && (0.0..=MAX_STEP_MS).contains(&ms)) {
        return Err(InvalidRecord::BadDuration {
            what: what(),
            ms: ms.to_string(),
        });
    }
    Ok(())
}

/// Checks one record.
pub fn check_record(r: &HookRecord) -> Result<(), InvalidRecord> {
    let (job, rank) = r.subject();
    label("job", job, MAX_NAME_BYTES)?;
    if rank >= MAX_WORLD_SIZE {
        return Err(InvalidRecord::BadRank(rank));
    }
    match r {
        HookRecord::Alloc(a) => {
            stats(&a.stats)?;
            a.limit.as_ref().map_or(Ok(()), device_limit)
        }
        HookRecord::Step(s) => {
            duration(|| "duration_ms".to_owned(), s.duration_ms)?;
            if s.sections.len() > MAX_SECTIONS {
                return Err(InvalidRecord::TooManySections(s.sections.len()));
            }
            for (name, ms) in &s.sections {
                label("section name", name, MAX_LABEL_BYTES)?;
                duration(|| format!("section {name:?}"), *ms)?;
            }
            if s.waits.len() > MAX_WAIT_GROUPS {
                return Err(InvalidRecord::TooManyWaitGroups(s.waits.len()));
            }
            for (i, w) in s.waits.iter().enumerate() {
                label("process group", &w.group, MAX_LABEL_BYTES)?;
                if s.waits[..i].iter().any(|o| o.group == w.group) {
                    return Err(InvalidRecord::RepeatedWaitGroup(w.group.clone()));
                }
                if w.calls > MAX_WAIT_CALLS {
                    return Err(InvalidRecord::TooManyWaitCalls(w.calls));
                }
                duration(|| format!("wait in process group {:?}", w.group), w.wait_ms)?;
            }
            collectives(&s.collectives)
        }
        HookRecord::Event(e) => {
            label("name", &e.name, MAX_LABEL_BYTES)?;
            if let Some(detail) = e.detail.as_ref().filter(|d| d.len() > MAX_DETAIL_BYTES) {
                return Err(InvalidRecord::LongDetail(detail.len()));
            }
            match &e.snapshot {
                Some(s) => stats(s).map_err(|e| InvalidRecord::SnapshotStats(Box::new(e))),
                None => Ok(()),
            }
        }
        HookRecord::Stall(s) => stall(s),
    }
}

/// A step's collectives listed one by one: bounded, named within the label
/// limits, numbered from 1, and times that are plausible durations after the
/// step's start, left no earlier than entered.
fn collectives(list: &[CollectiveArrival]) -> Result<(), InvalidRecord> {
    if list.len() > MAX_STEP_COLLECTIVES {
        return Err(InvalidRecord::TooManyCollectives(list.len()));
    }
    for c in list {
        label("process group", &c.group, MAX_LABEL_BYTES)?;
        label("collective operation", &c.op, MAX_LABEL_BYTES)?;
        if c.seq == 0 {
            return Err(InvalidRecord::ZeroCollectiveNumber {
                group: c.group.clone(),
                op: c.op.clone(),
            });
        }
        let what = |field: &str| {
            format!(
                "{field} of collective #{} of process group {:?}",
                c.seq, c.group
            )
        };
        duration(|| what("entered_ms"), c.entered_ms)?;
        duration(|| what("left_ms"), c.left_ms)?;
        duration(|| what("wait_ms"), c.wait_ms)?;
        if c.left_ms < c.entered_ms {
            return Err(InvalidRecord::LeftBeforeEntered {
                group: c.group.clone(),
                seq: c.seq,
                entered_ms: c.entered_ms.to_string(),
                left_ms: c.left_ms.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::{EventRecord, StepRecord};

    fn step(duration_ms: f64, sections: Vec<(String, f64)>) -> HookRecord {
        HookRecord::Step(StepRecord {
            group: None,
            t_ms: 1,
            job: "j".into(),
            rank: 0,
            step: 1,
            duration_ms,
            sections,
            waits: Vec::new(),
            collectives: Vec::new(),
        })
    }

    #[test]
    fn collectives_listed_one_by_one_are_bounded_numbered_and_in_order() {
        let with = |collectives: Vec<CollectiveArrival>| match step(100.0, vec![]) {
            HookRecord::Step(s) => HookRecord::Step(StepRecord { collectives, ..s }),
            _ => unreachable!(),
        };
        let call = |seq: u64, entered_ms: f64, left_ms: f64| CollectiveArrival {
            group: "1".into(),
            seq,
            op: "all_reduce".into(),
            entered_ms,
            left_ms,
            wait_ms: (left_ms - entered_ms).max(0.0),
        };
        assert!(check_record(&with(vec![call(1, 2.0, 9.5), call(2, 10.0, 10.0)])).is_ok());
        let many = (1..=33).map(|seq| call(seq, 1.0, 2.0)).collect();
        assert_eq!(
            check_record(&with(many)),
            Err(InvalidRecord::TooManyCollectives(33))
        );
        assert!(matches!(
            check_record(&with(vec![call(0, 1.0, 2.0)])),
            Err(InvalidRecord::ZeroCollectiveNumber { .. })
        ));
        let err = check_record(&with(vec![call(7, 5.0, 4.0)])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "collective #7 of process group \"1\" was left (4 ms) before it was entered (5 ms)"
        );
        assert!(matches!(
            check_record(&with(vec![call(3, f64::NAN, 4.0)])),
            Err(InvalidRecord::BadDuration { .. })
        ));
        let mut unnamed = call(3, 1.0, 2.0);
        unnamed.op.clear();
        assert_eq!(
            check_record(&with(vec![unnamed])),
            Err(InvalidRecord::EmptyName("collective operation"))
        );
    }

    #[test]
    fn collective_waits_are_bounded_named_once_and_plausible() {
        use gpumon_proto::GroupWait;
        let with = |waits: Vec<GroupWait>| match step(100.0, vec![]) {
            HookRecord::Step(s) => HookRecord::Step(StepRecord { waits, ..s }),
            _ => unreachable!(),
        };
        let wait = |group: &str, calls: u32, wait_ms: f64| GroupWait {
            group: group.into(),
            calls,
            wait_ms,
        };
        assert!(check_record(&with(vec![wait("0", 2, 3.5), wait("p2p", 1, 0.0)])).is_ok());
        let nine = (0..9).map(|g| wait(&g.to_string(), 1, 1.0)).collect();
        assert_eq!(
            check_record(&with(nine)),
            Err(InvalidRecord::TooManyWaitGroups(9))
        );
        assert_eq!(
            check_record(&with(vec![wait("1", 1, 1.0), wait("1", 2, 1.0)])),
            Err(InvalidRecord::RepeatedWaitGroup("1".into()))
        );
        assert_eq!(
            check_record(&with(vec![wait("", 1, 1.0)])),
            Err(InvalidRecord::EmptyName("process group"))
        );
        assert_eq!(
            check_record(&with(vec![wait("1", u32::MAX, 1.0)])),
            Err(InvalidRecord::TooManyWaitCalls(u32::MAX))
        );
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            assert!(matches!(
                check_record(&with(vec![wait("1", 1, bad)])),
                Err(InvalidRecord::BadDuration { .. })
            ));
        }
    }

    #[test]
    fn refuses_what_cannot_be_true() {
        assert!(check_record(&step(10.0, vec![("data".into(), 1.0)])).is_ok());
        assert!(matches!(
            check_record(&step(f64::NAN, vec![])),
            Err(InvalidRecord::BadDuration { .. })
        ));
        assert!(matches!(
            check_record(&step(1.0, vec![("x".into(), -1.0)])),
            Err(InvalidRecord::BadDuration { .. })
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
        assert_eq!(
            check_record(&event("", None)),
            Err(InvalidRecord::EmptyName("name"))
        );
        assert_eq!(
            check_record(&event("bad\nname", None)),
            Err(InvalidRecord::ControlInName("name"))
        );
        assert_eq!(
            check_record(&event(&"n".repeat(MAX_LABEL_BYTES + 1), None))
                .unwrap_err()
                .to_string(),
            "name is 129 bytes; the limit is 128"
        );
        assert_eq!(
            check_record(&event("x", Some("d".repeat(2000)))),
            Err(InvalidRecord::LongDetail(2000))
        );
    }
}
