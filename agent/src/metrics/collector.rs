//! The agent's metric vocabulary: node-level series read at scrape time.
//!
//! Every name starts with `gpumon_agent_`, so that no agent series shares a
//! name with a coordinator series (a `sum()` over both would count a GPU
//! twice); names are in base units, counters end in `_total`.
//! Per-GPU series carry `node`, `gpu`, `uuid` and `model`; per-process
//! series `node`, `gpu`, `pid` and, when the process is attributed to a
//! torchrun rank, `job` and `rank` (the scrape config needs
//! `honor_labels: true` to keep that `job`; see deploy/prometheus/).

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use gpumon_proto::{GaugeStat, GpuWindow};
use gpumon_runtime::metric_family::gauge;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::Sources;

/// One of a window's gauge statistics (utilization, SM clock, power).
type GaugeOf = fn(&GpuWindow) -> Option<GaugeStat>;

/// Reads the agent's counters on each scrape.
#[derive(Debug)]
pub(super) struct NodeCollector {
    sources: Arc<Sources>,
}

impl NodeCollector {
    pub fn new(sources: Arc<Sources>) -> Self {
        Self { sources }
    }
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, u64, f64>(&v, None)
}

impl Collector for NodeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let enc = &mut enc;
        let s = &self.sources;
        encode_gpus(s, enc)?;
        let a = &s.agent;
        counter(
            enc,
            "gpumon_agent_gpu_samples",
            "GPU samples taken",
            a.samples.load(Relaxed),
        )?;
        counter(
            enc,
            "gpumon_agent_sample_errors",
            "Sampling rounds that failed",
            a.sample_errors.load(Relaxed),
        )?;
        counter(
            enc,
            "gpumon_agent_windows_built",
            "Windows built, one per GPU per window",
            a.windows.load(Relaxed),
        )?;
        counter(
            enc,
            "gpumon_agent_window_sets_dropped",
            "Window sets dropped because the uplink was behind",
            a.window_sets_dropped.load(Relaxed),
        )?;
        encode_uplink(s, enc)?;
        encode_hook(s, enc)?;
        // A gauge named `_info`, not the OpenMetrics info type, which the
        // classic text format (and promtool) does not know.
        enc.encode_descriptor(
            "gpumon_agent_build_info",
            "The agent's build (always 1)",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[
            ("version", env!("CARGO_PKG_VERSION")),
            ("agent", s.agent_id.as_str()),
            ("node", s.node.as_str()),
        ])?
        .encode_gauge(&1u64)
    }
}

fn encode_gpus(s: &Sources, enc: &mut DescriptorEncoder) -> fmt::Result {
    let windows = s.agent.latest();
    let labels = |w: &GpuWindow| {
        [
            ("node", s.node.clone()),
            ("gpu", w.gpu.index.to_string()),
            ("uuid", w.gpu.uuid.clone()),
            ("model", w.gpu.name.clone()),
        ]
    };
    let mut m = enc.encode_descriptor(
        "gpumon_agent_gpu_memory_used",
        "GPU memory in use at the end of the newest window",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for w in &windows {
        m.encode_family(&labels(w))?
            .encode_gauge(&w.used_bytes.last)?;
    }
    let mut m = enc.encode_descriptor(
        "gpumon_agent_gpu_memory_total",
        "GPU memory capacity",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for w in &windows {
        m.encode_family(&labels(w))?
            .encode_gauge(&w.gpu.total_bytes)?;
    }
    // Window means NVML gives on some GPUs only; each in its base unit.
    let means: [(&str, &str, GaugeOf, f64); 3] = [
        (
            "gpumon_agent_gpu_utilization_ratio",
            "GPU utilization, mean over the newest window, 0 to 1",
            |w| w.util_pct,
            0.01,
        ),
        (
            "gpumon_agent_gpu_sm_clock_hertz",
            "SM clock, mean over the newest window",
            |w| w.sm_clock_mhz,
            1e6,
        ),
        (
            "gpumon_agent_gpu_power_watts",
            "Power draw, mean over the newest window",
            |w| w.power_w,
            1.0,
        ),
    ];
    for (name, help, stat, scale) in means {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for w in &windows {
            if let Some(g) = stat(w).filter(|g| g.mean.is_finite()) {
                m.encode_family(&labels(w))?
                    .encode_gauge(&(f64::from(g.mean) * scale))?;
            }
        }
    }
    let mut m = enc.encode_descriptor(
        "gpumon_agent_process_memory_used",
        "GPU memory a process holds at the end of the newest window",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for w in &windows {
        let gpu = w.gpu.index.to_string();
        for p in &w.procs {
            let pid = p.pid.to_string();
            let mut labels = vec![
                ("node", s.node.as_str().to_owned()),
                ("gpu", gpu.clone()),
                ("pid", pid),
            ];
            if let Some(r) = &p.rank {
                labels.push(("job", r.job.clone()));
                labels.push(("rank", r.rank.to_string()));
            }
            m.encode_family(&labels)?.encode_gauge(&p.used_bytes.last)?;
        }
    }
    Ok(())
}

fn encode_uplink(s: &Sources, enc: &mut DescriptorEncoder) -> fmt::Result {
    let u = &s.uplink;
    let mut m = enc.encode_descriptor(
        "gpumon_agent_pushes",
        "Push attempts by outcome: acked (committed), rejected (refused for good), failed (retried), busy (429: kept, retried after Retry-After)",
        None,
        MetricType::Counter,
    )?;
    for (outcome, n) in [
        ("acked", u.acked.load(Relaxed)),
        ("rejected", u.rejected.load(Relaxed)),
        ("failed", u.failures.load(Relaxed)),
        ("busy", u.busy.load(Relaxed)),
    ] {
        m.encode_family(&[("outcome", outcome)])?
            .encode_counter::<NoLabelSet, u64, f64>(&n, None)?;
    }
    gauge(
        enc,
        "gpumon_agent_batches_buffered",
        "Batches waiting for a coordinator to commit them",
        None,
        u.buffered.load(Relaxed),
    )?;
    counter(
        enc,
        "gpumon_agent_batches_dropped",
        "Batches dropped because the buffer was full",
        u.dropped.load(Relaxed),
    )?;
    counter(
        enc,
        "gpumon_agent_hook_records_lost",
        "Hook records lost in dropped batches or alone over max_batch_bytes",
        u.dropped_hook_records.load(Relaxed),
    )?;
    counter(
        enc,
        "gpumon_agent_action_acks_lost",
        "Action acks lost in dropped batches or alone over max_batch_bytes",
        u.dropped_acks.load(Relaxed),
    )?;
    let mut m = enc.encode_descriptor(
        "gpumon_agent_last_push_timestamp",
        "When a coordinator last committed a push, seconds since the Unix epoch",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    let last_ms = u.last_acked_ms.load(Relaxed);
    if last_ms > 0 {
        m.encode_gauge(&(last_ms as f64 / 1000.0))?;
    }
    Ok(())
}

fn encode_hook(s: &Sources, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(hub) = &s.hub else {
        return Ok(());
    };
    let h = hub.stats();
    gauge(
        enc,
        "gpumon_agent_hook_sessions",
        "Hooked training processes connected now",
        None,
        h.sessions_live,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_sessions_opened",
        "Hook sessions ever registered",
        h.sessions_opened,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_sessions_taken_back",
        "Hook sessions ended because their process registered again on a new connection",
        h.sessions_taken_back,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_records_accepted",
        "Hook records accepted",
        h.records_accepted,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_records_skipped",
        "Hook records skipped as invalid",
        h.records_skipped,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_records_dropped",
        "Accepted hook records dropped because the push queue was full",
        h.records_dropped,
    )?;
    gauge(
        enc,
        "gpumon_agent_hook_records_queued",
        "Hook records waiting for the next push",
        None,
        h.records_queued,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_requests_refused",
        "Hook requests refused",
        h.refused,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_connections_idle_closed",
        "Hook connections closed for sending nothing past their deadline",
        h.idle_closed,
    )?;
    counter(
        enc,
        "gpumon_agent_hook_tcp_peers_unknown",
        "Loopback TCP hook connections whose process the agent could not find (their claims are checked against the claimed process's environment only)",
        h.tcp_peers_unknown,
    )
}
