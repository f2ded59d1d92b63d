//! Secrets read from files: the cluster secret, agent tokens, the admin
//! token.
//!
//! A secret never comes from the command line of a long-running process
//! (every local user can read it in `ps`); it comes from a file that only
//! its owner may read. A file readable by its group or by others is
//! refused, naming it, so a mistake in deployment shows at start and not
//! after a leak. A [`Secret`] prints as `[redacted]` and compares in time
//! that does not depend on where a guess goes wrong.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

/// Shortest secret accepted, in bytes: shorter ones can be guessed.
pub const MIN_SECRET_BYTES: usize = 16;

/// Most tokens one token file may list.
pub const MAX_TOKENS: usize = 4096;
/// Most agent ids or node names one agent token may be bound to.
pub const MAX_BOUND_NAMES: usize = 1024;
/// Longest agent id or node name a token may be bound to, in bytes.
pub const MAX_BOUND_NAME_BYTES: usize = 256;

/// An agent token and the agents it may push as.
#[derive(Debug, Clone)]
pub struct AgentToken {
    /// The token.
    pub secret: Secret,
    /// The agent ids and node names it may push as; `None`: any (a file
    /// line with the token alone, as before bindings existed).
    pub agents: Option<Arc<[String]>>,
    /// Its line in the file, for messages.
    pub line: usize,
}

/// A secret value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Secret {
    /// A secret from its text; refused when shorter than [`MIN_SECRET_BYTES`]
    /// or holding whitespace or control characters.
    pub fn new(text: &str) -> Result<Self, BadSecret> {
        if text.len() < MIN_SECRET_BYTES {
            return Err(BadSecret::Short { len: text.len() });
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BadSecret::Characters);
        }
        Ok(Self(text.to_owned()))
    }

    /// The value, to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this secret, compared without stopping at the
    /// first difference.
    pub fn matches(&self, given: &[u8]) -> bool {
        let want = self.0.as_bytes();
        if want.len() != given.len() {
            return false;
        }
        want.iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// Why a text is not a usable secret; the text follows "the secret" or
/// "the token" in a [`SecretError`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadSecret {
    /// Shorter than [`MIN_SECRET_BYTES`].
    #[error("is {len} bytes; a secret has at least {MIN_SECRET_BYTES}")]
    Short {
        /// Its length, bytes.
        len: usize,
    },
    /// It holds whitespace or control characters.
    #[error("holds whitespace or control characters")]
    Characters,
}

/// Why a secret file cannot be used.
#[derive(Debug, Error)]
pub enum SecretError {
    /// It cannot be read.
    #[error("cannot read secret file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Its group or others may read it.
    #[error("secret file {path} is readable by its group or others (mode {mode:o}); run: chmod 600 {path}")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Its content is not a usable secret.
    #[error("secret file {path}: {reason}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Reads a file holding one secret (a trailing newline is allowed).
pub fn read_secret(path: &Path) -> Result<Secret, SecretError> {
    let text = read_private(path)?;
    let line = text.trim_end_matches(['\n', '\r']);
    Secret::new(line).map_err(|reason| SecretError::Bad {
        path: path.to_owned(),
        reason: format!("the secret {reason}"),
    })
}

/// Reads a file of agent tokens, one per line: the token, then the agent
/// ids or node names it may push as, separated by whitespace (none: any
/// agent). Blank lines and lines starting with `#` are passed over. At
/// least one token, at most [`MAX_TOKENS`], each bound to at most
/// [`MAX_BOUND_NAMES`] names.
pub fn read_agent_tokens(path: &Path) -> Result<Vec<AgentToken>, SecretError> {
    let text = read_private(path)?;
    let bad = |reason: String| SecretError::Bad {
        path: path.to_owned(),
        reason,
    };
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if tokens.len() == MAX_TOKENS {
            return Err(bad(format!("more than {MAX_TOKENS} tokens")));
        }
        let n = i + 1;
        let mut fields = line.split_whitespace();
        let token = fields.next().unwrap_or_default();
        let secret = Secret::new(token).map_err(|r| bad(format!("line {n}: the token {r}")))?;
        let names: Vec<String> = fields.map(str::to_owned).collect();
        if names.len() > MAX_BOUND_NAMES {
            return Err(bad(format!(
                "line {n}: the token is bound to {} names; at most {MAX_BOUND_NAMES}",
                names.len()
            )));
        }
        if let Some(long) = names.iter().find(|s| s.len() > MAX_BOUND_NAME_BYTES) {
            return Err(bad(format!(
                "line {n}: a name of {} bytes; at most {MAX_BOUND_NAME_BYTES}",
                long.len()
            )));
        }
        tokens.push(AgentToken {
            secret,
            agents: (!names.is_empty()).then(|| names.into()),
            line: n,
        });
    }
    if tokens.is_empty() {
        return Err(bad("holds no token".into()));
    }
    Ok(tokens)
}

/// Reads a file only its owner may read (a secret, a TLS private key); a
/// file its group or others may read is refused, naming it.
pub fn read_private(path: &Path) -> Result<String, SecretError> {
    let read_err = |source| SecretError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretError::TooOpen {
                path: path.to_owned(),
                mode,
            });
        }
    }
    if meta.len() > 1 << 20 {
        return Err(SecretError::Bad {
            path: path.to_owned(),
            reason: "is over 1 MiB".into(),
        });
    }
    std::fs::read_to_string(path).map_err(read_err)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_private_file_gives_its_secret_and_an_open_one_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let good = file(dir.path(), "s", "0123456789abcdef\n", 0o600);
        let secret = read_secret(&good).unwrap();
        assert!(secret.matches(b"0123456789abcdef"));
        assert!(!secret.matches(b"0123456789abcdeX"));
        assert_eq!(format!("{secret:?}"), "[redacted]");

        let open = file(dir.path(), "open", "0123456789abcdef\n", 0o644);
        let err = read_secret(&open).unwrap_err().to_string();
        assert!(err.contains(&open.display().to_string()), "{err}");
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn short_or_spaced_secrets_and_empty_token_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["short\n", "0123456789 abcdef\n", ""] {
            let path = file(dir.path(), "s", text, 0o600);
            assert!(read_secret(&path).is_err(), "{text:?}");
        }
        let empty = file(dir.path(), "t", "# no tokens\n\n", 0o600);
        assert!(read_agent_tokens(&empty).is_err());
    }

    #[test]
    fn a_token_file_lists_one_token_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(
            dir.path(),
            "t",
            "# node-a\ntoken-of-node-a-000001\n\ntoken-of-node-b-000002\n",
            0o400,
        );
        let tokens = read_agent_tokens(&path).unwrap();
        assert_eq!(tokens.len(), 2);
        assert!(tokens[1].secret.matches(b"token-of-node-b-000002"));
        assert!(
            tokens.iter().all(|t| t.agents.is_none()),
            "unbound: any agent"
        );
        let bad = file(dir.path(), "b", "token-of-node-a-000001\nshort\n", 0o600);
        let err = read_agent_tokens(&bad).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn an_agent_token_is_bound_to_the_names_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(
            dir.path(),
            "t",
            "token-of-node-a-000001 node-a\n# two nodes share one\ntoken-of-racks-b-00002\tnode-b1  node-b2\n",
            0o600,
        );
        let tokens = read_agent_tokens(&path).unwrap();
        let names = |i: usize| tokens[i].agents.as_deref().map(<[String]>::to_vec);
        assert_eq!(names(0), Some(vec!["node-a".to_owned()]));
        assert_eq!(
            names(1),
            Some(vec!["node-b1".to_owned(), "node-b2".to_owned()])
        );
        assert_eq!((tokens[0].line, tokens[1].line), (1, 3));
        let long = format!(
            "token-of-node-a-000001 {}\n",
            "n".repeat(MAX_BOUND_NAME_BYTES + 1)
        );
        let err = read_agent_tokens(&file(dir.path(), "l", &long, 0o600)).unwrap_err();
        assert!(
            err.to_string().contains("line 1: a name of 257 bytes"),
            "{err}"
        );
    }
}
