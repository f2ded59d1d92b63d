//! The coordinator's metric vocabulary: a `prometheus-client` collector that
//! encodes a [`Scrape`] taken at scrape time.
//!
//! Every name starts with `gpumon_`, is in base units (`_bytes`,
//! `_seconds`, `_ratio`), and counters end in `_total`. Per-rank series
//! carry `job`, `rank`, `node` and `gpu` labels; per-GPU series `node`,
//! `gpu`, `uuid` and `model`; per-node host RAM series `node`. A rank in Kubernetes also has
//! `gpumon_rank_info` (always 1) with its `namespace`, `pod`, `container`,
//! `uid` and `container_id`, those known: one series per exported rank, so
//! the pod labels add no series to the others and join onto them by
//! `job` and `rank`. A series whose value is unknown (no forecast,
//! no hook data) is left out rather than reported as 0.
//!
//! The cluster series come from the leader only (see [`super::scrape`]);
//! `gpumon_cluster_series_exported` says whether this answer has them.

use std::fmt;

use gpumon_runtime::metric_family::gauge;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::families::{counter, counters, gauges, BYTES, SECONDS};
use super::scrape::{severity_name, ClusterRows, LocalRows, RankRow, Scrape, FLAGS};
use crate::api::ApiContext;
use crate::notify::NotifyCounts;

/// Reads the replicated state on each scrape.
#[derive(Debug)]
pub struct StateCollector {
    state: ApiContext,
}

impl StateCollector {
    /// A collector over this replica's state.
    pub fn new(state: ApiContext) -> Self {
        Self { state }
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        encode(&Scrape::take(&self.state), &mut enc)
    }
}

fn per_rank<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    s: &ClusterRows,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: impl Fn(&RankRow) -> Option<V>,
) -> fmt::Result {
    gauges(
        enc,
        name,
        help,
        unit,
        s.ranks.iter().map(|r| (r.labels(), value(r))),
    )
}

/// Encodes every family of `s`.
pub fn encode(s: &Scrape, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauge(
        enc,
        "gpumon_cluster_series_exported",
        "1 when this answer carries the cluster series (this replica leads), 0 when it carries only this replica's own",
        None,
        u64::from(s.cluster.is_some()),
    )?;
    if let Some(c) = &s.cluster {
        encode_gpus(c, enc)?;
        encode_hosts(c, enc)?;
        encode_ranks(c, enc)?;
        encode_rank_info(c, enc)?;
        encode_jobs(c, enc)?;
        encode_alerts(c, enc)?;
        encode_settings(c, enc)?;
        encode_cluster(c, enc)?;
    }
    encode_local(&s.local, enc)?;
    encode_notifications(&s.local, enc)?;
    if let Some(rw) = &s.local.remote_write {
        super::remote_write::encode(rw, enc)?;
    }
    encode_raft(&s.local, enc)?;
    encode_state_copies(&s.local, enc)
}

fn encode_state_copies(s: &LocalRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let mut m = enc.encode_descriptor(
        "gpumon_state_copy",
        "How long the state lock was held to copy the state for a snapshot or a digest (pushes wait this long)",
        SECONDS,
        MetricType::Histogram,
    )?;
    for (why, stats) in &s.state_copies {
        m.encode_family(&[("for", *why)])?
            .encode_histogram::<NoLabelSet>(stats.sum_s, stats.count, &stats.buckets, None)?;
    }
    Ok(())
}

fn encode_gpus(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let labels = |g: &super::scrape::GpuRow| {
        [
            ("node", g.node.clone()),
            ("gpu", g.gpu.clone()),
            ("uuid", g.uuid.clone()),
            ("model", g.model.clone()),
        ]
    };
    gauges(
        enc,
        "gpumon_gpu_memory_used",
        "GPU memory in use, newest window",
        BYTES,
        s.gpus.iter().map(|g| (labels(g), Some(g.used_bytes))),
    )?;
    gauges(
        enc,
        "gpumon_gpu_memory_total",
        "GPU memory capacity",
        BYTES,
        s.gpus.iter().map(|g| (labels(g), Some(g.total_bytes))),
    )?;
    gauges(
        enc,
        "gpumon_gpu_utilization_ratio",
        "GPU utilization, newest window, 0 to 1",
        None,
        s.gpus.iter().map(|g| (labels(g), g.utilization)),
    )?;
    gauges(
        enc,
        "gpumon_gpu_oom_forecast",
        "Seconds from the newest observation to the GPU's predicted out-of-memory, while one is forecast",
        SECONDS,
        s.gpus.iter().map(|g| (labels(g), g.oom_in_s)),
    )?;
    gauges(
        enc,
        "gpumon_gpu_oom_risk",
        "GPU out-of-memory risk level: 0 none, 1 low, 2 warning, 3 high, 4 critical",
        None,
        s.gpus.iter().map(|g| (labels(g), Some(g.risk))),
    )
}

fn encode_hosts(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let node = |h: &super::scrape::HostRow| [("node", h.node.clone())];
    gauges(
        enc,
        "gpumon_node_host_memory_used",
        "Host RAM in use on the node (total less available), the highest of its agent's newest window",
        BYTES,
        s.hosts.iter().map(|h| (node(h), Some(h.used_bytes))),
    )?;
    gauges(
        enc,
        "gpumon_node_host_memory_total",
        "Host RAM of the node",
        BYTES,
        s.hosts.iter().map(|h| (node(h), Some(h.total_bytes))),
    )
}

/// Every exported rank's series: its memory, its steps, what the detectors
/// make of it; then how many live ranks were left out.
fn encode_ranks(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    encode_rank_memory(s, enc)?;
    encode_rank_steps(s, enc)?;
    encode_rank_findings(s, enc)?;
    gauge(
        enc,
        "gpumon_metrics_ranks_omitted",
        "Live ranks left out of this scrape's per-rank series (--metrics-rank-series, or over the series bound)",
        None,
        s.ranks_omitted,
    )
}

/// A rank's memory: NVML's figure and its GPU's capacity, the caching
/// allocator's, and the part outside it.
fn encode_rank_memory(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_used",
        "GPU memory the rank's process holds, newest window",
        BYTES,
        |r| Some(r.used_bytes),
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_total",
        "Capacity of the rank's GPU",
        BYTES,
        |r| Some(r.total_bytes),
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_allocated",
        "Bytes in live tensors (PyTorch allocator, with the hook)",
        BYTES,
        |r| r.allocated_bytes,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_reserved",
        "Bytes the caching allocator reserved (with the hook)",
        BYTES,
        |r| r.reserved_bytes,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_outside_allocator",
        "Bytes of the process on its GPU outside the caching allocator: NVML's figure less reserved (CUDA context, NCCL buffers, library workspaces; with the hook and NVML)",
        BYTES,
        |r| r.outside_allocator_bytes,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_memory_limit",
        "The limit the rank's memory meets first: its allocator's cap, its MIG slice or its GPU's capacity (with a hook that reports what bounds it; the OOM forecast and the memory levels use it)",
        BYTES,
        |r| r.memory_limit_bytes,
    )
}

/// A rank's step times, whole and by named section.
fn encode_rank_steps(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    per_rank(
        enc,
        s,
        "gpumon_rank_step",
        "Duration of the rank's latest training step",
        SECONDS,
        |r| r.step_s,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_step_mean",
        "Moving mean of the rank's step duration",
        SECONDS,
        |r| r.step_mean_s,
    )?;
    let mut m = enc.encode_descriptor(
        "gpumon_rank_section",
        "Moving mean duration of a named step section",
        SECONDS,
        MetricType::Gauge,
    )?;
    for r in &s.ranks {
        for (section, secs) in &r.sections {
            let [a, b, c, d] = r.labels();
            let labels = [a, b, c, d, ("section", section.as_str())];
            m.encode_family(&labels)?.encode_gauge(secs)?;
        }
    }
    Ok(())
}

/// What the detectors make of a rank: its GPU's OOM forecast and risk, its
/// straggler slowdown, imbalance, leak rate and flags, and whether it is lost.
fn encode_rank_findings(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    per_rank(
        enc,
        s,
        "gpumon_rank_oom_forecast",
        "Seconds from the newest observation to the predicted out-of-memory of the rank's GPU, while one is forecast",
        SECONDS,
        |r| r.oom_in_s,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_oom_risk",
        "Out-of-memory risk level of the rank's GPU: 0 none, 1 low, 2 warning, 3 high, 4 critical",
        None,
        |r| Some(r.risk),
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_straggler_slowdown_ratio",
        "How many times longer the rank's own work (its step sections less the wait for its peers) takes than its peers' (1: as fast)",
        None,
        |r| r.slowdown,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_imbalance_excess_bytes",
        "The rank's memory level above the job's median level (negative: below)",
        None,
        |r| r.imbalance_excess_bytes,
    )?;
    per_rank(
        enc,
        s,
        "gpumon_rank_leak_rate_bytes_per_second",
        "Growth of leaked memory, while a leak is flagged",
        None,
        |r| r.leak_bytes_per_s,
    )?;
    let mut m = enc.encode_descriptor(
        "gpumon_rank_flag",
        "1 while the detector flags the rank (leak, fragmentation, imbalance, straggler)",
        None,
        MetricType::Gauge,
    )?;
    for r in &s.ranks {
        for (flag, on) in FLAGS.iter().zip(r.flags) {
            let [a, b, c, d] = r.labels();
            let labels = [a, b, c, d, ("flag", *flag)];
            m.encode_family(&labels)?.encode_gauge(&u64::from(on))?;
        }
    }
    per_rank(
        enc,
        s,
        "gpumon_rank_lost",
        "1 while no agent on the rank's node is up (its series keep the last figures reported), else 0",
        None,
        |r| Some(u64::from(r.lost)),
    )
}

/// `gpumon_rank_info` for the exported ranks with a placement.
fn encode_rank_info(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let mut m = enc.encode_descriptor(
        "gpumon_rank_info",
        "1 for a rank in Kubernetes, labelled with the namespace, pod and container of its process (those known)",
        None,
        MetricType::Gauge,
    )?;
    for r in &s.ranks {
        let Some(p) = &r.placement else { continue };
        let placement = [
            ("namespace", &p.namespace),
            ("pod", &p.pod_name),
            ("container", &p.container_name),
            ("uid", &p.pod_uid),
            ("container_id", &p.container_id),
        ];
        let labels: Vec<(&str, &str)> = r
            .labels()
            .into_iter()
            .chain(
                placement
                    .iter()
                    .filter_map(|(name, v)| Some((*name, v.as_deref()?))),
            )
            .collect();
        m.encode_family(&labels)?.encode_gauge(&1u64)?;
    }
    Ok(())
}

fn encode_jobs(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let job = |j: &super::scrape::JobRow| [("job", j.job.clone())];
    gauges(
        enc,
        "gpumon_job_ranks",
        "Live ranks of the job",
        None,
        s.jobs.iter().map(|j| (job(j), Some(j.live_ranks))),
    )?;
    gauges(
        enc,
        "gpumon_job_world_size",
        "Ranks the job was started with",
        None,
        s.jobs.iter().map(|j| (job(j), Some(j.world_size))),
    )?;
    gauges(
        enc,
        "gpumon_job_oom_forecast",
        "Seconds from the newest observation to the job's earliest predicted out-of-memory, while one is forecast",
        SECONDS,
        s.jobs.iter().map(|j| (job(j), j.oom_in_s)),
    )?;
    gauges(
        enc,
        "gpumon_job_oom_risk",
        "Out-of-memory risk level of the job's earliest forecast: 0 none to 4 critical",
        None,
        s.jobs.iter().map(|j| (job(j), j.risk)),
    )
}

fn encode_cluster(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauges(
        enc,
        "gpumon_alerts_firing",
        "Alerts active now, by kind and severity",
        None,
        s.alerts_firing.iter().map(|((kind, sev), n)| {
            (
                [("kind", kind.as_str()), ("severity", severity_name(*sev))],
                Some(*n),
            )
        }),
    )?;
    gauges(
        enc,
        "gpumon_actions",
        "Actions on training processes kept in the book, by state",
        None,
        s.actions
            .iter()
            .map(|(state, n)| ([("state", state.name())], Some(*n))),
    )?;
    let agent =
        |a: &super::scrape::AgentRow| [("agent", a.agent.clone()), ("node", a.node.clone())];
    gauges(
        enc,
        "gpumon_cluster_agent_up",
        "1 while the agent's newest window ended within 30 s of the cluster's newest one",
        None,
        s.agents.iter().map(|a| (agent(a), Some(u64::from(a.up)))),
    )?;
    gauges(
        enc,
        "gpumon_cluster_agent_last_seen_timestamp",
        "End of the agent's newest window, seconds since the Unix epoch (agent clock)",
        SECONDS,
        s.agents.iter().map(|a| (agent(a), Some(a.last_seen_s))),
    )?;
    gauge(
        enc,
        "gpumon_data_timestamp",
        "End of the newest window applied, seconds since the Unix epoch (agent clocks)",
        SECONDS,
        s.data_time_s,
    )?;
    counter(
        enc,
        "gpumon_ingest_batches_applied",
        "Pushed batches applied",
        s.batches_applied,
    )?;
    counter(
        enc,
        "gpumon_ingest_batches_duplicate",
        "Pushed batches dropped as already applied",
        s.batches_duplicate,
    )?;
    counter(
        enc,
        "gpumon_ingest_windows_applied",
        "GPU windows applied",
        s.windows_applied,
    )?;
    counter(
        enc,
        "gpumon_ingest_windows_skipped",
        "GPU windows or fields skipped as invalid",
        s.windows_skipped,
    )?;
    counter(
        enc,
        "gpumon_hook_records_applied",
        "Hook records (allocator, step, event) applied",
        s.hook_records_applied,
    )?;
    counter(
        enc,
        "gpumon_hook_records_skipped",
        "Hook records skipped as invalid",
        s.hook_records_skipped,
    )?;
    counter(
        enc,
        "gpumon_engine_observations_late",
        "Observations more than the engine's window older than the newest one (still used)",
        s.observations_late,
    )?;
    counters(
        enc,
        "gpumon_engine_observations_ignored",
        "Observations the detection engine ignored, by reason",
        s.observations_ignored
            .iter()
            .map(|(r, n)| ([("reason", *r)], *n)),
    )
}

/// Per active alert episode: 1 with its severity now, and when it fired.
fn encode_alerts(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauges(
        enc,
        "gpumon_alert_active",
        "1 per active alert, labelled with its kind, its severity now and whom it is about",
        None,
        s.alerts.iter().map(|a| (a.labels(), Some(1u64))),
    )?;
    gauges(
        enc,
        "gpumon_alert_started_timestamp",
        "When the active alert first fired, seconds since the Unix epoch (data time)",
        SECONDS,
        s.alerts
            .iter()
            .map(|a| (a.labels(), Some(a.started_s).filter(|t| t.is_finite()))),
    )
}

/// The numeric live settings in effect (`gpumon config show`).
fn encode_settings(s: &ClusterRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauges(
        enc,
        "gpumon_setting",
        "A numeric live setting in effect, by key: cluster-wide (job=\"\") or a job's own; source is config, cluster or job",
        None,
        s.settings.iter().map(|r| {
            let labels = [("key", r.key), ("job", r.job.as_str()), ("source", r.source)];
            (labels, Some(r.value))
        }),
    )
}

/// This replica's own counters and its build.
fn encode_local(s: &LocalRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    counter(
        enc,
        "gpumon_ingest_agent_id_conflicts",
        "Pushes of an older incarnation of an agent after a newer one joined: two agents share one agent id",
        s.agent_id_conflicts,
    )?;
    counters(
        enc,
        "gpumon_ingest_pushes_rejected",
        "Pushes this replica refused before Raft, by reason",
        s.pushes_rejected
            .iter()
            .map(|(r, n)| ([("reason", *r)], *n)),
    )?;
    counters(
        enc,
        "gpumon_api_requests_unauthorized",
        "Requests this replica refused for a missing or wrong secret, by kind of access",
        s.requests_unauthorized
            .iter()
            .map(|(a, n)| ([("access", *a)], *n)),
    )?;
    // A gauge named `_info`, not the OpenMetrics info type, which the
    // classic text format (and promtool) does not know.
    gauges(
        enc,
        "gpumon_build_info",
        "The gpumon build (always 1)",
        None,
        [([("version", env!("CARGO_PKG_VERSION"))], Some(1u64))],
    )
}

fn encode_notifications(s: &LocalRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    type Pick = fn(&NotifyCounts) -> u64;
    let families: [(&str, &str, Pick); 6] = [
        ("gpumon_notifications_sent", "Notifications a receiver accepted", |c| c.sent),
        ("gpumon_notifications_failed", "Notifications that failed every attempt (tried again later)", |c| c.failed),
        ("gpumon_notification_retries", "Attempts retried after an error or timeout", |c| c.retried),
        ("gpumon_notifications_dropped", "Notifications not queued, the receiver's queue being full (due again next round)", |c| c.dropped),
        ("gpumon_notifications_recorded", "Notifications sent and recorded through Raft", |c| c.recorded),
        ("gpumon_notifications_unrecorded", "Notifications sent but not recorded, leadership being lost (the next leader may repeat them)", |c| c.unrecorded),
    ];
    for (name, help, pick) in families {
        counters(
            enc,
            name,
            help,
            s.notifications
                .iter()
                .map(|(receiver, c)| ([("receiver", *receiver)], pick(c))),
        )?;
    }
    Ok(())
}

fn encode_raft(s: &LocalRows, enc: &mut DescriptorEncoder) -> fmt::Result {
    let r = &s.raft;
    gauge(enc, "gpumon_raft_id", "This replica's Raft id", None, r.id)?;
    gauge(enc, "gpumon_raft_term", "Current Raft term", None, r.term)?;
    gauge(
        enc,
        "gpumon_raft_is_leader",
        "1 while this replica leads",
        None,
        u64::from(r.is_leader),
    )?;
    let mut m = enc.encode_descriptor(
        "gpumon_raft_leader_id",
        "Id of the leader this replica knows, while it knows one",
        None,
        MetricType::Gauge,
    )?;
    if let Some(leader) = r.leader {
        m.encode_gauge(&leader)?;
    }
    gauge(
        enc,
        "gpumon_raft_last_log_index",
        "Index of the last entry in this replica's log",
        None,
        r.last_log_index,
    )?;
    gauge(
        enc,
        "gpumon_raft_commit_index",
        "Index of the last entry known committed",
        None,
        r.commit_index,
    )?;
    gauge(
        enc,
        "gpumon_raft_applied_index",
        "Index of the last entry applied to the state",
        None,
        r.applied_index,
    )?;
    gauge(
        enc,
        "gpumon_raft_apply_lag",
        "Committed entries not applied yet",
        None,
        r.apply_lag,
    )?;
    gauge(enc, "gpumon_raft_voters", "Voting members", None, r.voters)?;
    gauge(
        enc,
        "gpumon_raft_learners",
        "Non-voting members",
        None,
        r.learners,
    )?;
    gauges(
        enc,
        "gpumon_raft_replication_lag",
        "Entries a peer's log trails the leader's (on the leader only)",
        None,
        r.replication_lag
            .iter()
            .map(|(peer, lag)| ([("peer", peer.to_string())], Some(*lag))),
    )
}
