//! Why a remote-write configuration is refused at start-up: the flag it
//! comes from and the value, as the usage error says it.

use thiserror::Error;

/// What `Url::parse` refuses a URL with.
pub type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// A refused remote-write setting.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RemoteWriteConfigError {
    /// The URL does not parse.
    #[error("--remote-write-url {url:?} is not a URL ({reason})")]
    NotUrl {
        /// The URL given.
        url: String,
        /// Why it does not parse.
        reason: UrlError,
    },
    /// The URL is not `http(s)://HOST...`.
    #[error("--remote-write-url {url:?}: expected http(s)://HOST[:PORT]/PATH")]
    Form {
        /// The URL given.
        url: String,
    },
    /// Credentials both in the URL and in a token file.
    #[error(
        "--remote-write-url carries credentials and --remote-write-bearer-token-file is given: use one"
    )]
    TwoCredentials,
    /// The interval is outside 0.1 to 3600 s.
    #[error("--remote-write-interval-s {secs:?} is outside 0.1 to 3600 seconds")]
    Interval {
        /// The interval, seconds.
        secs: f64,
    },
    /// The timeout is outside 0.1 to 600 s.
    #[error("--remote-write-timeout-s {secs:?} is outside 0.1 to 600 seconds")]
    Timeout {
        /// The timeout, seconds.
        secs: f64,
    },
    /// Samples per request outside 1 to 1,000,000.
    #[error("--remote-write-max-samples-per-request {value} is outside 1 to 1000000")]
    SamplesPerRequest {
        /// The value given.
        value: usize,
    },
    /// A queue smaller than one request.
    #[error("--remote-write-max-queued-samples {queued} is below one request ({per_request})")]
    QueueBelowRequest {
        /// `--remote-write-max-queued-samples`.
        queued: usize,
        /// `--remote-write-max-samples-per-request`.
        per_request: usize,
    },
    /// More extra labels than may be.
    #[error("--remote-write-label: {count} labels, at most {max}")]
    TooManyLabels {
        /// The labels given.
        count: usize,
        /// The most taken.
        max: usize,
    },
    /// A label name that is not `[a-z_][a-zA-Z0-9_]*`.
    #[error("--remote-write-label {name:?}: a label name here is [a-z_][a-zA-Z0-9_]*")]
    LabelName {
        /// The name.
        name: String,
    },
    /// A label name the sender sets, or Prometheus reserves.
    #[error(
        "--remote-write-label {name:?}: reserved (the sender sets {} and Prometheus __*)",
        .own.join(", ")
    )]
    LabelReserved {
        /// The name.
        name: String,
        /// The labels the sender sets itself.
        own: &'static [&'static str],
    },
    /// A label value empty or longer than may be.
    #[error("--remote-write-label {name}: the value must be 1 to {max} bytes")]
    LabelValue {
        /// The label's name.
        name: String,
        /// The longest taken, bytes.
        max: usize,
    },
}
