//! The remote-write sender's runtime configuration, validated at start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use gpumon_runtime::secrets::Secret;

use super::config_error::RemoteWriteConfigError as Error;

/// Default time between sends.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// Default time allowed for one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default most samples in one request.
pub const DEFAULT_MAX_SAMPLES_PER_REQUEST: usize = 10_000;
/// Default most samples waiting to be sent: more than one interval of a
/// 64k-GPU fleet (about 1.5 million samples at 2 s windows and 15 s).
pub const DEFAULT_MAX_QUEUED_SAMPLES: usize = 2_000_000;
/// Most extra labels.
pub const MAX_EXTRA_LABELS: usize = 16;
/// Longest extra label value, bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 256;
/// Label names the sender sets itself, which extra labels may not take.
pub const OWN_LABELS: [&str; 5] = ["node", "gpu", "uuid", "job", "rank"];

/// Where and how the leader writes the per-GPU series.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteWriteConfig {
    /// The receiver's write endpoint (`http://` or `https://`).
    pub url: String,
    /// Sent as `Authorization: Bearer`.
    pub bearer_token: Option<Secret>,
    /// CA certificates an https receiver is verified with [default: the
    /// public roots].
    pub ca_file: Option<PathBuf>,
    /// Time between sends.
    pub interval: Duration,
    /// Time allowed for one request, from connecting to the answer.
    pub timeout: Duration,
    /// Most samples in one request; more make several requests.
    pub max_samples_per_request: usize,
    /// Most samples waiting to be sent; past it the oldest requests are
    /// dropped (and counted).
    pub max_queued_samples: usize,
    /// Labels added to every series, e.g. `cluster="a"`.
    pub labels: BTreeMap<String, String>,
}

impl RemoteWriteConfig {
    /// Every default, writing to `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            bearer_token: None,
            ca_file: None,
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            max_samples_per_request: DEFAULT_MAX_SAMPLES_PER_REQUEST,
            max_queued_samples: DEFAULT_MAX_QUEUED_SAMPLES,
            labels: BTreeMap::new(),
        }
    }

    /// Checks the values; the error names the flag and says why.
    pub fn validate(&self) -> Result<(), Error> {
        let url = reqwest::Url::parse(&self.url).map_err(|reason| Error::NotUrl {
            url: self.url.clone(),
            reason,
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(Error::Form {
                url: self.url.clone(),
            });
        }
        let has_credentials = !url.username().is_empty() || url.password().is_some();
        if has_credentials && self.bearer_token.is_some() {
            return Err(Error::TwoCredentials);
        }
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(3600));
        if !(min..=max).contains(&self.interval) {
            return Err(Error::Interval {
                secs: self.interval.as_secs_f64(),
            });
        }
        if !(min..=Duration::from_secs(600)).contains(&self.timeout) {
            return Err(Error::Timeout {
                secs: self.timeout.as_secs_f64(),
            });
        }
        if !(1..=1_000_000).contains(&self.max_samples_per_request) {
            return Err(Error::SamplesPerRequest {
                value: self.max_samples_per_request,
            });
        }
        if self.max_queued_samples < self.max_samples_per_request {
            return Err(Error::QueueBelowRequest {
                queued: self.max_queued_samples,
                per_request: self.max_samples_per_request,
            });
        }
        if self.labels.len() > MAX_EXTRA_LABELS {
            return Err(Error::TooManyLabels {
                count: self.labels.len(),
                max: MAX_EXTRA_LABELS,
            });
        }
        self.labels
            .iter()
            .try_for_each(|(name, value)| check_label(name, value))
    }
}

/// An extra label: a Prometheus label name of our own choosing (not one
/// the sender sets, nor reserved `__`), with a non-empty bounded value.
/// The name starts lower-case or with `_`, so byte order, which receivers
/// check labels against, still puts `__name__` first.
fn check_label(name: &str, value: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(Error::LabelName {
            name: name.to_owned(),
        });
    }
    if name.starts_with("__") || OWN_LABELS.contains(&name) {
        return Err(Error::LabelReserved {
            name: name.to_owned(),
            own: &OWN_LABELS,
        });
    }
    if value.is_empty() || value.len() > MAX_LABEL_VALUE_BYTES {
        return Err(Error::LabelValue {
            name: name.to_owned(),
            max: MAX_LABEL_VALUE_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Tune = fn(&mut RemoteWriteConfig);

    fn with(tune: impl FnOnce(&mut RemoteWriteConfig)) -> Result<(), String> {
        let mut c = RemoteWriteConfig::new("http://127.0.0.1:9090/api/v1/write");
        tune(&mut c);
        c.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn the_defaults_are_valid_and_each_bad_value_names_its_flag() {
        assert_eq!(with(|_| {}), Ok(()));
        let cases: [(&str, Tune); 8] = [
            ("--remote-write-url", |c| c.url = "ftp://x/".into()),
            ("--remote-write-url", |c| c.url = "not a url".into()),
            ("--remote-write-interval-s", |c| {
                c.interval = Duration::from_millis(10)
            }),
            ("--remote-write-timeout-s", |c| c.timeout = Duration::ZERO),
            ("--remote-write-max-samples-per-request", |c| {
                c.max_samples_per_request = 0
            }),
            ("--remote-write-max-queued-samples", |c| {
                c.max_queued_samples = 10
            }),
            ("--remote-write-label", |c| {
                c.labels.insert("job".into(), "x".into());
            }),
            ("--remote-write-bearer-token-file", |c| {
                c.url = "http://u:p@h/w".into();
                c.bearer_token = Some(Secret::new("0123456789abcdef").unwrap());
            }),
        ];
        for (flag, tune) in cases {
            let err = with(tune).unwrap_err();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }

    #[test]
    fn extra_labels_are_prometheus_names_with_bounded_values() {
        for (name, value, ok) in [
            ("cluster", "a", true),
            ("_zone", "eu-1", true),
            ("zoneA", "eu-1", true),
            ("Zone", "eu-1", false),
            ("9lives", "a", false),
            ("has-dash", "a", false),
            ("__name__", "a", false),
            ("rank", "a", false),
            ("cluster", "", false),
        ] {
            assert_eq!(check_label(name, value).is_ok(), ok, "{name}={value}");
        }
        let long = "v".repeat(MAX_LABEL_VALUE_BYTES + 1);
        assert!(check_label("cluster", &long).is_err());
    }
}
