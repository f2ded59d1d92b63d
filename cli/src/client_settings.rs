//! What the client commands (`status`, `top`, `record`) take from
//! `--config`: the coordinator to ask and the TLS client files, from the
//! file's `[agent]` table (the node's agent talks to the same cluster).
//! Flags and their environment variables come first; a `--config` file
//! that is missing or invalid is an error, never ignored.

use std::path::Path;

use gpumon_net::ClientTls;
use gpumon_runtime::config::FileConfig;

use crate::args::ClientTlsArgs;
use gpumon_tools::failure::{usage, Failure};

/// The coordinator asked when nothing names one.
pub const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7070";

/// Where a client command connects, and how.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// A coordinator's base URL.
    pub coordinator: String,
    /// Trust and client certificate for https.
    pub tls: ClientTls,
}

/// `flag` (or its environment variable), else the first of the file's
/// `[agent] coordinators`, else [`DEFAULT_COORDINATOR`]; TLS likewise.
pub fn resolve(
    flag: Option<String>,
    tls: &ClientTlsArgs,
    config_file: Option<&Path>,
) -> Result<ClientSettings, Failure> {
    let agent = match config_file {
        Some(path) => FileConfig::load(path).map_err(usage)?.agent,
        None => Default::default(),
    };
    let coordinator = flag
        .or_else(|| agent.coordinators.as_ref()?.first().cloned())
        .unwrap_or_else(|| DEFAULT_COORDINATOR.to_owned());
    let tls = tls
        .resolve((
            agent.tls_ca_file.as_ref(),
            agent.tls_cert_file.as_ref(),
            agent.tls_key_file.as_ref(),
        ))
        .map_err(usage)?;
    Ok(ClientSettings { coordinator, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_file_then_the_default_and_a_missing_file_is_an_error() {
        let none = ClientTlsArgs::default();
        assert_eq!(
            resolve(None, &none, None).unwrap().coordinator,
            DEFAULT_COORDINATOR
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpumon.toml");
        std::fs::write(
            &file,
            "[agent]\ncoordinators = [\"https://coord-1:7070\", \"https://coord-2:7070\"]\n",
        )
        .unwrap();
        let from_file = resolve(None, &none, Some(&file)).unwrap();
        assert_eq!(from_file.coordinator, "https://coord-1:7070");
        let flagged = resolve(Some("http://other:7070".into()), &none, Some(&file)).unwrap();
        assert_eq!(flagged.coordinator, "http://other:7070");
        let missing = dir.path().join("nope.toml");
        assert!(resolve(None, &none, Some(&missing)).is_err());
    }
}
