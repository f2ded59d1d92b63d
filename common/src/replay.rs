//! Replay: a trace through the replica's own transition, and the report it
//! leaves (see docs/trace-format.md, "Replaying: gpumon replay").
//!
//! [`Replay`] turns each record into the command a live cluster would have
//! committed ([`TraceCommands`]) and applies it with [`Replicated::apply`],
//! the function every coordinator replica runs: the same view, validation,
//! bounds and engine, so a replay shows what production would have decided
//! on the same data.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::cluster::Limits;
use crate::engine::summary::{DeviceSummary, JobSummary};
use crate::engine::{Alert, AlertKind, EngineConfig, EngineCounters};
use crate::trace::{ReadStats, RecordRef, TraceError, TraceReader};
use crate::transition::{settings_command, Replicated, TraceCommands};

/// Report format version, in the report's `gpumon_report` field.
pub const REPORT_VERSION: u32 = 1;

/// A replay in progress: the replicated state and the trace-to-command
/// translation.
#[derive(Debug)]
pub struct Replay {
    state: Replicated,
    commands: TraceCommands,
    settings_refused: Vec<String>,
}

/// Refused settings changes a replay keeps, with their reasons.
pub const MAX_REFUSALS_KEPT: usize = 16;

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

impl Replay {
    /// A replay with the cluster's default bounds and this engine configuration.
    pub fn new(engine_config: &EngineConfig) -> Self {
        Self::with_limits(Limits::default(), engine_config)
    }

    /// A replay with these bounds (a cluster's `[limits]`) and engine
    /// configuration, to match what that cluster computed.
    pub fn with_limits(limits: Limits, engine_config: &EngineConfig) -> Self {
        Self {
            state: Replicated::new(limits, engine_config),
            commands: TraceCommands::default(),
            settings_refused: Vec::new(),
        }
    }

    /// The state so far.
    pub fn state(&self) -> &Replicated {
        &self.state
    }

    /// Feeds one record. Records are applied in pushes of several, so
    /// the last ones wait for [`Replay::finish`].
    pub fn feed(&mut self, record: &RecordRef<'_>) {
        if let Some(command) = self.commands.add(record) {
            self.state.apply(command, false);
        }
        if let RecordRef::Settings(s) = record {
            let effects = self.state.apply(settings_command(s), false);
            if let Some(reason) = effects.result.settings_refused {
                self.settings_refused.push(format!("t={}: {reason}", s.t));
                self.settings_refused.truncate(MAX_REFUSALS_KEPT);
            }
        }
    }

    /// The trace's settings changes that were refused, with why (the first
    /// [`MAX_REFUSALS_KEPT`]).
    pub fn settings_refused(&self) -> &[String] {
        &self.settings_refused
    }

    /// Applies what the last records left waiting.
    pub fn finish(&mut self) {
        if let Some(command) = self.commands.finish() {
            self.state.apply(command, false);
        }
    }

    /// Feeds every record of `reader`, calling `progress` every `every`
    /// records, then finishes. Stops at the first unreadable line.
    pub fn run<R: BufRead>(
        &mut self,
        reader: &mut TraceReader<R>,
        every: u64,
        mut progress: impl FnMut(&Progress),
    ) -> Result<(), TraceError> {
        let every = every.max(1);
        let mut n = 0u64;
        while let Some(record) = reader.next_ref()? {
            self.feed(&record);
            n += 1;
            if n % every == 0 {
                progress(&Progress {
                    records: n,
                    t: self.state.engine.now(),
                    alerts: self.state.engine.alerts().len(),
                });
            }
        }
        self.finish();
        Ok(())
    }

    /// The report of the replay so far.
    pub fn report(&self, stats: &ReadStats, source: &str) -> Report {
        report(&self.state, stats, source)
    }
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
    /// Records the trace held (invalid and unknown ones left out).
    pub records_read: u64,
    /// Observations the engine received, by type.
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
    /// Samples the cluster's own checks refused, as a replica would have.
    pub windows_skipped: u64,
    /// Allocator, step and event records the hook checks refused.
    pub hook_records_skipped: u64,
}

/// Builds the report of a finished replay.
fn report(state: &Replicated, stats: &ReadStats, source: &str) -> Report {
    let engine = &state.engine;
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
            records_read: stats.records,
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
            windows_skipped: state.state.counters().windows_skipped,
            hook_records_skipped: state.hook.counters().records_skipped,
        },
    }
}
