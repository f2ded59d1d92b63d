//! Slack incoming webhooks: a Block Kit message with a plain-text fallback.
//!
//! Blocks: a header (`🔴 OOM predicted: job-x rank 2`, or `✅ Resolved: ...`),
//! the alert's message, a section of fields (Job, Rank, What, Since,
//! Forecast, Recommendation, and GPU when known) and a button to the job's
//! dashboard page. Texts are escaped for mrkdwn (`&`, `<`, `>`) and clipped
//! to Slack's limits (150 characters for a header, 2000 for a field, 3000
//! for a section).

use serde_json::{json, Value};

use gpumon_core::engine::Severity;
use gpumon_core::notify::Notice;

use super::{clip, details, rfc3339, what, Message};

const HEADER_MAX: usize = 150;
const FIELD_MAX: usize = 2000;
const SECTION_MAX: usize = 3000;

/// Escapes the three characters mrkdwn reserves.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn field(name: &str, value: &str) -> Value {
    json!({ "type": "mrkdwn", "text": clip(&format!("*{name}*\n{}", escape(value)), FIELD_MAX) })
}

fn icon(m: &Message) -> &'static str {
    match (m.due.notice, m.due.alert.severity) {
        (Notice::Resolve, _) => "✅",
        (_, Severity::Critical) => "🔴",
        (_, Severity::High) => "🟠",
        (_, Severity::Warning) => "🟡",
    }
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "warning",
        Severity::High => "high",
        Severity::Critical => "critical",
    }
}

/// The JSON body.
pub fn body(m: &Message) -> Value {
    let a = &m.due.alert;
    let title = m.title();
    let (header, status) = match m.due.notice {
        Notice::Resolve => (format!("Resolved: {title}"), "RESOLVED".to_owned()),
        Notice::Escalation => (
            format!("{title} ({})", severity(a.severity)),
            format!("ESCALATED to {}", severity(a.severity)),
        ),
        Notice::Repeat => (title.clone(), "STILL FIRING".to_owned()),
        Notice::New => (title.clone(), "FIRING".to_owned()),
    };
    let mut what_text = format!("{} ({})", what(a.kind), severity(a.severity));
    let extra = details(a);
    if !extra.is_empty() {
        what_text = format!("{what_text}: {}", extra.join(", "));
    }
    let since = match a.resolved_t {
        Some(r) => format!("{} (resolved {})", rfc3339(a.t), rfc3339(r)),
        None => rfc3339(a.t),
    };
    let forecast = match (m.due.notice, m.forecast()) {
        (Notice::Resolve, _) => "no longer forecast".to_owned(),
        (_, Some(f)) => f.describe(),
        (_, None) => "none".to_owned(),
    };
    let mut fields = vec![
        field("Job", a.job.as_deref().unwrap_or("-")),
        field("Rank", &a.rank.map_or("-".to_owned(), |r| r.to_string())),
        field("What", &what_text),
        field("Since", &since),
        field("Forecast", &forecast),
        field(
            "Recommendation",
            a.recommendation.as_deref().unwrap_or("none"),
        ),
    ];
    match (&a.node, a.gpu, &a.job) {
        (Some(node), Some(gpu), _) => fields.push(field("GPU", &format!("{node} GPU {gpu}"))),
        (Some(node), None, None) => fields.push(field("Host", node)),
        _ => {}
    }
    let link = m.link();
    let message = if a.message.is_empty() {
        title.clone()
    } else {
        a.message.clone()
    };
    json!({
        "text": clip(&format!("[{status}] {title}: {message}"), SECTION_MAX),
        "blocks": [
            {
                "type": "header",
                "text": {
                    "type": "plain_text",
                    "text": clip(&format!("{} {header}", icon(m)), HEADER_MAX),
                    "emoji": true,
                },
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": clip(&format!("*{status}* {}", escape(&message)), SECTION_MAX),
                },
            },
            { "type": "section", "fields": fields },
            {
                "type": "actions",
                "elements": [{
                    "type": "button",
                    "text": { "type": "plain_text", "text": "Open dashboard" },
                    "url": link,
                }],
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use gpumon_core::notify::ReceiverKind;

    use super::super::testing::oom_message;
    use super::*;

    fn fields(b: &Value) -> Vec<String> {
        b["blocks"][2]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["text"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_message_has_a_header_fields_and_a_dashboard_button() {
        let m = oom_message(ReceiverKind::Slack, Notice::New);
        let b = body(&m);
        assert_eq!(b["blocks"][0]["type"], "header");
        let header = b["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(header.contains("OOM predicted: job x rank 2"), "{header}");
        let f = fields(&b);
        let names: Vec<&str> = f.iter().map(|t| t.split('\n').next().unwrap()).collect();
        assert_eq!(
            names,
            [
                "*Job*",
                "*Rank*",
                "*What*",
                "*Since*",
                "*Forecast*",
                "*Recommendation*",
                "*GPU*"
            ]
        );
        assert_eq!(f[0], "*Job*\njob x");
        assert_eq!(f[1], "*Rank*\n2");
        assert!(f[3].contains(&rfc3339(m.due.alert.t)), "{}", f[3]);
        assert!(f[4].contains("OOM in 10 min"), "{}", f[4]);
        assert!(f[5].contains("empty_cache"), "{}", f[5]);
        assert_eq!(b["blocks"][3]["elements"][0]["url"], m.link());
        assert!(b["text"].as_str().unwrap().starts_with("[FIRING]"));
    }

    #[test]
    fn a_host_alert_names_its_host() {
        let m = super::super::testing::host_message(ReceiverKind::Slack, Notice::New);
        let b = body(&m);
        let f = fields(&b);
        assert_eq!(
            f.last().map(String::as_str),
            Some("*Host*\nnode-a"),
            "{f:?}"
        );
        assert_eq!(f[0], "*Job*\n-");
        let header = b["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(header.contains("node-a host RAM"), "{header}");
    }

    #[test]
    fn a_resolve_says_resolved_and_text_is_escaped() {
        let mut m = oom_message(ReceiverKind::Slack, Notice::Resolve);
        m.due.alert.message = "a <b> & c".into();
        let b = body(&m);
        let header = b["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(header.contains("Resolved"), "{header}");
        assert!(b["text"].as_str().unwrap().starts_with("[RESOLVED]"));
        let section = b["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(section.contains("a &lt;b&gt; &amp; c"), "{section}");
        assert!(fields(&b)[3].contains("resolved"));
    }
}
