//! The replicated book of notifications: per key, which episode was last
//! notified, when (the leader's wall clock carried by the Raft command), how
//! many repeats, and whether its resolve was sent. Bounded: past
//! [`MAX_NOTIFY_KEYS`] the oldest resolved key is forgotten first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::receiver::ReceiverId;
use crate::engine::{AlertKind, Severity, Subject};

/// Keys kept; past it the oldest resolved key goes first, then the oldest.
pub const MAX_NOTIFY_KEYS: usize = 16_384;
/// Most entries one command records; the rest are ignored (a leader sends
/// one notification per command, this only bounds what a log entry can do).
pub const MAX_ENTRIES_PER_COMMAND: usize = 1024;

/// What a notification is about: one receiver, one alert kind, one subject.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NotifyKey {
    /// The receiver.
    pub receiver: ReceiverId,
    /// The alert kind.
    pub kind: AlertKind,
    /// A rank of a job, or a GPU with no known rank.
    pub subject: Subject,
}

/// Why a notification is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Notice {
    /// The key started firing (or fired again after its resolve was sent).
    New,
    /// Still firing, `repeat_interval` after the last one.
    Repeat,
    /// Still firing, at a higher severity than last notified.
    Escalation,
    /// It resolved.
    Resolve,
}

impl Notice {
    /// `firing`, or `resolved` for [`Notice::Resolve`].
    pub fn status(self) -> &'static str {
        match self {
            Self::Resolve => "resolved",
            _ => "firing",
        }
    }

    /// `new`, `repeat`, `escalation` or `resolve`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Repeat => "repeat",
            Self::Escalation => "escalation",
            Self::Resolve => "resolve",
        }
    }
}

/// One notification a receiver accepted, as the leader records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifiedEntry {
    /// Receiver, kind and subject.
    pub key: NotifyKey,
    /// The alert episode it was about.
    pub episode: u64,
    /// The severity it announced.
    pub severity: Severity,
    /// Why it was sent.
    pub notice: Notice,
}

/// What the book remembers about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyRecord {
    /// The episode last notified.
    pub episode: u64,
    /// The severity last announced.
    pub severity: Severity,
    /// When the key started firing as receivers know it, ms (leader clock).
    pub first_ms: u64,
    /// The latest notification, ms (leader clock).
    pub last_ms: u64,
    /// Repeats and escalations since `first_ms`.
    pub repeats: u32,
    /// The resolve was sent: receivers consider it over.
    pub resolved_sent: bool,
}

/// Counters of the book.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyBookCounters {
    /// Entries recorded.
    pub recorded: u64,
    /// Keys forgotten to stay within [`MAX_NOTIFY_KEYS`].
    pub forgotten: u64,
    /// Entries ignored: beyond [`MAX_ENTRIES_PER_COMMAND`] in one command.
    pub ignored: u64,
}

/// The book; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NotifyBook {
    records: BTreeMap<NotifyKey, NotifyRecord>,
    counters: NotifyBookCounters,
}

impl NotifyBook {
    /// What the book knows about `key`.
    pub fn get(&self, key: &NotifyKey) -> Option<&NotifyRecord> {
        self.records.get(key)
    }

    /// Every key and its record, in key order.
    pub fn records(&self) -> impl Iterator<Item = (&NotifyKey, &NotifyRecord)> {
        self.records.iter()
    }

    /// Keys kept.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when nothing was ever notified (or all was forgotten).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The book's counters.
    pub fn counters(&self) -> NotifyBookCounters {
        self.counters
    }

    /// Records notifications the leader sent, at `at_ms` of its clock.
    /// Times only move forward per key, so an entry proposed late (by a
    /// leader that has since lost its term) cannot move a record back.
    pub fn apply(&mut self, entries: &[NotifiedEntry], at_ms: u64) {
        let skip = entries.len().saturating_sub(MAX_ENTRIES_PER_COMMAND);
        self.counters.ignored += skip as u64;
        for e in entries.iter().take(MAX_ENTRIES_PER_COMMAND) {
            self.counters.recorded += 1;
            if !self.records.contains_key(&e.key) {
                self.make_room();
            }
            let fresh = || NotifyRecord {
                episode: e.episode,
                severity: e.severity,
                first_ms: at_ms,
                last_ms: at_ms,
                repeats: 0,
                resolved_sent: false,
            };
            let record = self.records.entry(e.key.clone()).or_insert_with(fresh);
            match e.notice {
                Notice::New => {
                    // A re-fire after a resolve starts over; a second `New`
                    // for what is already firing (two leaders racing) keeps
                    // the first time.
                    if record.resolved_sent {
                        *record = fresh();
                    }
                    record.episode = e.episode;
                    record.severity = e.severity;
                    record.last_ms = record.last_ms.max(at_ms);
                }
                Notice::Repeat | Notice::Escalation => {
                    record.episode = e.episode;
                    record.severity = e.severity;
                    record.repeats = record.repeats.saturating_add(1);
                    record.last_ms = record.last_ms.max(at_ms);
                }
                Notice::Resolve => {
                    record.episode = record.episode.max(e.episode);
                    record.resolved_sent = true;
                    record.last_ms = record.last_ms.max(at_ms);
                }
            }
        }
    }

    /// Forgets one key when the book is full: the oldest resolved one, else
    /// the oldest (which may then be notified again as new).
    fn make_room(&mut self) {
        while self.records.len() >= MAX_NOTIFY_KEYS {
            let oldest = |resolved_only: bool| {
                self.records
                    .iter()
                    .filter(|(_, r)| !resolved_only || r.resolved_sent)
                    .min_by_key(|(_, r)| r.last_ms)
                    .map(|(k, _)| k.clone())
            };
            let Some(key) = oldest(true).or_else(|| oldest(false)) else {
                return;
            };
            self.records.remove(&key);
            self.counters.forgotten += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::{ReceiverId, ReceiverKind};

    fn key(rank: u32) -> NotifyKey {
        NotifyKey {
            receiver: ReceiverId::new(ReceiverKind::Webhook, "http://127.0.0.1:1/hook"),
            kind: AlertKind::Leak,
            subject: Subject::Rank("job".into(), rank),
        }
    }

    fn entry(rank: u32, episode: u64, notice: Notice) -> NotifiedEntry {
        NotifiedEntry {
            key: key(rank),
            episode,
            severity: Severity::Warning,
            notice,
        }
    }

    #[test]
    fn a_key_goes_new_repeat_resolve_and_starts_over_on_a_refire() {
        let mut b = NotifyBook::default();
        b.apply(&[entry(1, 7, Notice::New)], 1_000);
        b.apply(&[entry(1, 7, Notice::Repeat)], 5_000);
        let r = b.get(&key(1)).unwrap();
        assert_eq!((r.first_ms, r.last_ms, r.repeats), (1_000, 5_000, 1));
        assert!(!r.resolved_sent);
        b.apply(&[entry(1, 7, Notice::Resolve)], 6_000);
        assert!(b.get(&key(1)).unwrap().resolved_sent);
        b.apply(&[entry(1, 9, Notice::New)], 9_000);
        let r = b.get(&key(1)).unwrap();
        assert_eq!((r.episode, r.first_ms, r.repeats), (9, 9_000, 0));
        assert!(!r.resolved_sent);
        assert_eq!(b.counters().recorded, 4);
    }

    #[test]
    fn a_late_entry_does_not_move_time_back() {
        let mut b = NotifyBook::default();
        b.apply(&[entry(1, 7, Notice::New)], 5_000);
        b.apply(&[entry(1, 7, Notice::New)], 4_000);
        let r = b.get(&key(1)).unwrap();
        assert_eq!((r.first_ms, r.last_ms), (5_000, 5_000));
    }

    #[test]
    fn the_book_is_bounded_and_forgets_resolved_keys_first() {
        let mut b = NotifyBook::default();
        for rank in 0..MAX_NOTIFY_KEYS as u32 {
            b.apply(&[entry(rank, 1, Notice::New)], 1_000 + u64::from(rank));
        }
        // Rank 5 resolves late: it is the only resolved key, so it goes
        // first although older firing keys exist.
        b.apply(&[entry(5, 1, Notice::Resolve)], 1_000_000);
        b.apply(&[entry(999_999, 1, Notice::New)], 2_000_000);
        assert_eq!(b.len(), MAX_NOTIFY_KEYS);
        assert!(b.get(&key(5)).is_none());
        assert!(b.get(&key(0)).is_some());
        b.apply(&[entry(1_000_000, 1, Notice::New)], 2_000_001);
        assert!(b.get(&key(0)).is_none(), "then the oldest firing key");
        assert_eq!(b.counters().forgotten, 2);
    }

    #[test]
    fn a_command_records_at_most_its_bound() {
        let mut b = NotifyBook::default();
        let many: Vec<_> = (0..MAX_ENTRIES_PER_COMMAND as u32 + 3)
            .map(|r| entry(r, 1, Notice::New))
            .collect();
        b.apply(&many, 1);
        assert_eq!(b.len(), MAX_ENTRIES_PER_COMMAND);
        assert_eq!(b.counters().ignored, 3);
    }
}
