//! The messages of Prometheus remote-write 1.0 (`prometheus.WriteRequest`
//! of `prompb/remote.proto` and `types.proto`), declared with prost's
//! derive: only the fields gpumon sends, with their tag numbers from the
//! spec. Fields a receiver may also know (metadata, exemplars, histograms)
//! are left out, which protobuf allows: an absent repeated field is empty.

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
    /// Field 1.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub value: String,
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
