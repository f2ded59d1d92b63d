//! The log's one writer thread: appends grouped into one fsynced
//! transaction, in order with the other writes.
//!
//! openraft 0.9 hands the leader's log every client write as an append of
//! its own and waits for `append` to return before it takes the next. With
//! a transaction and an fsync per append inside `append`, a leader could
//! not commit more pushes a second than its disk does fsyncs, however idle
//! its cores. So `append` only queues: the entries go into [`Pending`],
//! where readers see them at once (openraft's rule: an appended entry is
//! readable when `append` returns), and to this thread, which writes every
//! append queued meanwhile in one transaction, fsyncs once, and only then
//! tells openraft the entries are durable (`LogFlushed`). An entry is never
//! acknowledged before its fsync.
//!
//! Truncations, purges and votes go through the same queue, so every write
//! reaches the file in the order openraft asked for it; their callers wait
//! for them, as openraft expects.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::LogFlushed;
use openraft::{Entry, LogId, StorageError};

use super::TypeConfig;

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Most entries written in one transaction: a bound on the group, not a
/// limit on appends (the rest go in the next transaction).
const MAX_GROUP_ENTRIES: usize = 4_096;
/// Most encoded bytes written in one transaction.
const MAX_GROUP_BYTES: usize = 64 << 20;

/// One entry encoded for the file.
pub(super) struct Row {
    pub log_id: LogId<NodeId>,
    pub bytes: Vec<u8>,
}

/// Where the writer thread writes: the log's file, opened without a writer
/// of its own.
pub(super) trait RowSink: Send + 'static {
    /// Writes `rows` in one transaction and fsyncs it.
    fn write_rows(&self, rows: &[Row]) -> StorageResult<()>;
}

/// A write other than an append, run on the writer thread.
type Work<S> = Box<dyn FnOnce(&S) -> StorageResult<()> + Send>;

/// A write for the writer thread.
pub(super) enum Op<S> {
    /// Entries to store, then `done` once they are fsynced.
    Append {
        rows: Vec<Row>,
        done: LogFlushed<TypeConfig>,
    },
    /// Any other write, run in order; its result goes back on `done`.
    Run {
        work: Work<S>,
        done: tokio::sync::oneshot::Sender<StorageResult<()>>,
    },
}

/// Entries appended but not yet written, by index: always the tail of the
/// log, without a gap.
#[derive(Debug, Clone, Default)]
pub(super) struct Pending(Arc<Mutex<BTreeMap<u64, Entry<TypeConfig>>>>);

impl Pending {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry<TypeConfig>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `entries` until they are written.
    pub fn add(&self, entries: Vec<Entry<TypeConfig>>) {
        let mut pending = self.lock();
        for e in entries {
            pending.insert(e.log_id.index, e);
        }
    }

    /// Forgets what was written, unless a truncation replaced it meanwhile.
    fn written(&self, rows: &[Row]) {
        let mut pending = self.lock();
        for row in rows {
            if pending
                .get(&row.log_id.index)
                .is_some_and(|e| e.log_id == row.log_id)
            {
                pending.remove(&row.log_id.index);
            }
        }
    }

    /// Forgets the entries in `range` (truncated or purged).
    pub fn drop_range(&self, range: (Bound<u64>, Bound<u64>)) {
        let mut pending = self.lock();
        let gone: Vec<u64> = pending.range(range).map(|(i, _)| *i).collect();
        for i in gone {
            pending.remove(&i);
        }
    }

    /// The lowest index not yet written, and copies of the pending entries
    /// in `range`; every entry below that index is in the file (or purged).
    pub fn read(&self, range: (Bound<u64>, Bound<u64>)) -> (Option<u64>, Vec<Entry<TypeConfig>>) {
        let pending = self.lock();
        let first = pending.keys().next().copied();
        (
            first,
            pending.range(range).map(|(_, e)| e.clone()).collect(),
        )
    }

    /// The newest pending entry's log id.
    pub fn last(&self) -> Option<LogId<NodeId>> {
        self.lock().values().next_back().map(|e| e.log_id)
    }
}

/// Runs the writer until every sender is gone. `store` is the log without
/// a writer of its own.
fn run<S: RowSink>(store: S, pending: Pending, ops: Receiver<Op<S>>) {
    let mut next = None;
    loop {
        let op = match next.take() {
            Some(op) => op,
            None => match ops.recv() {
                Ok(op) => op,
                Err(_) => return,
            },
        };
        match op {
            Op::Run { work, done } => {
                // A caller that went away does not need the answer.
                let _ = done.send(work(&store));
            }
            Op::Append { mut rows, done } => {
                let mut dones = vec![done];
                let mut bytes: usize = rows.iter().map(|r| r.bytes.len()).sum();
                while rows.len() < MAX_GROUP_ENTRIES && bytes < MAX_GROUP_BYTES {
                    match ops.try_recv() {
                        Ok(Op::Append { rows: more, done }) => {
                            bytes += more.iter().map(|r| r.bytes.len()).sum::<usize>();
                            rows.extend(more);
                            dones.push(done);
                        }
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                }
                let result = store.write_rows(&rows);
                if result.is_ok() {
                    pending.written(&rows);
                }
                for done in dones {
                    done.log_io_completed(
                        result
                            .as_ref()
                            .map(|_| ())
                            .map_err(|e| std::io::Error::other(e.to_string())),
                    );
                }
            }
        }
    }
}

/// The sending half, shared by the log store's clones. When the last one
/// goes, the thread finishes the writes queued and ends, and the file is
/// closed before the drop returns (so a replica restarted in the same
/// process can open it again).
#[derive(Debug)]
pub(super) struct Writer<S>(Arc<Handle<S>>);

impl<S> Clone for Writer<S> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

#[derive(Debug)]
struct Handle<S> {
    ops: Option<Sender<Op<S>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S> Drop for Handle<S> {
    fn drop(&mut self) {
        drop(self.ops.take());
        if let Some(thread) = self.thread.take() {
            // Its panic was reported when it happened.
            let _ = thread.join();
        }
    }
}

impl<S: RowSink> Writer<S> {
    /// Starts the writer thread over `store` (a copy without a writer).
    pub fn start(store: S, pending: Pending) -> std::io::Result<Self> {
        let (ops, queue) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run(store, pending, queue))?;
        Ok(Self(Arc::new(Handle {
            ops: Some(ops),
            thread: Some(thread),
        })))
    }

    fn send(&self, op: Op<S>) -> bool {
        self.0.ops.as_ref().is_some_and(|ops| ops.send(op).is_ok())
    }

    /// Queues an append; false when the writer thread is gone.
    pub fn append(&self, rows: Vec<Row>, done: LogFlushed<TypeConfig>) -> bool {
        self.send(Op::Append { rows, done })
    }

    /// Runs `work` on the writer thread after every write queued before it.
    pub async fn run<F>(&self, work: F) -> Option<StorageResult<()>>
    where
        F: FnOnce(&S) -> StorageResult<()> + Send + 'static,
    {
        let (done, answer) = tokio::sync::oneshot::channel();
        let queued = self.send(Op::Run {
            work: Box::new(work),
            done,
        });
        if !queued {
            return None;
        }
        answer.await.ok()
    }
}

impl<S> std::fmt::Debug for Op<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Append { rows, .. } => write!(f, "Append({} entries)", rows.len()),
            Op::Run { .. } => f.write_str("Run"),
        }
    }
}
