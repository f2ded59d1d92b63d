//! What each receiver kind is sent, built from one due notification; one
//! file per kind. Pure: the caller passes the wall clock and data time.

pub mod alertmanager;
pub mod slack;
pub mod webhook;

use gpumon_core::engine::{Alert, AlertKind};
use gpumon_core::notify::Due;
use gpumon_core::units::fmt_bytes;
use serde::Serialize;

/// One notification and what its payload needs besides the alert.
#[derive(Debug, Clone)]
pub struct Message {
    /// What is due.
    pub due: Due,
    /// The engine's data time when it was found due, seconds.
    pub data_now_t: f64,
    /// Base URL of the dashboard, without a trailing slash.
    pub dashboard_url: String,
}

impl Message {
    /// The dashboard page of the alert's job, or its front page for a GPU
    /// alert: `{dashboard}/#/jobs/{job}`.
    pub fn link(&self) -> String {
        match &self.due.alert.job {
            Some(job) => format!("{}/#/jobs/{}", self.dashboard_url, encode_component(job)),
            None => format!("{}/", self.dashboard_url),
        }
    }

    /// The OOM forecast, for alerts that carry one.
    pub fn forecast(&self) -> Option<Forecast> {
        let a = &self.due.alert;
        let t = a.predicted_oom_t?;
        Some(Forecast {
            predicted_oom_t: t,
            seconds_left: (t - self.data_now_t).max(0.0),
            confidence: a.confidence,
        })
    }

    /// One line naming what and whom: `OOM predicted: job-x rank 2`.
    pub fn title(&self) -> String {
        format!("{}: {}", what(self.due.alert.kind), whom(&self.due.alert))
    }
}

/// The OOM forecast as payloads show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Forecast {
    /// Predicted OOM time, Unix seconds (data time).
    pub predicted_oom_t: f64,
    /// Seconds from the data's present to the predicted OOM.
    pub seconds_left: f64,
    /// 0 to 1.
    pub confidence: Option<f64>,
}

impl Forecast {
    /// `OOM in 12 min (confidence 80%)`.
    pub fn describe(&self) -> String {
        let left = self.seconds_left;
        let when = if left < 120.0 {
            format!("{left:.0} s")
        } else if left < 7200.0 {
            format!("{:.0} min", left / 60.0)
        } else {
            format!("{:.1} h", left / 3600.0)
        };
        match self.confidence {
            Some(c) => format!("OOM in {when} (confidence {:.0}%)", c * 100.0),
            None => format!("OOM in {when}"),
        }
    }
}

/// What an alert kind is, for people.
pub fn what(kind: AlertKind) -> &'static str {
    match kind {
        AlertKind::OomPredicted => "OOM predicted",
        AlertKind::Leak => "Memory leak",
        AlertKind::Fragmentation => "Fragmentation",
        AlertKind::Imbalance => "Memory imbalance",
        AlertKind::Straggler => "Straggler",
        AlertKind::MemoryLevel => "Memory level",
        AlertKind::StageImbalance => "Pipeline stage imbalance",
        AlertKind::SlowLink => "Slow link",
        AlertKind::OutsideMemory => "Memory outside the allocator grew",
        AlertKind::Hang => "Hung job",
    }
}

/// `job-x rank 2`, `node-a GPU 3`, or `node-a host RAM` (an alert about a
/// node with neither job nor GPU: its host memory).
pub fn whom(a: &Alert) -> String {
    match (&a.job, a.rank, &a.node, a.gpu) {
        (Some(job), Some(rank), _, _) => format!("{job} rank {rank}"),
        (_, _, Some(node), Some(gpu)) => format!("{node} GPU {gpu}"),
        (None, None, Some(node), None) => format!("{node} host RAM"),
        _ => "cluster".to_owned(),
    }
}

/// Extra facts of the alert's kind, for people: rate, slowdown, excess.
pub fn details(a: &Alert) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(r) = a.rate_bytes_per_s {
        out.push(format!("growing {}/s", fmt_bytes(r.max(0.0) as u64)));
    }
    if let Some(s) = a.slowdown {
        let section = a.section.as_deref().unwrap_or("step");
        out.push(format!("{s:.2}x slower ({section})"));
    }
    if let Some(b) = a.excess_bytes {
        out.push(format!("{} above the median", fmt_bytes(b.max(0.0) as u64)));
    }
    if let Some(b) = a.reclaimable_bytes {
        out.push(format!("{} reclaimable", fmt_bytes(b.max(0.0) as u64)));
    }
    out
}

/// Unix seconds as RFC 3339 UTC with milliseconds, e.g.
/// `2023-11-14T22:13:20.000Z`; non-finite or negative times give the epoch.
pub fn rfc3339(t_s: f64) -> String {
    let ms = if t_s.is_finite() && t_s > 0.0 {
        (t_s * 1000.0).round() as u64
    } else {
        0
    };
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month and day of `days` after 1970-01-01 in the proleptic
/// Gregorian calendar (eras of 400 years, years starting in March).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Percent-encodes everything but unreserved characters, for a path part.
fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// At most `max` bytes of `s`, cut on a character boundary, with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
pub(crate) mod testing {
    use gpumon_core::engine::{AlertKind, Severity, Subject};
    use gpumon_core::notify::{Due, Notice, NotifyKey, ReceiverId, ReceiverKind};

    use super::Message;

    /// A host memory-level alert on node-a (critical), due as `notice`.
    pub fn host_message(kind: ReceiverKind, notice: Notice) -> Message {
        let subject = Subject::Host("node-a".into());
        let mut m = oom_message(kind, notice);
        let mut alert = subject.alert(AlertKind::MemoryLevel, 1.7e9, Severity::Critical);
        alert.id = 5;
        alert.message = "host RAM on node-a is 93.0 % used".into();
        m.due.key.kind = AlertKind::MemoryLevel;
        m.due.key.subject = subject;
        m.due.alert = alert;
        m
    }

    /// An OOM alert on job-x rank 2, fired at t = 1_700_000_000 s, due as `notice`.
    pub fn oom_message(kind: ReceiverKind, notice: Notice) -> Message {
        let subject = Subject::Rank("job x".into(), 2);
        let mut alert = subject.alert(AlertKind::OomPredicted, 1.7e9, Severity::Critical);
        alert.id = 4;
        alert.node = Some("node-a".into());
        alert.gpu = Some(2);
        alert.predicted_oom_t = Some(1.7e9 + 900.0);
        alert.confidence = Some(0.8);
        alert.rate_bytes_per_s = Some(20.0 * 1024.0 * 1024.0);
        alert.recommendation = Some("call torch.cuda.empty_cache()".into());
        alert.message = "rank 2 runs out of memory in 10 min".into();
        if notice == Notice::Resolve {
            alert.resolved_t = Some(1.7e9 + 400.0);
        }
        Message {
            due: Due {
                key: NotifyKey {
                    receiver: ReceiverId::new(kind, "http://127.0.0.1:9/x"),
                    kind: AlertKind::OomPredicted,
                    subject,
                },
                notice,
                alert,
                previous_severity: None,
            },
            data_now_t: 1.7e9 + 300.0,
            dashboard_url: "http://gpumon.test:7070".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000.25), "2023-11-14T22:13:20.250Z");
        // A leap day, and the day after.
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(951_868_800.0), "2000-03-01T00:00:00.000Z");
        assert_eq!(rfc3339(f64::NAN), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn links_encode_the_job() {
        let m = testing::oom_message(
            gpumon_core::notify::ReceiverKind::Webhook,
            gpumon_core::notify::Notice::New,
        );
        assert_eq!(m.link(), "http://gpumon.test:7070/#/jobs/job%20x");
        assert_eq!(m.title(), "OOM predicted: job x rank 2");
        let f = m.forecast().unwrap();
        assert_eq!(f.seconds_left, 600.0);
        assert_eq!(f.describe(), "OOM in 10 min (confidence 80%)");
    }

    #[test]
    fn a_host_alert_names_the_node_s_host_and_links_the_front_page() {
        let m = testing::host_message(
            gpumon_core::notify::ReceiverKind::Webhook,
            gpumon_core::notify::Notice::New,
        );
        assert_eq!(m.title(), "Memory level: node-a host RAM");
        assert_eq!(m.link(), "http://gpumon.test:7070/");
        assert!(m.forecast().is_none());
    }

    #[test]
    fn clip_cuts_on_a_char_boundary() {
        assert_eq!(clip("short", 10), "short");
        let c = clip(&"é".repeat(100), 11);
        assert!(c.len() <= 11 && c.ends_with('…'), "{c}");
    }
}
