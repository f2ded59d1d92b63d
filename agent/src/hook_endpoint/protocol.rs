//! Requests and answers of the hook protocol (agent/python/PROTOCOL.md):
//! one JSON object per line in, one per line out.
//!
//! Parsing goes through `serde_json::Value` rather than derived structs so
//! that each refusal can name the field and what was wrong with it in the
//! sentence the hook shows its user, and so that unknown fields are ignored
//! (a newer hook may send more). Every string that comes back in an answer
//! is cut short (see [`super::fields::shown`]).

use gpumon_core::limits::MAX_NAME_BYTES;
use gpumon_proto::ActionOutcome;
use serde_json::{json, Map, Value};

use super::field_error::FieldError;
use super::fields::{cut, kind_of, opt_bytes, shown, NON_NEGATIVE};
use super::hub::{AckReport, HookDevice, Registration, MAX_ACK_TEXT_BYTES};
use super::protocol_error::ProtocolError;
use crate::discovery::MAX_WORLD_SIZE;

/// The hook protocol version this agent speaks.
pub const HOOK_PROTOCOL_VERSION: u64 = 1;
/// Longest line (request) accepted, bytes, without its newline: 1 MiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Longest device UUID accepted, bytes.
const MAX_UUID_BYTES: usize = 128;

/// A request's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Register,
    Report,
    Poll,
    Ack,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Register => "register",
            Op::Report => "report",
            Op::Poll => "poll",
            Op::Ack => "ack",
        }
    }
}

/// A parsed request: its operation and its whole object.
#[derive(Debug)]
pub(crate) struct Request {
    pub op: Op,
    pub body: Map<String, Value>,
}

/// Parses one line: UTF-8, a JSON object, `"v": 1`, a known `op`.
pub(crate) fn parse_request(line: &[u8]) -> Result<Request, ProtocolError> {
    let text = std::str::from_utf8(line)?;
    let value: Value = serde_json::from_str(text)?;
    let Value::Object(body) = value else {
        let got = kind_of(&value).to_owned();
        return Err(FieldError::wrong("a request", "a JSON object", got).into());
    };
    match body.get("v") {
        Some(v) if v.as_u64() == Some(HOOK_PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(ProtocolError::Version {
                got: shown(v),
                speaks: HOOK_PROTOCOL_VERSION,
            })
        }
        None => {
            return Err(ProtocolError::NoVersion {
                speaks: HOOK_PROTOCOL_VERSION,
            })
        }
    }
    let op = match body.get("op") {
        Some(Value::String(op)) => match op.as_str() {
            "register" => Op::Register,
            "report" => Op::Report,
            "poll" => Op::Poll,
            "ack" => Op::Ack,
            _ => {
                return Err(ProtocolError::UnknownOp {
                    got: shown(&Value::String(op.clone())),
                })
            }
        },
        Some(other) => return Err(FieldError::wrong("op", "a string", shown(other)).into()),
        None => return Err(FieldError::missing("op").into()),
    };
    Ok(Request { op, body })
}

/// The fields of a `register`.
pub(crate) fn parse_registration(body: &Map<String, Value>) -> Result<Registration, ProtocolError> {
    let pid = u32_field(body, "pid")?;
    let job = match body.get("job") {
        Some(Value::String(job)) => job.clone(),
        Some(other) => return Err(FieldError::wrong("job", "a string", shown(other)).into()),
        None => return Err(FieldError::missing("job").into()),
    };
    if job.is_empty() {
        return Err(ProtocolError::EmptyJob);
    }
    if job.len() > MAX_NAME_BYTES {
        let (len, limit) = (job.len(), MAX_NAME_BYTES);
        return Err(FieldError::TooLong {
            key: "job",
            len,
            limit,
        }
        .into());
    }
    let rank = u32_field(body, "rank")?;
    let local_rank = u32_field(body, "local_rank")?;
    let world_size = u32_field(body, "world_size")?;
    if world_size == 0 || world_size > MAX_WORLD_SIZE {
        return Err(ProtocolError::WorldSize {
            world_size,
            max: MAX_WORLD_SIZE,
        });
    }
    for (key, rank) in [("rank", rank), ("local_rank", local_rank)] {
        if rank >= world_size {
            return Err(ProtocolError::RankOutside {
                key,
                rank,
                world_size,
            });
        }
    }
    if let Some(v) = body.get("hook_version") {
        if !(v.is_string() || v.is_null()) {
            return Err(FieldError::wrong("hook_version", "a string", shown(v)).into());
        }
    }
    let device = match body.get("device") {
        None | Some(Value::Null) => None,
        Some(Value::Object(d)) => Some(parse_device(d).map_err(|e| FieldError::In {
            key: "device",
            inner: Box::new(e),
        })?),
        Some(other) => {
            let got = kind_of(other).to_owned();
            return Err(FieldError::wrong("device", "an object or null", got).into());
        }
    };
    Ok(Registration {
        pid,
        job,
        rank,
        local_rank,
        world_size,
        device,
    })
}

fn parse_device(d: &Map<String, Value>) -> Result<HookDevice, FieldError> {
    let index = u32_field(d, "index")?;
    let uuid = match d.get("uuid") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if u.is_empty() => None,
        Some(Value::String(u)) if u.len() <= MAX_UUID_BYTES => Some(u.clone()),
        Some(Value::String(u)) => {
            return Err(FieldError::TooLong {
                key: "uuid",
                len: u.len(),
                limit: MAX_UUID_BYTES,
            })
        }
        Some(other) => return Err(FieldError::wrong("uuid", "a string or null", shown(other))),
    };
    let name = match d.get("name") {
        None | Some(Value::Null) => "unknown GPU".to_owned(),
        Some(Value::String(n)) => cut(n.clone(), MAX_NAME_BYTES),
        Some(other) => return Err(FieldError::wrong("name", "a string", shown(other))),
    };
    let total_bytes = match d.get("total_bytes") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| FieldError::wrong("total_bytes", NON_NEGATIVE, shown(v)))?,
    };
    Ok(HookDevice {
        index,
        uuid,
        name,
        total_bytes,
    })
}

/// The fields of an `ack`.
pub(crate) fn parse_ack(body: &Map<String, Value>) -> Result<AckReport, ProtocolError> {
    let id = match body.get("id") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| FieldError::wrong("id", NON_NEGATIVE, shown(v)))?,
        None => return Err(FieldError::missing("id").into()),
    };
    let text = |key: &str| -> Result<Option<String>, FieldError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(cut(s.clone(), MAX_ACK_TEXT_BYTES))),
            Some(other) => Err(FieldError::wrong(key, "a string or null", shown(other))),
        }
    };
    let opt_u64 = |key: &str| opt_bytes(body, key);
    let outcome = match body.get("state").and_then(Value::as_str) {
        Some("done") => ActionOutcome::Done {
            freed_bytes: opt_u64("freed_bytes")?.ok_or(ProtocolError::NoFreedBytes)?,
            at_step: opt_u64("at_step")?,
        },
        Some("failed") => ActionOutcome::Failed {
            reason: text("detail")?.unwrap_or_else(|| "failed".to_owned()),
        },
        _ => {
            let got = body
                .get("state")
                .map_or_else(|| "nothing".to_owned(), shown);
            return Err(FieldError::wrong("state", "\"done\" or \"failed\"", got).into());
        }
    };
    Ok(AckReport {
        id,
        outcome,
        response: text("response")?,
    })
}

fn u32_field(body: &Map<String, Value>, key: &str) -> Result<u32, FieldError> {
    match body.get(key) {
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| FieldError::wrong(key, "an integer in 0..=4294967295", shown(v))),
        None => Err(FieldError::missing(key)),
    }
}

/// An `ok: true` answer with `fields`, as a line.
pub(crate) fn ok(fields: Value) -> Vec<u8> {
    let mut obj = match fields {
        Value::Object(obj) => obj,
        _ => Map::new(),
    };
    obj.insert("ok".into(), Value::Bool(true));
    line(Value::Object(obj))
}

/// An `ok: false` answer saying why, as a line.
pub(crate) fn refusal(error: &str) -> Vec<u8> {
    line(json!({"ok": false, "error": error}))
}

fn line(v: Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&v).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn requests_need_json_objects_version_1_and_a_known_op() {
        let r = parse_request(br#"{"v": 1, "op": "poll", "extra": [1]}"#).unwrap();
        assert_eq!(r.op, Op::Poll);
        let err = |line: &[u8]| parse_request(line).unwrap_err().to_string();
        assert!(err(b"\xff").contains("not UTF-8"));
        assert!(err(b"{").contains("not JSON"));
        assert!(err(b"[1]").contains("JSON object, not an array"));
        let e = err(br#"{"v": 2, "op": "poll"}"#);
        assert!(
            e.contains("version 2 is not supported") && e.contains("speaks version 1"),
            "{e}"
        );
        assert!(err(br#"{"v": "1", "op": "poll"}"#).contains("version \"1\""));
        assert!(err(br#"{"op": "poll"}"#).contains("missing field v"));
        assert!(err(br#"{"v": 1, "op": "dance"}"#).contains("unknown op \"dance\""));
        assert!(err(br#"{"v": 1}"#).contains("missing field op"));
    }

    #[test]
    fn registration_fields_are_checked() {
        let good = json!({"v": 1, "op": "register", "pid": 4242, "job": "run-7", "rank": 3,
            "local_rank": 3, "world_size": 8, "hook_version": "0.1.0",
            "device": {"index": 3, "uuid": "GPU-5c0a", "name": "H100", "total_bytes": 85520809984u64}});
        let reg = parse_registration(&body(good.clone())).unwrap();
        assert_eq!(
            (reg.pid, reg.job.as_str(), reg.rank, reg.world_size),
            (4242, "run-7", 3, 8)
        );
        let device = reg.device.unwrap();
        assert_eq!(
            (device.index, device.uuid.as_deref()),
            (3, Some("GPU-5c0a"))
        );
        assert_eq!(device.total_bytes, 85_520_809_984);

        let with = |key: &str, v: Value| {
            let mut b = body(good.clone());
            b.insert(key.into(), v);
            parse_registration(&b).unwrap_err().to_string()
        };
        assert!(with("pid", json!(-1)).contains("pid must be an integer"));
        assert!(with("job", json!("")).contains("job is empty"));
        assert!(with("job", json!("j".repeat(257))).contains("257 bytes"));
        assert!(with("job", json!(7)).contains("job must be a string"));
        assert!(with("world_size", json!(0)).contains("world_size 0"));
        assert!(with("rank", json!(8)).contains("rank 8 is not below world_size 8"));
        assert!(with("local_rank", json!(9)).contains("local_rank 9"));
        assert!(with("device", json!(3)).contains("device must be an object or null"));
        assert!(with("device", json!({"uuid": "x"})).contains("device.missing field index"));
        let mut b = body(good.clone());
        b.remove("rank");
        assert!(parse_registration(&b)
            .unwrap_err()
            .to_string()
            .contains("missing field rank"));
        let mut b = body(good);
        b.insert("device".into(), json!({"index": 0, "uuid": null}));
        let device = parse_registration(&b).unwrap().device.unwrap();
        assert_eq!(
            (device.uuid, device.name.as_str(), device.total_bytes),
            (None, "unknown GPU", 0)
        );
    }

    #[test]
    fn acks_are_done_or_failed() {
        let ack = parse_ack(&body(json!({"id": 12, "state": "done", "freed_bytes": 5,
            "at_step": 130, "response": "batch size 32 -> 24", "detail": null})))
        .unwrap();
        assert_eq!(
            ack.outcome,
            ActionOutcome::Done {
                freed_bytes: 5,
                at_step: Some(130)
            }
        );
        assert_eq!(ack.response.as_deref(), Some("batch size 32 -> 24"));
        let failed = parse_ack(&body(
            json!({"id": 1, "state": "failed", "detail": "no CUDA"}),
        ))
        .unwrap();
        assert_eq!(
            failed.outcome,
            ActionOutcome::Failed {
                reason: "no CUDA".into()
            }
        );
        let bare = parse_ack(&body(json!({"id": 1, "state": "failed"}))).unwrap();
        assert_eq!(
            bare.outcome,
            ActionOutcome::Failed {
                reason: "failed".into()
            }
        );
        let err = |v: Value| parse_ack(&body(v)).unwrap_err().to_string();
        assert!(err(json!({"id": 1, "state": "done"})).contains("freed_bytes is required"));
        assert!(err(json!({"id": 1, "state": "maybe"})).contains("\"maybe\""));
        assert!(err(json!({"state": "done"})).contains("missing field id"));
        assert!(err(json!({"id": 1, "state": "failed", "detail": 3})).contains("detail must be"));
    }

    #[test]
    fn answers_are_single_lines() {
        let line = ok(json!({"session": 1}));
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v, json!({"ok": true, "session": 1}));
        let r = refusal("register first\nplease");
        assert_eq!(r.iter().filter(|&&b| b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&r).unwrap();
        assert_eq!(v["ok"], json!(false));
    }
}
