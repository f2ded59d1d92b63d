//! Alert episodes: one entry per time an alert fires, updated while it is
//! active and closed when it resolves. Kept in firing order, bounded. The
//! episode ([`Alert`]) is the core's own; its kind and severity are the
//! vocabulary the wire, the API and the settings share (`gpumon_proto::api`).

use std::collections::{BTreeMap, VecDeque};

use gpumon_proto::api;
pub use gpumon_proto::api::{AlertKind, Severity};
use serde::{Deserialize, Serialize};

/// One alert episode, as the engine's alert book keeps it (and Raft
/// snapshots encode it). Fields that do not apply to its kind are `None`.
/// The API's `gpumon_proto::api::Alert` is converted from it where it is
/// read; reports (`gpumon replay`, `gpumon profile`) write it as it is,
/// field for field the same JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// Sequence number, unique per engine.
    pub id: u64,
    /// What it is about.
    pub kind: AlertKind,
    /// The job, when the subject is a rank.
    #[serde(default)]
    pub job: Option<String>,
    /// The rank, when the subject is a rank.
    #[serde(default)]
    pub rank: Option<u32>,
    /// The node of the GPU involved, when known.
    #[serde(default)]
    pub node: Option<String>,
    /// The GPU index involved, when known.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// Trace time it first fired, seconds.
    pub t: f64,
    /// Current severity.
    pub severity: Severity,
    /// Trace time of the latest update, seconds.
    pub updated_t: f64,
    /// Trace time it resolved, seconds; absent while active.
    #[serde(default)]
    pub resolved_t: Option<f64>,
    /// Predicted OOM time, seconds (OOM alerts).
    #[serde(default)]
    pub predicted_oom_t: Option<f64>,
    /// Interval of the predicted OOM time, seconds (OOM alerts).
    #[serde(default)]
    pub predicted_oom_interval: Option<[f64; 2]>,
    /// 0 to 1 (OOM alerts).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Growth, bytes per second (OOM and leak alerts).
    #[serde(default)]
    pub rate_bytes_per_s: Option<f64>,
    /// How many times slower than its peers (straggler alerts).
    #[serde(default)]
    pub slowdown: Option<f64>,
    /// The slowest section (straggler alerts).
    #[serde(default)]
    pub section: Option<String>,
    /// Bytes above the job's median (imbalance alerts).
    #[serde(default)]
    pub excess_bytes: Option<f64>,
    /// Percent above the job's median (imbalance alerts).
    #[serde(default)]
    pub excess_pct: Option<f64>,
    /// Bytes `empty_cache()` could release.
    #[serde(default)]
    pub reclaimable_bytes: Option<f64>,
    /// What to do about it.
    #[serde(default)]
    pub recommendation: Option<String>,
    /// One line for people.
    pub message: String,
}

impl Alert {
    /// True until resolved.
    pub fn is_active(&self) -> bool {
        self.resolved_t.is_none()
    }
}

impl From<&Alert> for api::Alert {
    fn from(a: &Alert) -> Self {
        Self {
            id: a.id,
            kind: a.kind,
            job: a.job.clone(),
            rank: a.rank,
            node: a.node.clone(),
            gpu: a.gpu,
            t: a.t,
            severity: a.severity,
            updated_t: a.updated_t,
            resolved_t: a.resolved_t,
            predicted_oom_t: a.predicted_oom_t,
            predicted_oom_interval: a.predicted_oom_interval,
            confidence: a.confidence,
            rate_bytes_per_s: a.rate_bytes_per_s,
            slowdown: a.slowdown,
            section: a.section.clone(),
            excess_bytes: a.excess_bytes,
            excess_pct: a.excess_pct,
            reclaimable_bytes: a.reclaimable_bytes,
            recommendation: a.recommendation.clone(),
            message: a.message.clone(),
        }
    }
}

/// Whom an alert is about: a rank, a GPU with no known rank, or a node's
/// host. Variants are only added at the end: the alert book, snapshots
/// included, keys its active episodes by subject.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Subject {
    /// A rank of a job.
    Rank(String, u32),
    /// A device, by node and index.
    Gpu(String, u32),
    /// A node's host (its RAM), by node name.
    Host(String),
}

impl Subject {
    /// The subject in an alert's message: `rank 3 of job-a`, `GPU 1 on
    /// node-0`, `the host node-0`.
    pub fn describe(&self) -> String {
        match self {
            Subject::Rank(job, rank) => format!("rank {rank} of {job}"),
            Subject::Gpu(node, gpu) => format!("GPU {gpu} on {node}"),
            Subject::Host(node) => format!("the host {node}"),
        }
    }

    /// A new episode about this subject with no details; the detectors fill
    /// in theirs.
    pub fn alert(&self, kind: AlertKind, t: f64, severity: Severity) -> Alert {
        let (job, rank, node, gpu) = match self {
            Subject::Rank(job, rank) => (Some(job.clone()), Some(*rank), None, None),
            Subject::Gpu(node, gpu) => (None, None, Some(node.clone()), Some(*gpu)),
            Subject::Host(node) => (None, None, Some(node.clone()), None),
        };
        Alert {
            id: 0,
            kind,
            job,
            rank,
            node,
            gpu,
            t,
            severity,
            updated_t: t,
            resolved_t: None,
            predicted_oom_t: None,
            predicted_oom_interval: None,
            confidence: None,
            rate_bytes_per_s: None,
            slowdown: None,
            section: None,
            excess_bytes: None,
            excess_pct: None,
            reclaimable_bytes: None,
            recommendation: None,
            message: String::new(),
        }
    }
}

/// Every episode in firing order (the oldest forgotten beyond `max`), and
/// which are active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertBook {
    max: usize,
    episodes: VecDeque<Alert>,
    active: BTreeMap<(AlertKind, Subject), u64>,
    next_id: u64,
    forgotten: u64,
}

impl AlertBook {
    /// An empty book keeping at most `max` episodes.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            episodes: VecDeque::new(),
            active: BTreeMap::new(),
            next_id: 1,
            forgotten: 0,
        }
    }

    /// Opens an episode unless one is active for the same kind and subject,
    /// in which case that one is updated. Returns the episode's id.
    pub fn raise(&mut self, subject: Subject, alert: Alert) -> u64 {
        let key = (alert.kind, subject);
        if let Some(&id) = self.active.get(&key) {
            if let Some(open) = self.get_mut(id) {
                let first = (open.id, open.t);
                *open = Alert {
                    id: first.0,
                    t: first.1,
                    ..alert
                };
                return id;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        if self.episodes.len() == self.max {
            if let Some(old) = self.episodes.pop_front() {
                self.forgotten += 1;
                self.active.retain(|_, v| *v != old.id);
            }
        }
        self.episodes.push_back(Alert { id, ..alert });
        self.active.insert(key, id);
        id
    }

    /// Whether any episode of this kind is active: one ordered-map step,
    /// no allocation (the least subject, `Rank("", 0)`, owns no string), so
    /// the detectors can pass over subjects with nothing to close.
    pub fn any_active(&self, kind: AlertKind) -> bool {
        self.active
            .range((kind, Subject::Rank(String::new(), 0))..)
            .next()
            .is_some_and(|((k, _), _)| *k == kind)
    }

    /// Whether any episode of this kind about a GPU is active: one
    /// ordered-map step, no allocation, like [`AlertBook::any_active`].
    pub fn any_active_about_a_gpu(&self, kind: AlertKind) -> bool {
        self.active
            .range((kind, Subject::Gpu(String::new(), 0))..)
            .next()
            .is_some_and(|((k, s), _)| *k == kind && matches!(s, Subject::Gpu(..)))
    }

    /// The active episode of this kind and subject, to refresh in place: a
    /// detector that would raise it again with new figures need not build
    /// the whole alert anew. The key is taken whole so that looking up
    /// copies no subject.
    pub fn active_mut(&mut self, key: &(AlertKind, Subject)) -> Option<&mut Alert> {
        let id = *self.active.get(key)?;
        self.get_mut(id)
    }

    /// Updates the active episode for this kind and subject, if any.
    pub fn update(&mut self, kind: AlertKind, subject: &Subject, f: impl FnOnce(&mut Alert)) {
        if !self.any_active(kind) {
            return;
        }
        if let Some(&id) = self.active.get(&(kind, subject.clone())) {
            if let Some(a) = self.get_mut(id) {
                f(a);
            }
        }
    }

    /// Closes the active episode for this kind and subject, if any.
    pub fn resolve(&mut self, kind: AlertKind, subject: &Subject, t: f64) -> bool {
        if !self.any_active(kind) {
            return false;
        }
        self.resolve_key(&(kind, subject.clone()), t)
    }

    /// [`AlertBook::resolve`] for a caller that holds the key whole, so
    /// that looking up copies no subject.
    pub fn resolve_key(&mut self, key: &(AlertKind, Subject), t: f64) -> bool {
        let Some(id) = self.active.remove(key) else {
            return false;
        };
        if let Some(a) = self.get_mut(id) {
            a.resolved_t = Some(t.max(a.t));
            a.updated_t = t.max(a.updated_t);
        }
        true
    }

    /// Closes every active episode about `subject`.
    pub fn resolve_subject(&mut self, subject: &Subject, t: f64) {
        for kind in AlertKind::ALL {
            self.resolve(kind, subject, t);
        }
    }

    /// Whether an episode of this kind is active for `subject`.
    pub fn is_active(&self, kind: AlertKind, subject: &Subject) -> bool {
        self.any_active(kind) && self.active.contains_key(&(kind, subject.clone()))
    }

    /// Episodes in firing order.
    pub fn episodes(&self) -> impl DoubleEndedIterator<Item = &Alert> + ExactSizeIterator {
        self.episodes.iter()
    }

    /// Active episodes in firing order.
    pub fn active(&self) -> impl Iterator<Item = &Alert> {
        self.episodes.iter().filter(|a| a.is_active())
    }

    /// Active episodes with their subjects, by kind then subject: reads
    /// the active ones alone, however many episodes the book keeps.
    pub fn active_by_subject(&self) -> impl Iterator<Item = (&Subject, &Alert)> {
        self.active
            .iter()
            .filter_map(|((_, subject), &id)| Some((subject, self.get(id)?)))
    }

    /// Episodes dropped to stay within the bound.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    fn get(&self, id: u64) -> Option<&Alert> {
        let first = self.episodes.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        self.episodes.get(i)
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Alert> {
        let first = self.episodes.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        self.episodes.get_mut(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: u32) -> Subject {
        Subject::Rank("job".into(), r)
    }

    #[test]
    fn raise_is_idempotent_while_active_and_keeps_the_first_time() {
        let mut book = AlertBook::new(10);
        let a = book.raise(
            rank(1),
            rank(1).alert(AlertKind::Leak, 10.0, Severity::Warning),
        );
        let b = book.raise(
            rank(1),
            rank(1).alert(AlertKind::Leak, 20.0, Severity::High),
        );
        assert_eq!(a, b);
        let only: Vec<_> = book.episodes().collect();
        assert_eq!(only.len(), 1);
        assert_eq!((only[0].t, only[0].severity), (10.0, Severity::High));
    }

    #[test]
    fn a_resolved_alert_fires_again_as_a_new_episode() {
        let mut book = AlertBook::new(10);
        book.raise(
            rank(1),
            rank(1).alert(AlertKind::Leak, 10.0, Severity::Warning),
        );
        assert!(book.resolve(AlertKind::Leak, &rank(1), 30.0));
        book.raise(
            rank(1),
            rank(1).alert(AlertKind::Leak, 40.0, Severity::Warning),
        );
        let times: Vec<_> = book.episodes().map(|a| (a.t, a.resolved_t)).collect();
        assert_eq!(times, vec![(10.0, Some(30.0)), (40.0, None)]);
    }

    #[test]
    fn the_book_is_bounded_and_counts_what_it_forgot() {
        let mut book = AlertBook::new(3);
        for r in 0..5 {
            book.raise(
                rank(r),
                rank(r).alert(AlertKind::Imbalance, r as f64, Severity::Warning),
            );
        }
        assert_eq!(book.episodes().len(), 3);
        assert_eq!(book.forgotten(), 2);
        assert!(!book.is_active(AlertKind::Imbalance, &rank(0)));
        assert!(book.is_active(AlertKind::Imbalance, &rank(4)));
    }

    #[test]
    fn the_api_alert_says_what_the_book_holds() {
        let alert = Alert {
            id: 3,
            kind: AlertKind::OomPredicted,
            job: Some("job".into()),
            rank: Some(2),
            node: Some("node-a".into()),
            gpu: Some(1),
            t: 10.0,
            severity: Severity::High,
            updated_t: 12.0,
            resolved_t: None,
            predicted_oom_t: Some(100.0),
            predicted_oom_interval: Some([90.0, 120.0]),
            confidence: Some(0.8),
            rate_bytes_per_s: Some(1e6),
            slowdown: None,
            section: None,
            excess_bytes: None,
            excess_pct: None,
            reclaimable_bytes: Some(2e9),
            recommendation: Some("release cached memory".into()),
            message: "rank 2 of job runs out of memory in 88 s".into(),
        };
        let shown = api::Alert::from(&alert);
        assert_eq!(
            serde_json::to_value(&shown).unwrap(),
            serde_json::to_value(&alert).unwrap()
        );
        assert_eq!(shown.is_active(), alert.is_active());
    }
}
