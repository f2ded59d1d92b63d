//! Fuzz target of the uplink wire codec, `gpumon_proto::wire::decode`: the
//! push body a coordinator decodes from every agent ([`AgentMessage`]) and
//! the reply an agent decodes ([`CoordinatorReply`]).
//!
//! Inputs: valid encodings of hellos, full and empty push batches (windows,
//! every hook record kind, acks), a version 2 push with placements and host
//! memory, and replies of both versions (version 2 with alerts), damaged by the shared mutator
//! (bit flips, truncations, insertions, deletions, splices, varint length
//! fields blown up to huge values), and plain random bytes.
//!
//! Property: `decode` never panics; it returns `Ok` or a `DecodeError`, and
//! whatever it accepts re-encodes to bytes that decode again to the same
//! encoding. A tiny input claiming a huge sequence or string length is
//! refused at once, without reserving memory for the claim.
//!
//! Cases: the defaults below, times `GPUMON_FUZZ_SCALE`, or exactly
//! `GPUMON_FUZZ_CASES`; seed `GPUMON_FUZZ_SEED`; see docs/testing.md.

use gpumon_testkit::fuzz::{self as kit, messages};

use std::time::{Duration, Instant};

use gpumon_proto::wire::{self, DecodeError, Versioned};
use gpumon_proto::{
    AgentMessage, AgentMessageV1, AgentMessageV2, CoordinatorReply, CoordinatorReplyV1,
    CoordinatorReplyV2, PushOutcome,
};
use kit::{varint, Rng};

/// The most a coordinator accepts in one push.
const MAX_BYTES: usize = 16 << 20;
/// Default cases per target: a few seconds in a debug build.
const CASES: u64 = 100_000;

fn agent_seeds() -> Vec<Vec<u8>> {
    [
        AgentMessage::V1(AgentMessageV1::Hello(messages::hello())),
        AgentMessage::V1(AgentMessageV1::Push(messages::push())),
        AgentMessage::V1(AgentMessageV1::Push(messages::empty_push())),
        AgentMessage::V2(AgentMessageV2::Hello(messages::hello())),
        AgentMessage::V2(AgentMessageV2::Push(messages::placed_push())),
    ]
    .iter()
    .map(wire::encode)
    .collect()
}

fn reply_seeds() -> Vec<Vec<u8>> {
    let reply = |outcome, actions| CoordinatorReply::V1(CoordinatorReplyV1 { outcome, actions });
    [
        reply(
            PushOutcome::Committed {
                acked_seq: 300,
                duplicate: false,
            },
            vec![messages::action(), messages::action()],
        ),
        reply(
            PushOutcome::NotLeader {
                leader_url: Some("http://10.0.0.1:7070".into()),
            },
            vec![],
        ),
        reply(PushOutcome::NotLeader { leader_url: None }, vec![]),
        CoordinatorReply::V2(CoordinatorReplyV2 {
            outcome: PushOutcome::Committed {
                acked_seq: 301,
                duplicate: false,
            },
            actions: vec![messages::action()],
            alerts: messages::node_alerts(),
        }),
    ]
    .iter()
    .map(wire::encode)
    .collect()
}

/// Decodes `bytes` as `T` and checks the property; true when accepted.
fn check<T: Versioned + std::fmt::Debug>(bytes: &[u8]) -> bool {
    match wire::decode::<T>(bytes, MAX_BYTES) {
        Ok(msg) => {
            let again = wire::encode(&msg);
            let back = wire::decode::<T>(&again, MAX_BYTES)
                .unwrap_or_else(|e| panic!("{msg:?} re-encodes to bytes that fail: {e}"));
            assert_eq!(wire::encode(&back), again, "{msg:?} does not round-trip");
            true
        }
        Err(DecodeError::TooLarge { .. }) => panic!("{} bytes are under the limit", bytes.len()),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

/// Mutates the seeds of `T` and decodes them; returns how many were accepted.
fn fuzz<T: Versioned + std::fmt::Debug>(target: &str, seeds: &[Vec<u8>]) -> u64 {
    for seed in seeds {
        assert!(check::<T>(seed), "a seed must decode");
    }
    let mut accepted = 0;
    kit::run(target, CASES, |rng| {
        accepted += u64::from(check::<T>(&kit::binary_input(rng, seeds, 256)));
    });
    accepted
}

#[test]
fn push_bodies_decode_or_fail_cleanly() {
    let accepted = fuzz::<AgentMessage>("wire agent message", &agent_seeds());
    // Some mutations (a changed number) still decode: the harness reaches
    // past the first bytes.
    assert!(accepted > 0);
}

#[test]
fn replies_decode_or_fail_cleanly() {
    let accepted = fuzz::<CoordinatorReply>("wire coordinator reply", &reply_seeds());
    assert!(accepted > 0);
}

/// A push whose `windows` claims `len` elements and holds none.
fn push_claiming_windows(len: u64) -> Vec<u8> {
    let mut bytes = vec![0, 1]; // V1, Push
    bytes.extend([1, b'a', 1, 1, 1, b'n', 0]); // agent_id, incarnation, seq, node, dropped
    bytes.extend(varint(len));
    bytes
}

/// A hello whose `agent_id` claims `len` bytes and holds one.
fn hello_claiming_string(len: u64) -> Vec<u8> {
    let mut bytes = vec![0, 0]; // V1, Hello
    bytes.extend(varint(len));
    bytes.push(b'x');
    bytes
}

#[test]
fn a_tiny_input_claiming_a_huge_length_is_refused_at_once() {
    let before = kit::vm_peak_bytes();
    let started = Instant::now();
    let mut rng = Rng::new(kit::DEFAULT_SEED);
    let lengths = [u64::MAX, 1 << 62, 1 << 40, u64::from(u32::MAX), 1 << 28];
    for &len in lengths.iter().chain(&[rng.interesting_u64()]) {
        for bytes in [push_claiming_windows(len), hello_claiming_string(len)] {
            let err = wire::decode::<AgentMessage>(&bytes, MAX_BYTES).unwrap_err();
            assert!(matches!(err, DecodeError::Malformed { .. }), "{len}: {err}");
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    if let (Some(before), Some(after)) = (before, kit::vm_peak_bytes()) {
        let grew = after.saturating_sub(before);
        assert!(grew < 256 << 20, "peak memory grew by {grew} bytes");
    }
}

/// Found by this target: a variant index of `u64::MAX` overflowed `+ 1`
/// when naming the version (a panic in debug builds, version 0 in release).
#[test]
fn regression_the_largest_variant_names_the_largest_version() {
    for bytes in [varint(u64::MAX), varint(u64::MAX - 1)] {
        let err = wire::decode::<AgentMessage>(&bytes, MAX_BYTES).unwrap_err();
        assert!(
            matches!(err, DecodeError::UnsupportedVersion { got, .. } if got >= u64::MAX - 1),
            "{err}"
        );
        assert!(wire::decode::<CoordinatorReply>(&bytes, MAX_BYTES).is_err());
    }
}
