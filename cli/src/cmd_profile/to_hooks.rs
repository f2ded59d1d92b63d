//! Passing alerts on to the training processes: each alert that opens or
//! changes severity goes to the hooks of its rank (`gpumon.on_alert`
//! callbacks run at the next step boundary); an alert about a GPU with no
//! known rank, or about the host, goes to every job's hooks.

use std::collections::BTreeMap;

use gpumon_agent::hook_endpoint::{HookAlert, HookAlertSeverity, HookHub};
use gpumon_common::engine::{Alert, Severity};

/// Which alerts have been passed on, at which severity.
#[derive(Debug, Default)]
pub struct AlertRelay {
    passed_on: BTreeMap<u64, Severity>,
}

impl AlertRelay {
    /// Alerts among `alerts` that are active and new, or whose severity
    /// changed, since the last call; forgets the ones that resolved.
    pub fn news<'a>(&mut self, alerts: impl Iterator<Item = &'a Alert>) -> Vec<&'a Alert> {
        let mut out = Vec::new();
        for a in alerts {
            if !a.is_active() {
                self.passed_on.remove(&a.id);
            } else if self.passed_on.insert(a.id, a.severity) != Some(a.severity) {
                out.push(a);
            }
        }
        out
    }
}

/// The hook's form of an alert.
pub fn hook_alert(a: &Alert) -> HookAlert {
    HookAlert {
        kind: a.kind.as_str().to_owned(),
        severity: match a.severity {
            Severity::Critical => HookAlertSeverity::Critical,
            Severity::High | Severity::Warning => HookAlertSeverity::Warning,
        },
        message: a.message.clone(),
        t_ms: (a.updated_t.max(0.0) * 1000.0) as u64,
    }
}

/// Posts `a` to its rank's hooks, or to every job's in `jobs` when it names
/// no rank.
pub fn post(hub: &HookHub, a: &Alert, jobs: &[String]) {
    match (&a.job, a.rank) {
        (Some(job), rank) => {
            hub.post_alert(job, rank, hook_alert(a));
        }
        (None, _) => {
            for job in jobs {
                hub.post_alert(job, None, hook_alert(a));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_common::engine::{AlertKind, Subject};

    #[test]
    fn an_alert_is_news_when_it_opens_and_when_its_severity_changes() {
        let subject = Subject::Rank("job".into(), 1);
        let mut a = subject.alert(AlertKind::MemoryLevel, 10.0, Severity::Warning);
        a.id = 7;
        let mut relay = AlertRelay::default();
        assert_eq!(relay.news([&a].into_iter()).len(), 1);
        assert!(relay.news([&a].into_iter()).is_empty(), "once");
        a.severity = Severity::Critical;
        assert_eq!(relay.news([&a].into_iter()).len(), 1);
        a.resolved_t = Some(20.0);
        assert!(relay.news([&a].into_iter()).is_empty());
        let h = hook_alert(&a);
        assert_eq!(
            (h.kind.as_str(), h.severity),
            ("memory_level", HookAlertSeverity::Critical)
        );
    }
}
