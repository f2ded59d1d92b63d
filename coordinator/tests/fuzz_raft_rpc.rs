//! Fuzz target of the Raft RPC bodies a coordinator decodes from its peers
//! (`api/raft_rpc.rs`: postcard `AppendEntriesRequest<TypeConfig>`,
//! `VoteRequest<u64>`, `InstallSnapshotRequest<TypeConfig>`), without a
//! live Raft: only the decode step.
//!
//! Inputs: valid bodies (entries of every payload kind and every command,
//! memberships, votes, a snapshot chunk holding the current format's
//! fixture state) damaged by the shared mutator, every body decoded as
//! each of the three types, and random bytes.
//!
//! Property: decoding never panics; it is `Ok` or a postcard error, and
//! what it accepts re-encodes to bytes that decode to the same encoding.
//!
//! Cases: the defaults below, times `GPUMON_FUZZ_SCALE`, or exactly
//! `GPUMON_FUZZ_CASES`; seed `GPUMON_FUZZ_SEED`; see docs/testing.md.

use gpumon_testkit::fuzz::{self as kit, messages};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::Path;

use gpumon_coordinator::raft::{snapshot_file, TypeConfig};
use gpumon_core::actions::{ActionOrigin, ActionRequest, IssueRules};
use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_core::transition::{Command, CommandV1};
use gpumon_proto::ActionKind;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, Vote,
};
use serde::{de::DeserializeOwned, Serialize};

/// Default cases of the small bodies (about a second in a debug build).
const CASES: u64 = 40_000;
/// Default cases of the snapshot chunk, a few KiB each.
const SNAPSHOT_CASES: u64 = 8_000;

type Append = AppendEntriesRequest<TypeConfig>;
type VoteReq = VoteRequest<u64>;
type Install = InstallSnapshotRequest<TypeConfig>;

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn membership() -> Membership<u64, BasicNode> {
    let voters = BTreeSet::from([1u64, 2, 3]);
    let nodes: BTreeMap<u64, BasicNode> = (1..=4)
        .map(|id| (id, BasicNode::new(format!("10.0.0.{id}:7070"))))
        .collect();
    Membership::new(vec![voters, BTreeSet::from([2, 3, 4])], nodes)
}

fn commands() -> Vec<CommandV1> {
    vec![
        CommandV1::Hello(messages::hello()),
        CommandV1::Push(messages::push()),
        CommandV1::IssueActions {
            requests: vec![ActionRequest {
                kind: ActionKind::ReleaseCache,
                job: "run-7".into(),
                rank: 3,
                reason: "fuzz".into(),
                origin: ActionOrigin::Admin,
            }],
            rules: IssueRules::default(),
        },
        CommandV1::DeliverActions {
            node: "node-7".into(),
            ids: vec![1, 2, u64::MAX],
        },
        CommandV1::Notified {
            entries: vec![],
            at_ms: 1_700_000_000_000,
        },
        CommandV1::Expire {
            stale_after_ms: 600_000,
        },
        CommandV1::PushPlaced(messages::placed_push()),
    ]
}

fn append() -> Append {
    let mut entries = vec![
        Entry {
            log_id: log_id(3, 41),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(3, 42),
            payload: EntryPayload::Membership(membership()),
        },
    ];
    for (i, command) in commands().into_iter().enumerate() {
        entries.push(Entry {
            log_id: log_id(3, 43 + i as u64),
            payload: EntryPayload::Normal(Command::V1(command)),
        });
    }
    AppendEntriesRequest {
        vote: Vote::new_committed(3, 1),
        prev_log_id: Some(log_id(2, 40)),
        entries,
        leader_commit: Some(log_id(3, 41)),
    }
}

fn install() -> Install {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/fixtures/snapshots/v{}.bin",
        snapshot_file::CURRENT_VERSION
    ));
    let loaded = snapshot_file::load(&fixture, Limits::default(), &EngineConfig::default())
        .unwrap()
        .expect("the current format's fixture");
    InstallSnapshotRequest {
        vote: Vote::new_committed(3, 1),
        meta: SnapshotMeta {
            snapshot_id: "3-1-42".into(),
            ..loaded.meta
        },
        offset: 0,
        data: loaded.data,
        done: true,
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).unwrap()
}

/// Every valid body, of all three types.
fn seeds() -> Vec<Vec<u8>> {
    let empty_append = Append {
        vote: Vote::new(1, 2),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    vec![
        encode(&append()),
        encode(&empty_append),
        encode(&VoteReq {
            vote: Vote::new(4, 2),
            last_log_id: Some(log_id(3, 47)),
        }),
        encode(&VoteReq {
            vote: Vote::new(1, 1),
            last_log_id: None,
        }),
        encode(&install()),
    ]
}

/// Decodes `body` as the handler does; checks the property, true when accepted.
fn check<T: Serialize + DeserializeOwned + Debug>(body: &[u8]) -> bool {
    match postcard::from_bytes::<T>(body) {
        Ok(req) => {
            let again = encode(&req);
            let back: T = postcard::from_bytes(&again)
                .unwrap_or_else(|e| panic!("{req:?} re-encodes to a body that fails: {e}"));
            assert_eq!(encode(&back), again, "{req:?} does not round-trip");
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

/// Every body goes to every decoder, as a confused or hostile peer may send it.
fn check_all(body: &[u8]) -> u64 {
    u64::from(check::<Append>(body))
        + u64::from(check::<VoteReq>(body))
        + u64::from(check::<Install>(body))
}

fn fuzz(target: &str, cases: u64, seeds: &[Vec<u8>]) -> u64 {
    let mut accepted = 0;
    kit::run(target, cases, |rng| {
        accepted += check_all(&kit::binary_input(rng, seeds, 512));
    });
    accepted
}

#[test]
fn valid_bodies_decode_as_their_type() {
    let seeds = seeds();
    assert!(check::<Append>(&seeds[0]) && check::<Append>(&seeds[1]));
    assert!(check::<VoteReq>(&seeds[2]) && check::<VoteReq>(&seeds[3]));
    assert!(check::<Install>(&seeds[4]));
}

#[test]
fn append_entries_bodies_decode_or_fail_cleanly() {
    let seeds = seeds();
    assert!(fuzz("raft append entries", CASES, &seeds[..2]) > 0);
}

#[test]
fn vote_bodies_decode_or_fail_cleanly() {
    let seeds = seeds();
    assert!(fuzz("raft vote", CASES, &seeds[2..4]) > 0);
}

#[test]
fn install_snapshot_bodies_decode_or_fail_cleanly() {
    let seeds = seeds();
    assert!(fuzz("raft install snapshot", SNAPSHOT_CASES, &seeds[4..]) > 0);
}
