//! Pushes that tried to poison the view: a forged seq, a window from the
//! far future, and the agent restart that must still be recognized.

use super::super::*;
use super::{batch, two_ranks, window};
use crate::limits::{MAX_CLOCK_LEAP_MS, MAX_SEQ_GAP};

const T0: u64 = 1_700_000_000_000;

fn started() -> Cluster {
    let mut s = Cluster::new(Limits::default());
    assert_eq!(s.apply_push(&two_ranks(1, T0, 1 << 30)).windows_applied, 2);
    s
}

#[test]
fn a_forged_seq_far_ahead_is_refused_and_the_real_agent_goes_on() {
    let mut s = started();
    let forged = s.apply_push(&two_ranks(u64::MAX, T0 + 1_000, 1 << 30));
    assert!(forged.refused && !forged.duplicate);
    assert_eq!(forged.windows_skipped, 2);
    assert_eq!(s.last_seq("agent-0", 1), Some(1));
    assert_eq!(s.counters().windows_skipped, 2);

    let next = s.apply_push(&two_ranks(2, T0 + 2_000, 1 << 30));
    assert!(!next.duplicate && !next.refused);
    assert_eq!(next.windows_applied, 2);
    assert_eq!(s.last_seq("agent-0", 1), Some(2));
}

#[test]
fn a_seq_gap_up_to_the_bound_applies_and_one_past_it_is_refused() {
    let mut s = started();
    let past = two_ranks(2 + MAX_SEQ_GAP, T0 + 2_000, 1 << 30);
    assert!(s.apply_push(&past).refused);
    let at = two_ranks(1 + MAX_SEQ_GAP, T0 + 2_000, 1 << 30);
    assert_eq!(s.apply_push(&at).windows_applied, 2);
    assert!(s.apply_push(&two_ranks(2, T0 + 4_000, 1 << 30)).duplicate);
}

#[test]
fn forged_incarnations_cannot_shut_out_the_real_one() {
    let mut s = started();
    // Enough new incarnations to push the real one out of those remembered:
    // each takes any seq, having no history to poison.
    for incarnation in 100..100 + INCARNATIONS_REMEMBERED as u64 {
        let forged = batch(u64::MAX, incarnation, vec![window(0, T0 + 1_000, vec![])]);
        assert!(!s.apply_push(&forged).refused);
    }
    assert_eq!(s.last_seq("agent-0", 1), None);
    // The real agent, far along its own numbering, is taken again.
    let real = s.apply_push(&two_ranks(2 * MAX_SEQ_GAP, T0 + 2_000, 1 << 30));
    assert_eq!((real.refused, real.windows_applied), (false, 2));
    assert_eq!(s.last_seq("agent-0", 1), Some(2 * MAX_SEQ_GAP));
}

#[test]
fn a_restarted_agent_starts_again_at_seq_one() {
    let mut s = started();
    for seq in 2..=10 {
        s.apply_push(&two_ranks(seq, T0 + seq * 2_000, 1 << 30));
    }
    let restart = batch(1, 2, vec![window(0, T0 + 30_000, vec![])]);
    let out = s.apply_push(&restart);
    assert!(!out.duplicate && !out.refused);
    assert_eq!(out.windows_applied, 1);
    assert!(matches!(
        out.events[0],
        ClusterEvent::AgentJoined {
            restarted: true,
            ..
        }
    ));
    let agent = &s.cluster_view().agents[0];
    assert_eq!((agent.incarnation, agent.last_seq), (2, 1));
    assert_eq!(agent.last_seen_ms, T0 + 30_000);
}

#[test]
fn a_window_from_the_far_future_cannot_freeze_the_clock() {
    let mut s = started();
    let forged = s.apply_push(&two_ranks(2, u64::MAX, 1 << 30));
    assert_eq!((forged.windows_applied, forged.windows_skipped), (0, 2));
    assert_eq!(s.now_ms(), T0 + MAX_CLOCK_LEAP_MS);
    assert_eq!(s.cluster_view().agents[0].last_seen_ms, T0);

    // The agent's real windows still apply, and once they reach the clock
    // the agent is the newest thing the view has seen again.
    let real = s.apply_push(&two_ranks(3, T0 + 2_000, 1 << 30));
    assert_eq!(real.windows_applied, 2);
    let later = T0 + MAX_CLOCK_LEAP_MS + 2_000;
    assert_eq!(
        s.apply_push(&two_ranks(4, later, 1 << 30)).windows_applied,
        2
    );
    assert_eq!(s.now_ms(), later);
    assert_eq!(s.cluster_view().agents[0].last_seen_ms, later);
}

#[test]
fn after_a_long_silence_the_clock_catches_up() {
    let mut s = started();
    let back = T0 + 3_600_000;
    let mut skipped = 0;
    for seq in 2..20 {
        let out = s.apply_push(&two_ranks(seq, back + seq * 2_000, 1 << 30));
        if out.windows_applied == 2 {
            break;
        }
        skipped += 1;
    }
    assert_eq!(skipped, 6, "an hour, ten minutes per batch");
    assert_eq!(s.cluster_view().agents[0].last_seen_ms, s.now_ms());
}

/// An agent that names another node in each push leaves one host reading,
/// not one per node it named (they waited for the next expiry before).
#[test]
fn an_agent_that_changes_its_node_leaves_one_host_reading() {
    let mut s = Cluster::new(Limits::default());
    let host = gpumon_proto::HostMemory {
        t_ms: T0,
        used_max_bytes: 1 << 30,
        total_bytes: 1 << 34,
    };
    for seq in 1..=5u64 {
        let mut b = two_ranks(seq, T0 + seq * 1_000, 1 << 30);
        b.node = format!("node-{seq}");
        s.apply_push(&b);
        let host = gpumon_proto::HostMemory {
            t_ms: T0 + seq * 1_000,
            ..host
        };
        assert!(s.apply_host(&b, &host));
        assert!(s.host(&b.node).is_some());
    }
    assert!(s.host("node-4").is_none(), "no agent is on node-4 now");
    assert_eq!(s.hosts.len(), 1);
}
