//! The notifier's runtime configuration: receivers (kind and URL), repeat
//! interval, minimum severity, and the sending tunables, validated at start.
//! Receiver URLs are `http://` or `https://` (verified against the roots
//! compiled into `crate::outbound`); credentials in them are sent as Basic auth.

use std::fmt;
use std::time::Duration;

use gpumon_core::engine::Severity;
use gpumon_core::notify::{NotifyFile, ReceiverId, ReceiverKind};

use super::config_error::NotifyConfigError as Error;

/// How often the leader looks for due notifications, ms.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;
/// Time allowed for one POST, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;
/// First wait before retrying a failed POST, ms; doubles per attempt.
pub const DEFAULT_BACKOFF_INITIAL_MS: u64 = 1000;
/// Longest wait between attempts, ms; also how long a notification that
/// failed every attempt rests before the leader tries it again.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 60_000;
/// Attempts per notification before it is counted failed (and tried again
/// after a rest: nothing is given up for good).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 6;
/// Period of re-posting firing alerts to Alertmanager, ms: it resolves an
/// alert on its own once `endsAt` passes, and we post `endsAt` four periods ahead.
pub const DEFAULT_ALERTMANAGER_REFRESH_MS: u64 = 60_000;
/// Notifications queued per receiver; past it they wait for the next round.
pub const DEFAULT_QUEUE_CAPACITY: usize = 256;
/// Most receivers of all kinds together.
pub const MAX_RECEIVERS: usize = 32;

/// One receiver. Its `Debug` and [`Receiver::redacted`] never show the
/// URL's path or query (a Slack webhook URL is a secret).
#[derive(Clone, PartialEq, Eq)]
pub struct Receiver {
    /// What it speaks.
    pub kind: ReceiverKind,
    /// Where: the webhook URL, or Alertmanager's base URL.
    pub url: String,
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Receiver {
    /// A receiver of `kind` at `url`.
    pub fn new(kind: ReceiverKind, url: impl Into<String>) -> Self {
        Self {
            kind,
            url: url.into(),
        }
    }

    /// Its id in the replicated state.
    pub fn id(&self) -> ReceiverId {
        ReceiverId::new(self.kind, &self.url)
    }

    /// `slack http://host:port (slack-1234...)`: safe for logs.
    pub fn redacted(&self) -> String {
        let origin = reqwest::Url::parse(&self.url)
            .ok()
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|| "(invalid URL)".to_owned());
        format!("{} {origin} ({})", self.kind.as_str(), self.id())
    }

    /// The URL to POST to: the URL itself, or Alertmanager's alerts endpoint.
    pub fn endpoint(&self) -> String {
        match self.kind {
            ReceiverKind::Alertmanager => format!(
                "{}{}",
                self.url.trim_end_matches('/'),
                super::payload::alertmanager::ALERTS_PATH
            ),
            _ => self.url.clone(),
        }
    }

    fn flag(&self) -> String {
        let k = self.kind.as_str();
        format!("--notify-{k} (or [notify] {k})")
    }

    fn validate(&self) -> Result<(), Error> {
        let url = reqwest::Url::parse(&self.url).map_err(|reason| Error::NotUrl {
            flag: self.flag(),
            url: self.url.clone(),
            reason,
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::Scheme {
                flag: self.flag(),
                redacted: self.redacted(),
                scheme: url.scheme().to_owned(),
            });
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Error::NoHost {
                flag: self.flag(),
                url: self.url.clone(),
            });
        }
        // What the sender will do with it, so a URL it cannot use is refused
        // now rather than failing every send.
        crate::outbound::target(&self.endpoint())
            .map(drop)
            .map_err(|e| Error::Unusable {
                flag: self.flag(),
                redacted: self.redacted(),
                reason: e.to_string(),
            })
    }
}

/// Everything the notifier needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    /// Where notifications go; none disables the notifier.
    pub receivers: Vec<Receiver>,
    /// Time between notifications of an alert that keeps firing, ms.
    pub repeat_interval_ms: u64,
    /// Alerts below this severity are not announced.
    pub min_severity: Severity,
    /// Base URL of dashboard links; `None`: this replica's advertised API URL.
    pub dashboard_url: Option<String>,
    /// How often the leader looks for due notifications, ms.
    pub interval_ms: u64,
    /// Time allowed for one POST, ms.
    pub timeout_ms: u64,
    /// First wait before a retry, ms; doubles per attempt up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    /// Longest wait between attempts, and rest after all attempts failed, ms.
    pub backoff_max_ms: u64,
    /// Attempts per notification before it is counted failed.
    pub max_attempts: u32,
    /// Re-post period of firing alerts to Alertmanager, ms; the shorter of
    /// this and `repeat_interval_ms` applies ([`NotifyConfig::repeat_ms_for`]).
    pub alertmanager_refresh_ms: u64,
    /// Notifications queued per receiver.
    pub queue_capacity: usize,
    /// CA certificates https receivers are verified with [default: the
    /// public roots].
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self::from_file(&NotifyFile::default())
    }
}

impl NotifyConfig {
    /// The config a `[notify]` table describes (not yet validated).
    pub fn from_file(file: &NotifyFile) -> Self {
        let mut c = Self {
            receivers: Vec::new(),
            repeat_interval_ms: secs_to_ms(file.repeat_interval_s),
            min_severity: file.min_severity,
            dashboard_url: file.dashboard_url.clone(),
            interval_ms: DEFAULT_INTERVAL_MS,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            backoff_initial_ms: DEFAULT_BACKOFF_INITIAL_MS,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            alertmanager_refresh_ms: DEFAULT_ALERTMANAGER_REFRESH_MS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            ca_file: file.ca_file.clone(),
        };
        c.set(ReceiverKind::Webhook, &file.webhook);
        c.set(ReceiverKind::Slack, &file.slack);
        c.set(ReceiverKind::Alertmanager, &file.alertmanager);
        c
    }

    /// Replaces the receivers of `kind` with `urls`.
    pub fn set(&mut self, kind: ReceiverKind, urls: &[String]) {
        self.receivers.retain(|r| r.kind != kind);
        self.receivers
            .extend(urls.iter().map(|u| Receiver::new(kind, u.clone())));
        self.receivers.sort_by_key(|r| r.kind);
    }

    /// The repeat interval `due` uses for a receiver: Alertmanager's is its
    /// refresh period when shorter, so firing alerts never lapse there.
    pub fn repeat_ms_for(&self, kind: ReceiverKind) -> u64 {
        self.repeat_ms_with(kind, self.repeat_interval_ms)
    }

    /// [`NotifyConfig::repeat_ms_for`] with `repeat_interval_ms` in place
    /// of the configured one (a live setting's).
    pub fn repeat_ms_with(&self, kind: ReceiverKind, repeat_interval_ms: u64) -> u64 {
        match kind {
            ReceiverKind::Alertmanager => repeat_interval_ms.min(self.alertmanager_refresh_ms),
            _ => repeat_interval_ms,
        }
    }

    /// How far ahead a firing alert posted to Alertmanager ends.
    pub fn alertmanager_ends_after(&self) -> Duration {
        Duration::from_millis(
            self.repeat_ms_for(ReceiverKind::Alertmanager)
                .saturating_mul(4),
        )
    }

    /// Checks URLs and numbers; the error names the flag or key and the value.
    pub fn validate(&self) -> Result<(), Error> {
        if self.receivers.len() > MAX_RECEIVERS {
            return Err(Error::TooManyReceivers {
                count: self.receivers.len(),
                max: MAX_RECEIVERS,
            });
        }
        for (i, r) in self.receivers.iter().enumerate() {
            r.validate()?;
            if self.receivers[..i].contains(r) {
                return Err(Error::SameUrl {
                    kind: r.kind.as_str(),
                    redacted: r.redacted(),
                });
            }
        }
        if let Some(d) = &self.dashboard_url {
            let ok = reqwest::Url::parse(d)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
            if !ok {
                return Err(Error::DashboardUrl { url: d.clone() });
            }
        }
        if self.repeat_interval_ms == 0 {
            return Err(Error::RepeatInterval);
        }
        let positive = [
            ("interval_ms", self.interval_ms),
            ("timeout_ms", self.timeout_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("alertmanager_refresh_ms", self.alertmanager_refresh_ms),
            ("max_attempts", u64::from(self.max_attempts)),
            ("queue_capacity", self.queue_capacity as u64),
        ];
        if let Some(&(name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(Error::NotPositive { name });
        }
        if self.backoff_max_ms < self.backoff_initial_ms {
            return Err(Error::Backoff);
        }
        Ok(())
    }
}

/// Seconds to milliseconds; non-finite or negative gives 0 (refused by
/// [`NotifyConfig::validate`]).
fn secs_to_ms(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1000.0).round().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(kind: ReceiverKind, url: &str) -> NotifyConfig {
        let mut c = NotifyConfig::default();
        c.set(kind, &[url.to_owned()]);
        c
    }

    #[test]
    fn good_urls_pass_and_bad_ones_name_the_flag() {
        assert!(with(ReceiverKind::Webhook, "http://127.0.0.1:9000/hook")
            .validate()
            .is_ok());
        let err = with(ReceiverKind::Webhook, "not a url")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--notify-webhook") && err.contains("not a url"),
            "{err}"
        );
        let err = with(ReceiverKind::Alertmanager, "ftp://am:21")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--notify-alertmanager") && err.contains("ftp"),
            "{err}"
        );
        let err = with(
            ReceiverKind::Slack,
            "ftp://hooks.example/services/T/B/secret",
        )
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--notify-slack") && err.contains("ftp") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn https_receivers_are_accepted() {
        for kind in [
            ReceiverKind::Slack,
            ReceiverKind::Webhook,
            ReceiverKind::Alertmanager,
        ] {
            let c = with(kind, "https://hooks.slack.com/services/T/B/secret");
            assert_eq!(c.validate(), Ok(()), "{kind:?}");
        }
    }

    #[test]
    fn the_debug_form_hides_the_path() {
        let r = Receiver::new(ReceiverKind::Slack, "http://relay:8080/services/T/B/secret");
        let shown = format!("{r:?}");
        assert!(
            shown.contains("relay:8080") && !shown.contains("secret"),
            "{shown}"
        );
    }

    #[test]
    fn alertmanager_is_refreshed_within_the_repeat_interval() {
        let mut c = with(ReceiverKind::Alertmanager, "http://am:9093/");
        assert_eq!(c.receivers[0].endpoint(), "http://am:9093/api/v2/alerts");
        assert_eq!(
            c.repeat_ms_for(ReceiverKind::Alertmanager),
            DEFAULT_ALERTMANAGER_REFRESH_MS
        );
        assert_eq!(c.repeat_ms_for(ReceiverKind::Slack), 4 * 3600 * 1000);
        c.repeat_interval_ms = 1000;
        assert_eq!(c.repeat_ms_for(ReceiverKind::Alertmanager), 1000);
    }
}
