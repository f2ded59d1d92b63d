//! Why a notifier configuration is refused at start-up: the flag or key
//! and the value, as the usage error says it. A receiver's URL appears
//! redacted wherever it may hold a secret (Slack's does).

use thiserror::Error;

use crate::remote_write::UrlError;

/// A refused notifier setting.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NotifyConfigError {
    /// A receiver's URL does not parse.
    #[error("{flag} {url:?} is not a URL ({reason}); expected http(s)://HOST[:PORT]/PATH")]
    NotUrl {
        /// The receiver's flag, e.g. `--notify-webhook (or [notify] webhook)`.
        flag: String,
        /// The URL given.
        url: String,
        /// Why it does not parse.
        reason: UrlError,
    },
    /// A receiver's URL of another scheme than http(s).
    #[error("{flag} {redacted}: scheme {scheme:?} is neither http nor https")]
    Scheme {
        /// The receiver's flag.
        flag: String,
        /// The receiver, redacted.
        redacted: String,
        /// The scheme.
        scheme: String,
    },
    /// A receiver's URL without a host.
    #[error("{flag} {url:?} names no host")]
    NoHost {
        /// The receiver's flag.
        flag: String,
        /// The URL given.
        url: String,
    },
    /// A URL the sender could not send to.
    #[error("{flag} {redacted}: {reason}")]
    Unusable {
        /// The receiver's flag.
        flag: String,
        /// The receiver, redacted.
        redacted: String,
        /// The sender's reason.
        reason: String,
    },
    /// More receivers than may be.
    #[error("{count} notification receivers exceed the maximum of {max}")]
    TooManyReceivers {
        /// The receivers given.
        count: usize,
        /// The most taken.
        max: usize,
    },
    /// One URL given twice for one kind of receiver.
    #[error("--notify-{kind} lists the same URL twice ({redacted})")]
    SameUrl {
        /// The kind, e.g. `slack`.
        kind: &'static str,
        /// The receiver, redacted.
        redacted: String,
    },
    /// A dashboard URL that is not http(s).
    #[error("--dashboard-url {url:?} is not an http(s) URL such as http://gpumon.example:7070")]
    DashboardUrl {
        /// The URL given.
        url: String,
    },
    /// A repeat interval of 0.
    #[error("[notify] repeat_interval_s must be positive")]
    RepeatInterval,
    /// A count or duration of 0.
    #[error("notify {name} must be positive")]
    NotPositive {
        /// The key.
        name: &'static str,
    },
    /// The longest backoff below the first.
    #[error("notify backoff_max_ms must be at least backoff_initial_ms")]
    Backoff,
}
