//! The remote-write sender's series, on every replica that has it on (the
//! leader sends; the others show what they sent while they led).

use std::fmt;

use gpumon_runtime::metric_family::gauge;
use prometheus_client::encoding::DescriptorEncoder;

use super::families::{counters, SECONDS};
use crate::remote_write::RemoteWriteCounts;

/// Encodes the sender's families.
pub fn encode(c: &RemoteWriteCounts, enc: &mut DescriptorEncoder) -> fmt::Result {
    counters(
        enc,
        "gpumon_remote_write_samples",
        "Samples of the per-GPU series by outcome: sent (accepted), dropped (queue full, take over budget, shutdown) or failed (refused by the receiver)",
        [
            ("sent", c.sent),
            ("dropped", c.dropped),
            ("failed", c.failed),
        ]
        .map(|(outcome, n)| ([("outcome", outcome)], n)),
    )?;
    counters(
        enc,
        "gpumon_remote_write_requests",
        "Remote-write requests by the receiver's status code (error: no answer)",
        c.requests
            .iter()
            .map(|(code, n)| ([("code", code.as_str())], *n)),
    )?;
    if c.last_success_ms > 0 {
        gauge(
            enc,
            "gpumon_remote_write_last_success_timestamp",
            "When a remote-write request last succeeded, seconds since the epoch",
            SECONDS,
            c.last_success_ms as f64 / 1000.0,
        )?;
    }
    gauge(
        enc,
        "gpumon_remote_write_queued_samples",
        "Samples waiting to be sent",
        None,
        c.queued as u64,
    )?;
    gauge(
        enc,
        "gpumon_remote_write_sending",
        "1 while this replica leads and takes the per-GPU series to send",
        None,
        u64::from(c.sending),
    )
}
