//! Replay: the engine driven by a trace instead of live pushes, and the
//! report it leaves (see docs/trace-format.md, "Replaying: gpumon replay").
//!
//! The same [`Engine`] runs here and in the coordinator's state machine, so
//! a replay shows what production would have decided on the same data.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::engine::view::{DeviceSummary, JobSummary};
use crate::engine::{Alert, AlertKind, AllocObs, Engine, EngineCounters, GpuObs, RankObs};
use crate::trace::{ReadStats, RecordRef, TraceError, TraceReader, TraceRecord};

/// Report format version, in the report's `gpumon_report` field.
pub const REPORT_VERSION: u32 = 1;

/// Feeds one trace record to the engine.
pub fn feed(engine: &mut Engine, record: &TraceRecord) {
    feed_ref(engine, &RecordRef::from(record));
}

/// Feeds one borrowed trace record to the engine (the replay's hot path).
pub fn feed_ref(engine: &mut Engine, record: &RecordRef<'_>) {
    match record {
        RecordRef::Gpu(g) => engine.observe_gpu(&GpuObs {
            t: g.t,
            node: &g.node,
            gpu: g.gpu,
            uuid: &g.uuid,
            name: &g.name,
            total: g.total,
            used_low: g.used,
            used_high: g.used,
            used: g.used,
            util: g.util,
            sm_clock_mhz: g.sm_clock_mhz,
            power_w: g.power_w,
            procs: &g.procs,
        }),
        RecordRef::Rank(r) => engine.observe_rank(&RankObs {
            t: r.t,
            job: &r.job,
            rank: r.rank,
            local_rank: r.local_rank,
            world_size: r.world_size,
            node: &r.node,
            gpu: r.gpu,
            pid: r.pid,
        }),
        RecordRef::Alloc(a) => engine.observe_alloc(&AllocObs {
            t: a.t,
            job: &a.job,
            rank: a.rank,
            allocated: a.allocated,
            reserved: a.reserved,
            peak_allocated: a.peak_allocated,
            inactive_split: a.inactive_split,
            alloc_retries: a.alloc_retries,
            ooms: a.ooms,
        }),
        RecordRef::Step(s) => engine.observe_step(
            s.t,
            &s.job,
            s.rank,
            s.step,
            s.duration_ms,
            s.sections.iter().map(|(k, v)| (k.as_ref(), *v)),
        ),
        RecordRef::Event(e) => engine.observe_event(e.t, &e.job, e.rank, &e.name),
    }
}

/// Where a replay is, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Records fed so far.
    pub records: u64,
    /// Trace time reached, seconds.
    pub t: f64,
    /// Alert episodes so far.
    pub alerts: usize,
}

/// Feeds every record of `reader` to `engine`, calling `progress` every
/// `every` records. Stops at the first unreadable line.
pub fn run<R: BufRead>(
    reader: &mut TraceReader<R>,
    engine: &mut Engine,
    every: u64,
    mut progress: impl FnMut(&Progress),
) -> Result<(), TraceError> {
    let every = every.max(1);
    let mut n = 0u64;
    while let Some(record) = reader.next_ref()? {
        feed_ref(engine, &record);
        n += 1;
        if n % every == 0 {
            progress(&Progress {
                records: n,
                t: engine.now(),
                alerts: engine.alerts().len(),
            });
        }
    }
    Ok(())
}

/// The replay report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Report format version.
    pub gpumon_report: u32,
    /// Alert episodes in firing order.
    pub alerts: Vec<Alert>,
    /// Per device, keyed `node:index`.
    pub devices: BTreeMap<String, DeviceSummary>,
    /// Per job, the cross-rank view at the end of the trace.
    pub jobs: BTreeMap<String, JobSummary>,
    /// Counts.
    pub summary: Summary,
}

/// What was read, skipped and found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The trace header's `source`.
    pub source: String,
    /// Trace time of the newest record, seconds.
    pub end_t: f64,
    /// Records fed, by type.
    pub records: EngineCounters,
    /// Lines skipped by the reader: impossible values.
    pub invalid_records: u64,
    /// Records of unknown types, by type.
    pub unknown_types: BTreeMap<String, u64>,
    /// The first reasons records were skipped, with line numbers.
    pub skipped_examples: Vec<String>,
    /// Alert episodes by kind.
    pub alerts_by_kind: BTreeMap<String, u64>,
    /// Episodes beyond the alert bound, forgotten.
    pub alerts_forgotten: u64,
}

/// Builds the report of a finished replay.
pub fn report(engine: &Engine, stats: &ReadStats, source: &str) -> Report {
    let mut by_kind: BTreeMap<String, u64> = AlertKind::ALL
        .iter()
        .map(|k| (k.as_str().to_owned(), 0))
        .collect();
    for a in engine.alerts() {
        *by_kind.entry(a.kind.as_str().to_owned()).or_default() += 1;
    }
    Report {
        gpumon_report: REPORT_VERSION,
        alerts: engine.alerts().cloned().collect(),
        devices: engine
            .devices()
            .into_iter()
            .map(|d| (format!("{}:{}", d.node, d.gpu), d))
            .collect(),
        jobs: engine.jobs(),
        summary: Summary {
            source: source.to_owned(),
            end_t: if engine.now().is_finite() {
                engine.now()
            } else {
                0.0
            },
            records: engine.counters().clone(),
            invalid_records: stats.invalid,
            unknown_types: stats.unknown_types.clone(),
            skipped_examples: stats.examples.clone(),
            alerts_by_kind: by_kind,
            alerts_forgotten: engine.alert_book().forgotten(),
        },
    }
}
