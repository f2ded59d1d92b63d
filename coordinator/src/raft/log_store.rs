//! The Raft log and vote, durable in a redb file.
//!
//! Layout: table `log` maps index → postcard(Entry); table `meta` holds the
//! vote, the committed log id and the last purged log id. Every write is a
//! redb transaction committed with immediate durability (fsync) before
//! openraft hears about it: [`LogFlushed`] is called only after the commit
//! returns, so an acknowledged entry survives a crash.
//!
//! Writes go through one writer thread (`log_writer`), which groups the
//! appends queued meanwhile into one transaction: `append` returns once the
//! entries are readable from memory, and openraft hears they are durable
//! only after the fsync.
//!
//! The committed log id is kept in memory as openraft advances it (on every
//! commit, many times a second under load) and written with the next
//! append's transaction, not in a transaction of its own: openraft allows
//! it to be lost, and a replica whose stored one lags only re-applies less
//! at start and learns the rest from the leader.
//!
//! A record that does not decode is a storage error naming the file and the
//! index; entries are never skipped silently.

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Serialize};

use super::log_writer::{Pending, Row, RowSink, Writer};
use super::TypeConfig;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_PURGED: &str = "last_purged";

/// Memory redb may hold as its page cache and write buffer. Its default,
/// 1 GiB, filled up under sustained ingest and was a third of a replica's
/// resident set at 16k GPUs. The log is read near its tail (replication;
/// entries not yet written come from `Pending`) and near its head when
/// purged; the operating system's page cache keeps the file for the rest.
pub const LOG_CACHE_BYTES: usize = 32 << 20;

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// The redb-backed log store; cheap to clone (clones share the database).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    path: Arc<PathBuf>,
    committed: CommittedIndex,
    /// The newest committed log id openraft saved, written with the next append.
    committed_id: Arc<Mutex<Option<LogId<NodeId>>>>,
    /// Entries appended and not yet written.
    pending: Pending,
    /// The writer thread's queue; `None` in the writer thread's own copy.
    writer: Option<Writer<LogStore>>,
}

/// The newest committed log index this replica knows of, shared with the API
/// (openraft 0.9's metrics do not carry it). Updated when openraft saves it.
#[derive(Debug, Clone, Default)]
pub struct CommittedIndex(Arc<AtomicU64>);

impl CommittedIndex {
    /// The index, `None` before anything was committed.
    pub fn get(&self) -> Option<u64> {
        self.0.load(Relaxed).checked_sub(1)
    }

    fn set(&self, committed: Option<LogId<NodeId>>) {
        self.0.store(committed.map_or(0, |c| c.index + 1), Relaxed);
    }
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.path)
            .finish()
    }
}

/// Why the log file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open Raft log {path}: {reason}")]
pub struct OpenLogError {
    path: PathBuf,
    reason: String,
}

impl LogStore {
    /// The committed index, kept current as openraft advances it.
    pub fn committed(&self) -> CommittedIndex {
        self.committed.clone()
    }

    /// Opens (or creates) the log at `path` and checks its tables.
    pub fn open(path: &Path) -> Result<Self, OpenLogError> {
        let fail = |reason: String| OpenLogError {
            path: path.to_owned(),
            reason,
        };
        let db = Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(|e| fail(e.to_string()))?;
        let txn = db.begin_write().map_err(|e| fail(e.to_string()))?;
        txn.open_table(LOG).map_err(|e| fail(e.to_string()))?;
        txn.open_table(META).map_err(|e| fail(e.to_string()))?;
        txn.commit().map_err(|e| fail(e.to_string()))?;
        let store = Self {
            db: Arc::new(db),
            path: Arc::new(path.to_owned()),
            committed: CommittedIndex::default(),
            committed_id: Arc::default(),
            pending: Pending::default(),
            writer: None,
        };
        // Decode the metadata now, so a corrupt file stops the replica at start-up.
        store
            .read_meta::<Vote<NodeId>>(KEY_VOTE)
            .map_err(|e| fail(e.to_string()))?;
        let committed = store
            .read_meta::<Option<LogId<NodeId>>>(KEY_COMMITTED)
            .map_err(|e| fail(e.to_string()))?
            .flatten();
        store.committed.set(committed);
        *store.committed_id() = committed;
        let purged = store
            .read_meta::<LogId<NodeId>>(KEY_PURGED)
            .map_err(|e| fail(e.to_string()))?;
        store
            .check_entries(purged.map_or(0, |p| p.index + 1))
            .map_err(|e| fail(e.to_string()))?;
        let writer = Writer::start(store.clone(), store.pending.clone())
            .map_err(|e| fail(format!("cannot start the log writer thread: {e}")))?;
        Ok(Self {
            writer: Some(writer),
            ..store
        })
    }

    /// The writer thread's queue (every store but the writer's own has one).
    fn writer(&self) -> StorageResult<&Writer<LogStore>> {
        self.writer
            .as_ref()
            .ok_or_else(|| self.write_err("this copy of the log has no writer"))
    }

    /// Runs `work` on the writer thread, after every write queued before it.
    async fn write_in_order<F>(&self, work: F) -> StorageResult<()>
    where
        F: FnOnce(&LogStore) -> StorageResult<()> + Send + 'static,
    {
        self.writer()?
            .run(work)
            .await
            .unwrap_or_else(|| Err(self.write_err("the log writer thread stopped")))
    }

    /// Decodes every entry (the log is kept short behind snapshots) and checks
    /// that the indexes run without a gap from `first`, so a damaged file stops
    /// the replica at start-up instead of losing entries later.
    fn check_entries(&self, first: u64) -> StorageResult<()> {
        let txn = self.db.begin_read().map_err(|e| self.read_err(e))?;
        let table = txn.open_table(LOG).map_err(|e| self.read_err(e))?;
        let mut expect = None;
        for row in table.iter().map_err(|e| self.read_err(e))? {
            let (index, raw) = row.map_err(|e| self.read_err(e))?;
            let index = index.value();
            let entry = self.decode_entry(index, raw.value())?;
            if entry.log_id.index != index {
                return Err(self.read_err(format!(
                    "log entry stored at {index} claims index {}",
                    entry.log_id.index
                )));
            }
            let want = expect.unwrap_or(first);
            if index != want {
                return Err(self.read_err(format!("log entries {want}..{index} are missing")));
            }
            expect = Some(index + 1);
        }
        Ok(())
    }

    fn committed_id(&self) -> std::sync::MutexGuard<'_, Option<LogId<NodeId>>> {
        self.committed_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> StorageResult<Option<T>> {
        let txn = self.db.begin_read().map_err(|e| self.read_err(e))?;
        let table = txn.open_table(META).map_err(|e| self.read_err(e))?;
        let Some(raw) = table.get(key).map_err(|e| self.read_err(e))? else {
            return Ok(None);
        };
        postcard::from_bytes(raw.value())
            .map(Some)
            .map_err(|e| self.read_err(format!("record {key:?} does not decode: {e}")))
    }

    fn write_meta<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        durability: Durability,
    ) -> StorageResult<()> {
        let bytes = postcard::to_allocvec(value).map_err(|e| self.write_err(e))?;
        let mut txn = self.db.begin_write().map_err(|e| self.write_err(e))?;
        txn.set_durability(durability)
            .map_err(|e| self.write_err(e))?;
        {
            let mut table = txn.open_table(META).map_err(|e| self.write_err(e))?;
            table
                .insert(key, bytes.as_slice())
                .map_err(|e| self.write_err(e))?;
        }
        txn.commit().map_err(|e| self.write_err(e))
    }

    fn read_err(&self, e: impl fmt::Display) -> StorageError<NodeId> {
        StorageIOError::read_logs(AnyError::error(format!("{}: {e}", self.path.display()))).into()
    }

    fn write_err(&self, e: impl fmt::Display) -> StorageError<NodeId> {
        StorageIOError::write_logs(AnyError::error(format!("{}: {e}", self.path.display()))).into()
    }

    fn decode_entry(&self, index: u64, raw: &[u8]) -> StorageResult<Entry<TypeConfig>> {
        postcard::from_bytes(raw)
            .map_err(|e| self.read_err(format!("log entry {index} does not decode: {e}")))
    }

    /// Runs blocking redb work off the async runtime.
    async fn blocking<T, F>(&self, f: F) -> StorageResult<T>
    where
        T: Send + 'static,
        F: FnOnce(LogStore) -> StorageResult<T> + Send + 'static,
    {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(me))
            .await
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e.to_string())).into())
            .and_then(|r| r)
    }

    fn entries_in(&self, range: (Bound<u64>, Bound<u64>)) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let txn = self.db.begin_read().map_err(|e| self.read_err(e))?;
        let table = txn.open_table(LOG).map_err(|e| self.read_err(e))?;
        let mut out = Vec::new();
        for item in table.range::<u64>(range).map_err(|e| self.read_err(e))? {
            let (k, v) = item.map_err(|e| self.read_err(e))?;
            out.push(self.decode_entry(k.value(), v.value())?);
        }
        Ok(out)
    }

    fn last_entry(&self) -> StorageResult<Option<Entry<TypeConfig>>> {
        let txn = self.db.begin_read().map_err(|e| self.read_err(e))?;
        let table = txn.open_table(LOG).map_err(|e| self.read_err(e))?;
        let last = table.last().map_err(|e| self.read_err(e))?;
        match last {
            Some((k, v)) => Ok(Some(self.decode_entry(k.value(), v.value())?)),
            None => Ok(None),
        }
    }

    /// Removes entries in `range`.
    fn remove_range(
        &self,
        range: (Bound<u64>, Bound<u64>),
        purged: Option<LogId<NodeId>>,
    ) -> StorageResult<()> {
        let txn = self.db.begin_write().map_err(|e| self.write_err(e))?;
        {
            let mut table = txn.open_table(LOG).map_err(|e| self.write_err(e))?;
            table
                .retain_in::<u64, _>(range, |_, _| false)
                .map_err(|e| self.write_err(e))?;
            if let Some(purged) = purged {
                let bytes = postcard::to_allocvec(&purged).map_err(|e| self.write_err(e))?;
                let mut meta = txn.open_table(META).map_err(|e| self.write_err(e))?;
                meta.insert(KEY_PURGED, bytes.as_slice())
                    .map_err(|e| self.write_err(e))?;
            }
        }
        txn.commit().map_err(|e| self.write_err(e))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        let (first_pending, from_memory) = self.pending.read(bounds);
        // Below the first pending entry, everything is in the file.
        let in_file = (bounds.0, below(bounds.1, first_pending));
        let mut entries = if is_empty(in_file) {
            Vec::new()
        } else {
            self.blocking(move |s| s.entries_in(in_file)).await?
        };
        entries.extend(from_memory);
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        self.blocking(|s| {
            let last_purged_log_id = s.read_meta::<LogId<NodeId>>(KEY_PURGED)?;
            let last = match s.pending.last() {
                Some(last) => Some(last),
                None => s.last_entry()?.map(|e| e.log_id).or(last_purged_log_id),
            };
            Ok(LogState {
                last_purged_log_id,
                last_log_id: last,
            })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        let vote = *vote;
        self.write_in_order(move |s| s.write_meta(KEY_VOTE, &vote, Durability::Immediate))
            .await
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.blocking(|s| s.read_meta(KEY_VOTE)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        self.committed.set(committed);
        // Stored by the next append (see the module doc).
        *self.committed_id() = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        self.blocking(|s| {
            Ok(s.read_meta::<Option<LogId<NodeId>>>(KEY_COMMITTED)?
                .flatten())
        })
        .await
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let rows = entries
            .iter()
            .map(|e| {
                postcard::to_allocvec(e).map(|bytes| Row {
                    log_id: e.log_id,
                    bytes,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.write_err(e))?;
        let writer = self.writer()?;
        // Readable before `append` returns; durable when `callback` hears so.
        self.pending.add(entries);
        if writer.append(rows, callback) {
            Ok(())
        } else {
            Err(self.write_err("the log writer thread stopped"))
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let gone = (Bound::Included(log_id.index), Bound::Unbounded);
        self.pending.drop_range(gone);
        self.write_in_order(move |s| s.remove_range(gone, None))
            .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let gone = (Bound::Unbounded, Bound::Included(log_id.index));
        self.pending.drop_range(gone);
        self.write_in_order(move |s| s.remove_range(gone, Some(log_id)))
            .await
    }
}

/// `end`, no further than below `first` when there is one.
fn below(end: Bound<u64>, first: Option<u64>) -> Bound<u64> {
    match (end, first) {
        (end, None) => end,
        (Bound::Unbounded, Some(f)) => Bound::Excluded(f),
        (Bound::Included(e), Some(f)) if e >= f => Bound::Excluded(f),
        (Bound::Excluded(e), Some(f)) => Bound::Excluded(e.min(f)),
        (end, Some(_)) => end,
    }
}

/// True when no index lies in `range`.
fn is_empty(range: (Bound<u64>, Bound<u64>)) -> bool {
    let start = match range.0 {
        Bound::Included(s) => Some(s),
        Bound::Excluded(s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let Some(start) = start else { return true };
    match range.1 {
        Bound::Included(e) => start > e,
        Bound::Excluded(e) => start >= e,
        Bound::Unbounded => false,
    }
}

impl RowSink for LogStore {
    /// Stores encoded entries and the committed log id openraft saved last,
    /// in one transaction that returns after fsync.
    fn write_rows(&self, rows: &[Row]) -> StorageResult<()> {
        let committed =
            postcard::to_allocvec(&*self.committed_id()).map_err(|e| self.write_err(e))?;
        let txn = self.db.begin_write().map_err(|e| self.write_err(e))?;
        {
            let mut table = txn.open_table(LOG).map_err(|e| self.write_err(e))?;
            for row in rows {
                table
                    .insert(row.log_id.index, row.bytes.as_slice())
                    .map_err(|e| self.write_err(e))?;
            }
            let mut meta = txn.open_table(META).map_err(|e| self.write_err(e))?;
            meta.insert(KEY_COMMITTED, committed.as_slice())
                .map_err(|e| self.write_err(e))?;
        }
        txn.commit().map_err(|e| self.write_err(e))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn blank(index: u64) -> Vec<u8> {
        let entry = Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        };
        postcard::to_allocvec(&entry).unwrap()
    }

    fn row(index: u64) -> Row {
        Row {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            bytes: blank(index),
        }
    }

    fn write_rows(path: &Path, rows: &[(u64, Vec<u8>)]) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(LOG).unwrap();
            for (i, bytes) in rows {
                t.insert(*i, bytes.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }

    #[test]
    fn a_clean_log_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        write_rows(&path, &[(0, blank(0)), (1, blank(1)), (2, blank(2))]);
        LogStore::open(&path).unwrap();
    }

    #[test]
    fn an_undecodable_entry_stops_the_open_naming_file_and_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        write_rows(&path, &[(0, blank(0)), (1, vec![0xff; 7])]);
        let err = LogStore::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("log.redb") && err.contains("log entry 1"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_committed_id_is_stored_with_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        let committed = Some(LogId::new(CommittedLeaderId::new(1, 1), 1));
        {
            let mut store = LogStore::open(&path).unwrap();
            store.write_rows(&[row(0), row(1)]).unwrap();
            store.save_committed(committed).await.unwrap();
            assert_eq!(store.committed().get(), Some(1), "the API sees it at once");
            assert_eq!(
                store.read_committed().await.unwrap(),
                None,
                "no write of its own"
            );
            store.write_rows(&[row(2)]).unwrap();
        }
        let mut reopened = LogStore::open(&path).unwrap();
        assert_eq!(reopened.read_committed().await.unwrap(), committed);
        assert_eq!(reopened.committed().get(), Some(1));
    }

    #[test]
    fn a_missing_entry_stops_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        write_rows(&path, &[(0, blank(0)), (1, blank(1)), (3, blank(3))]);
        let err = LogStore::open(&path).unwrap_err().to_string();
        assert!(err.contains("2..3 are missing"), "{err}");
    }

    #[test]
    fn an_entry_under_the_wrong_index_stops_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.redb");
        write_rows(&path, &[(0, blank(0)), (1, blank(5))]);
        let err = LogStore::open(&path).unwrap_err().to_string();
        assert!(err.contains("claims index 5"), "{err}");
    }
}
