//! The openraft adapter: committed log entries applied through the one
//! transition, snapshots built and installed.
//!
//! It only adapts. Each normal entry goes to
//! [`Replicated::apply`](gpumon_core::transition::Replicated::apply) (the
//! function `gpumon replay` runs too); blank and membership entries and the
//! last applied log id are Raft's own bookkeeping, kept beside the data in
//! [`Applied`]. The state is rebuilt on start from the newest snapshot file
//! ([`super::snapshot_file`]) plus the log entries after it, which openraft
//! re-applies.
//!
//! Clones share the state: the Raft core applies through one clone while the
//! HTTP API reads through another.
//!
//! Two bounded broadcast channels carry what was applied to live readers, sent
//! after the write lock is released so a slow reader never holds up apply:
//! [`ClusterEvent`]s ([`StateMachine::subscribe`]) and the windows themselves
//! ([`StateMachine::subscribe_applied`], behind `GET /api/v1/stream`). A
//! reader that falls more than [`APPLIED_CHANNEL_CAPACITY`] batches behind
//! loses the oldest and is told how many (`RecvError::Lagged`).

use std::fmt;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use gpumon_core::cluster::{ClusterEvent, Limits};
use gpumon_core::engine::EngineConfig;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use tokio::sync::broadcast;

pub use super::applied::Applied;
pub use super::snapshot_file::{LoadSnapshotError, SNAPSHOT_FILE};
pub use gpumon_core::transition::AppliedBatch;

use super::copy_times::{CopyFor, CopyTimes};
use super::snapshot_file::{self, decode_applied};
use super::{CommandResult, TypeConfig};

type NodeId = u64;
type Node = openraft::BasicNode;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// The metadata of the snapshot in the data dir; its bytes stay on disk
/// until a follower needs them.
type StoredSnapshot = SnapshotMeta<NodeId, Node>;

/// Batches an [`AppliedBatch`] subscriber may fall behind before it loses the oldest.
pub const APPLIED_CHANNEL_CAPACITY: usize = 1024;

/// A state digest, the applied index it was taken at, and when.
type DigestAt = (Option<u64>, String, std::time::Instant);

/// How long a digest is reused while entries keep being applied.
pub const DIGEST_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// The state machine; clones share state.
#[derive(Clone)]
pub struct StateMachine {
    applied: Arc<RwLock<Applied>>,
    current_snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
    snapshot_path: Arc<PathBuf>,
    snapshots_built: Arc<std::sync::atomic::AtomicU64>,
    digest_cache: Arc<Mutex<Option<DigestAt>>>,
    copy_times: CopyTimes,
    events: broadcast::Sender<ClusterEvent>,
    applied_batches: broadcast::Sender<Arc<AppliedBatch>>,
}

impl fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachine")
            .field("snapshot_path", &self.snapshot_path)
            .finish_non_exhaustive()
    }
}

impl StateMachine {
    /// Opens the state machine of `data_dir`, restoring the newest snapshot if there is one.
    pub fn open(
        data_dir: &Path,
        limits: Limits,
        engine_config: &EngineConfig,
    ) -> Result<Self, LoadSnapshotError> {
        let path = data_dir.join(SNAPSHOT_FILE);
        let (applied, current) = match snapshot_file::load(&path, limits, engine_config)? {
            Some(loaded) => (loaded.applied, Some(loaded.meta)),
            None => (Applied::empty(limits, engine_config), None),
        };
        if applied.data.engine.settings().base() != engine_config {
            tracing::warn!(path = %path.display(),
                "this replica's [engine] differs from the settings its snapshot holds: the cluster's settings (the snapshot's, then the log's) apply, so that every replica computes the same state; change them live with `gpumon config set`");
        }
        let (events, _) = broadcast::channel(1024);
        let (applied_batches, _) = broadcast::channel(APPLIED_CHANNEL_CAPACITY);
        Ok(Self {
            applied: Arc::new(RwLock::new(applied)),
            current_snapshot: Arc::new(Mutex::new(current)),
            snapshot_path: Arc::new(path),
            snapshots_built: Arc::default(),
            digest_cache: Arc::default(),
            copy_times: CopyTimes::default(),
            events,
            applied_batches,
        })
    }

    /// Read access to the applied state (hold it briefly: apply waits for it).
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The index of the last entry applied.
    pub fn applied_index(&self) -> Option<u64> {
        self.read().last_applied.map(|l| l.index)
    }

    /// The applied index and the digest of the replicated data at it: the
    /// cluster view, the engine (histories, detector and alert state), the
    /// action book, the hook data, the step times and the notify book, not
    /// Raft's own bookkeeping, so a blank entry of a new term or a
    /// membership change leaves it alone. See [`super::digest`].
    ///
    /// Nothing slow happens under the state's lock: the data is cloned
    /// under it and hashed after, one computation at a time. A digest is
    /// reused while nothing new was applied, and for
    /// [`DIGEST_REUSE`] while entries keep coming, so a busy replica's
    /// readers see a digest at most that old (with the index it is at).
    pub fn digest(&self) -> (Option<u64>, String) {
        let mut cache = self.digest_cache.lock().unwrap_or_else(|p| p.into_inner());
        let index_now = self.read().last_applied.map(|l| l.index);
        if let Some((at, d, when)) = cache.as_ref() {
            if *at == index_now || when.elapsed() < DIGEST_REUSE {
                return (*at, d.clone());
            }
        }
        let (index, data) = {
            let started = std::time::Instant::now();
            let applied = self.read();
            let copy = (applied.last_applied.map(|l| l.index), applied.data.clone());
            drop(applied);
            self.copy_times.record(CopyFor::Digest, started.elapsed());
            copy
        };
        let d = super::digest::digest(&data).unwrap_or_else(|e| format!("unencodable state: {e}"));
        *cache = Some((index, d.clone(), std::time::Instant::now()));
        (index, d)
    }

    /// How long copies of the state for snapshots and digests held its lock.
    pub fn copy_times(&self) -> &CopyTimes {
        &self.copy_times
    }

    /// Events from every applied entry, for live displays.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events.subscribe()
    }

    /// The windows of every push applied from now on, for `GET /api/v1/stream`.
    pub fn subscribe_applied(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
        self.applied_batches.subscribe()
    }

    /// Writes a received snapshot's file off the runtime, then makes it the
    /// current snapshot.
    async fn persist_snapshot(
        &self,
        meta: SnapshotMeta<NodeId, Node>,
        data: Vec<u8>,
    ) -> StorageResult<()> {
        let me = self.clone();
        let meta2 = meta.clone();
        tokio::task::spawn_blocking(move || snapshot_file::write(&me.snapshot_path, &meta2, &data))
            .await
            .map_err(|e| self.snapshot_err(e))?
            .map_err(|e| self.snapshot_err(e))?;
        self.set_current(meta);
        Ok(())
    }

    fn set_current(&self, meta: SnapshotMeta<NodeId, Node>) {
        *self
            .current_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(meta);
    }

    fn snapshot_err(&self, e: impl fmt::Display) -> StorageError<NodeId> {
        StorageIOError::write_snapshot(
            None,
            AnyError::error(format!("{}: {e}", self.snapshot_path.display())),
        )
        .into()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    /// Apply waits only for the copy (copy-on-write: it shares every entry
    /// until a push changes one). The copy is then encoded twice as it
    /// streams, once to seal the snapshot's id with its checksum and length,
    /// once into the file, so no encoding of the state is ever held in
    /// memory: a snapshot costs the entries pushes change meanwhile.
    ///
    /// The returned snapshot carries the metadata and no data: openraft
    /// 0.9 (pinned) reads only `meta` from a built snapshot, and asks
    /// [`RaftStateMachine::get_current_snapshot`], which reads the file,
    /// when a follower needs the data.
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let started = std::time::Instant::now();
        let copy = self.read().clone();
        let copied = started.elapsed();
        self.copy_times.record(CopyFor::Snapshot, copied);
        let (last_applied, membership) = (copy.last_applied, copy.membership.clone());
        let n = self
            .snapshots_built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = match last_applied {
            Some(id) => format!(
                "{}-{}-{}-{n}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => format!("empty-{n}"),
        };
        let path = self.snapshot_path.clone();
        let built = tokio::task::spawn_blocking(move || {
            let (checksum, len) = snapshot_file::seal_of(&copy).map_err(std::io::Error::other)?;
            let meta = SnapshotMeta {
                last_log_id: last_applied,
                last_membership: membership,
                snapshot_id: snapshot_file::seal_id_with(&base, &checksum),
            };
            snapshot_file::write_encoding(&path, &meta, &copy, len)?;
            Ok::<_, std::io::Error>((meta, len))
        })
        .await
        .map_err(|e| self.snapshot_err(e))?;
        let (meta, len) = built.map_err(|e| self.snapshot_err(e))?;
        self.set_current(meta.clone());
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes = len,
            copy_ms = copied.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "built snapshot"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, Node>)> {
        let applied = self.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<CommandResult>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut results = Vec::new();
        let mut events = Vec::new();
        let mut batches = Vec::new();
        // While nobody streams, applied windows are not packed for streaming.
        let streaming = self.applied_batches.receiver_count() > 0;
        {
            let mut applied = self.applied.write().unwrap_or_else(|p| p.into_inner());
            for entry in entries {
                applied.last_applied = Some(entry.log_id);
                let result = match entry.payload {
                    EntryPayload::Blank => CommandResult::default(),
                    EntryPayload::Membership(m) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), m);
                        CommandResult::default()
                    }
                    EntryPayload::Normal(command) => {
                        let effects = applied.data.apply(command, streaming);
                        events.extend(effects.events);
                        batches.extend(effects.applied.into_iter().map(Arc::new));
                        effects.result
                    }
                };
                results.push(result);
            }
        }
        for e in events {
            // No subscriber is fine: events are for live displays only.
            let _ = self.events.send(e);
        }
        for b in batches {
            // Likewise: a stream client that went away is no error.
            let _ = self.applied_batches.send(b);
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        // Checked before anything is decoded or written: a damaged snapshot
        // or one of another format leaves the data dir as it was.
        snapshot_file::check_sealed(&meta.snapshot_id, &data).map_err(|why| {
            tracing::error!(snapshot = %meta.snapshot_id, %why, "refused a snapshot from the leader");
            StorageIOError::read_snapshot(None, AnyError::error(why))
        })?;
        let new_state = decode_applied(&data).map_err(|e| {
            StorageIOError::read_snapshot(
                None,
                AnyError::error(format!("received snapshot does not decode: {e}")),
            )
        })?;
        self.persist_snapshot(meta.clone(), data).await?;
        *self.applied.write().unwrap_or_else(|p| p.into_inner()) = Applied {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            data: new_state.data,
        };

        tracing::info!(snapshot = %meta.snapshot_id, "installed snapshot");
        Ok(())
    }

    /// Reads the snapshot file: its metadata and data belong together even
    /// when a new snapshot replaced the file since the current one was
    /// recorded (renames are atomic), so what is sent is always whole.
    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let current = self
            .current_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if !current {
            return Ok(None);
        }
        let path = self.snapshot_path.clone();
        let read = tokio::task::spawn_blocking(move || snapshot_file::read_current(&path))
            .await
            .map_err(|e| self.snapshot_err(e))?;
        let (meta, data) =
            read.map_err(|e| StorageIOError::read_snapshot(None, AnyError::error(e.to_string())))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
