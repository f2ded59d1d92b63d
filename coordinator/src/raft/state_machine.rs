//! The replicated state machine: committed commands applied to the cluster
//! view and the detection engine.
//!
//! The state lives in memory ([`gpumon_common::view::ClusterState`] and
//! [`gpumon_common::engine::Engine`], both deterministic, so every replica
//! holds the same alerts and forecasts) and is
//! rebuilt on start from the newest snapshot file plus the log entries after
//! it, which openraft re-applies. Snapshots are postcard files written
//! atomically (temporary file, fsync, rename), so a crash mid-write leaves
//! the previous snapshot intact.
//!
//! Clones share the state: the Raft core applies through one clone while the
//! HTTP API reads through another.
//!
//! Two bounded broadcast channels carry what was applied to live readers, sent
//! after the write lock is released so a slow reader never holds up apply:
//! [`ViewEvent`]s ([`StateMachine::subscribe`]) and the windows themselves
//! ([`StateMachine::subscribe_applied`], behind `GET /api/v1/stream`). A
//! reader that falls more than [`APPLIED_CHANNEL_CAPACITY`] batches behind
//! loses the oldest and is told how many (`RecvError::Lagged`).

use std::fmt;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use gpumon_common::actions::ActionBook;
use gpumon_common::engine::{Engine, EngineConfig};
use gpumon_common::hook::{check_record, HookState, StepTimes};
use gpumon_common::notify::NotifyBook;
use gpumon_common::view::{ClusterState, Limits, ViewEvent};
use gpumon_proto::{GpuWindow, HookRecord};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::{Command, CommandResult, CommandV1, TypeConfig};

type NodeId = u64;
type Node = openraft::BasicNode;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// A snapshot's metadata and bytes.
type StoredSnapshot = (SnapshotMeta<NodeId, Node>, Arc<Vec<u8>>);

/// Name of the snapshot file inside the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.bin";

/// Batches an [`AppliedBatch`] subscriber may fall behind before it loses the oldest.
pub const APPLIED_CHANNEL_CAPACITY: usize = 1024;

/// The windows and hook records of one pushed batch that this replica
/// applied: duplicates and invalid ones left out, in the batch's order.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedBatch {
    /// Node the windows were sampled on.
    pub node: String,
    /// The applied windows.
    pub windows: Vec<GpuWindow>,
    /// The applied hook records (windows and records are not both empty).
    pub hook: Vec<HookRecord>,
}

/// What the state machine holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// Last log id applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// Last membership applied.
    pub membership: StoredMembership<NodeId, Node>,
    /// The cluster view.
    pub state: ClusterState,
    /// The detection engine: forecasts, alerts, detector state.
    pub engine: Engine,
    /// Actions on training processes and how they ended.
    pub actions: ActionBook,
    /// Hook data beside the engine: named snapshots, counters.
    pub hook: HookState,
    /// Step and section times per rank, from the hooks.
    pub steps: StepTimes,
    /// Notifications the leaders sent, per receiver and alert key.
    pub notify: NotifyBook,
}

impl Applied {
    /// Nothing applied yet.
    fn empty(limits: Limits, engine_config: &EngineConfig) -> Self {
        Self {
            last_applied: None,
            membership: StoredMembership::default(),
            state: ClusterState::new(limits),
            engine: Engine::new(engine_config.clone()),
            actions: ActionBook::default(),
            hook: HookState::default(),
            steps: StepTimes::default(),
            notify: NotifyBook::default(),
        }
    }

    /// Folds a batch's valid step records into the step times, and forgets
    /// the jobs the engine no longer tracks.
    fn observe_steps(&mut self, records: &[HookRecord]) {
        let mut any = false;
        for record in records {
            if let HookRecord::Step(s) = record {
                if check_record(record).is_ok() {
                    self.steps.observe(s);
                    any = true;
                }
            }
        }
        if any {
            let engine = &self.engine;
            self.steps.retain_jobs(|job| engine.tracks_job(job));
        }
    }

    /// Data time for actions, seconds: the newest time the engine has seen.
    pub fn now_t(&self) -> f64 {
        let t = self.engine.now();
        if t.is_finite() {
            t
        } else {
            0.0
        }
    }
}

/// [`Applied`] as snapshot format 3 wrote it, before step times.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct AppliedV3 {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    state: ClusterState,
    engine: Engine,
    actions: ActionBook,
    hook: HookState,
}

/// [`Applied`] as snapshot format 2 wrote it, before actions and hook data.
#[derive(Deserialize)]
struct AppliedV2 {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    state: ClusterState,
    engine: Engine,
}

/// [`Applied`] as snapshot format 1 wrote it, before the engine existed.
#[derive(Deserialize)]
struct AppliedV1 {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    state: ClusterState,
}

/// A snapshot file: versioned, because it outlives binaries.
#[derive(Serialize, Deserialize)]
enum SnapshotFile {
    /// The cluster view only.
    V1 {
        meta: SnapshotMeta<NodeId, Node>,
        data: Vec<u8>,
    },
    /// The cluster view and the detection engine.
    V2 {
        meta: SnapshotMeta<NodeId, Node>,
        data: Vec<u8>,
    },
    /// The cluster view, the engine, actions and hook data.
    V3 {
        meta: SnapshotMeta<NodeId, Node>,
        data: Vec<u8>,
    },
    /// All of [`Applied`]: format 3, step times and the notify book.
    V4 {
        meta: SnapshotMeta<NodeId, Node>,
        data: Vec<u8>,
    },
}

/// A state digest and the applied index it was taken at.
type DigestAt = (Option<u64>, String);

/// [`SnapshotFile::V4`] borrowed, for writing without copying the data;
/// postcard encodes both the same way.
#[derive(Serialize)]
enum SnapshotFileRef<'a> {
    #[allow(dead_code)]
    V1,
    #[allow(dead_code)]
    V2,
    #[allow(dead_code)]
    V3,
    V4 {
        meta: &'a SnapshotMeta<NodeId, Node>,
        data: &'a [u8],
    },
}

/// The state machine; clones share state.
#[derive(Clone)]
pub struct StateMachine {
    applied: Arc<RwLock<Applied>>,
    current_snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
    snapshot_path: Arc<PathBuf>,
    snapshots_built: Arc<std::sync::atomic::AtomicU64>,
    digest_cache: Arc<Mutex<Option<DigestAt>>>,
    events: broadcast::Sender<ViewEvent>,
    applied_batches: broadcast::Sender<Arc<AppliedBatch>>,
}

impl fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachine")
            .field("snapshot_path", &self.snapshot_path)
            .finish_non_exhaustive()
    }
}

/// Why the snapshot file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load snapshot {path}: {reason}")]
pub struct LoadSnapshotError {
    path: PathBuf,
    reason: String,
}

impl StateMachine {
    /// Opens the state machine of `data_dir`, restoring the newest snapshot if there is one.
    pub fn open(
        data_dir: &Path,
        limits: Limits,
        engine_config: &EngineConfig,
    ) -> Result<Self, LoadSnapshotError> {
        let path = data_dir.join(SNAPSHOT_FILE);
        let fail = |reason: String| LoadSnapshotError {
            path: path.clone(),
            reason,
        };
        let mut applied = Applied::empty(limits, engine_config);
        let mut current = None;
        let upgraded = |applied: &Applied| -> Result<Arc<Vec<u8>>, LoadSnapshotError> {
            let data = postcard::to_allocvec(applied).map_err(|e| fail(e.to_string()))?;
            Ok(Arc::new(data))
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let file: SnapshotFile = postcard::from_bytes(&bytes)
                    .map_err(|e| fail(format!("does not decode: {e}")))?;
                match file {
                    SnapshotFile::V1 { meta, data } => {
                        let old: AppliedV1 =
                            postcard::from_bytes(&data).map_err(|e| fail(e.to_string()))?;
                        tracing::warn!(
                            path = %path.display(),
                            "snapshot format 1 has no detector state; detectors start afresh"
                        );
                        applied.last_applied = old.last_applied;
                        applied.membership = old.membership;
                        applied.state = old.state;
                        current = Some((meta, upgraded(&applied)?));
                    }
                    SnapshotFile::V2 { meta, data } => {
                        let old: AppliedV2 =
                            postcard::from_bytes(&data).map_err(|e| fail(e.to_string()))?;
                        tracing::warn!(
                            path = %path.display(),
                            "snapshot format 2 has no action book; actions start afresh"
                        );
                        applied.last_applied = old.last_applied;
                        applied.membership = old.membership;
                        applied.state = old.state;
                        applied.engine = old.engine;
                        current = Some((meta, upgraded(&applied)?));
                    }
                    SnapshotFile::V3 { meta, data } => {
                        let old: AppliedV3 =
                            postcard::from_bytes(&data).map_err(|e| fail(e.to_string()))?;
                        tracing::info!(
                            path = %path.display(),
                            "snapshot format 3 has no step times; they fill in from the next steps"
                        );
                        applied.last_applied = old.last_applied;
                        applied.membership = old.membership;
                        applied.state = old.state;
                        applied.engine = old.engine;
                        applied.actions = old.actions;
                        applied.hook = old.hook;
                        current = Some((meta, upgraded(&applied)?));
                    }
                    SnapshotFile::V4 { meta, data } => {
                        applied = decode_applied(&data).map_err(|e| fail(e.to_string()))?;
                        current = Some((meta, Arc::new(data)));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e.to_string())),
        }
        let (events, _) = broadcast::channel(1024);
        let (applied_batches, _) = broadcast::channel(APPLIED_CHANNEL_CAPACITY);
        Ok(Self {
            applied: Arc::new(RwLock::new(applied)),
            current_snapshot: Arc::new(Mutex::new(current)),
            snapshot_path: Arc::new(path),
            snapshots_built: Arc::default(),
            digest_cache: Arc::default(),
            events,
            applied_batches,
        })
    }

    /// Read access to the applied state (hold it briefly: apply waits for it).
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The applied index and the digest of the replicated data at it: the
    /// cluster view, the engine (histories, detector and alert state), the
    /// action book, the hook data, the step times and the notify book, not Raft's own
    /// bookkeeping, so a blank entry of a new term or a
    /// membership change leaves it alone. See [`super::digest`]; cached until
    /// the next entry is applied.
    pub fn digest(&self) -> (Option<u64>, String) {
        let applied = self.read();
        let index = applied.last_applied.map(|l| l.index);
        let mut cache = self.digest_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, d)) = cache.as_ref() {
            if *at == index {
                return (index, d.clone());
            }
        }
        let d = super::digest::digest(&(
            &applied.state,
            &applied.engine,
            &applied.actions,
            &applied.hook,
            &applied.steps,
            &applied.notify,
        ))
        .unwrap_or_else(|e| format!("unencodable state: {e}"));
        *cache = Some((index, d.clone()));
        (index, d)
    }

    /// Events from every applied entry, for live displays.
    pub fn subscribe(&self) -> broadcast::Receiver<ViewEvent> {
        self.events.subscribe()
    }

    /// The windows of every push applied from now on, for `GET /api/v1/stream`.
    pub fn subscribe_applied(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
        self.applied_batches.subscribe()
    }

    /// Writes the snapshot file atomically (temporary file, fsync, rename,
    /// fsync of the directory), streaming: no copy of `data` is made.
    fn write_snapshot_file(
        &self,
        meta: &SnapshotMeta<NodeId, Node>,
        data: &[u8],
    ) -> std::io::Result<()> {
        let file = SnapshotFileRef::V4 { meta, data };
        let tmp = self.snapshot_path.with_extension("bin.tmp");
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
            postcard::to_io(&file, &mut w).map_err(std::io::Error::other)?;
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, self.snapshot_path.as_path())?;
        if let Some(dir) = self.snapshot_path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Writes the snapshot file off the runtime, then makes it the current snapshot.
    async fn persist_snapshot(
        &self,
        meta: SnapshotMeta<NodeId, Node>,
        data: Arc<Vec<u8>>,
    ) -> StorageResult<()> {
        let me = self.clone();
        let (meta2, data2) = (meta.clone(), data.clone());
        tokio::task::spawn_blocking(move || me.write_snapshot_file(&meta2, &data2))
            .await
            .map_err(|e| self.snapshot_err(e))?
            .map_err(|e| self.snapshot_err(e))?;
        *self
            .current_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((meta, data));
        Ok(())
    }

    fn snapshot_err(&self, e: impl fmt::Display) -> StorageError<NodeId> {
        StorageIOError::write_snapshot(
            None,
            AnyError::error(format!("{}: {e}", self.snapshot_path.display())),
        )
        .into()
    }
}

fn decode_applied(data: &[u8]) -> Result<Applied, postcard::Error> {
    postcard::from_bytes(data)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        // Apply waits only for the copy; encoding and writing happen after.
        let started = std::time::Instant::now();
        let copy = self.read().clone();
        let copied = started.elapsed();
        let (last_applied, membership) = (copy.last_applied, copy.membership.clone());
        let data = tokio::task::spawn_blocking(move || postcard::to_allocvec(&copy))
            .await
            .map_err(|e| self.snapshot_err(e))?
            .map_err(|e| self.snapshot_err(e))?;
        let n = self
            .snapshots_built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(id) => format!(
                "{}-{}-{}-{n}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => format!("empty-{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let data = Arc::new(data);
        self.persist_snapshot(meta.clone(), data.clone()).await?;
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes = data.len(),
            copy_ms = copied.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "built snapshot"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.as_ref().clone())),
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
                    EntryPayload::Normal(Command::V1(CommandV1::Hello(hello))) => {
                        events.extend(applied.state.apply_hello(&hello));
                        CommandResult::default()
                    }
                    EntryPayload::Normal(Command::V1(CommandV1::Push(batch))) => {
                        let out = applied.state.apply_push(&batch);
                        for &i in &out.applied_indexes {
                            if let Some(w) = batch.windows.get(i as usize) {
                                applied.engine.observe_window(&batch.node, w);
                            }
                        }
                        events.extend(out.events);
                        if !out.duplicate {
                            let applied = &mut *applied;
                            applied.hook.apply(&mut applied.engine, &batch.hook);
                            applied.observe_steps(&batch.hook);
                            let t = applied.now_t();
                            for ack in &batch.acks {
                                applied.actions.ack(&batch.node, ack, t);
                            }
                            if !applied.actions.nothing_outstanding() {
                                let state = &applied.state;
                                applied
                                    .actions
                                    .expire(t, |job, rank| state.rank_place(job, rank));
                            }
                        }
                        let hook_streamed = !out.duplicate && !batch.hook.is_empty();
                        if streaming && (!out.applied_indexes.is_empty() || hook_streamed) {
                            // The entry is ours: move the applied windows out, no copy.
                            let mut keep = vec![false; batch.windows.len()];
                            for &i in &out.applied_indexes {
                                if let Some(k) = keep.get_mut(i as usize) {
                                    *k = true;
                                }
                            }
                            let windows: Vec<GpuWindow> = batch
                                .windows
                                .into_iter()
                                .zip(keep)
                                .filter_map(|(w, k)| k.then_some(w))
                                .collect();
                            let hook = if hook_streamed {
                                batch
                                    .hook
                                    .into_iter()
                                    .filter(|r| check_record(r).is_ok())
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            batches.push(Arc::new(AppliedBatch {
                                node: batch.node,
                                windows,
                                hook,
                            }));
                        }
                        CommandResult {
                            duplicate: out.duplicate,
                            windows_applied: out.windows_applied as u32,
                            windows_skipped: out.windows_skipped as u32,
                            issued: Vec::new(),
                        }
                    }
                    EntryPayload::Normal(Command::V1(CommandV1::IssueActions {
                        requests,
                        rules,
                    })) => {
                        let applied = &mut *applied;
                        let t = applied.now_t();
                        let issued = requests
                            .iter()
                            .map(|req| {
                                let place = applied.state.rank_place(&req.job, req.rank);
                                applied.actions.issue(t, req, &rules, place)
                            })
                            .collect();
                        CommandResult {
                            issued,
                            ..CommandResult::default()
                        }
                    }
                    EntryPayload::Normal(Command::V1(CommandV1::DeliverActions { node, ids })) => {
                        let t = applied.now_t();
                        applied.actions.deliver(&node, &ids, t);
                        CommandResult::default()
                    }
                    EntryPayload::Normal(Command::V1(CommandV1::Notified { entries, at_ms })) => {
                        applied.notify.apply(&entries, at_ms);
                        CommandResult::default()
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
        let new_state = decode_applied(&data).map_err(|e| {
            StorageIOError::read_snapshot(
                None,
                AnyError::error(format!("received snapshot does not decode: {e}")),
            )
        })?;
        self.persist_snapshot(meta.clone(), Arc::new(data)).await?;
        *self.applied.write().unwrap_or_else(|p| p.into_inner()) = Applied {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            ..new_state
        };

        tracing::info!(snapshot = %meta.snapshot_id, "installed snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let current = self
            .current_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(current.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.as_ref().clone())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_3_snapshot_loads_with_its_actions_and_no_step_times() {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig::default();
        let mut old = Applied::empty(Limits::default(), &config);
        old.last_applied = Some(LogId::new(openraft::CommittedLeaderId::new(3, 1), 42));
        let v3 = AppliedV3 {
            last_applied: old.last_applied,
            membership: old.membership.clone(),
            state: old.state.clone(),
            engine: old.engine.clone(),
            actions: old.actions.clone(),
            hook: old.hook.clone(),
        };
        let meta = SnapshotMeta {
            last_log_id: old.last_applied,
            last_membership: StoredMembership::default(),
            snapshot_id: "old".into(),
        };
        let file = SnapshotFile::V3 {
            meta,
            data: postcard::to_allocvec(&v3).unwrap(),
        };
        std::fs::write(
            dir.path().join(SNAPSHOT_FILE),
            postcard::to_allocvec(&file).unwrap(),
        )
        .unwrap();

        let sm = StateMachine::open(dir.path(), Limits::default(), &config).unwrap();
        let applied = sm.read();
        assert_eq!(applied.last_applied.map(|l| l.index), Some(42));
        assert_eq!(applied.steps, StepTimes::default());
        assert!(applied.notify.is_empty(), "format 3 has no notify book");
        let current = sm.current_snapshot.lock().unwrap();
        let (_, data) = current
            .as_ref()
            .expect("the loaded snapshot is served to followers");
        let served = decode_applied(data).expect("re-encoded in the current format");
        assert_eq!(served.last_applied, applied.last_applied);
    }
}
