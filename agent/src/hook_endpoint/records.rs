//! Checking a `report`'s records and turning them into [`HookRecord`]s.
//!
//! The hook runs inside someone else's training script, so nothing it sends
//! is trusted: every record is read field by field (each field's JSON type),
//! stamped with the session's job and rank, and then put through the one
//! record check the coordinator applies too
//! ([`gpumon_core::hook_records::check_record`], bounds in
//! [`gpumon_core::limits`]) before it is forwarded. Checked here only:
//! what never leaves the agent (`t` against the agent's clock, the device
//! memory of `alloc` records, the step's `clock`). A bad record is skipped
//! and counted, never fatal: the rest of the report still counts. A record
//! that names another job or rank than the session's refuses the whole
//! report, since it means the hook is confused about who it is. Pure: the
//! agent's clock comes in as `now_ms`.

use gpumon_core::hook_records::check_record as check_fields;
use gpumon_core::limits::MAX_WAIT_GROUPS;
use gpumon_proto::{
    AllocRecord, AllocStats, CapSource, CollectiveArrival, DeviceLimit, EventRecord, GroupWait,
    HookRecord, MemoryCap, StepRecord, MAX_STEP_COLLECTIVES,
};
use serde_json::{Map, Value};

use super::field_error::FieldError;
use super::fields::{bytes, kind_of, opt_bytes, shown, shown_str};
use super::record_error::{RecordError, ReportError};

/// Most records in one report.
pub const MAX_RECORDS_PER_REPORT: usize = 1024;
/// Furthest a record's `t` may be from the agent's clock, ms.
pub const MAX_CLOCK_SKEW_MS: u64 = 300_000;
/// Skip reasons returned in one answer; the count covers the rest.
pub const MAX_REASONS: usize = 5;
/// The clocks a step record may name (`clock`; absent means `cpu`).
pub const STEP_CLOCKS: [&str; 2] = ["cuda", "cpu"];

/// What a report's records came to.
#[derive(Debug, Default)]
pub(crate) struct CheckedReport {
    /// The good records, in the report's order.
    pub records: Vec<HookRecord>,
    /// Records skipped.
    pub skipped: u64,
    /// The first [`MAX_REASONS`] reasons, `record N: ...` (N counts from 0).
    pub reasons: Vec<String>,
    /// The newest `alloc` record's reading (largest `t`).
    pub newest_alloc: Option<AllocReading>,
}

/// What the agent keeps of a session's allocator: enough to build a GPU
/// sample when it samples no GPU itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocReading {
    /// When, ms since the Unix epoch.
    pub t_ms: u64,
    /// The allocator's reserved bytes: the process's share of the device.
    pub reserved: u64,
    /// `total - free` of the whole device, from `torch.cuda.mem_get_info()`.
    pub device_used: Option<u64>,
    /// The device's memory, from the same call.
    pub device_total: Option<u64>,
}

/// Checks `records` (the report's `records` field) for a session of `job`,
/// `rank`. `Err` refuses the whole report with the sentence to answer.
pub(crate) fn check_report(
    records: Option<&Value>,
    job: &str,
    rank: u32,
    now_ms: u64,
) -> Result<CheckedReport, ReportError> {
    let records = match records {
        Some(Value::Array(records)) => records,
        Some(other) => {
            let got = kind_of(other).to_owned();
            return Err(FieldError::wrong("records", "an array", got).into());
        }
        None => return Err(FieldError::missing("records").into()),
    };
    if records.len() > MAX_RECORDS_PER_REPORT {
        return Err(ReportError::TooMany {
            count: records.len(),
            max: MAX_RECORDS_PER_REPORT,
        });
    }
    for (index, record) in records.iter().enumerate() {
        if let Some(claim) = foreign_subject(record, job, rank) {
            return Err(ReportError::Foreign {
                index,
                claim,
                rank,
                job: job.to_owned(),
            });
        }
    }
    let mut out = CheckedReport::default();
    for (i, record) in records.iter().enumerate() {
        match check_record(record, job, rank, now_ms) {
            Ok((record, alloc)) => {
                if let Some(a) = alloc {
                    if out.newest_alloc.is_none_or(|n| a.t_ms >= n.t_ms) {
                        out.newest_alloc = Some(a);
                    }
                }
                out.records.push(record);
            }
            Err(reason) => {
                out.skipped += 1;
                if out.reasons.len() < MAX_REASONS {
                    out.reasons.push(format!("record {i}: {reason}"));
                }
            }
        }
    }
    Ok(out)
}

/// The job/rank a record claims when it differs from the session's.
fn foreign_subject(record: &Value, job: &str, rank: u32) -> Option<String> {
    let obj = record.as_object()?;
    let job_differs = obj.get("job").is_some_and(|j| j.as_str() != Some(job));
    let rank_differs = obj
        .get("rank")
        .is_some_and(|r| r.as_u64() != Some(u64::from(rank)));
    (job_differs || rank_differs).then(|| {
        let shown = |k: &str| obj.get(k).map_or_else(|| "-".to_owned(), shown);
        format!("job {}, rank {}", shown("job"), shown("rank"))
    })
}

type Checked = (HookRecord, Option<AllocReading>);

fn check_record(record: &Value, job: &str, rank: u32, now_ms: u64) -> Result<Checked, RecordError> {
    let (record, alloc) = read_record(record, job, rank, now_ms)?;
    check_fields(&record)?;
    Ok((record, alloc))
}

/// The record as sent, each field of its JSON type, and what the agent
/// keeps of an `alloc` record.
fn read_record(record: &Value, job: &str, rank: u32, now_ms: u64) -> Result<Checked, RecordError> {
    let Value::Object(obj) = record else {
        return Err(RecordError::NotObject {
            got: kind_of(record),
        });
    };
    let kind = match obj.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(FieldError::wrong("type", "a string", shown(other)).into()),
        None => return Err(FieldError::missing("type").into()),
    };
    let t_ms = time(obj, now_ms)?;
    let job = job.to_owned();
    Ok(match kind {
        "alloc" => {
            let stats = alloc_stats(obj)?;
            let device_used = opt_bytes(obj, "device_used")?;
            let device_total = opt_bytes(obj, "device_total")?;
            if let (Some(used), Some(total)) = (device_used, device_total) {
                if used > total {
                    return Err(RecordError::DeviceOverTotal { used, total });
                }
            }
            let reading = AllocReading {
                t_ms,
                reserved: stats.reserved,
                device_used,
                device_total,
            };
            let record = AllocRecord {
                limit: device_limit(obj, device_total)?,
                t_ms,
                job,
                rank,
                stats,
            };
            (HookRecord::Alloc(record), Some(reading))
        }
        "step" => {
            let step = bytes(obj, "step")?;
            let duration_ms = millis(obj.get("duration_ms"), "duration_ms")?;
            let sections = sections(obj.get("sections"))?;
            check_clock(obj.get("clock"))?;
            let group = peer_group(obj, rank)?;
            let waits = group_waits(obj.get("waits"))?;
            let collectives = step_collectives(obj.get("collectives"))?;
            let record = StepRecord {
                group,
                t_ms,
                job,
                rank,
                step,
                duration_ms,
                sections,
                waits,
                collectives,
            };
            (HookRecord::Step(record), None)
        }
        "event" => {
            let name = name(obj)?;
            let detail = match obj.get("detail") {
                None | Some(Value::Null) => None,
                Some(Value::String(d)) => Some(d.clone()),
                Some(other) => {
                    return Err(FieldError::wrong("detail", "a string", shown(other)).into())
                }
            };
            let record = EventRecord {
                t_ms,
                job,
                rank,
                name,
                detail,
                snapshot: None,
            };
            (HookRecord::Event(record), None)
        }
        "snapshot" => {
            let name = name(obj)?;
            let stats = match obj.get("stats") {
                Some(Value::Object(stats)) => alloc_stats(stats)?,
                Some(other) => {
                    let got = kind_of(other).to_owned();
                    return Err(FieldError::wrong("stats", "an object", got).into());
                }
                None => return Err(FieldError::missing("stats").into()),
            };
            let record = EventRecord {
                t_ms,
                job,
                rank,
                name,
                detail: None,
                snapshot: Some(stats),
            };
            (HookRecord::Event(record), None)
        }
        "stall" => (
            HookRecord::Stall(super::stall::read_stall(obj, t_ms, job, rank)?),
            None,
        ),
        other => {
            return Err(RecordError::UnknownType {
                got: shown(&Value::String(other.to_owned())),
            })
        }
    })
}

/// `t` (seconds since the epoch, a float) as ms, within the allowed skew.
fn time(obj: &Map<String, Value>, now_ms: u64) -> Result<u64, RecordError> {
    let t = match obj.get("t") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => return Err(FieldError::wrong("t", "a number", shown(other)).into()),
        None => return Err(FieldError::missing("t").into()),
    };
    if !t.is_finite() || t < 0.0 {
        return Err(FieldError::NotA {
            key: "t".to_owned(),
            value: t,
            what: "a time",
        }
        .into());
    }
    let t_ms = (t * 1000.0).round();
    // Compared in f64 so a huge t cannot wrap; ms precision is plenty here.
    if (t_ms - now_ms as f64).abs() > MAX_CLOCK_SKEW_MS as f64 {
        return Err(RecordError::Skew {
            t,
            now_ms,
            max_ms: MAX_CLOCK_SKEW_MS,
        });
    }
    Ok(t_ms as u64)
}

/// What bounds the process's memory, from an `alloc` record: its device as
/// it sees it and the allocator's cap (`cap` with `cap_source`); `None`
/// when the record says neither.
fn device_limit(
    obj: &Map<String, Value>,
    device_total: Option<u64>,
) -> Result<Option<DeviceLimit>, RecordError> {
    let bytes = opt_bytes(obj, "cap")?;
    let source = match obj.get("cap_source") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => {
            Some(
                CapSource::parse(name).ok_or_else(|| RecordError::UnknownCapSource {
                    got: shown_str(name),
                })?,
            )
        }
        Some(other) => {
            return Err(FieldError::Type {
                key: "cap_source".into(),
                want: "a string",
                got: shown(other),
            }
            .into())
        }
    };
    let cap = match (bytes, source) {
        (Some(bytes), Some(source)) => Some(MemoryCap { bytes, source }),
        (None, None) => None,
        _ => return Err(RecordError::CapWithoutSource),
    };
    Ok((device_total.is_some() || cap.is_some()).then_some(DeviceLimit { device_total, cap }))
}

/// The allocator fields shared by `alloc` records and snapshots' `stats`.
fn alloc_stats(obj: &Map<String, Value>) -> Result<AllocStats, FieldError> {
    Ok(AllocStats {
        allocated: bytes(obj, "allocated")?,
        reserved: bytes(obj, "reserved")?,
        active: opt_bytes(obj, "active")?,
        inactive_split: opt_bytes(obj, "inactive_split")?,
        peak_allocated: opt_bytes(obj, "peak_allocated")?,
        peak_reserved: opt_bytes(obj, "peak_reserved")?,
        alloc_retries: opt_bytes(obj, "alloc_retries")?,
        ooms: opt_bytes(obj, "ooms")?,
    })
}

/// A step's peer group: the lowest rank of the ranks it is compared with,
/// so never above its own.
fn peer_group(obj: &Map<String, Value>, rank: u32) -> Result<Option<u32>, RecordError> {
    match opt_bytes(obj, "group")? {
        Some(group) if group > u64::from(rank) => Err(RecordError::GroupAboveRank { group, rank }),
        g => Ok(g.map(|g| g as u32)),
    }
}

/// A required duration in ms (its range is the record check's).
fn millis(v: Option<&Value>, what: &str) -> Result<f64, FieldError> {
    match v {
        Some(Value::Number(n)) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        Some(other) => Err(FieldError::wrong(what, "a number", shown(other))),
        None => Err(FieldError::missing(what)),
    }
}

/// `sections`: an object of name → ms (absent or `null`: none), sorted by name.
fn sections(v: Option<&Value>) -> Result<Vec<(String, f64)>, FieldError> {
    let sections = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(sections)) => sections,
        Some(other) => {
            let got = kind_of(other).to_owned();
            return Err(FieldError::wrong("sections", "an object", got));
        }
    };
    let mut out = Vec::with_capacity(sections.len());
    for (name, ms) in sections {
        out.push((
            name.clone(),
            millis(Some(ms), &format!("section {}", shown_str(name)))?,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `waits`: `[[group, calls, ms], ...]` (absent or `null`: none); the
/// record check bounds how many and their values.
fn group_waits(v: Option<&Value>) -> Result<Vec<GroupWait>, RecordError> {
    let waits = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(waits)) => waits,
        Some(other) => {
            let got = kind_of(other).to_owned();
            return Err(FieldError::wrong("waits", "an array", got).into());
        }
    };
    if waits.len() > MAX_WAIT_GROUPS {
        return Err(RecordError::TooManyWaits { count: waits.len() });
    }
    waits
        .iter()
        .map(|w| match w.as_array().map(Vec::as_slice) {
            Some([Value::String(group), calls, ms]) => {
                let calls = calls
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or_else(|| {
                        let key = format!("the calls of waits {}", shown_str(group));
                        FieldError::wrong(key, "a count", shown(calls))
                    })?;
                let wait_ms = millis(Some(ms), &format!("waits {}", shown_str(group)))?;
                Ok(GroupWait {
                    group: group.clone(),
                    calls,
                    wait_ms,
                })
            }
            _ => Err(FieldError::wrong(
                "each of waits",
                "[group, calls, ms]",
                shown(w),
            )),
        })
        .collect::<Result<_, FieldError>>()
        .map_err(RecordError::from)
}

/// `collectives`: `[[group, seq, op, entered_ms, left_ms, wait_ms], ...]`
/// (absent or `null`: none); the record check bounds their values.
fn step_collectives(v: Option<&Value>) -> Result<Vec<CollectiveArrival>, RecordError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            let got = kind_of(other).to_owned();
            return Err(FieldError::wrong("collectives", "an array", got).into());
        }
    };
    if list.len() > MAX_STEP_COLLECTIVES {
        return Err(RecordError::TooManyCollectives { count: list.len() });
    }
    list.iter()
        .map(|c| match c.as_array().map(Vec::as_slice) {
            Some([Value::String(group), seq, Value::String(op), entered, left, wait]) => {
                let seq = seq.as_u64().ok_or_else(|| {
                    let key = format!(
                        "the number of a collective of process group {}",
                        shown_str(group)
                    );
                    FieldError::wrong(key, "a count", shown(seq))
                })?;
                let what = |field: &str| format!("{field} of collective #{seq}");
                Ok(CollectiveArrival {
                    group: group.clone(),
                    seq,
                    op: op.clone(),
                    entered_ms: millis(Some(entered), &what("entered_ms"))?,
                    left_ms: millis(Some(left), &what("left_ms"))?,
                    wait_ms: millis(Some(wait), &what("wait_ms"))?,
                })
            }
            _ => Err(FieldError::wrong(
                "each of collectives",
                "[group, seq, op, entered_ms, left_ms, wait_ms]",
                shown(c),
            )),
        })
        .collect::<Result<_, FieldError>>()
        .map_err(RecordError::from)
}

/// A step's `clock`: `cuda`, `cpu`, or absent/`null` (`cpu`). Checked but
/// not forwarded: [`StepRecord`] has no field for it.
fn check_clock(v: Option<&Value>) -> Result<(), FieldError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(c)) if STEP_CLOCKS.contains(&c.as_str()) => Ok(()),
        Some(other) => Err(FieldError::wrong(
            "clock",
            "\"cuda\" or \"cpu\"",
            shown(other),
        )),
    }
}

fn name(obj: &Map<String, Value>) -> Result<String, FieldError> {
    match obj.get("name") {
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => Err(FieldError::wrong("name", "a string", shown(other))),
        None => Err(FieldError::missing("name")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_core::limits::{MAX_DETAIL_BYTES, MAX_LABEL_BYTES, MAX_SECTIONS};
    use serde_json::json;

    const NOW_MS: u64 = 1_763_700_000_000;
    const T: f64 = 1_763_700_000.25;

    fn check(records: Value) -> Result<CheckedReport, String> {
        check_report(Some(&records), "run-7", 3, NOW_MS).map_err(|e| e.to_string())
    }

    fn alloc(allocated: u64, reserved: u64) -> Value {
        json!({"type": "alloc", "t": T, "allocated": allocated, "reserved": reserved})
    }

    #[test]
    fn an_alloc_record_carries_its_device_and_its_cap() {
        let report = check(json!([
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2,
             "device_used": 30, "device_total": 80, "cap": 40, "cap_source": "memory_fraction"},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "device_total": 80},
            alloc(1, 2),
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "cap": 40},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "cap": 4, "cap_source": "env"},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2,
             "device_total": 80, "cap": 90, "cap_source": "alloc_conf"},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "device_total": 0},
        ]))
        .unwrap();
        let limits: Vec<_> = report
            .records
            .iter()
            .map(|r| match r {
                HookRecord::Alloc(a) => a.limit,
                other => panic!("{other:?}"),
            })
            .collect();
        let cap = MemoryCap {
            bytes: 40,
            source: CapSource::MemoryFraction,
        };
        assert_eq!(
            limits,
            [
                Some(DeviceLimit {
                    device_total: Some(80),
                    cap: Some(cap)
                }),
                Some(DeviceLimit {
                    device_total: Some(80),
                    cap: None
                }),
                None,
            ]
        );
        assert_eq!(report.skipped, 4, "{:?}", report.reasons);
        assert!(report.reasons[0].contains("cap and cap_source come together"));
        assert!(report.reasons[1].contains("\"env\" is not memory_fraction"));
        assert!(report.reasons[2].contains("cap > device_total (90 > 80)"));
        assert!(report.reasons[3].contains("device_total 0 bytes"));
    }

    #[test]
    fn converts_every_record_type() {
        let report = check(json!([
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "active": 1,
             "inactive_split": null, "peak_allocated": 5, "peak_reserved": 6,
             "alloc_retries": 0, "ooms": 0, "device_used": 30, "device_total": 80},
            {"type": "step", "t": 1_763_700_000.31, "step": 120, "duration_ms": 212.5,
             "sections": {"forward": 80.2, "data": 12.1, "backward": 110.0}},
            {"type": "event", "t": 1_763_700_001.0, "name": "eval start", "detail": null},
            {"type": "snapshot", "t": 1_763_700_002.0, "name": "before_training",
             "stats": {"allocated": 1, "reserved": 2}},
        ]))
        .unwrap();
        assert_eq!(report.skipped, 0, "{:?}", report.reasons);
        let [a, s, e, snap] = &report.records[..] else {
            panic!("{:?}", report.records)
        };
        let HookRecord::Alloc(a) = a else { panic!() };
        assert_eq!((a.t_ms, a.job.as_str(), a.rank), (NOW_MS + 250, "run-7", 3));
        assert_eq!(a.stats.peak_allocated, Some(5));
        assert_eq!(a.stats.inactive_split, None);
        let HookRecord::Step(s) = s else { panic!() };
        assert_eq!(s.t_ms, NOW_MS + 310);
        let names: Vec<_> = s.sections.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["backward", "data", "forward"],
            "sections in name order"
        );
        let HookRecord::Event(e) = e else { panic!() };
        assert_eq!(
            (e.name.as_str(), &e.detail, &e.snapshot),
            ("eval start", &None, &None)
        );
        let HookRecord::Event(snap) = snap else {
            panic!()
        };
        assert_eq!(snap.detail, None);
        assert_eq!(snap.snapshot.unwrap().reserved, 2);
        assert_eq!(
            report.newest_alloc,
            Some(AllocReading {
                t_ms: NOW_MS + 250,
                reserved: 2,
                device_used: Some(30),
                device_total: Some(80)
            })
        );
    }

    #[test]
    fn bad_records_are_skipped_with_their_reasons() {
        let long = "n".repeat(MAX_LABEL_BYTES + 1);
        let many: Map<String, Value> = (0..=MAX_SECTIONS)
            .map(|i| (format!("s{i}"), json!(1.0)))
            .collect();
        let report = check(json!([
            alloc(2, 1),
            {"type": "alloc", "t": T, "allocated": -1, "reserved": 2},
            {"type": "alloc", "t": T, "allocated": 1.5, "reserved": 2},
            {"type": "alloc", "t": T - 301.0, "allocated": 1, "reserved": 2},
            {"type": "event", "t": T, "name": long},
            {"type": "event", "t": T, "name": "x", "detail": "d".repeat(MAX_DETAIL_BYTES + 1)},
            {"type": "step", "t": T, "step": 1, "duration_ms": 1.0, "sections": many},
            {"type": "step", "t": -1.0, "step": 1, "duration_ms": 1.0},
            {"type": "bogus", "t": T},
            "not an object",
            alloc(1, 1),
        ]))
        .unwrap();
        assert_eq!((report.records.len(), report.skipped), (1, 10));
        assert_eq!(
            report.reasons,
            [
                "record 0: allocated > reserved (2 > 1)",
                "record 1: allocated must be a non-negative integer, not -1",
                "record 2: allocated must be a non-negative integer, not 1.5",
                "record 3: t 1763699699.25 is more than 300 s from the agent's clock (1763700000.000)",
                "record 4: name is 129 bytes; the limit is 128",
            ]
        );
        let more = check(json!([
            {"type": "event", "t": T, "name": "x", "detail": "d".repeat(MAX_DETAIL_BYTES + 1)},
            {"type": "step", "t": T, "step": 1, "duration_ms": 1.0,
             "sections": (0..=MAX_SECTIONS).map(|i| (format!("s{i}"), json!(1.0))).collect::<Map<_, _>>()},
            {"type": "step", "t": T, "step": 1, "duration_ms": -2.0},
            {"type": "snapshot", "t": T, "name": "s", "stats": {"allocated": 3, "reserved": 2}},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "device_used": 9, "device_total": 8},
        ]))
        .unwrap();
        assert_eq!(more.skipped, 5);
        assert!(
            more.reasons[0].contains("detail is 1025 bytes"),
            "{:?}",
            more.reasons
        );
        assert!(
            more.reasons[1].contains("33 sections"),
            "{:?}",
            more.reasons
        );
        assert!(
            more.reasons[2].contains("duration_ms"),
            "{:?}",
            more.reasons
        );
        assert!(
            more.reasons[3].contains("stats: allocated > reserved"),
            "{:?}",
            more.reasons
        );
        assert!(
            more.reasons[4].contains("device_used"),
            "{:?}",
            more.reasons
        );
    }

    #[test]
    fn what_the_coordinator_would_skip_is_skipped_here_with_its_reason() {
        let report = check(json!([
            {"type": "event", "t": T, "name": "eval\nstart"},
            {"type": "step", "t": T, "step": 1, "duration_ms": 90_000_000.0},
            {"type": "alloc", "t": T, "allocated": 1, "reserved": 2, "inactive_split": 3},
        ]))
        .unwrap();
        assert_eq!((report.records.len(), report.skipped), (0, 3));
        assert_eq!(
            report.reasons,
            [
                "record 0: name holds control characters",
                "record 1: duration_ms 90000000 ms is not a plausible duration (0 to one day)",
                "record 2: inactive_split > reserved (3 > 2)",
            ]
        );
    }

    #[test]
    fn step_clocks() {
        let step = |clock: Option<Value>| {
            let mut s = json!({"type": "step", "t": T, "step": 1, "duration_ms": 2.5,
                               "sections": {"forward": 1.5}});
            if let Some(clock) = clock {
                s["clock"] = clock;
            }
            s
        };
        let accepted = check(json!([
            step(Some(json!("cuda"))),
            step(Some(json!("cpu"))),
            step(None),
            step(Some(Value::Null)),
        ]))
        .unwrap();
        assert_eq!(
            (accepted.records.len(), accepted.skipped),
            (4, 0),
            "{:?}",
            accepted.reasons
        );
        let HookRecord::Step(s) = &accepted.records[0] else {
            panic!()
        };
        assert_eq!(
            (s.step, s.duration_ms, &s.sections[..]),
            (1, 2.5, &[("forward".to_owned(), 1.5)][..])
        );
        let refused = check(json!([
            step(Some(json!("gpu"))),
            step(Some(json!("CUDA"))),
            step(Some(json!(""))),
            step(Some(json!(1))),
            step(Some(json!({"kind": "cuda"}))),
        ]))
        .unwrap();
        assert_eq!((refused.records.len(), refused.skipped), (0, 5));
        assert_eq!(
            refused.reasons,
            [
                r#"record 0: clock must be "cuda" or "cpu", not "gpu""#,
                r#"record 1: clock must be "cuda" or "cpu", not "CUDA""#,
                r#"record 2: clock must be "cuda" or "cpu", not """#,
                r#"record 3: clock must be "cuda" or "cpu", not 1"#,
                r#"record 4: clock must be "cuda" or "cpu", not an object"#,
            ]
        );
    }

    #[test]
    fn a_step_names_a_peer_group_no_higher_than_its_rank() {
        // The session is rank 3.
        let step = |group: Value| json!({"type": "step", "t": T, "step": 1, "duration_ms": 2.5, "group": group});
        let accepted = check(json!([step(json!(0)), step(json!(3)), step(Value::Null)])).unwrap();
        let groups: Vec<Option<u32>> = accepted
            .records
            .iter()
            .map(|r| match r {
                HookRecord::Step(s) => s.group,
                _ => panic!("{r:?}"),
            })
            .collect();
        assert_eq!(groups, [Some(0), Some(3), None]);
        let refused = check(json!([step(json!(4)), step(json!(-1)), step(json!("0"))])).unwrap();
        assert_eq!(refused.records.len(), 0);
        assert_eq!(
            refused.reasons,
            [
                "record 0: group 4 is above the rank 3: a group is the lowest rank of its ranks",
                "record 1: group must be a non-negative integer, not -1",
                r#"record 2: group must be a non-negative integer, not "0""#,
            ]
        );
    }

    #[test]
    fn a_step_lists_its_collectives_one_by_one_checked() {
        let step = |list: Value| json!({"type": "step", "t": T, "step": 1, "duration_ms": 30.0, "collectives": list});
        let accepted = check(json!([
            step(json!([["1", 41, "all_gather_into_tensor", 2.5, 9.0, 6.5]])),
            step(Value::Null),
        ]))
        .unwrap();
        let lists: Vec<Vec<CollectiveArrival>> = accepted
            .records
            .iter()
            .map(|r| match r {
                HookRecord::Step(s) => s.collectives.clone(),
                _ => panic!("{r:?}"),
            })
            .collect();
        let gathered = CollectiveArrival {
            group: "1".into(),
            seq: 41,
            op: "all_gather_into_tensor".into(),
            entered_ms: 2.5,
            left_ms: 9.0,
            wait_ms: 6.5,
        };
        assert_eq!(lists, [vec![gathered], vec![]]);
        let many: Vec<Value> = (1..=33)
            .map(|n| json!(["0", n, "all_reduce", 1.0, 2.0, 1.0]))
            .collect();
        let refused = check(json!([
            step(json!({"0": 1.0})),
            step(json!([["0", 1, "all_reduce", 1.0, 2.0]])),
            step(json!([["0", -4, "all_reduce", 1.0, 2.0, 1.0]])),
            step(json!([["0", 4, "all_reduce", 3.0, 2.0, 0.0]])),
            step(Value::Array(many)),
        ]))
        .unwrap();
        assert_eq!((refused.records.len(), refused.skipped), (0, 5));
        assert_eq!(
            refused.reasons,
            [
                "record 0: collectives must be an array, not an object",
                "record 1: each of collectives must be [group, seq, op, entered_ms, left_ms, wait_ms], not an array",
                r#"record 2: the number of a collective of process group "0" must be a count, not -4"#,
                r#"record 3: collective #4 of process group "0" was left (2 ms) before it was entered (3 ms)"#,
                "record 4: 33 collectives listed; the limit is 32",
            ]
        );
    }

    #[test]
    fn a_step_carries_its_collective_waits_per_process_group_checked() {
        let step = |waits: Value| json!({"type": "step", "t": T, "step": 1, "duration_ms": 30.0, "waits": waits});
        let accepted = check(json!([
            step(json!([["0", 2, 5.16], ["1", 3, 21.5], ["p2p", 1, 3.0]])),
            step(Value::Null),
        ]))
        .unwrap();
        let waits: Vec<Vec<GroupWait>> = accepted
            .records
            .iter()
            .map(|r| match r {
                HookRecord::Step(s) => s.waits.clone(),
                _ => panic!("{r:?}"),
            })
            .collect();
        let wait = |group: &str, calls, wait_ms| GroupWait {
            group: group.into(),
            calls,
            wait_ms,
        };
        assert_eq!(
            waits,
            [
                vec![wait("0", 2, 5.16), wait("1", 3, 21.5), wait("p2p", 1, 3.0)],
                vec![]
            ]
        );
        let nine: Vec<Value> = (0..9).map(|g| json!([g.to_string(), 1, 1.0])).collect();
        let refused = check(json!([
            step(json!({"0": 1.0})),
            step(json!([["0", 1]])),
            step(json!([["0", -1, 1.0]])),
            step(json!([["0", 1, "fast"]])),
            step(json!([["0", 1, -2.0]])),
        ]))
        .unwrap();
        assert_eq!((refused.records.len(), refused.skipped), (0, 5));
        assert_eq!(
            refused.reasons,
            [
                "record 0: waits must be an array, not an object",
                "record 1: each of waits must be [group, calls, ms], not an array",
                r#"record 2: the calls of waits "0" must be a count, not -1"#,
                r#"record 3: waits "0" must be a number, not "fast""#,
                r#"record 4: wait in process group "0" -2 ms is not a plausible duration (0 to one day)"#,
            ]
        );
        let refused = check(json!([
            step(json!([["1", 1, 1.0], ["1", 2, 1.0]])),
            step(Value::Array(nine)),
        ]))
        .unwrap();
        assert_eq!(
            refused.reasons,
            [
                r#"record 0: process group "1" is named twice in waits"#,
                "record 1: 9 process groups in waits; the limit is 8",
            ]
        );
    }

    #[test]
    fn records_for_another_job_refuse_the_whole_report() {
        let mut other = alloc(1, 2);
        other["job"] = json!("run-8");
        let e = check(json!([alloc(1, 2), other])).unwrap_err();
        assert!(e.contains("record 1 is for another job"), "{e}");
        assert!(e.contains("\"run-8\""), "{e}");
        let mut other_rank = alloc(1, 2);
        other_rank["rank"] = json!(4);
        assert!(check(json!([other_rank]))
            .unwrap_err()
            .contains("another job"));
        // The session's own job and rank are fine.
        let mut same = alloc(1, 2);
        same["job"] = json!("run-7");
        same["rank"] = json!(3);
        assert_eq!(check(json!([same])).unwrap().records.len(), 1);
    }

    #[test]
    fn the_report_itself_must_be_sane() {
        assert!(check_report(None, "j", 0, NOW_MS)
            .unwrap_err()
            .to_string()
            .contains("records"));
        assert!(check(json!({})).unwrap_err().contains("must be an array"));
        let too_many = Value::Array(vec![alloc(1, 2); MAX_RECORDS_PER_REPORT + 1]);
        assert!(check(too_many)
            .unwrap_err()
            .contains("at most 1024 records"));
        let most = Value::Array(vec![alloc(1, 2); MAX_RECORDS_PER_REPORT]);
        assert_eq!(check(most).unwrap().records.len(), MAX_RECORDS_PER_REPORT);
    }

    #[test]
    fn long_values_are_cut_in_reasons() {
        let report = check(json!([{"type": "é".repeat(100), "t": T}])).unwrap();
        assert!(report.reasons[0].len() < 120, "{}", report.reasons[0]);
        assert!(report.reasons[0].ends_with("...: alloc, step, event, snapshot or stall"));
    }
}
