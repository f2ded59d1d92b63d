//! Writing one metric family: gauges or counters over labelled rows, a
//! counter without labels, and the units they are in. The `/metrics`
//! collector and the remote-write part of it both write with these.

use std::fmt;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

pub(super) const BYTES: Option<&Unit> = Some(&Unit::Bytes);
pub(super) const SECONDS: Option<&Unit> = Some(&Unit::Seconds);

/// One gauge family; rows with `None` are left out.
pub(super) fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: impl IntoIterator<Item = (L, Option<V>)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in rows {
        if let Some(v) = v {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

/// One counter family; `name` without `_total`, which the encoder adds.
pub(super) fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, V, f64>(&v, None)?;
    }
    Ok(())
}

/// One counter without labels.
pub(super) fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, u64, f64>(&v, None)
}
