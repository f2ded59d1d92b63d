//! Live settings through the transition: a change commits, applies from
//! the next window, reaches the live stream as a trace record, and a replay
//! of that record decides as the replicas did.

use super::super::*;
use super::{fresh, push, window};
use crate::engine::AlertKind;
use crate::records::{RecordRef, TraceRecord};
use crate::settings::SettingsChange;

const GIB: u64 = 1 << 30;

/// GPU 0 at 60 % of its 80 GiB, a window every second from `from_s`.
fn sixty_percent(seq: &mut u64, from_s: u64, to_s: u64) -> Vec<Command> {
    (from_s..to_s)
        .map(|s| {
            *seq += 1;
            push(
                *seq,
                vec![window(0, 1_700_000_000_000 + s * 1000, 48 * GIB)],
                Vec::new(),
            )
        })
        .collect()
}

fn lower_warning() -> SettingsChange {
    SettingsChange {
        set: vec![("memory_levels.warning_pct".into(), "50".into())],
        ..SettingsChange::default()
    }
}

fn level_alerts(state: &Replicated) -> usize {
    state
        .engine
        .alerts()
        .filter(|a| a.kind == AlertKind::MemoryLevel && a.is_active())
        .count()
}

/// Records through the transition as `gpumon replay` takes them: pushes as
/// [`TraceCommands`] gathers them, a settings record as its own command.
struct Replayed {
    commands: TraceCommands,
    state: Replicated,
    refused: usize,
}

impl Default for Replayed {
    fn default() -> Self {
        Self {
            commands: TraceCommands::default(),
            state: fresh(),
            refused: 0,
        }
    }
}

impl Replayed {
    fn feed(&mut self, record: &RecordRef<'_>) {
        if let Some(push) = self.commands.add(record) {
            self.state.apply(push, false);
        }
        if let RecordRef::Settings(s) = record {
            let effects = self.state.apply(settings_command(s), false);
            self.refused += usize::from(effects.result.settings_refused.is_some());
        }
    }

    fn finish(&mut self) {
        if let Some(push) = self.commands.finish() {
            self.state.apply(push, false);
        }
    }
}

#[test]
fn a_cluster_wide_change_applies_from_the_next_window_and_replays_the_same() {
    let mut state = fresh();
    let mut seq = 0;
    for c in sixty_percent(&mut seq, 0, 30) {
        state.apply(c, false);
    }
    assert_eq!(
        level_alerts(&state),
        0,
        "60 % is under the default 80 % level"
    );

    let effects = state.apply(Command::V1(CommandV1::Settings(lower_warning())), true);
    assert_eq!(effects.result.settings_refused, None);
    let [applied] = effects.applied.as_slice() else {
        panic!("one settings record for the stream: {:?}", effects.applied);
    };
    let record = applied
        .settings
        .clone()
        .expect("the change as a trace record");
    assert_eq!(record.t, 1_700_000_029.0, "at the data time it took effect");
    for c in sixty_percent(&mut seq, 30, 60) {
        state.apply(c, false);
    }
    assert_eq!(level_alerts(&state), 1, "60 % is over the new 50 % level");

    // The stream's records, replayed: the same decision at the same point.
    let mut replay = Replayed::default();
    let rec = |s: u64| {
        TraceRecord::Gpu(crate::records::GpuRecord {
            t: 1_700_000_000.0 + s as f64,
            node: "node-a".into(),
            gpu: 0,
            uuid: "GPU-0".into(),
            name: "H100".into(),
            total: 80 * GIB,
            used: 48 * GIB,
            used_min: None,
            used_last: None,
            util: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: Vec::new(),
        })
    };
    for s in 0..30 {
        replay.feed(&RecordRef::from(&rec(s)));
    }
    replay.feed(&RecordRef::from(&TraceRecord::Settings(record)));
    assert_eq!(level_alerts(&replay.state), 0);
    for s in 30..60 {
        replay.feed(&RecordRef::from(&rec(s)));
    }
    replay.finish();
    assert_eq!(level_alerts(&replay.state), 1);
    assert_eq!(replay.refused, 0);
}

#[test]
fn a_change_the_state_no_longer_takes_is_refused_whole_on_every_replica() {
    let mut state = fresh();
    let bad = SettingsChange {
        set: vec![
            ("memory_levels.warning_pct".into(), "50".into()),
            ("memory_levels.critical_pct".into(), "40".into()),
        ],
        ..SettingsChange::default()
    };
    let before = state.engine.settings().clone();
    let effects = state.apply(Command::V1(CommandV1::Settings(bad)), true);
    let reason = effects.result.settings_refused.expect("refused");
    assert!(reason.contains("memory_levels"), "{reason}");
    assert!(effects.applied.is_empty(), "nothing for the stream");
    assert_eq!(state.engine.settings(), &before);
}
