//! Receivers as the replicated state names them: kind plus a hash of the
//! URL, so the state never holds the URL (a Slack webhook URL is a secret).

use serde::{Deserialize, Serialize};

/// Where notifications go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiverKind {
    /// A generic JSON webhook.
    Webhook,
    /// A Slack incoming webhook (Block Kit).
    Slack,
    /// An Alertmanager (`POST /api/v2/alerts`).
    Alertmanager,
}

impl ReceiverKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ReceiverKind; 3] = [Self::Webhook, Self::Slack, Self::Alertmanager];

    /// `webhook`, `slack` or `alertmanager`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Slack => "slack",
            Self::Alertmanager => "alertmanager",
        }
    }
}

/// A receiver's name in the replicated state: `KIND-HASH`, the hash being
/// 64-bit FNV-1a of the URL in hex. Stable across restarts and replicas
/// that list the same URL; 64 bits of a URL whose secret part carries far
/// more entropy do not reveal it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReceiverId(String);

impl ReceiverId {
    /// The id of the receiver of `kind` at `url`.
    pub fn new(kind: ReceiverKind, url: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in url.as_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(format!("{}-{h:016x}", kind.as_str()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ReceiverId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_name_the_kind_and_hide_the_url() {
        let url = "https://hooks.slack.com/services/T000/B000/secretsecretsecret";
        let a = ReceiverId::new(ReceiverKind::Slack, url);
        assert_eq!(a, ReceiverId::new(ReceiverKind::Slack, url));
        assert!(a.as_str().starts_with("slack-"), "{a}");
        assert!(!a.as_str().contains("secret"), "{a}");
        assert_ne!(a, ReceiverId::new(ReceiverKind::Webhook, url));
        assert_ne!(
            a,
            ReceiverId::new(
                ReceiverKind::Slack,
                "https://hooks.slack.com/services/T000/B000/other"
            )
        );
    }
}
