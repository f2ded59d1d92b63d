//! What is due: a pure function of the notify book, the engine's alert
//! episodes and the proposer's clock.
//!
//! Per receiver and key (alert kind and subject) only the key's latest
//! episode counts:
//! - firing, never notified, or notified resolved before: [`Notice::New`]
//!   (when at `min_severity` or above);
//! - firing, notified firing: [`Notice::Escalation`] when its severity rose
//!   above the one announced, else [`Notice::Repeat`] once
//!   `repeat_interval_ms` has passed since the last notification;
//! - resolved, notified firing: [`Notice::Resolve`], once.
//!
//! So a key is the unit of dedup, not an episode: an episode that ends and
//! fires again before the resolve went out (a flap within one round, or
//! while a receiver is down) continues the same notification, with no
//! resolve and no second `New`. Once the resolve was sent, a new firing is
//! announced (staying silent would leave the receiver believing it is over).
//! A key whose episodes the engine forgot (its alert book is bounded) gets
//! nothing more.

use std::collections::BTreeMap;

use super::book::{Notice, NotifiedEntry, NotifyBook, NotifyKey};
use super::receiver::ReceiverId;
use crate::engine::{Alert, AlertKind, Severity, Subject};

/// One receiver as [`due`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverRule {
    /// Its id.
    pub id: ReceiverId,
    /// Minimum time between notifications of a key that keeps firing, ms.
    pub repeat_interval_ms: u64,
}

/// A notification to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// Receiver, kind and subject.
    pub key: NotifyKey,
    /// Why.
    pub notice: Notice,
    /// The episode, as the engine holds it now.
    pub alert: Alert,
    /// The severity announced before, for an escalation.
    pub previous_severity: Option<Severity>,
}

impl Due {
    /// What the leader records once a receiver accepted it.
    pub fn entry(&self) -> NotifiedEntry {
        NotifiedEntry {
            key: self.key.clone(),
            episode: self.alert.id,
            severity: self.alert.severity,
            notice: self.notice,
        }
    }
}

/// The subject of an alert: its rank, else its GPU, else (a node with
/// neither job nor GPU) its node's host; `None` for an alert naming none
/// (the engine raises none such).
pub fn subject_of(alert: &Alert) -> Option<Subject> {
    match (&alert.job, alert.rank, &alert.node, alert.gpu) {
        (Some(job), Some(rank), _, _) => Some(Subject::Rank(job.clone(), rank)),
        (_, _, Some(node), Some(gpu)) => Some(Subject::Gpu(node.clone(), gpu)),
        (None, None, Some(node), None) => Some(Subject::Host(node.clone())),
        _ => None,
    }
}

/// Notifications due at `now_ms` (the proposer's clock), in key order per
/// receiver; see the module docs for the rules.
pub fn due<'a>(
    book: &NotifyBook,
    alerts: impl IntoIterator<Item = &'a Alert>,
    now_ms: u64,
    receivers: &[ReceiverRule],
    min_severity: Severity,
) -> Vec<Due> {
    // Episodes come in firing order: the last one per key is the latest.
    let mut latest: BTreeMap<(AlertKind, Subject), &Alert> = BTreeMap::new();
    for alert in alerts {
        if let Some(subject) = subject_of(alert) {
            latest.insert((alert.kind, subject), alert);
        }
    }
    let mut out = Vec::new();
    for receiver in receivers {
        for ((kind, subject), alert) in &latest {
            let key = NotifyKey {
                receiver: receiver.id.clone(),
                kind: *kind,
                subject: subject.clone(),
            };
            let record = book.get(&key);
            let (notice, previous_severity) = match record {
                Some(r) if !r.resolved_sent && alert.is_active() => {
                    if alert.severity > r.severity {
                        (Notice::Escalation, Some(r.severity))
                    } else if now_ms >= r.last_ms.saturating_add(receiver.repeat_interval_ms) {
                        (Notice::Repeat, None)
                    } else {
                        continue;
                    }
                }
                Some(r) if !r.resolved_sent => (Notice::Resolve, None),
                _ if alert.is_active() && alert.severity >= min_severity => (Notice::New, None),
                _ => continue,
            };
            out.push(Due {
                key,
                notice,
                alert: (*alert).clone(),
                previous_severity,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::ReceiverKind;

    const HOUR_MS: u64 = 3_600_000;

    fn rule(url: &str) -> ReceiverRule {
        ReceiverRule {
            id: ReceiverId::new(ReceiverKind::Webhook, url),
            repeat_interval_ms: HOUR_MS,
        }
    }

    fn alert(id: u64, rank: u32, severity: Severity, resolved: bool) -> Alert {
        let subject = Subject::Rank("job".into(), rank);
        let mut a = subject.alert(AlertKind::OomPredicted, 100.0, severity);
        a.id = id;
        if resolved {
            a.resolved_t = Some(200.0);
        }
        a
    }

    /// Sends everything due at `now_ms` and records it, as a leader would.
    fn round(
        book: &mut NotifyBook,
        alerts: &[Alert],
        now_ms: u64,
        rules: &[ReceiverRule],
    ) -> Vec<(Notice, u64)> {
        let due = due(book, alerts, now_ms, rules, Severity::Warning);
        let entries: Vec<_> = due.iter().map(Due::entry).collect();
        book.apply(&entries, now_ms);
        due.iter().map(|d| (d.notice, d.alert.id)).collect()
    }

    #[test]
    fn a_new_alert_is_sent_once_then_repeated_after_the_interval() {
        let rules = [rule("http://a/")];
        let mut book = NotifyBook::default();
        let alerts = [alert(1, 0, Severity::Warning, false)];
        assert_eq!(round(&mut book, &alerts, 0, &rules), [(Notice::New, 1)]);
        assert!(round(&mut book, &alerts, 1_000, &rules).is_empty());
        assert!(round(&mut book, &alerts, HOUR_MS - 1, &rules).is_empty());
        assert_eq!(
            round(&mut book, &alerts, HOUR_MS, &rules),
            [(Notice::Repeat, 1)]
        );
        assert!(round(&mut book, &alerts, HOUR_MS + 1, &rules).is_empty());
        assert_eq!(book.records().next().unwrap().1.repeats, 1);
    }

    #[test]
    fn an_escalation_is_sent_at_once_and_a_drop_in_severity_is_not() {
        let rules = [rule("http://a/")];
        let mut book = NotifyBook::default();
        round(&mut book, &[alert(1, 0, Severity::High, false)], 0, &rules);
        assert!(round(
            &mut book,
            &[alert(1, 0, Severity::Warning, false)],
            10,
            &rules
        )
        .is_empty());
        let up = [alert(1, 0, Severity::Critical, false)];
        let d = due(&book, &up, 20, &rules, Severity::Warning);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].notice, Notice::Escalation);
        assert_eq!(d[0].previous_severity, Some(Severity::High));
        round(&mut book, &up, 20, &rules);
        assert!(round(&mut book, &up, 30, &rules).is_empty());
    }

    #[test]
    fn a_resolve_is_sent_once_and_only_for_what_was_announced() {
        let rules = [rule("http://a/")];
        let mut book = NotifyBook::default();
        round(
            &mut book,
            &[alert(1, 0, Severity::Warning, false)],
            0,
            &rules,
        );
        let resolved = [
            alert(1, 0, Severity::Warning, true),
            alert(2, 1, Severity::Warning, true),
        ];
        assert_eq!(
            round(&mut book, &resolved, 10, &rules),
            [(Notice::Resolve, 1)],
            "rank 1 was never announced: no resolve for it"
        );
        assert!(round(&mut book, &resolved, 20, &rules).is_empty());
        assert!(round(&mut book, &resolved, 2 * HOUR_MS, &rules).is_empty());
    }

    #[test]
    fn dedup_is_per_key_and_receiver() {
        let rules = [rule("http://a/"), rule("http://b/")];
        let mut book = NotifyBook::default();
        let first = [alert(1, 0, Severity::Warning, false)];
        assert_eq!(
            round(&mut book, &first, 0, &rules).len(),
            2,
            "one per receiver"
        );
        // The episode ended and fired again between two rounds: the same
        // key, so no resolve and no second new.
        let flapped = [
            alert(1, 0, Severity::Warning, true),
            alert(2, 0, Severity::Warning, false),
        ];
        assert!(round(&mut book, &flapped, 1_000, &rules).is_empty());
        // Another rank is another key.
        let other = [
            alert(1, 0, Severity::Warning, true),
            alert(2, 0, Severity::Warning, false),
            alert(3, 1, Severity::Warning, false),
        ];
        assert_eq!(
            round(&mut book, &other, 2_000, &rules),
            [(Notice::New, 3), (Notice::New, 3)]
        );
        // The repeat carries the latest episode.
        assert_eq!(
            round(&mut book, &other, HOUR_MS, &rules),
            [(Notice::Repeat, 2), (Notice::Repeat, 2)]
        );
    }

    #[test]
    fn a_refire_after_the_resolve_was_sent_is_new() {
        let rules = [rule("http://a/")];
        let mut book = NotifyBook::default();
        round(
            &mut book,
            &[alert(1, 0, Severity::Warning, false)],
            0,
            &rules,
        );
        round(
            &mut book,
            &[alert(1, 0, Severity::Warning, true)],
            10,
            &rules,
        );
        let again = [
            alert(1, 0, Severity::Warning, true),
            alert(2, 0, Severity::Warning, false),
        ];
        assert_eq!(round(&mut book, &again, 20, &rules), [(Notice::New, 2)]);
    }

    #[test]
    fn alerts_below_the_minimum_severity_are_not_announced() {
        let rules = [rule("http://a/")];
        let book = NotifyBook::default();
        let alerts = [
            alert(1, 0, Severity::Warning, false),
            alert(2, 1, Severity::Critical, false),
        ];
        let d = due(&book, &alerts, 0, &rules, Severity::High);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].alert.id, 2);
    }

    #[test]
    fn host_alerts_are_keyed_by_node() {
        let subject = Subject::Host("node-a".into());
        let a = subject.alert(AlertKind::MemoryLevel, 0.0, Severity::Warning);
        assert_eq!(subject_of(&a), Some(subject.clone()));
        let d = due(
            &NotifyBook::default(),
            [&a],
            0,
            &[rule("http://a/")],
            Severity::Warning,
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].key.subject, subject);
    }

    #[test]
    fn gpu_alerts_are_keyed_by_node_and_gpu() {
        let subject = Subject::Gpu("node-a".into(), 3);
        let a = subject.alert(AlertKind::OomPredicted, 0.0, Severity::High);
        assert_eq!(subject_of(&a), Some(subject));
        let d = due(
            &NotifyBook::default(),
            [&a],
            0,
            &[rule("http://a/")],
            Severity::Warning,
        );
        assert_eq!(d[0].key.subject, Subject::Gpu("node-a".into(), 3));
    }
}
