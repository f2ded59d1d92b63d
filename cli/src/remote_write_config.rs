//! `gpumon coordinator`'s remote-write settings: the `--remote-write-*`
//! flags (or their environment) over the `[remote_write]` table, the
//! bearer token read from its owner-only file. Off without a URL.

use std::collections::BTreeMap;
use std::time::Duration;

use gpumon_coordinator::remote_write::RemoteWriteConfig;
use gpumon_runtime::config::RemoteWriteFile;
use gpumon_runtime::secrets::read_secret;

use crate::args::RemoteWriteArgs;

/// The sender's config, or None when no URL is given; validated with the
/// rest of the coordinator's config.
pub fn resolve(
    args: &RemoteWriteArgs,
    file: &RemoteWriteFile,
) -> Result<Option<RemoteWriteConfig>, String> {
    let Some(url) = args.remote_write_url.clone().or(file.url.clone()) else {
        return Ok(None);
    };
    let mut config = RemoteWriteConfig::new(url);
    if let Some(path) = args
        .remote_write_bearer_token_file
        .as_ref()
        .or(file.bearer_token_file.as_ref())
    {
        config.bearer_token = Some(read_secret(path).map_err(|e| e.to_string())?);
    }
    config.ca_file = args.remote_write_ca_file.clone().or(file.ca_file.clone());
    if let Some(s) = args.remote_write_interval_s.or(file.interval_s) {
        config.interval = seconds(s, "--remote-write-interval-s")?;
    }
    if let Some(s) = args.remote_write_timeout_s.or(file.timeout_s) {
        config.timeout = seconds(s, "--remote-write-timeout-s")?;
    }
    if let Some(n) = args
        .remote_write_max_samples_per_request
        .or(file.max_samples_per_request)
    {
        config.max_samples_per_request = n;
    }
    if let Some(n) = args
        .remote_write_max_queued_samples
        .or(file.max_queued_samples)
    {
        config.max_queued_samples = n;
    }
    config.labels = if args.remote_write_label.is_empty() {
        file.labels.clone().unwrap_or_default()
    } else {
        labels(&args.remote_write_label)?
    };
    Ok(Some(config))
}

fn seconds(s: f64, flag: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("{flag} {s}: not a number of seconds"))
}

/// `NAME=VALUE` pairs; a name given twice is refused.
fn labels(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!(
                "--remote-write-label {pair:?}: expected NAME=VALUE"
            ));
        };
        if out.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err(format!("--remote-write-label {name} is given twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use super::*;

    fn token_file(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join(format!("token-{mode:o}"));
        std::fs::write(&path, "remote-write-token-0001\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn off_without_a_url_and_flags_over_the_table() {
        let none = RemoteWriteArgs::default();
        let keys_only = RemoteWriteFile {
            interval_s: Some(5.0),
            ..RemoteWriteFile::default()
        };
        assert_eq!(resolve(&none, &keys_only), Ok(None));

        let file = RemoteWriteFile {
            url: Some("http://file:9090/api/v1/write".into()),
            interval_s: Some(5.0),
            max_samples_per_request: Some(500),
            labels: Some(BTreeMap::from([("cluster".into(), "file".into())])),
            ..RemoteWriteFile::default()
        };
        let c = resolve(&none, &file).unwrap().unwrap();
        assert_eq!(c.url, "http://file:9090/api/v1/write");
        assert_eq!(c.interval, Duration::from_secs(5));
        assert_eq!(c.max_samples_per_request, 500);
        assert_eq!(c.labels["cluster"], "file");
        assert_eq!(c.timeout, RemoteWriteConfig::new("x").timeout);

        let flags = RemoteWriteArgs {
            remote_write_url: Some("http://flag:9090/api/v1/write".into()),
            remote_write_interval_s: Some(0.5),
            remote_write_label: vec!["cluster=a".into(), "zone=eu".into()],
            ..RemoteWriteArgs::default()
        };
        let c = resolve(&flags, &file).unwrap().unwrap();
        assert_eq!(c.url, "http://flag:9090/api/v1/write");
        assert_eq!(c.interval, Duration::from_millis(500));
        assert_eq!(c.max_samples_per_request, 500, "the table's key stays");
        assert_eq!(
            c.labels,
            BTreeMap::from([("cluster".into(), "a".into()), ("zone".into(), "eu".into())])
        );
        c.validate().unwrap();
    }

    #[test]
    fn bad_labels_and_durations_are_refused_by_flag() {
        let with = |args: RemoteWriteArgs| {
            resolve(
                &RemoteWriteArgs {
                    remote_write_url: Some("http://p/w".into()),
                    ..args
                },
                &RemoteWriteFile::default(),
            )
            .unwrap_err()
        };
        let err = with(RemoteWriteArgs {
            remote_write_label: vec!["cluster".into()],
            ..RemoteWriteArgs::default()
        });
        assert!(err.contains("NAME=VALUE"), "{err}");
        let err = with(RemoteWriteArgs {
            remote_write_label: vec!["a=1".into(), "a=2".into()],
            ..RemoteWriteArgs::default()
        });
        assert!(err.contains("twice"), "{err}");
        let err = with(RemoteWriteArgs {
            remote_write_timeout_s: Some(-1.0),
            ..RemoteWriteArgs::default()
        });
        assert!(err.contains("--remote-write-timeout-s"), "{err}");
    }

    #[test]
    fn the_token_comes_from_an_owner_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let args = |path: PathBuf| RemoteWriteArgs {
            remote_write_url: Some("http://p/w".into()),
            remote_write_bearer_token_file: Some(path),
            ..RemoteWriteArgs::default()
        };
        let file = RemoteWriteFile::default();
        let c = resolve(&args(token_file(dir.path(), 0o600)), &file)
            .unwrap()
            .unwrap();
        assert_eq!(c.bearer_token.unwrap().expose(), "remote-write-token-0001");
        let open = token_file(dir.path(), 0o644);
        let err = resolve(&args(open.clone()), &file).unwrap_err();
        assert!(err.contains(&open.display().to_string()), "{err}");
        assert!(err.contains("chmod 600"), "{err}");
    }
}
