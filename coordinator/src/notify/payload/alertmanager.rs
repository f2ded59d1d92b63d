//! Alertmanager v2: `POST {base}/api/v2/alerts` with a JSON array of alerts.
//!
//! Alertmanager identifies an alert by its labels (`alertname` such as
//! `GpumonOomPredicted`, `severity` (`critical`, `warning` or `info`: see
//! [`severity`]), `kind`, `source="gpumon"`, and `job`,
//! `rank`, `node`, `gpu` where known) and resolves one that is not posted
//! again before its `endsAt`. So a firing alert is posted with `endsAt` a
//! few refresh periods ahead and re-posted every refresh period (the
//! notifier's repeat interval for Alertmanager receivers), and a resolved
//! one is posted once with `endsAt` at its resolution. An escalation changes
//! the `severity` label and so the identity: the label set announced before
//! is closed in the same post.
//!
//! Times: `startsAt` is when the episode fired and `endsAt` of a resolved
//! alert when it resolved (data time), both clamped to the sender's clock so
//! that data running ahead of it cannot post an alert from the future.

use std::collections::BTreeMap;

use gpumon_core::engine::{Alert, Severity};
use gpumon_core::notify::Notice;
use serde_json::{json, Value};

use super::{details, rfc3339, Message};

/// The path alerts are posted to, after the base URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

/// `GpumonOomPredicted`, `GpumonLeak`, ...: `Gpumon` and the kind in camel case.
pub fn alertname(a: &Alert) -> String {
    let mut out = String::from("Gpumon");
    for word in a.kind.as_str().split('_') {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// The `severity` label: Alertmanager routes by the usual `critical`,
/// `warning` and `info`, so gpumon's critical stays critical, its high
/// becomes `warning` and its warning `info`. The shipped Prometheus rules
/// (`deploy/prometheus/rules.yml`) map the same way.
pub fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "info",
        Severity::High => "warning",
        Severity::Critical => "critical",
    }
}

/// The label set of `a` at severity `s`.
pub fn labels(a: &Alert, s: Severity) -> BTreeMap<&'static str, String> {
    let mut l = BTreeMap::from([
        ("alertname", alertname(a)),
        ("severity", severity(s).to_owned()),
        ("kind", a.kind.as_str().to_owned()),
        ("source", "gpumon".to_owned()),
    ]);
    if let Some(job) = &a.job {
        l.insert("job", job.clone());
    }
    if let Some(rank) = a.rank {
        l.insert("rank", rank.to_string());
    }
    if let Some(node) = &a.node {
        l.insert("node", node.clone());
    }
    if let Some(gpu) = a.gpu {
        l.insert("gpu", gpu.to_string());
    }
    l
}

/// The JSON array to post, at `now_s` of the sender's clock (Unix seconds);
/// a firing alert ends `ends_after_s` later unless posted again.
pub fn body(m: &Message, now_s: f64, ends_after_s: f64) -> Value {
    let a = &m.due.alert;
    let link = m.link();
    let mut description = a.message.clone();
    let extra = details(a);
    if !extra.is_empty() {
        description = format!("{description} ({})", extra.join(", "));
    }
    if let Some(f) = m.forecast() {
        description = format!("{description}; {}", f.describe());
    }
    let starts = a.t.min(now_s);
    let ends = match (m.due.notice, a.resolved_t) {
        (Notice::Resolve, Some(r)) => r.min(now_s).max(starts),
        (Notice::Resolve, None) => now_s.max(starts),
        _ => now_s.max(starts) + ends_after_s,
    };
    let one = |s: Severity, ends: f64| {
        json!({
            "labels": labels(a, s),
            "annotations": {
                "summary": m.title(),
                "description": description,
                "recommendation": a.recommendation.clone().unwrap_or_default(),
                "dashboard": link,
            },
            "startsAt": rfc3339(starts),
            "endsAt": rfc3339(ends),
            "generatorURL": link,
        })
    };
    let mut out = vec![one(a.severity, ends)];
    if let Some(before) = m.due.previous_severity.filter(|s| *s != a.severity) {
        out.push(one(before, now_s.max(starts)));
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use gpumon_core::notify::ReceiverKind;

    use super::super::testing::oom_message;
    use super::*;

    const NOW: f64 = 1.8e9;

    #[test]
    fn a_firing_alert_carries_labels_annotations_and_a_future_end() {
        let m = oom_message(ReceiverKind::Alertmanager, Notice::New);
        let b = body(&m, NOW, 240.0);
        let alerts = b.as_array().unwrap();
        assert_eq!(alerts.len(), 1);
        let x = &alerts[0];
        assert_eq!(x["labels"]["alertname"], "GpumonOomPredicted");
        assert_eq!(x["labels"]["severity"], "critical");
        assert_eq!(x["labels"]["job"], "job x");
        assert_eq!(x["labels"]["rank"], "2");
        assert_eq!(x["labels"]["gpu"], "2");
        assert_eq!(x["labels"]["source"], "gpumon");
        assert_eq!(x["labels"]["kind"], "oom_predicted");
        assert_eq!(x["startsAt"], rfc3339(m.due.alert.t));
        assert_eq!(x["endsAt"], rfc3339(NOW + 240.0));
        assert_eq!(x["annotations"]["dashboard"], m.link());
        assert_eq!(x["generatorURL"], m.link());
        assert!(x["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("OOM in 10 min"));
    }

    #[test]
    fn a_host_alert_is_labelled_with_its_node_only() {
        let m = super::super::testing::host_message(ReceiverKind::Alertmanager, Notice::New);
        let b = body(&m, NOW, 240.0);
        let labels = b[0]["labels"].as_object().unwrap();
        assert_eq!(labels["alertname"], "GpumonMemoryLevel");
        assert_eq!(labels["node"], "node-a");
        for absent in ["job", "rank", "gpu"] {
            assert!(!labels.contains_key(absent), "{absent}: {labels:?}");
        }
    }

    #[test]
    fn severities_are_the_ones_alertmanager_routes_by() {
        let all = [Severity::Warning, Severity::High, Severity::Critical].map(severity);
        assert_eq!(all, ["info", "warning", "critical"]);
    }

    #[test]
    fn a_resolved_alert_ends_at_its_resolution() {
        let m = oom_message(ReceiverKind::Alertmanager, Notice::Resolve);
        let b = body(&m, NOW, 240.0);
        assert_eq!(b[0]["endsAt"], rfc3339(m.due.alert.resolved_t.unwrap()));
    }

    #[test]
    fn an_escalation_closes_the_label_set_announced_before() {
        let mut m = oom_message(ReceiverKind::Alertmanager, Notice::Escalation);
        m.due.previous_severity = Some(Severity::High);
        let b = body(&m, NOW, 240.0);
        assert_eq!(b[0]["labels"]["severity"], "critical");
        assert_eq!(b[1]["labels"]["severity"], "warning", "gpumon's high");
        assert_eq!(b[1]["endsAt"], rfc3339(NOW));
    }

    #[test]
    fn data_ahead_of_the_clock_does_not_start_in_the_future() {
        let m = oom_message(ReceiverKind::Alertmanager, Notice::New);
        let b = body(&m, 1.6e9, 240.0);
        assert_eq!(b[0]["startsAt"], rfc3339(1.6e9));
        assert_eq!(b[0]["endsAt"], rfc3339(1.6e9 + 240.0));
    }
}
