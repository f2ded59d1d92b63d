//! A refused push leaves nothing behind, and no value in a push, however
//! absurd, makes the transition overflow or panic.

use gpumon_proto::{ActionAck, ActionOutcome, PushBatch};

use super::tests::{alloc, fresh, push, window};
use super::*;

const GIB: u64 = 1 << 30;
const T0: u64 = 1_700_000_000_000;

#[test]
fn a_refused_push_applies_none_of_its_records() {
    let mut r = fresh();
    r.apply(push(1, vec![window(0, T0, GIB)], vec![]), false);
    let forged = push(
        u64::MAX,
        vec![window(0, T0 + 1, GIB)],
        vec![alloc(T0, 0, GIB)],
    );
    let out = r.apply(forged, true);
    assert!(out.result.refused && !out.result.duplicate);
    assert_eq!(out.result.windows_skipped, 1);
    assert!(out.applied.is_empty());
    assert_eq!(r.hook.counters().records_applied, 0);
}

#[test]
fn extreme_values_neither_overflow_nor_panic() {
    let extremes = [0, 1, T0, u64::MAX - 1, u64::MAX];
    for &seq in &extremes {
        for &t in &extremes {
            for started in [false, true] {
                let mut r = fresh();
                if started {
                    r.apply(push(1, vec![window(0, T0, GIB)], vec![]), false);
                }
                let mut w = window(1, t, GIB);
                w.start_ms = 0;
                let Command::V1(CommandV1::Push(mut batch)) =
                    push(seq, vec![w, window(0, t, GIB)], vec![alloc(t, 0, GIB)])
                else {
                    unreachable!("push builds a push");
                };
                batch.incarnation = t;
                batch.dropped_batches = u64::MAX;
                batch.acks.push(ActionAck {
                    id: u64::MAX,
                    t_ms: t,
                    outcome: ActionOutcome::Failed { reason: "x".into() },
                    response: None,
                });
                apply_twice(&mut r, batch);
                assert!(r.state.now_ms() <= T0.max(t));
            }
        }
    }
}

fn apply_twice(r: &mut Replicated, batch: PushBatch) {
    let command = Command::V1(CommandV1::Push(batch));
    r.apply(command.clone(), true);
    r.apply(command, true);
    let _ = (r.state.cluster_view(), r.state.jobs_view(), r.now_t());
}
