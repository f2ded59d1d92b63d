//! [`Applied`]: what a replica's state machine holds, Raft's bookkeeping
//! beside the replicated data.

use std::ops::{Deref, DerefMut};

use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_core::transition::Replicated;
use openraft::{LogId, StoredMembership};
use serde::{Deserialize, Serialize};

/// The applied state: openraft's last applied log id and membership, and
/// the data the commands built. Reads go through to the data
/// (`applied.engine`, `applied.cluster`, ...).
///
/// Its postcard encoding is the data of snapshot format 5 (see
/// [`super::snapshot_file`]): the fields in this order, flattened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// Last log id applied.
    pub last_applied: Option<LogId<u64>>,
    /// Last membership applied.
    pub membership: StoredMembership<u64, openraft::BasicNode>,
    /// What the commands built.
    pub data: Replicated,
}

impl Applied {
    /// Nothing applied yet.
    pub fn empty(limits: Limits, engine_config: &EngineConfig) -> Self {
        Self {
            last_applied: None,
            membership: StoredMembership::default(),
            data: Replicated::new(limits, engine_config),
        }
    }
}

impl Deref for Applied {
    type Target = Replicated;

    fn deref(&self) -> &Replicated {
        &self.data
    }
}

impl DerefMut for Applied {
    fn deref_mut(&mut self) -> &mut Replicated {
        &mut self.data
    }
}
