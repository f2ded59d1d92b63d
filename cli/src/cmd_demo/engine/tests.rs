//! Plays the simulator's scenarios through the demo's engine settings,
//! offline and in simulated time, the way the demo's agents and replicas
//! do live: two simulated nodes of four GPUs sampled every 250 ms, windows
//! and hook records handed over every second, windows fed to the engine
//! before the batch's hook records.

use std::collections::BTreeSet;

use gpumon_agent::source::sim::{Scenario, SimSettings, SimSource};
use gpumon_agent::source::GpuSource;
use gpumon_core::engine::{AlertKind, Engine, EngineConfig};
use gpumon_core::hook_records::HookData;
use gpumon_core::window::WindowFolder;

use super::{demo_config, PROMISED_ALERT_S};

/// Step 0 of every played job, ms since the Unix epoch.
const T0: u64 = 1_763_700_000_000;
const SAMPLE_MS: u64 = 250;
const PUSH_MS: u64 = 1_000;

/// An alert as the test compares it: kind, rank, seconds after the start
/// when it first fired, and whether it is still active.
#[derive(Debug, Clone, PartialEq)]
struct Fired {
    kind: AlertKind,
    rank: Option<u32>,
    after_s: f64,
    active: bool,
}

/// Plays `scenario` with `seed` for `seconds`; every alert episode.
fn play(scenario: Scenario, seed: u64, seconds: u64) -> Vec<Fired> {
    let mut nodes: Vec<(String, SimSource, WindowFolder)> = (0..2)
        .map(|i| {
            let mut s = SimSettings::new(scenario, 2, i, 4);
            s.seed = seed;
            s.job = "demo-job".into();
            s.start_ms = T0;
            s.hook = true;
            let src = SimSource::new(s).unwrap();
            (format!("node-{i}"), src, WindowFolder::new())
        })
        .collect();
    let mut engine = Engine::new(demo_config());
    let mut hook = HookData::default();
    let mut t = T0;
    while t <= T0 + seconds * 1_000 {
        for (_, src, folder) in &mut nodes {
            for s in src.sample(t).unwrap() {
                folder.add(&s);
            }
        }
        t += SAMPLE_MS;
        if (t - T0) % PUSH_MS == 0 {
            for (node, src, folder) in &mut nodes {
                for w in folder.take() {
                    engine.observe_window(node, &w);
                }
                hook.apply(&mut engine, &src.take_hook_records());
            }
        }
    }
    assert_eq!(
        hook.counters().records_skipped,
        0,
        "the simulated hook sends valid records"
    );
    engine
        .alerts()
        .map(|a| Fired {
            kind: a.kind,
            rank: a.rank,
            after_s: a.t - T0 as f64 / 1000.0,
            active: a.is_active(),
        })
        .collect()
}

/// The alerts each scenario plants: (kind, rank).
fn planted(scenario: Scenario) -> Vec<(AlertKind, u32)> {
    use AlertKind::*;
    match scenario {
        Scenario::Steady => vec![],
        Scenario::Leak => vec![(Leak, 2), (OomPredicted, 2)],
        Scenario::Fragmentation => vec![(Fragmentation, 1)],
        Scenario::Imbalance => vec![(Imbalance, 0)],
        Scenario::Straggler => vec![(Straggler, 5)],
        Scenario::Mixed => vec![(Leak, 2), (OomPredicted, 2), (Imbalance, 0), (Straggler, 5)],
    }
}

/// Ranks allowed more alerts than the planted ones: a rank whose memory
/// grows may also be forecast to run out of it.
fn may_also_forecast_oom(scenario: Scenario) -> Option<u32> {
    (scenario == Scenario::Fragmentation).then_some(1)
}

/// Seconds played: past the promise, to catch late false alerts.
const PLAYED_S: u64 = 150;

#[test]
fn every_scenario_alerts_exactly_its_planted_problems_in_time() {
    for seed in [1, 2, 3] {
        for scenario in Scenario::ALL {
            let fired = play(scenario, seed, PLAYED_S);
            let context = format!("{scenario}, seed {seed}: {fired:#?}");
            for (kind, rank) in planted(scenario) {
                let first = fired
                    .iter()
                    .find(|f| f.kind == kind && f.rank == Some(rank))
                    .unwrap_or_else(|| panic!("no {kind:?} on rank {rank} in {context}"));
                assert!(
                    first.after_s <= f64::from(PROMISED_ALERT_S),
                    "{kind:?} late in {context}"
                );
                assert!(first.active, "{kind:?} resolved in {context}");
            }
            for f in &fired {
                let is_planted = planted(scenario)
                    .iter()
                    .any(|&(kind, rank)| f.kind == kind && f.rank == Some(rank));
                let allowed = f.kind == AlertKind::OomPredicted
                    && f.rank.is_some()
                    && f.rank == may_also_forecast_oom(scenario);
                assert!(is_planted || allowed, "false alert {f:?} in {context}");
            }
            let episodes = fired.len();
            let distinct = fired
                .iter()
                .map(|f| (f.kind, f.rank))
                .collect::<BTreeSet<_>>()
                .len();
            assert_eq!(episodes, distinct, "an alert flapped in {context}");
        }
    }
}

#[test]
fn the_demo_runs_the_default_straggler_settings() {
    // Stragglers are judged per step; the demo's steps are real-sized.
    assert_eq!(demo_config().straggler, EngineConfig::default().straggler);
    assert!(demo_config().window_s < EngineConfig::default().window_s);
}
