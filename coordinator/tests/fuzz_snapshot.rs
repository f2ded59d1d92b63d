//! Fuzz target of the snapshot file (`raft/snapshot_file.rs`): `load`,
//! which a replica runs on its data dir at start-up, and `decode_applied`,
//! which it runs on the state a leader sends.
//!
//! Inputs: the fixtures of every format (`tests/fixtures/snapshots/
//! v{1..=CURRENT_VERSION}.bin`) damaged by the shared mutator (truncations,
//! bit flips, splices between versions, length fields blown up), and the
//! current format's state alone, damaged the same way.
//!
//! Property: `load` never panics; it returns the snapshot, upgraded to the
//! current format (whose data decodes again), or a `LoadSnapshotError`
//! naming the file. `decode_applied` returns the state or an error.
//!
//! Cases: the defaults below, times `GPUMON_FUZZ_SCALE`, or exactly
//! `GPUMON_FUZZ_CASES`; seed `GPUMON_FUZZ_SEED`; see docs/testing.md.

use gpumon_testkit::fuzz as kit;

use std::path::{Path, PathBuf};

use gpumon_coordinator::raft::snapshot_file::{self, Loaded};
use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;

/// Default cases of whole files (about two seconds in a debug build).
const FILE_CASES: u64 = 1_500;
/// Default cases of the state alone (under a second).
const STATE_CASES: u64 = 6_000;

fn fixtures() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots");
    (1..=snapshot_file::CURRENT_VERSION)
        .map(|v| std::fs::read(dir.join(format!("v{v}.bin"))).unwrap())
        .collect()
}

fn load(path: &Path) -> Result<Option<Loaded>, snapshot_file::LoadSnapshotError> {
    snapshot_file::load(path, Limits::default(), &EngineConfig::default())
}

/// Writes `bytes` at `path` and loads it; checks the property, true when
/// it loaded.
fn check_file(path: &Path, bytes: &[u8]) -> bool {
    std::fs::write(path, bytes).unwrap();
    match load(path) {
        Ok(Some(loaded)) => {
            assert!((1..=snapshot_file::CURRENT_VERSION).contains(&loaded.version));
            let state = snapshot_file::decode_applied(&loaded.data);
            assert!(state.is_ok(), "loaded data does not decode: {state:?}");
            true
        }
        Ok(None) => panic!("{} exists", path.display()),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&path.display().to_string()),
                "{text} names no file"
            );
            false
        }
    }
}

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(snapshot_file::SNAPSHOT_FILE);
    (dir, path)
}

#[test]
fn every_fixture_loads() {
    let (_dir, path) = scratch();
    for (i, bytes) in fixtures().iter().enumerate() {
        assert!(check_file(&path, bytes), "v{}", i + 1);
    }
}

#[test]
fn damaged_snapshot_files_load_or_name_the_file() {
    let (_dir, path) = scratch();
    let fixtures = fixtures();
    let mut loaded = 0u64;
    kit::run("snapshot file", FILE_CASES, |rng| {
        loaded += u64::from(check_file(&path, &kit::binary_input(rng, &fixtures, 4096)));
    });
    assert!(loaded > 0, "some damage (a changed number) still loads");
}

#[test]
fn damaged_state_decodes_or_fails() {
    let (_dir, path) = scratch();
    let current = fixtures().pop().expect("the current format's fixture");
    std::fs::write(&path, current).unwrap();
    let data = load(&path).unwrap().unwrap().data;
    let corpus = [data.clone()];
    kit::run("snapshot state", STATE_CASES, |rng| {
        let bytes = kit::mutate(rng, &data, &corpus, &[], &[]);
        if let Ok(applied) = snapshot_file::decode_applied(&bytes) {
            let again = snapshot_file::encode_applied(&applied).unwrap();
            assert!(snapshot_file::decode_applied(&again).is_ok());
        }
    });
}

#[test]
fn a_missing_file_is_none_and_an_empty_one_an_error() {
    let (dir, path) = scratch();
    assert!(load(&path).unwrap().is_none());
    assert!(!check_file(&path, b""));
    drop(dir);
}
