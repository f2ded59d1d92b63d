//! Reading a client's JSON fields: non-negative integers with a reason when
//! they are not, values shown short in those reasons, and strings cut to a
//! byte bound. Hook reports, stall reports, alerts and the line protocol all
//! read their fields with these, so every reason a client gets back is
//! worded and bounded the same way.

use gpumon_core::limits::prefix_within;
use serde_json::{Map, Value};

use super::field_error::FieldError;

/// A required non-negative integer (bytes, counts, step numbers).
pub(super) fn bytes(obj: &Map<String, Value>, key: &str) -> Result<u64, FieldError> {
    opt_bytes(obj, key)?.ok_or_else(|| FieldError::missing(key))
}

/// An optional non-negative integer: absent and `null` are `None`.
pub(super) fn opt_bytes(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| FieldError::wrong(key, NON_NEGATIVE, shown(v))),
    }
}

/// What [`bytes`] and [`opt_bytes`] take, as their errors say it.
pub(super) const NON_NEGATIVE: &str = "a non-negative integer";

/// The JSON type of a value, for messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value as compact JSON, cut to a few dozen bytes: reasons go back to the
/// client and into logs, so they must stay short whatever was sent.
pub(crate) fn shown(v: &Value) -> String {
    match v {
        Value::Array(_) | Value::Object(_) => kind_of(v).to_owned(),
        Value::String(s) => shown_str(s),
        other => other.to_string(),
    }
}

pub(super) fn shown_str(s: &str) -> String {
    const MAX: usize = 40;
    if s.len() <= MAX {
        return format!("{s:?}");
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &s[..end])
}

/// `s` cut to at most `max` bytes on a char boundary.
pub(crate) fn cut(mut s: String, max: usize) -> String {
    let keep = prefix_within(&s, max).len();
    s.truncate(keep);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_respects_char_boundaries() {
        assert_eq!(cut("ééé".into(), 3), "é");
        assert_eq!(cut("abc".into(), 5), "abc");
    }
}
