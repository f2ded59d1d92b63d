//! `[notify]` in the coordinator's configuration file: where notifications
//! go and how often a firing alert is repeated. URLs are checked by the
//! coordinator when it starts.

use serde::Deserialize;

use crate::engine::Severity;

/// Default time between notifications of an alert that keeps firing,
/// seconds: 4 h, Alertmanager's default `repeat_interval`.
pub const DEFAULT_REPEAT_INTERVAL_S: f64 = 4.0 * 3600.0;

/// `[notify]`.
///
/// ```toml
/// [notify]
/// webhook = ["http://hooks.internal:8080/gpumon"]
/// slack = ["https://hooks.slack.com/services/T000/B000/XXXX"]
/// alertmanager = ["http://alertmanager:9093"]
/// repeat_interval_s = 14400.0
/// min_severity = "warning"
/// dashboard_url = "http://gpumon.internal:7070"
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyFile {
    /// Generic JSON webhook URLs (`--notify-webhook`).
    pub webhook: Vec<String>,
    /// Slack incoming webhook URLs (`--notify-slack`).
    pub slack: Vec<String>,
    /// Alertmanager base URLs (`--notify-alertmanager`).
    pub alertmanager: Vec<String>,
    /// Time between notifications of an alert that keeps firing, seconds [default: 14400].
    pub repeat_interval_s: f64,
    /// Alerts below this severity are not announced: warning, high or critical [default: warning].
    pub min_severity: Severity,
    /// Base URL of the dashboard that links point to (`--dashboard-url`) [default: this replica's API URL].
    pub dashboard_url: Option<String>,
    /// PEM file of the CA certificates that https receivers are verified
    /// with, for receivers behind a private CA [default: the public roots].
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for NotifyFile {
    fn default() -> Self {
        Self {
            webhook: Vec::new(),
            slack: Vec::new(),
            alertmanager: Vec::new(),
            repeat_interval_s: DEFAULT_REPEAT_INTERVAL_S,
            min_severity: Severity::Warning,
            dashboard_url: None,
            ca_file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_names_unknown_keys() {
        let n: NotifyFile =
            toml::from_str("slack = [\"https://hooks.slack.com/x\"]\nmin_severity = \"high\"\n")
                .unwrap();
        assert_eq!(n.slack.len(), 1);
        assert!(n.webhook.is_empty());
        assert_eq!(n.min_severity, Severity::High);
        assert_eq!(n.repeat_interval_s, DEFAULT_REPEAT_INTERVAL_S);
        let err = toml::from_str::<NotifyFile>("slak = []\n").unwrap_err();
        assert!(err.to_string().contains("slak"), "{err}");
    }
}
