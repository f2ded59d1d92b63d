//! Alerts from the coordinators to the hooks. The leader's reply to each
//! version 2 push carries the active alerts about this node ([`NodeAlert`]:
//! its ranks, its GPUs, its host), again and again while they stay active;
//! [`Relayed`] makes each reach each job's hooks once per severity: an
//! alert is posted to a job when first heard and again when its severity
//! changes. It is remembered only once it reached a live session, so a
//! rank that registers after its alert fired (or a job that starts on a
//! node whose host RAM is at a level) still hears it from the next reply.
//! The last [`MAX_RELAYED_ALERTS`] (alert, job) pairs are remembered; one
//! forgotten while still active is posted once more. `gpumon profile`
//! relays its embedded engine's alerts the same way.

use std::collections::{HashMap, VecDeque};

use gpumon_proto::api::Severity;
use gpumon_proto::NodeAlert;

use super::alerts::{HookAlert, HookAlertSeverity};

/// (alert id, job) pairs remembered with the severity they were posted at.
pub const MAX_RELAYED_ALERTS: usize = 4096;

/// An alert as posted to one job.
type Key = (u64, String);

/// Which alerts were posted to which job, at which severity; bounded (see
/// the module docs).
#[derive(Debug, Default)]
pub(crate) struct Relayed {
    posted: HashMap<Key, Severity>,
    order: VecDeque<Key>,
}

impl Relayed {
    /// Whether `alert` is news to `job`: never posted to it, or posted at
    /// another severity.
    pub(crate) fn is_news(&self, alert: &NodeAlert, job: &str) -> bool {
        self.posted.get(&(alert.id, job.to_owned())) != Some(&alert.severity)
    }

    /// Remembers that `alert` reached `job`'s hooks.
    pub(crate) fn posted(&mut self, alert: &NodeAlert, job: &str) {
        let key = (alert.id, job.to_owned());
        if self.posted.insert(key.clone(), alert.severity).is_none() {
            self.order.push_back(key);
            while self.order.len() > MAX_RELAYED_ALERTS {
                if let Some(old) = self.order.pop_front() {
                    self.posted.remove(&old);
                }
            }
        }
    }
}

/// The hook's form of a relayed alert: high and warning are both a
/// warning to the training process.
pub(crate) fn hook_alert(a: &NodeAlert) -> HookAlert {
    HookAlert {
        kind: a.kind.clone(),
        severity: match a.severity {
            Severity::Critical => HookAlertSeverity::Critical,
            Severity::High | Severity::Warning => HookAlertSeverity::Warning,
        },
        message: a.message.clone(),
        t_ms: a.t_ms,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// An alert a coordinator sends about this node, about nobody yet.
    pub(in crate::hook_endpoint) fn alert(id: u64, severity: Severity) -> NodeAlert {
        NodeAlert {
            id,
            kind: "memory_level".into(),
            severity,
            message: "m".into(),
            job: None,
            rank: None,
            t_ms: 1,
        }
    }

    #[test]
    fn an_alert_is_news_to_a_job_once_per_severity() {
        let mut r = Relayed::default();
        let warn = alert(1, Severity::Warning);
        assert!(r.is_news(&warn, "j"));
        r.posted(&warn, "j");
        assert!(!r.is_news(&warn, "j"), "heard again");
        assert!(r.is_news(&warn, "k"), "another job");
        assert!(r.is_news(&alert(2, Severity::Warning), "j"), "another id");
        let crit = alert(1, Severity::Critical);
        assert!(r.is_news(&crit, "j"), "worse");
        r.posted(&crit, "j");
        assert!(!r.is_news(&crit, "j"));
        assert!(r.is_news(&warn, "j"), "better");
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut r = Relayed::default();
        for id in 0..(MAX_RELAYED_ALERTS as u64 + 10) {
            r.posted(&alert(id, Severity::Warning), "j");
        }
        assert_eq!(r.posted.len(), MAX_RELAYED_ALERTS);
        assert_eq!(r.order.len(), MAX_RELAYED_ALERTS);
        assert!(
            r.is_news(&alert(0, Severity::Warning), "j"),
            "the oldest were forgotten"
        );
        let newest = alert(MAX_RELAYED_ALERTS as u64 + 9, Severity::Warning);
        assert!(!r.is_news(&newest, "j"));
    }

    #[test]
    fn high_and_warning_reach_the_hook_as_warnings() {
        let severities = [Severity::Warning, Severity::High, Severity::Critical]
            .map(|s| hook_alert(&alert(1, s)).severity);
        assert_eq!(
            severities,
            [
                HookAlertSeverity::Warning,
                HookAlertSeverity::Warning,
                HookAlertSeverity::Critical
            ]
        );
    }
}
