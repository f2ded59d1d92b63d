//! Alerts for the training process: what the agent's owner posts to a job
//! or one rank, and the bounded queue each session keeps until its hook's
//! next `poll` takes them.
//!
//! Delivery is at most once: a `poll` answer takes the queue, and an alert
//! posted while no session of its job or rank is live reaches nobody (it
//! is counted). A session keeps at most [`MAX_PENDING_ALERTS_PER_SESSION`];
//! past that the oldest goes and is counted, so a hook that stopped polling
//! costs bounded memory.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::fields::cut;

/// Alerts kept for one session between two polls; past it the oldest go.
pub const MAX_PENDING_ALERTS_PER_SESSION: usize = 64;
/// Longest alert kind kept, bytes (the limit on names); longer ones are cut.
pub const MAX_ALERT_KIND_BYTES: usize = 128;
/// Longest alert message kept, bytes; longer ones are cut.
pub const MAX_ALERT_MESSAGE_BYTES: usize = 1024;

/// How urgent an alert for the training process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookAlertSeverity {
    /// For the record.
    Info,
    /// Worth a look.
    Warning,
    /// Act now.
    Critical,
}

impl HookAlertSeverity {
    /// The name the hook sees (`"info"`, `"warning"`, `"critical"`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookAlertSeverity::Info => "info",
            HookAlertSeverity::Warning => "warning",
            HookAlertSeverity::Critical => "critical",
        }
    }
}

/// An alert to hand to the training processes of a job (or one rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAlert {
    /// What it is about, e.g. `memory_level`, `oom_risk`, `leak`,
    /// `straggler`; cut to [`MAX_ALERT_KIND_BYTES`].
    pub kind: String,
    /// How urgent it is.
    pub severity: HookAlertSeverity,
    /// A sentence for the user; cut to [`MAX_ALERT_MESSAGE_BYTES`].
    pub message: String,
    /// When it was raised, ms since the Unix epoch.
    pub t_ms: u64,
}

/// An alert as one session receives it: the alert and whom it was posted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedAlert {
    /// The job it was posted to.
    pub job: String,
    /// The rank it was posted to; `None` for every rank of the job.
    pub rank: Option<u32>,
    /// The alert, its texts already cut to their limits.
    pub alert: HookAlert,
}

impl PostedAlert {
    /// The alert cut to its limits, for `job` (and `rank`).
    pub(crate) fn new(job: &str, rank: Option<u32>, alert: HookAlert) -> Self {
        let HookAlert {
            kind,
            severity,
            message,
            t_ms,
        } = alert;
        PostedAlert {
            job: job.to_owned(),
            rank,
            alert: HookAlert {
                kind: cut(kind, MAX_ALERT_KIND_BYTES),
                severity,
                message: cut(message, MAX_ALERT_MESSAGE_BYTES),
                t_ms,
            },
        }
    }

    /// The object of a `poll` answer's `"alerts"` list (agent/python/PROTOCOL.md).
    pub(crate) fn to_json(&self) -> Value {
        let a = &self.alert;
        json!({
            "kind": a.kind,
            "severity": a.severity.as_str(),
            "job": self.job,
            "rank": self.rank,
            "message": a.message,
            "t": a.t_ms as f64 / 1000.0,
        })
    }
}

/// One session's alerts waiting for its next poll, oldest first, bounded.
#[derive(Debug, Default)]
pub(crate) struct AlertQueue {
    queue: VecDeque<PostedAlert>,
}

impl AlertQueue {
    /// Queues `alert`; true when the oldest had to go to make room.
    pub(crate) fn push(&mut self, alert: PostedAlert) -> bool {
        let full = self.queue.len() >= MAX_PENDING_ALERTS_PER_SESSION;
        if full {
            self.queue.pop_front();
        }
        self.queue.push_back(alert);
        full
    }

    /// Everything queued, oldest first; the queue is left empty.
    pub(crate) fn take(&mut self) -> Vec<PostedAlert> {
        self.queue.drain(..).collect()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(message: &str) -> HookAlert {
        HookAlert {
            kind: "oom_risk".into(),
            severity: HookAlertSeverity::Critical,
            message: message.into(),
            t_ms: 1_700_000_000_250,
        }
    }

    #[test]
    fn the_wire_shape_is_the_protocols() {
        let posted = PostedAlert::new("run-7", Some(3), alert("rank 3 runs out in 4 min"));
        assert_eq!(
            posted.to_json(),
            json!({"kind": "oom_risk", "severity": "critical", "job": "run-7", "rank": 3,
                   "message": "rank 3 runs out in 4 min", "t": 1_700_000_000.25})
        );
        let job_wide = PostedAlert::new("run-7", None, alert("m"));
        assert_eq!(job_wide.to_json()["rank"], Value::Null);
        let names: Vec<_> = [
            HookAlertSeverity::Info,
            HookAlertSeverity::Warning,
            HookAlertSeverity::Critical,
        ]
        .iter()
        .map(|s| s.as_str())
        .collect();
        assert_eq!(names, ["info", "warning", "critical"]);
    }

    #[test]
    fn texts_are_cut_to_their_limits() {
        let mut long = alert(&"é".repeat(MAX_ALERT_MESSAGE_BYTES));
        long.kind = "k".repeat(MAX_ALERT_KIND_BYTES + 1);
        let posted = PostedAlert::new("j", None, long);
        assert_eq!(posted.alert.kind.len(), MAX_ALERT_KIND_BYTES);
        assert_eq!(posted.alert.message.len(), MAX_ALERT_MESSAGE_BYTES);
    }

    #[test]
    fn the_queue_keeps_the_newest_and_says_when_it_dropped() {
        let mut q = AlertQueue::default();
        let n = MAX_PENDING_ALERTS_PER_SESSION + 2;
        let dropped = (0..n)
            .filter(|i| q.push(PostedAlert::new("j", None, alert(&i.to_string()))))
            .count();
        assert_eq!(dropped, 2);
        assert_eq!(q.len(), MAX_PENDING_ALERTS_PER_SESSION);
        let taken = q.take();
        assert_eq!(taken[0].alert.message, "2", "the two oldest went");
        assert_eq!(taken.last().unwrap().alert.message, (n - 1).to_string());
        assert!(q.take().is_empty());
    }
}
