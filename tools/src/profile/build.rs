//! Builds the [`ProfileReport`] from the engine, what the profile kept
//! beside it and the host's samples.

use std::collections::BTreeMap;

use gpumon_core::engine::summary::RankSummary;
use gpumon_core::engine::{Alert, Risk};
use gpumon_core::hook_records::named_snapshot;

use super::embedded::Embedded;
use super::observed::RankSeries;
use super::recommend::recommendations;
use super::report::{
    ExitInfo, GpuReport, HostReport, JobReport, Levels, ProfileReport, RankReport, Summary,
    PROFILE_VERSION,
};
use super::series::PeakMean;
use super::series::Timeline;
use super::step_verdicts;

/// The host's side of the run.
#[derive(Debug)]
pub struct HostRun {
    /// Host RAM.
    pub total: u64,
    /// RAM in use.
    pub used: PeakMean,
    /// The process tree's resident memory.
    pub rss: PeakMean,
    /// `(t, [used, rss])`.
    pub timeline: Timeline<2>,
    /// Samples taken.
    pub samples: u64,
}

/// The run's facts that are not the engine's.
#[derive(Debug)]
pub struct RunFacts {
    /// The command.
    pub command: Vec<String>,
    /// Start and end, seconds since the epoch.
    pub started_t: f64,
    /// End.
    pub ended_t: f64,
    /// How it ended.
    pub exit: ExitInfo,
    /// Levels in force.
    pub levels: Levels,
    /// Where GPU samples came from.
    pub source: String,
}

/// The report of a run.
pub fn build(engine: &Embedded, host: &HostRun, run: RunFacts) -> ProfileReport {
    let state = engine.state();
    let observed = engine.observed();
    let gpus = gpu_reports(engine);
    let (mut ranks, mut jobs) = rank_and_job_reports(engine);
    step_verdicts::add(&mut ranks, &mut jobs);
    // Every episode, the host's levels included: all the engine's.
    let mut alerts: Vec<Alert> = state.engine.alerts().cloned().collect();
    alerts.sort_by(|a, b| a.t.total_cmp(&b.t).then(a.id.cmp(&b.id)));
    let mut report = ProfileReport {
        gpumon_profile: PROFILE_VERSION,
        command: run.command,
        started_t: run.started_t,
        ended_t: run.ended_t,
        exit: run.exit,
        source: run.source,
        levels: run.levels,
        host: host_report(host),
        gpus,
        ranks,
        jobs,
        marks: observed.marks.clone(),
        allocator_snapshots: observed.allocator_snapshots.clone(),
        alerts,
        recommendations: Vec::new(),
        summary: Summary {
            windows: observed.windows,
            hook_records: observed.hook_records,
            windows_skipped: state.cluster.counters().windows_skipped,
            hook_records_skipped: state.hook.counters().records_skipped,
            host_samples: host.samples,
            marks_dropped: observed.marks_dropped,
        },
        snapshots: BTreeMap::new(),
        actions: state.actions.entries().map(Into::into).collect(),
    };
    for job in report.jobs.keys() {
        if let Some(sets) = state.hook.snapshots().job(job) {
            let named = sets.iter().map(|(n, s)| named_snapshot(n, s)).collect();
            report.snapshots.insert(job.clone(), named);
        }
    }
    report.recommendations = recommendations(&report);
    report
}

/// Every GPU the profile saw on this node: its samples, with the engine's
/// utilization, risk and forecast.
fn gpu_reports(engine: &Embedded) -> Vec<GpuReport> {
    let devices: BTreeMap<u32, _> = engine
        .state()
        .engine
        .devices()
        .into_iter()
        .filter(|d| d.node == engine.node())
        .map(|d| (d.gpu, d))
        .collect();
    engine
        .observed()
        .gpus
        .iter()
        .map(|(&index, g)| {
            let d = devices.get(&index);
            GpuReport {
                node: engine.node().to_owned(),
                gpu: index,
                uuid: g.info.uuid.clone(),
                name: g.info.name.clone(),
                total_bytes: g.info.total_bytes,
                peak_used_bytes: g.peak_used,
                avg_used_bytes: g.used.mean().unwrap_or(0),
                avg_util_pct: d.and_then(|d| d.avg_util_pct),
                risk: d.map_or(Risk::None, |d| d.risk),
                forecast: d.and_then(|d| d.forecast),
                timeline: g.timeline.points(),
            }
        })
        .collect()
}

/// Every job the engine knows and every rank of each, in its order; step
/// verdicts are added later.
fn rank_and_job_reports(engine: &Embedded) -> (Vec<RankReport>, BTreeMap<String, JobReport>) {
    let observed = engine.observed();
    let jobs_summary = engine.state().engine.jobs();
    let mut ranks = Vec::new();
    let mut jobs = BTreeMap::new();
    for (name, job) in &jobs_summary {
        jobs.insert(
            name.clone(),
            JobReport {
                world_size: job.world_size,
                forecast_rank: job.forecast.as_ref().map(|f| f.rank),
                forecast: job.forecast.as_ref().map(|f| f.forecast),
                step_verdict: None,
            },
        );
        for r in &job.ranks {
            let kept = observed.ranks.get(&(name.clone(), r.rank));
            ranks.push(rank_report(name, r, kept));
        }
    }
    (ranks, jobs)
}

/// One rank: the engine's summary `r` of it, and the series the profile
/// kept of it when the hook reported.
fn rank_report(job: &str, r: &RankSummary, kept: Option<&RankSeries>) -> RankReport {
    RankReport {
        job: job.to_owned(),
        rank: r.rank,
        node: r.node.clone(),
        gpu: r.gpu,
        pid: Some(r.pid).filter(|&p| p > 0),
        peak_allocated_bytes: kept.and_then(|k| k.allocated.peak()),
        avg_allocated_bytes: kept.and_then(|k| k.allocated.mean()),
        peak_reserved_bytes: kept.and_then(|k| k.reserved.peak()),
        avg_reserved_bytes: kept.and_then(|k| k.reserved.mean()),
        floor_allocated_bytes: kept.and_then(|k| k.floor_allocated),
        peak_used_bytes: r.peak_used_bytes,
        outside_allocator_bytes: r.outside_allocator_bytes,
        outside_allocator_baseline_bytes: r.outside_allocator_baseline_bytes,
        memory_limit: r.memory_limit.clone(),
        ooms: kept.map_or(0, |k| k.ooms),
        steps: kept.map_or(r.steps, |k| k.steps.max(r.steps)),
        step_ms: kept.and_then(|k| k.step_ms.quantiles()),
        sections: kept
            .map(|k| {
                k.sections
                    .iter()
                    .filter_map(|(n, v)| Some((n.clone(), v.quantiles()?)))
                    .collect()
            })
            .unwrap_or_default(),
        step_verdict: None,
        leak: r.leak,
        leak_bytes_per_s: r.leak_bytes_per_s,
        fragmentation: r.fragmentation,
        imbalance: r.imbalance,
        straggler: r.straggler,
        slowdown: r.slowdown,
        risk: r.risk,
        forecast: r.forecast,
        timeline: kept.map(|k| k.timeline.points()).unwrap_or_default(),
    }
}

/// The host's RAM and the process tree's resident memory over the run.
fn host_report(host: &HostRun) -> HostReport {
    HostReport {
        total_bytes: host.total,
        peak_used_bytes: host.used.peak().unwrap_or(0),
        avg_used_bytes: host.used.mean().unwrap_or(0),
        peak_rss_bytes: host.rss.peak().unwrap_or(0),
        avg_rss_bytes: host.rss.mean().unwrap_or(0),
        timeline: host.timeline.points(),
    }
}
