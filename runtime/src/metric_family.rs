//! Metric families of one sample without labels, as both `/metrics`
//! collectors (the agent's and the coordinator's) write them with
//! `prometheus-client`.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// Writes the gauge `name` (help text `help`, in `unit` when given) with the one value `v`.
pub fn gauge<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: V,
) -> fmt::Result {
    enc.encode_descriptor(name, help, unit, MetricType::Gauge)?
        .encode_gauge(&v)
}
