//! Reading a hook's `stall` record (see `agent/python/PROTOCOL.md`): a rank
//! whose training thread has finished no step for a while, the collective
//! it waits in and the last one it entered per process group. Field by
//! field, like the other records; the bounds are the common record check's.

use gpumon_core::engine::hang::PROCESS_EXIT;
use gpumon_proto::{CollectiveWait, StallRecord};
use serde_json::{Map, Value};

use super::field_error::FieldError;
use super::fields::{bytes, opt_bytes, shown, NON_NEGATIVE};
use super::record_error::RecordError;

/// The record, stamped with the session's job and rank.
pub(super) fn read_stall(
    obj: &Map<String, Value>,
    t_ms: u64,
    job: String,
    rank: u32,
) -> Result<StallRecord, RecordError> {
    let source = match obj.get("source") {
        None | Some(Value::Null) => "none".to_owned(),
        Some(Value::String(s)) if s == PROCESS_EXIT => return Err(RecordError::AgentsSource),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(FieldError::wrong("source", "a string", shown(other)).into()),
    };
    let waiting = match obj.get("waiting") {
        None | Some(Value::Null) => None,
        Some(Value::Object(w)) => Some(wait(w)?),
        Some(other) => {
            let got = shown(other);
            return Err(FieldError::wrong("waiting", "an object or null", got).into());
        }
    };
    Ok(StallRecord {
        t_ms,
        job,
        rank,
        step: bytes(obj, "step")?,
        quiet_ms: seconds_as_ms(obj.get("quiet_s"), "quiet_s")?,
        source,
        waiting,
        entered: entered(obj.get("entered"))?,
        marker: opt_string(obj, "marker")?,
    })
}

fn wait(w: &Map<String, Value>) -> Result<CollectiveWait, FieldError> {
    Ok(CollectiveWait {
        group: string(w, "group")?,
        desc: opt_string(w, "desc")?.unwrap_or_default(),
        seq: bytes(w, "seq")?,
        op: string(w, "op")?,
        numel: opt_bytes(w, "numel")?.unwrap_or(0),
        waited_ms: seconds_as_ms(w.get("waited_s"), "waited_s")?,
        timeout_ms: match w.get("timeout_s") {
            None | Some(Value::Null) => None,
            v => Some(seconds_as_ms(v, "timeout_s")?),
        },
    })
}

/// `entered`: a list of `[group, seq]` pairs (absent or `null`: none).
fn entered(v: Option<&Value>) -> Result<Vec<(String, u64)>, FieldError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(FieldError::wrong("entered", "a list", shown(other))),
    };
    list.iter()
        .map(|pair| match pair.as_array().map(Vec::as_slice) {
            Some([Value::String(group), seq]) => seq
                .as_u64()
                .map(|seq| (group.clone(), seq))
                .ok_or_else(|| FieldError::wrong("entered: seq", NON_NEGATIVE, shown(seq))),
            _ => Err(FieldError::wrong(
                "entered: each entry",
                "[group, seq]",
                shown(pair),
            )),
        })
        .collect()
}

/// Seconds (a non-negative number) as whole ms; the record check bounds them.
fn seconds_as_ms(v: Option<&Value>, what: &str) -> Result<u64, FieldError> {
    let s = match v {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => return Err(FieldError::wrong(what, "a number", shown(other))),
        None => return Err(FieldError::missing(what)),
    };
    if !(s.is_finite() && s >= 0.0) {
        return Err(FieldError::NotA {
            key: what.to_owned(),
            value: s,
            what: "a duration",
        });
    }
    // Saturating: the record check refuses anything above 30 days.
    Ok((s * 1000.0).round().min(u64::MAX as f64) as u64)
}

fn string(obj: &Map<String, Value>, key: &str) -> Result<String, FieldError> {
    opt_string(obj, key)?.ok_or_else(|| FieldError::missing(key))
}

fn opt_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(FieldError::wrong(key, "a string", shown(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn reads_a_stall_from_the_flight_recorder() {
        let r = read_stall(
            &obj(
                json!({"type": "stall", "t": 1.0, "step": 41, "quiet_s": 20.5,
                "waiting": {"group": "0", "desc": "default_pg", "seq": 10, "op": "all_reduce",
                            "numel": 72, "waited_s": 19.25, "timeout_s": 1800.0},
                "entered": [["0", 10], ["1", 4]], "marker": null, "source": "flight_recorder"}),
            ),
            1_000,
            "j".into(),
            2,
        )
        .unwrap();
        assert_eq!(
            (r.job.as_str(), r.rank, r.step, r.quiet_ms),
            ("j", 2, 41, 20_500)
        );
        let w = r.waiting.unwrap();
        assert_eq!(
            (w.seq, w.waited_ms, w.timeout_ms),
            (10, 19_250, Some(1_800_000))
        );
        assert_eq!(r.entered, vec![("0".to_owned(), 10), ("1".to_owned(), 4)]);
    }

    #[test]
    fn refuses_what_is_not_a_stall() {
        let bad = [
            (json!({"step": 1}), "missing field quiet_s"),
            (json!({"step": 1, "quiet_s": -1}), "not a duration"),
            (
                json!({"step": 1, "quiet_s": 1, "entered": [["0"]]}),
                "[group, seq]",
            ),
            (
                json!({"step": 1, "quiet_s": 1, "entered": [["0", -2]]}),
                "non-negative",
            ),
            (
                json!({"step": 1, "quiet_s": 1, "waiting": {"group": "0", "seq": 1}}),
                "missing field op",
            ),
            (
                json!({"step": 1, "quiet_s": 1, "waiting": 3}),
                "object or null",
            ),
            (
                json!({"step": 1, "quiet_s": 1, "source": "process_exit"}),
                "a hook cannot send it",
            ),
        ];
        for (v, want) in bad {
            let err = read_stall(&obj(v.clone()), 1, "j".into(), 0)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{v}: {err}");
        }
    }
}
