//! The generic webhook: one JSON object per notification, POSTed as is.
//!
//! ```json
//! { "version": 1, "status": "firing", "notice": "new", "kind": "oom_predicted",
//!   "severity": "critical", "job": "job-x", "rank": 2, "node": "node-a", "gpu": 2,
//!   "since": "2023-11-14T22:13:20.000Z", "resolved_at": null, "message": "...",
//!   "recommendation": "...",
//!   "forecast": { "predicted_oom_t": 1700000900.0, "seconds_left": 600.0, "confidence": 0.8 },
//!   "dashboard_url": "http://gpumon:7070/#/jobs/job-x", "alert": { ...the full alert... } }
//! ```

use serde_json::{json, Value};

use super::{rfc3339, Message};

/// Version of the payload's layout; bumped on an incompatible change.
pub const WEBHOOK_PAYLOAD_VERSION: u32 = 1;

/// The JSON body.
pub fn body(m: &Message) -> Value {
    let a = &m.due.alert;
    json!({
        "version": WEBHOOK_PAYLOAD_VERSION,
        "status": m.due.notice.status(),
        "notice": m.due.notice.as_str(),
        "kind": a.kind.as_str(),
        "severity": a.severity,
        "job": a.job,
        "rank": a.rank,
        "node": a.node,
        "gpu": a.gpu,
        "since": rfc3339(a.t),
        "resolved_at": a.resolved_t.map(rfc3339),
        "message": a.message,
        "recommendation": a.recommendation,
        "forecast": m.forecast(),
        "dashboard_url": m.link(),
        "alert": a,
    })
}

#[cfg(test)]
mod tests {
    use gpumon_core::notify::{Notice, ReceiverKind};

    use super::super::testing::oom_message;
    use super::*;

    #[test]
    fn the_body_names_the_alert_its_forecast_and_link() {
        let m = oom_message(ReceiverKind::Webhook, Notice::New);
        let b = body(&m);
        assert_eq!(b["version"], 1);
        assert_eq!(b["status"], "firing");
        assert_eq!(b["kind"], "oom_predicted");
        assert_eq!(b["severity"], "critical");
        assert_eq!(
            (b["job"].as_str(), b["rank"].as_u64()),
            (Some("job x"), Some(2))
        );
        assert_eq!(b["since"], rfc3339(m.due.alert.t));
        assert_eq!(b["resolved_at"], Value::Null);
        assert_eq!(b["forecast"]["seconds_left"], 600.0);
        assert_eq!(b["forecast"]["confidence"], 0.8);
        assert_eq!(b["dashboard_url"], m.link());
        assert_eq!(
            b["recommendation"],
            m.due.alert.recommendation.clone().unwrap()
        );
        assert_eq!(b["alert"]["id"], m.due.alert.id);

        let r = body(&oom_message(ReceiverKind::Webhook, Notice::Resolve));
        assert_eq!(r["status"], "resolved");
        assert_eq!(r["notice"], "resolve");
        assert!(r["resolved_at"].is_string());
    }
}
