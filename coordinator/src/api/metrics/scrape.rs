//! What one scrape reports, copied out of the replicated state while its
//! read lock is held (briefly), so encoding never holds up apply.
//!
//! Which replica reports what: the cluster series (GPUs, ranks, jobs,
//! alerts, actions, agents, the replicated counters) are the same on every
//! replica that applied the same log, so only the replica that leads when
//! scraped reports them ([`ClusterRows`]); every replica reports its own
//! series ([`LocalRows`]: Raft, refused pushes and requests, notifications,
//! state copies, build). A follower's scrape never takes the state lock.
//!
//! Only live jobs and ranks are copied: a job's series disappear from the
//! next scrape once its last rank ends. Times are data times: "seconds until
//! OOM" counts from the engine's newest observation and "agent up" from the
//! cluster's newest window end, never from this replica's clock, so every
//! replica that applied the same log reports the same values.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;

use gpumon_core::actions::ActionState;
use gpumon_core::engine::summary::RankSummary;
use gpumon_core::engine::{AlertKind, Risk, Severity};
use gpumon_core::hook_records::RankSteps;
use gpumon_core::settings::{Settings, KEYS};
use gpumon_core::transition::Replicated;
use gpumon_proto::api::ClusterView;
use gpumon_proto::api::OomForecast;
use gpumon_proto::PodPlacement;
use openraft::ServerState;

use crate::api::raft_status::{lag, peers_matched};
use crate::api::{ApiContext, RankSeries};
use crate::notify::NotifyCounts;
use crate::raft::copy_times::{CopyFor, CopyStats};
use crate::remote_write::RemoteWriteCounts;

/// Most ranks given series in one scrape (the first, by job then rank);
/// the rest are counted in `gpumon_metrics_ranks_omitted`.
pub const MAX_RANK_SERIES: usize = 16_384;
/// An agent is up while its newest window ended at most this long before the
/// cluster's newest one (data time), ms.
pub use gpumon_core::cluster::AGENT_STALE_MS;
/// Most step sections given a series per rank, by name: all the state keeps.
pub use gpumon_core::hook_records::MAX_SECTIONS_PER_RANK;

/// Every severity, in rising order.
pub const SEVERITIES: [Severity; 3] = [Severity::Warning, Severity::High, Severity::Critical];

/// A severity's label value.
pub fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "warning",
        Severity::High => "high",
        Severity::Critical => "critical",
    }
}

/// A risk level as a number: 0 none, 1 low, 2 warning, 3 high, 4 critical.
pub fn risk_level(r: Risk) -> u64 {
    match r {
        Risk::None => 0,
        Risk::Low => 1,
        Risk::Warning => 2,
        Risk::High => 3,
        Risk::Critical => 4,
    }
}

/// One GPU.
#[derive(Debug)]
pub struct GpuRow {
    pub node: String,
    pub gpu: String,
    pub uuid: String,
    pub model: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// 0..1.
    pub utilization: Option<f64>,
    pub risk: u64,
    pub oom_in_s: Option<f64>,
}

/// One node's host RAM, from its agent's newest push.
#[derive(Debug)]
pub struct HostRow {
    pub node: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// One live rank.
#[derive(Debug)]
pub struct RankRow {
    pub job: String,
    pub rank: String,
    pub node: String,
    pub gpu: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub allocated_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    pub outside_allocator_bytes: Option<u64>,
    /// The limit its memory meets first, when its hook reports one.
    pub memory_limit_bytes: Option<u64>,
    pub step_s: Option<f64>,
    pub step_mean_s: Option<f64>,
    /// Mean seconds per section, by name.
    pub sections: Vec<(String, f64)>,
    pub risk: u64,
    pub oom_in_s: Option<f64>,
    pub slowdown: Option<f64>,
    pub imbalance_excess_bytes: Option<f64>,
    pub leak_bytes_per_s: Option<f64>,
    /// leak, fragmentation, imbalance, straggler.
    pub flags: [bool; 4],
    /// No agent on the rank's node is up (data time): its figures are the
    /// last ones reported.
    pub lost: bool,
    /// The Kubernetes pod and container of the rank's process, when known.
    pub placement: Option<PodPlacement>,
}

/// Flag names, in the order of [`RankRow::flags`].
pub const FLAGS: [&str; 4] = ["leak", "fragmentation", "imbalance", "straggler"];

impl RankRow {
    /// The labels every per-rank series carries.
    pub fn labels(&self) -> [(&'static str, &str); 4] {
        [
            ("job", &self.job),
            ("rank", &self.rank),
            ("node", &self.node),
            ("gpu", &self.gpu),
        ]
    }
}

/// One live job.
#[derive(Debug)]
pub struct JobRow {
    pub job: String,
    pub live_ranks: u64,
    pub world_size: u64,
    pub risk: Option<u64>,
    pub oom_in_s: Option<f64>,
}

/// One agent.
#[derive(Debug)]
pub struct AgentRow {
    pub agent: String,
    pub node: String,
    pub last_seen_s: f64,
    pub up: bool,
}

/// One active alert episode: its kind, its severity now, whom it is about
/// (where known) and when it first fired.
#[derive(Debug)]
pub struct AlertRow {
    pub kind: AlertKind,
    pub severity: Severity,
    pub job: Option<String>,
    pub rank: Option<String>,
    pub node: Option<String>,
    pub gpu: Option<String>,
    /// When the episode first fired, seconds since the epoch (data time).
    pub started_s: f64,
}

impl AlertRow {
    /// `kind`, `severity`, then `job`, `rank`, `node`, `gpu` where known.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let mut l = vec![
            ("kind", self.kind.as_str().to_owned()),
            ("severity", severity_name(self.severity).to_owned()),
        ];
        for (k, v) in [
            ("job", &self.job),
            ("rank", &self.rank),
            ("node", &self.node),
            ("gpu", &self.gpu),
        ] {
            if let Some(v) = v {
                l.push((k, v.clone()));
            }
        }
        l
    }
}

/// This replica's Raft figures.
#[derive(Debug)]
pub struct RaftRow {
    pub id: u64,
    pub term: u64,
    pub leader: Option<u64>,
    pub is_leader: bool,
    pub last_log_index: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub apply_lag: u64,
    pub voters: u64,
    pub learners: u64,
    /// Entries each peer trails this leader's log by (leader only).
    pub replication_lag: Vec<(u64, u64)>,
}

/// Everything one scrape reports.
#[derive(Debug)]
pub struct Scrape {
    /// This replica's own series, served by every replica.
    pub local: LocalRows,
    /// The replicated cluster series: on the leader only.
    pub cluster: Option<ClusterRows>,
}

/// The cluster series, the same on every replica that applied the same log.
#[derive(Debug)]
pub struct ClusterRows {
    pub gpus: Vec<GpuRow>,
    pub hosts: Vec<HostRow>,
    pub ranks: Vec<RankRow>,
    pub ranks_omitted: u64,
    pub jobs: Vec<JobRow>,
    pub alerts_firing: BTreeMap<(AlertKind, Severity), u64>,
    /// Every active episode (bounded by the alert book).
    pub alerts: Vec<AlertRow>,
    pub actions: BTreeMap<ActionState, u64>,
    pub agents: Vec<AgentRow>,
    /// Replicated ingest counters.
    pub batches_applied: u64,
    pub batches_duplicate: u64,
    pub windows_applied: u64,
    pub windows_skipped: u64,
    pub hook_records_applied: u64,
    pub hook_records_skipped: u64,
    /// Engine observations older than its window (still used).
    pub observations_late: u64,
    /// Engine observations ignored, by reason.
    pub observations_ignored: [(&'static str, u64); 2],
    /// Newest window end applied, seconds since the epoch (0: none).
    pub data_time_s: f64,
    /// The numeric live settings in effect (see [`setting_rows`]).
    pub settings: Vec<SettingRow>,
}

/// One numeric live setting in effect: cluster-wide (`job` empty) or a
/// job's own.
#[derive(Debug)]
pub struct SettingRow {
    pub key: &'static str,
    pub job: String,
    /// `config`, `cluster` or `job`: where the value comes from.
    pub source: &'static str,
    pub value: f64,
}

/// Every numeric live key's cluster-wide value, and each job's overrides.
fn setting_rows(settings: &Settings) -> Vec<SettingRow> {
    let mut rows = Vec::new();
    for key in KEYS {
        if let Some(value) = settings.value(key, None).and_then(|v| v.number()) {
            let source = if settings.cluster_overrides().contains_key(key.name) {
                "cluster"
            } else {
                "config"
            };
            rows.push(SettingRow {
                key: key.name,
                job: String::new(),
                source,
                value,
            });
        }
        for (job, o) in settings.job_overrides() {
            if let Some(value) = o.get(key.name).and_then(|v| v.number()) {
                rows.push(SettingRow {
                    key: key.name,
                    job: job.clone(),
                    source: "job",
                    value,
                });
            }
        }
    }
    rows
}

/// This replica's own series.
#[derive(Debug)]
pub struct LocalRows {
    /// Pushes seen from two agents under one agent id.
    pub agent_id_conflicts: u64,
    /// Pushes this replica refused, by reason.
    pub pushes_rejected: [(&'static str, u64); 7],
    /// Requests the authorization layer refused, by kind of access.
    pub requests_unauthorized: [(&'static str, u64); 4],
    /// This replica's notifications, by receiver kind (counted on the leader).
    pub notifications: Vec<(&'static str, NotifyCounts)>,
    pub raft: RaftRow,
    /// How long copies of the state held its lock, for snapshots and digests.
    pub state_copies: [(&'static str, CopyStats); 2],
    /// The remote-write sender's counters, when it is on.
    pub remote_write: Option<RemoteWriteCounts>,
}

/// Seconds from `now` to a forecast's predicted OOM, never negative.
fn oom_in(f: &OomForecast, now: f64) -> Option<f64> {
    let left = f.predicted_oom_t - now;
    (left.is_finite() && now.is_finite()).then_some(left.max(0.0))
}

impl Scrape {
    /// Copies what a scrape reports out of `state`: the cluster series only
    /// while this replica leads.
    pub fn take(state: &ApiContext) -> Scrape {
        let local = LocalRows::take(state);
        let cluster = local.raft.is_leader.then(|| ClusterRows::take(state));
        Scrape { local, cluster }
    }
}

impl LocalRows {
    /// This replica's own figures; never takes the state lock.
    pub fn take(state: &ApiContext) -> LocalRows {
        let inner = &state.inner;
        let pushes_rejected = [
            ("too_large", inner.rejected.too_large.load(Relaxed)),
            ("bad_version", inner.rejected.bad_version.load(Relaxed)),
            ("malformed", inner.rejected.malformed.load(Relaxed)),
            ("busy", inner.rejected.busy.load(Relaxed)),
            ("full", inner.rejected.full.load(Relaxed)),
            ("out_of_bounds", inner.rejected.out_of_bounds.load(Relaxed)),
            ("forbidden", inner.rejected.forbidden.load(Relaxed)),
        ];
        let raft = raft_row(state);
        let notifications = inner
            .notify_stats
            .all()
            .into_iter()
            .map(|(kind, counts)| (kind.as_str(), counts))
            .collect();
        LocalRows {
            agent_id_conflicts: inner.service.agent_id_conflicts(),
            pushes_rejected,
            requests_unauthorized: inner.refused.counts(),
            notifications,
            raft,
            state_copies: [CopyFor::Snapshot, CopyFor::Digest]
                .map(|why| (why.label(), inner.state_machine.copy_times().stats(why))),
            remote_write: inner.remote_write_stats.as_ref().map(|s| s.get()),
        }
    }
}

impl ClusterRows {
    /// Copies the cluster series out of the replicated state.
    pub fn take(state: &ApiContext) -> ClusterRows {
        let applied = state.inner.state_machine.read();
        let now = applied.engine.now();
        let cluster = applied.cluster.cluster_view();
        let (gpus, hosts) = gpu_and_host_rows(&applied, now);
        let agents = agent_rows(&cluster);
        // A rank is lost while no agent on its node is up.
        let nodes_up: BTreeSet<String> = agents
            .iter()
            .filter(|a| a.up)
            .map(|a| a.node.clone())
            .collect();
        let live = LiveJobRows::take(
            &applied,
            state.inner.rank_series,
            cluster.live_ranks,
            &nodes_up,
            now,
        );
        let (alerts_firing, alerts) = alert_rows(&applied);

        let engine_counters = applied.engine.counters();
        let hook = applied.hook.counters();
        ClusterRows {
            gpus,
            hosts,
            ranks: live.ranks,
            ranks_omitted: live.ranks_omitted,
            jobs: live.jobs,
            alerts_firing,
            alerts,
            actions: applied.actions.count_by_state(),
            agents,
            batches_applied: cluster.ingest.batches_applied,
            batches_duplicate: cluster.ingest.batches_duplicate,
            windows_applied: cluster.ingest.windows_applied,
            windows_skipped: cluster.ingest.windows_skipped,
            hook_records_applied: hook.records_applied,
            hook_records_skipped: hook.records_skipped,
            observations_late: engine_counters.late,
            observations_ignored: [
                ("over_limit", engine_counters.over_limit),
                ("invalid", engine_counters.invalid),
            ],
            data_time_s: cluster.now_ms as f64 / 1000.0,
            settings: setting_rows(applied.engine.settings()),
        }
    }
}

/// Every GPU of every node, with the engine's risk and forecast, and every
/// node's host RAM where its agent reports it.
fn gpu_and_host_rows(applied: &Replicated, now: f64) -> (Vec<GpuRow>, Vec<HostRow>) {
    let devices: BTreeMap<(String, u32), _> = applied
        .engine
        .devices()
        .into_iter()
        .map(|d| ((d.node.clone(), d.gpu), d))
        .collect();
    let mut gpus = Vec::new();
    let mut hosts = Vec::new();
    for node in applied.cluster.nodes_view().nodes {
        if let (Some(used_bytes), Some(total_bytes)) = (node.host_used_bytes, node.host_total_bytes)
        {
            hosts.push(HostRow {
                node: node.node.clone(),
                used_bytes,
                total_bytes,
            });
        }
        for g in node.gpus {
            let engine = devices.get(&(node.node.clone(), g.index));
            gpus.push(GpuRow {
                node: node.node.clone(),
                gpu: g.index.to_string(),
                uuid: g.uuid,
                model: g.name,
                used_bytes: g.used_bytes,
                total_bytes: g.total_bytes,
                utilization: g
                    .util_pct
                    .map(|p| f64::from(p) / 100.0)
                    .filter(|u| u.is_finite()),
                risk: engine.map_or(0, |d| risk_level(d.risk)),
                oom_in_s: engine
                    .and_then(|d| d.forecast.as_ref())
                    .and_then(|f| oom_in(f, now)),
            });
        }
    }
    (gpus, hosts)
}

/// Every agent, up while its newest window is recent in data time.
fn agent_rows(cluster: &ClusterView) -> Vec<AgentRow> {
    cluster
        .agents
        .iter()
        .map(|a| AgentRow {
            agent: a.agent_id.clone(),
            node: a.node.clone(),
            last_seen_s: a.last_seen_ms as f64 / 1000.0,
            up: cluster.now_ms.saturating_sub(a.last_seen_ms) <= AGENT_STALE_MS,
        })
        .collect()
}

/// The live jobs' rows and their live ranks' rows, as many of the ranks as
/// the rank-series policy and [`MAX_RANK_SERIES`] let through.
struct LiveJobRows {
    jobs: Vec<JobRow>,
    ranks: Vec<RankRow>,
    ranks_omitted: u64,
}

impl LiveJobRows {
    fn take(
        applied: &Replicated,
        policy: RankSeries,
        live_ranks: usize,
        nodes_up: &BTreeSet<String>,
        now: f64,
    ) -> Self {
        let alerting: BTreeSet<(&str, u32)> = applied
            .engine
            .alert_book()
            .active()
            .filter_map(|a| Some((a.job.as_deref()?, a.rank?)))
            .collect();
        let mut ranks = Vec::new();
        let mut ranks_omitted = 0u64;
        let mut jobs = Vec::new();
        for job in applied
            .cluster
            .jobs_view()
            .jobs
            .into_iter()
            .filter(|j| j.live)
        {
            let summary = applied.engine.job(&job.job);
            let by_rank: BTreeMap<u32, &RankSummary> = summary
                .iter()
                .flat_map(|s| s.ranks.iter())
                .map(|r| (r.rank, r))
                .collect();
            let steps = applied.steps.job(&job.job);
            let forecast = summary.as_ref().and_then(|s| s.forecast.as_ref());
            let live: Vec<_> = job.ranks.iter().filter(|r| r.ended_ms.is_none()).collect();
            jobs.push(JobRow {
                job: job.job.clone(),
                live_ranks: live.len() as u64,
                world_size: u64::from(job.world_size),
                risk: Some(forecast.map_or(0, |f| risk_level(f.risk_level))),
                oom_in_s: forecast.and_then(|f| oom_in(&f.forecast, now)),
            });
            for r in live {
                let alerts = alerting.contains(&(job.job.as_str(), r.rank));
                if ranks.len() >= MAX_RANK_SERIES || !policy.exports(live_ranks, alerts) {
                    ranks_omitted += 1;
                    continue;
                }
                let engine = by_rank.get(&r.rank).copied();
                let step = steps.and_then(|s| s.get(&r.rank));
                let mut row = rank_row(&job.job, r, engine, step, now);
                row.lost = !nodes_up.contains(&row.node);
                ranks.push(row);
            }
        }
        LiveJobRows {
            jobs,
            ranks,
            ranks_omitted,
        }
    }
}

/// The active alerts, one row each, and how many fire of every kind and
/// severity (zeros included).
fn alert_rows(applied: &Replicated) -> (BTreeMap<(AlertKind, Severity), u64>, Vec<AlertRow>) {
    let mut alerts_firing: BTreeMap<(AlertKind, Severity), u64> = AlertKind::ALL
        .iter()
        .flat_map(|k| SEVERITIES.iter().map(move |s| ((*k, *s), 0)))
        .collect();
    let mut alerts = Vec::new();
    for a in applied.engine.alert_book().active() {
        *alerts_firing.entry((a.kind, a.severity)).or_default() += 1;
        alerts.push(AlertRow {
            kind: a.kind,
            severity: a.severity,
            job: a.job.clone(),
            rank: a.rank.map(|r| r.to_string()),
            node: a.node.clone(),
            gpu: a.gpu.map(|g| g.to_string()),
            started_s: a.t,
        });
    }
    (alerts_firing, alerts)
}

fn rank_row(
    job: &str,
    r: &gpumon_proto::api::RankView,
    engine: Option<&RankSummary>,
    step: Option<&RankSteps>,
    now: f64,
) -> RankRow {
    let secs = |ms: f64| (ms.is_finite() && ms >= 0.0).then_some(ms / 1000.0);
    RankRow {
        job: job.to_owned(),
        rank: r.rank.to_string(),
        node: r.node.clone(),
        gpu: r.gpu.to_string(),
        used_bytes: r.used_bytes,
        total_bytes: r.total_bytes,
        allocated_bytes: engine.and_then(|e| e.allocated_bytes),
        reserved_bytes: engine.and_then(|e| e.reserved_bytes),
        outside_allocator_bytes: engine.and_then(|e| e.outside_allocator_bytes),
        memory_limit_bytes: engine
            .and_then(|e| e.memory_limit.as_ref())
            .map(|l| l.limit_bytes),
        step_s: step
            .and_then(|s| secs(s.duration_ms))
            .or_else(|| engine.and_then(|e| e.last_step_ms).and_then(secs)),
        step_mean_s: step.and_then(|s| secs(s.mean_duration_ms)),
        sections: step
            .map(|s| {
                s.sections
                    .iter()
                    .filter_map(|(name, t)| Some((name.clone(), secs(t.mean_ms)?)))
                    .take(MAX_SECTIONS_PER_RANK)
                    .collect()
            })
            .unwrap_or_default(),
        risk: engine.map_or(0, |e| risk_level(e.risk)),
        oom_in_s: engine
            .and_then(|e| e.forecast.as_ref())
            .and_then(|f| oom_in(f, now)),
        slowdown: engine.and_then(|e| e.slowdown).filter(|v| v.is_finite()),
        imbalance_excess_bytes: engine
            .and_then(|e| e.imbalance_excess_bytes)
            .filter(|v| v.is_finite()),
        leak_bytes_per_s: engine
            .and_then(|e| e.leak_bytes_per_s)
            .filter(|v| v.is_finite()),
        flags: engine.map_or([false; 4], |e| {
            [e.leak, e.fragmentation, e.imbalance, e.straggler]
        }),
        lost: false,
        placement: r.placement.clone(),
    }
}

/// The Raft figures, from openraft's metrics and the log store.
fn raft_row(state: &ApiContext) -> RaftRow {
    let inner = &state.inner;
    let m = inner.raft.metrics().borrow().clone();
    let last_log_index = m.last_log_index.unwrap_or(0);
    let commit_index = inner.committed.get().unwrap_or(0);
    let applied_index = m.last_applied.map_or(0, |l| l.index);
    let membership = m.membership_config.membership();
    let replication_lag = peers_matched(&m, inner.id)
        .map(|(id, matched)| (id, lag(Some(last_log_index), matched)))
        .collect();
    RaftRow {
        id: inner.id,
        term: m.current_term,
        leader: m.current_leader,
        is_leader: m.state == ServerState::Leader,
        last_log_index,
        commit_index,
        applied_index,
        apply_lag: commit_index.saturating_sub(applied_index),
        voters: membership.voter_ids().count() as u64,
        learners: membership.learner_ids().count() as u64,
        replication_lag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forecast(predicted_oom_t: f64) -> OomForecast {
        OomForecast {
            t: 100.0,
            predicted_oom_t,
            earliest_oom_t: predicted_oom_t,
            latest_oom_t: predicted_oom_t,
            confidence: 0.9,
            slope_bytes_per_s: 1e6,
            level_bytes: 1e9,
            margin_bytes: 1e8,
            usable_bytes: 8e10,
            risk: Risk::Warning,
        }
    }

    #[test]
    fn seconds_to_oom_count_from_data_time_and_never_go_negative() {
        assert_eq!(oom_in(&forecast(700.0), 100.0), Some(600.0));
        assert_eq!(oom_in(&forecast(50.0), 100.0), Some(0.0));
        assert_eq!(oom_in(&forecast(700.0), f64::NEG_INFINITY), None);
        assert_eq!(oom_in(&forecast(f64::NAN), 100.0), None);
    }

    #[test]
    fn risk_levels_rise_with_the_risk() {
        let levels: Vec<u64> = [
            Risk::None,
            Risk::Low,
            Risk::Warning,
            Risk::High,
            Risk::Critical,
        ]
        .into_iter()
        .map(risk_level)
        .collect();
        assert_eq!(levels, vec![0, 1, 2, 3, 4]);
    }
}
