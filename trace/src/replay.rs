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
use std::sync::mpsc::SyncSender;

use serde::{Deserialize, Serialize};

use crate::{ReadStats, RecordRef, TraceError, TraceReader};
use gpumon_core::cluster::Limits;
use gpumon_core::engine::summary::{DeviceSummary, JobSummary};
use gpumon_core::engine::{Alert, AlertKind, EngineConfig, EngineCounters};
use gpumon_core::transition::{settings_command, Command, Replicated, TraceCommands};

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
        let mut out = Vec::new();
        translate_one(&mut self.commands, record, &mut out);
        for command in out {
            self.apply_translated(command);
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
    ///
    /// Reading, parsing and turning records into commands run on a thread
    /// of their own, [`COMMANDS_PER_HAND_OFF`] commands at a time, while
    /// this one applies them in the order they were read: the same
    /// commands as [`Replay::feed`] record by record, so the same report.
    pub fn run<R: BufRead + Send>(
        &mut self,
        reader: &mut TraceReader<R>,
        every: u64,
        mut progress: impl FnMut(&Progress),
    ) -> Result<(), TraceError> {
        let every = every.max(1);
        let mut commands = std::mem::take(&mut self.commands);
        let read = std::thread::scope(|scope| {
            let (send, receive) = std::sync::mpsc::sync_channel(HAND_OFFS_IN_FLIGHT);
            let reading = scope.spawn(|| translate(reader, &mut commands, send));
            let mut next_progress = every;
            for batch in receive {
                let batch: Translated = batch;
                for command in batch.commands {
                    self.apply_translated(command);
                }
                if batch.records >= next_progress {
                    next_progress = (batch.records / every + 1) * every;
                    progress(&Progress {
                        records: batch.records,
                        t: self.state.engine.now(),
                        alerts: self.state.engine.alerts().len(),
                    });
                }
            }
            reading
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        self.commands = commands;
        read?;
        self.finish();
        Ok(())
    }

    fn apply_translated(&mut self, command: TranslatedCommand) {
        match command {
            TranslatedCommand::Push(push) => {
                self.state.apply(push, false);
            }
            TranslatedCommand::Settings { t, command } => {
                let effects = self.state.apply(command, false);
                if let Some(reason) = effects.result.settings_refused {
                    self.settings_refused.push(format!("t={t}: {reason}"));
                    self.settings_refused.truncate(MAX_REFUSALS_KEPT);
                }
            }
        }
    }

    /// The report of the replay so far.
    pub fn report(&self, stats: &ReadStats, source: &str) -> Report {
        report(&self.state, stats, source)
    }
}

/// Commands handed from the reading thread to the applying one at a time:
/// enough that the hand-off costs next to nothing, few enough that the
/// applying thread starts soon (of 8 to 256, 32 replayed the corpus
/// fixtures fastest; 256 left it idle through a third of a small trace).
pub const COMMANDS_PER_HAND_OFF: usize = 32;

/// Hand-offs the reading thread may be ahead by: at most 512 pushes of at
/// most 64 records in flight, which smooths the two threads' bursts.
const HAND_OFFS_IN_FLIGHT: usize = 16;

/// A command translated from the trace, as [`Replay::feed`] applies it.
enum TranslatedCommand {
    /// A push of windows or hook records.
    Push(Command),
    /// A settings change, at trace time `t`.
    Settings { t: f64, command: Command },
}

/// Commands in the order they were read, and the records read so far.
struct Translated {
    commands: Vec<TranslatedCommand>,
    records: u64,
}

/// What one record adds to the commands: the push it completed, if any,
/// then its settings change, if it is one.
fn translate_one(
    commands: &mut TraceCommands,
    record: &RecordRef<'_>,
    out: &mut Vec<TranslatedCommand>,
) {
    if let Some(push) = commands.add(record) {
        out.push(TranslatedCommand::Push(push));
    }
    if let RecordRef::Settings(s) = record {
        out.push(TranslatedCommand::Settings {
            t: s.t,
            command: settings_command(s),
        });
    }
}

/// The reading thread: reads `reader` to its end (or its first unreadable
/// line) and sends the commands on. Stops early if the applying side is
/// gone.
fn translate<R: BufRead>(
    reader: &mut TraceReader<R>,
    commands: &mut TraceCommands,
    send: SyncSender<Translated>,
) -> Result<(), TraceError> {
    let mut records = 0u64;
    let mut out = Vec::with_capacity(COMMANDS_PER_HAND_OFF);
    let read = loop {
        let record = match reader.next_ref() {
            Ok(Some(record)) => record,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        translate_one(commands, &record, &mut out);
        records += 1;
        if out.len() >= COMMANDS_PER_HAND_OFF {
            let full = std::mem::replace(&mut out, Vec::with_capacity(COMMANDS_PER_HAND_OFF));
            if send
                .send(Translated {
                    commands: full,
                    records,
                })
                .is_err()
            {
                return Ok(());
            }
        }
    };
    // What was read before the end, or before an unreadable line, is
    // applied either way.
    let _ = send.send(Translated {
        commands: out,
        records,
    });
    read
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
            windows_skipped: state.cluster.counters().windows_skipped,
            hook_records_skipped: state.hook.counters().records_skipped,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::{from_reader, MAX_LINE_BYTES};

    /// The fixture's text, unzipped.
    fn fixture_text(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/traces/{name}.jsonl.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let gz = std::fs::read(&path).unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    /// Every record fed one by one on this thread, then finished or not.
    fn fed(text: &str, finish: bool) -> Replay {
        let mut reader = from_reader(text.as_bytes()).unwrap();
        let mut replay = Replay::new(&EngineConfig::default());
        while let Ok(Some(record)) = reader.next_ref() {
            replay.feed(&record);
        }
        if finish {
            replay.finish();
        }
        replay
    }

    fn report_of(replay: &Replay, text: &str) -> Report {
        let reader = from_reader(text.as_bytes()).unwrap();
        replay.report(reader.stats(), "test")
    }

    #[test]
    fn a_run_on_two_threads_decides_what_feeding_record_by_record_does() {
        for name in ["combo-1", "straggler_compute-1"] {
            let text = fixture_text(name);
            let mut reader = from_reader(text.as_bytes()).unwrap();
            let mut run = Replay::new(&EngineConfig::default());
            let mut seen = Vec::new();
            run.run(&mut reader, 1000, |p| seen.push(p.records))
                .unwrap();
            assert_eq!(
                report_of(&run, &text),
                report_of(&fed(&text, true), &text),
                "{name}"
            );
            assert!(
                run.state().engine.alerts().next().is_some(),
                "{name}: the fixture alerts"
            );
            // Progress comes at each thousand records, or at the first hand-off after it.
            assert!(seen.len() >= 5, "{name}: {seen:?}");
            assert!(
                seen.windows(2).all(|w| w[1] / 1000 > w[0] / 1000),
                "{name}: {seen:?}"
            );
        }
    }

    #[test]
    fn an_unreadable_line_stops_the_run_after_everything_before_it_was_applied() {
        let text = fixture_text("combo-1");
        let lines: Vec<&str> = text.lines().collect();
        let cut = lines.len() / 2;
        let before = lines[..cut].join("\n") + "\n";
        let broken = format!(
            "{before}{}\n{}\n",
            "x".repeat(MAX_LINE_BYTES + 1),
            lines[cut..].join("\n")
        );
        let mut reader = from_reader(broken.as_bytes()).unwrap();
        let mut run = Replay::new(&EngineConfig::default());
        let stopped = run.run(&mut reader, u64::MAX, |_| {});
        assert!(
            matches!(stopped, Err(TraceError::LineTooLong { .. })),
            "{stopped:?}"
        );
        // As far as the records before the line, pushes left open included.
        assert_eq!(
            report_of(&run, &before),
            report_of(&fed(&before, false), &before)
        );
        let mut open = fed(&before, false);
        open.finish();
        run.finish();
        assert_eq!(report_of(&run, &before), report_of(&open, &before));
    }
}
