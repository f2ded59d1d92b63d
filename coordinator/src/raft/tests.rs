//! openraft's own storage test suite (`openraft::testing::Suite`) run
//! against this log store and state machine: appends readable at once,
//! durable in order, truncation, purge, vote and log state as openraft
//! relies on them, with appends going through the writer thread.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;

use super::log_store::LogStore;
use super::state_machine::StateMachine;
use super::TypeConfig;

struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = LogStore::open(&dir.path().join("raft-log.redb")).expect("the log opens");
        let sm = StateMachine::open(dir.path(), Limits::default(), &EngineConfig::default())
            .expect("the state machine opens");
        Ok((dir, log, sm))
    }
}

#[test]
fn the_log_store_passes_openraft_s_storage_suite() {
    Suite::test_all(OnDisk).expect("every storage test passes");
}
