//! The messages of Prometheus remote-write 1.0 (`prometheus.WriteRequest`
//! of `prompb/remote.proto` and `types.proto`), declared with prost's
//! derive: only the fields gpumon sends, with their tag numbers from the
//! spec. Fields a receiver may also know (metadata, exemplars, histograms)
//! are left out, which protobuf allows: an absent repeated field is empty.
//!
//! A label's name and value are `string` in the spec and `bytes` here: the
//! two are the same on the wire (length and bytes; ours are always UTF-8),
//! and [`Bytes`] lets the series of one GPU share its label values instead
//! of copying them, which is most of the cost of a take at scale.

use prost::bytes::Bytes;

/// `prometheus.WriteRequest`: the body of one request, before snappy.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: one label set and its samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Field 1: sorted by name, `__name__` first.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Field 2.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Label {
    /// Field 1, UTF-8.
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    /// Field 2, UTF-8.
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

impl Label {
    /// A label whose name is known at compile time.
    pub fn new(name: &'static str, value: impl Into<Bytes>) -> Self {
        Self {
            name: Bytes::from_static(name.as_bytes()),
            value: value.into(),
        }
    }

    /// The name as text (lossy only for bytes that are not UTF-8, which
    /// the sender never makes).
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.name)
    }

    /// The value as text (lossy only for bytes that are not UTF-8).
    pub fn value_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Field 1.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Field 2: milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}
