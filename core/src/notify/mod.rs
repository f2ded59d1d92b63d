//! Notifications about alerts: the replicated book of what was sent to whom
//! and the pure decision of what is due next.
//!
//! Only the Raft leader sends (webhook, Slack, Alertmanager; the sending
//! lives in the coordinator). What it sent is recorded through the Raft log
//! ([`NotifyBook::apply`], with the leader's wall clock in milliseconds
//! carried by the command, so every replica records the same instants), and
//! what is due is a pure function of that book, the engine's alert episodes
//! and the proposer's clock ([`due`]). A new leader therefore continues where
//! the old one stopped: it does not repeat what was recorded and it sends
//! what was not.
//!
//! Delivery is at least once: the leader records a notification after the
//! receiver accepted it, so a leader that dies between the send and the
//! commit leaves it unrecorded and its successor sends it again. Recording
//! before sending would turn that into a lost notification, which is worse
//! for an alert.
//!
//! Grouping and dedup are per key: receiver, alert kind and subject (job and
//! rank, or node and GPU for a GPU without a known rank). See [`due`] for the
//! rules. Receivers are named in the replicated state by their kind and a
//! hash of their URL ([`ReceiverId`]), never by the URL: a Slack webhook URL
//! is a secret, and snapshots and the log are not.

mod book;
mod config;
mod due;
mod receiver;

pub use book::{
    Notice, NotifiedEntry, NotifyBook, NotifyBookCounters, NotifyKey, NotifyRecord,
    MAX_ENTRIES_PER_COMMAND, MAX_NOTIFY_KEYS,
};
pub use config::{NotifyFile, DEFAULT_REPEAT_INTERVAL_S};
pub use due::{due, subject_of, Due, ReceiverRule};
pub use receiver::{ReceiverId, ReceiverKind};
