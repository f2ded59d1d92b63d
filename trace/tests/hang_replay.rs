//! A hung job in a recorded trace: `gpumon replay` judges the `stall`
//! records the way the coordinator does (the same transition), names the
//! rank the others wait for, resolves the alert when steps resume, and
//! takes a job-wide pause for what it is.

use std::io::Cursor;

use gpumon_core::engine::{AlertKind, EngineConfig, Severity};
use gpumon_trace::replay::Replay;
use gpumon_trace::TraceReader;
use serde_json::json;

const RANKS: u32 = 4;
const STEP_S: f64 = 0.25;

/// Steps of every rank every 250 ms until `until`, from `from`.
fn steps(lines: &mut Vec<String>, from: f64, until: f64, first_step: u64) -> u64 {
    let mut step = first_step;
    let mut t = from;
    while t < until {
        for rank in 0..RANKS {
            lines.push(
                json!({"type": "step", "t": t, "job": "j", "rank": rank, "step": step,
                       "duration_ms": STEP_S * 1000.0, "sections": {"forward": 100.0}})
                .to_string(),
            );
        }
        step += 1;
        t += STEP_S;
    }
    step
}

/// Every `rank` but `silent` reports every 10 s from `from` to `until`:
/// `waiting(rank)` says whether it waits in all_reduce #seq of group 0.
fn stalls(
    lines: &mut Vec<String>,
    from: f64,
    until: f64,
    last_step: u64,
    seq: u64,
    waiting: impl Fn(u32) -> bool,
    marker: Option<&str>,
) {
    let mut t = from;
    while t <= until {
        for rank in 0..RANKS {
            let waits = waiting(rank);
            let wait = waits.then(|| {
                json!({"group": "0", "desc": "default_pg", "seq": seq, "op": "all_reduce",
                       "numel": 72, "waited_s": t - from + 15.0, "timeout_s": 1800.0})
            });
            let entered = if waits { seq } else { seq - 1 };
            lines.push(
                json!({"type": "stall", "t": t, "job": "j", "rank": rank, "step": last_step,
                       "quiet_s": t - from + 15.0, "source": "flight_recorder",
                       "waiting": wait, "entered": [["0", entered]],
                       "marker": marker.filter(|_| rank == 0)})
                .to_string(),
            );
        }
        t += 10.0;
    }
}

fn replay(lines: &[String]) -> Replay {
    let mut text = String::from("{\"gpumon_trace\": 1, \"source\": \"hang\"}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let mut reader = TraceReader::new(Cursor::new(text.into_bytes())).unwrap();
    let mut replay = Replay::new(&EngineConfig::default());
    replay.run(&mut reader, u64::MAX, |_| {}).unwrap();
    replay
}

#[test]
fn a_rank_that_never_enters_the_all_reduce_is_named_and_steps_resolve_the_hang() {
    let mut lines = Vec::new();
    let next = steps(&mut lines, 0.0, 30.0, 1);
    // Rank 1 stops at 30 s; the others wait in all_reduce #500 from then.
    stalls(&mut lines, 45.0, 115.0, next - 1, 500, |r| r != 1, None);
    let replayed = replay(&lines);
    let hangs: Vec<_> = replayed
        .state()
        .engine
        .alerts()
        .filter(|a| a.kind == AlertKind::Hang)
        .cloned()
        .collect();
    assert_eq!(hangs.len(), 1, "{hangs:?}");
    let h = &hangs[0];
    assert_eq!((h.rank, h.severity), (Some(1), Severity::Critical));
    assert!(
        h.t >= 90.0 && h.t <= 100.0,
        "judged once quiet for 60 s: {}",
        h.t
    );
    assert!(h.is_active());
    assert!(
        h.message.contains("rank 1 has not entered it"),
        "{}",
        h.message
    );
    assert!(
        h.message.contains("ranks 0, 2, 3 wait in all_reduce #500"),
        "{}",
        h.message
    );

    // Steps resume: resolved.
    let mut resumed = lines.clone();
    steps(&mut resumed, 120.0, 125.0, next);
    let replayed = replay(&resumed);
    let h = replayed
        .state()
        .engine
        .alerts()
        .find(|a| a.kind == AlertKind::Hang)
        .unwrap();
    assert_eq!(h.resolved_t, Some(120.0));
}

#[test]
fn a_job_wide_pause_or_a_marked_eval_is_not_a_hang() {
    let mut lines = Vec::new();
    let next = steps(&mut lines, 0.0, 30.0, 1);
    // Every rank busy in its own work for 90 s (a checkpoint of every rank).
    stalls(&mut lines, 45.0, 120.0, next - 1, 500, |_| false, None);
    let replayed = replay(&lines);
    assert_eq!(replayed.state().engine.alerts().len(), 0);

    // Rank 0 marked an evaluation; the others wait for it in a barrier.
    let mut lines = Vec::new();
    let next = steps(&mut lines, 0.0, 30.0, 1);
    stalls(
        &mut lines,
        45.0,
        120.0,
        next - 1,
        500,
        |r| r != 0,
        Some("eval"),
    );
    let replayed = replay(&lines);
    assert_eq!(replayed.state().engine.alerts().len(), 0);
}
