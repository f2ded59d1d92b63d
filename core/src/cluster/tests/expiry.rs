//! Expiry and admission: what went quiet is forgotten the same way on every
//! replica, and what would not fit is refused naming the limit.

use super::super::*;
use super::{batch, two_ranks, window};

const T0: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;
const FIVE_MIN: u64 = 300_000;

/// agent-1 heard from every five minutes from `from` to `to` (data time
/// moves in steps the state takes; see `limits::MAX_CLOCK_LEAP_MS`).
fn keep_talking(s: &mut Cluster, seq: &mut u64, from: u64, to: u64) {
    let mut t = from;
    while t <= to {
        *seq += 1;
        let applied = s.apply_push(&other_agent(*seq, t));
        assert_eq!(applied.windows_applied, 1, "at {t}");
        t += FIVE_MIN;
    }
}

fn other_agent(seq: u64, end_ms: u64) -> gpumon_proto::PushBatch {
    let mut b = batch(seq, 1, vec![window(7, end_ms, vec![])]);
    b.agent_id = "agent-1".into();
    b.node = "node-1".into();
    b.windows[0].gpu.uuid = "GPU-other".into();
    b
}

#[test]
fn a_quiet_agent_and_its_gpus_expire_and_its_ranks_end() {
    let mut s = Cluster::new(Limits::default());
    s.apply_push(&two_ranks(1, T0, 1 << 30));
    // agent-0 goes quiet; agent-1 talks on for an hour and a half.
    let mut seq = 0;
    keep_talking(&mut s, &mut seq, T0 + FIVE_MIN, T0 + HOUR + HOUR / 2);
    let mut events = Vec::new();
    let expired = s.expire(HOUR, &mut events);
    assert_eq!((expired.agents, expired.gpus), (1, 2));
    let view = s.cluster_view();
    assert_eq!(view.agents.len(), 1);
    assert_eq!(view.agents[0].agent_id, "agent-1");
    assert_eq!((view.gpus, view.live_ranks), (1, 0));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ClusterEvent::JobEnded { job, .. } if job == "job-a")),
        "{events:?}"
    );
    // An hour after the job ended, it is forgotten too.
    keep_talking(
        &mut s,
        &mut seq,
        T0 + HOUR + HOUR / 2 + FIVE_MIN,
        T0 + 3 * HOUR,
    );
    let expired = s.expire(HOUR, &mut Vec::new());
    assert_eq!(expired.ranks, 2);
    assert!(!s.has_job("job-a"));
}

#[test]
fn nothing_expires_while_it_is_heard_from_or_with_expiry_off() {
    let mut s = Cluster::new(Limits::default());
    let mut t = T0;
    for seq in 1..=13 {
        s.apply_push(&two_ranks(seq, t, 1 << 30));
        t += FIVE_MIN;
    }
    assert_eq!(s.expire(HOUR, &mut Vec::new()), Expired::default());
    assert_eq!(s.expire(0, &mut Vec::new()), Expired::default());
    assert_eq!(s.cluster_view().live_ranks, 2);
}

#[test]
fn what_would_pass_a_limit_is_refused_naming_it() {
    let limits = Limits {
        max_agents: 1,
        max_gpus: 2,
        max_ranks: 2,
        ..Limits::default()
    };
    let mut s = Cluster::new(limits);
    let first = two_ranks(1, T0, 1 << 30);
    assert_eq!(s.admits(&first.agent_id, &first.windows), Ok(()));
    s.apply_push(&first);
    assert_eq!(
        s.admits(&first.agent_id, &first.windows),
        Ok(()),
        "known ones fit"
    );

    let other = other_agent(1, T0);
    let err = s
        .admits(&other.agent_id, &other.windows)
        .unwrap_err()
        .to_string();
    assert!(err.contains("agents"), "{err}");
    let third_gpu = batch(2, 1, vec![window(5, T0 + 1_000, vec![])]);
    let err = s
        .admits(&third_gpu.agent_id, &third_gpu.windows)
        .unwrap_err()
        .to_string();
    assert!(err.contains("GPUs"), "{err}");
}
