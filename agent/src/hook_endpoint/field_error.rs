//! Why a field of a client's JSON cannot be read: missing, of the wrong
//! type, out of its range or too long. Every reader of the hook protocol
//! (requests, records, stall reports) words these the same way; the text
//! goes back to the hook in its answer, so the values in it are already
//! cut short ([`super::fields::shown`]).

use thiserror::Error;

/// A field that cannot be read.
#[derive(Debug, Clone, PartialEq, Error)]
pub(crate) enum FieldError {
    /// The field is absent.
    #[error("missing field {key}")]
    Missing {
        /// The field's name (or where it is, e.g. `section "fwd"`).
        key: String,
    },
    /// The field holds a value of another type or outside its range.
    #[error("{key} must be {want}, not {got}")]
    Type {
        /// The field's name.
        key: String,
        /// What it takes, e.g. `a string`, `a non-negative integer`.
        want: &'static str,
        /// What it holds, shown short.
        got: String,
    },
    /// The field is a number that is not a value of its kind.
    #[error("{key} {value} is not {what}")]
    NotA {
        /// The field's name.
        key: String,
        /// Its value.
        value: f64,
        /// What it should be, e.g. `a time`, `a duration`.
        what: &'static str,
    },
    /// The field's string is longer than its bound.
    #[error("{key} is {len} bytes; the limit is {limit}")]
    TooLong {
        /// The field's name.
        key: &'static str,
        /// Its length, bytes.
        len: usize,
        /// The most it may be, bytes.
        limit: usize,
    },
    /// A field of the object in the field `key` cannot be read.
    #[error("{key}.{inner}")]
    In {
        /// The field holding the object.
        key: &'static str,
        /// What is wrong inside it.
        inner: Box<FieldError>,
    },
}

impl FieldError {
    /// `key` is absent.
    pub(crate) fn missing(key: impl Into<String>) -> Self {
        Self::Missing { key: key.into() }
    }

    /// `key` must be `want`, and holds `got` (shown short).
    pub(crate) fn wrong(key: impl Into<String>, want: &'static str, got: String) -> Self {
        Self::Type {
            key: key.into(),
            want,
            got,
        }
    }
}
