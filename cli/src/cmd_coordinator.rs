//! `gpumon coordinator`.

use std::path::{Path, PathBuf};

use gpumon_coordinator::notify::NotifyConfig;
use gpumon_coordinator::peers::parse_peers;
use gpumon_coordinator::{Coordinator, CoordinatorConfig, Credentials, Formation, StartError};
use gpumon_core::notify::{NotifyFile, ReceiverKind};
use gpumon_runtime::config::{resolve_limits, CoordinatorFile, FileConfig, LimitError, LimitsFile};
use gpumon_runtime::secrets::{read_agent_tokens, read_secret, Secret};

use gpumon_net::ServerTls;

use crate::args::{identity, CoordinatorArgs, NotifyArgs};
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::shutdown;

/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "gpumon-data";

fn resolve(
    args: CoordinatorArgs,
    config_file: Option<&Path>,
) -> Result<CoordinatorConfig, Failure> {
    let whole = match config_file {
        Some(path) => FileConfig::load(path).map_err(usage)?,
        None => FileConfig::default(),
    };
    let file = whole.coordinator;
    let credentials = credentials(&args, &file)?;
    let limit_flags = LimitsFile {
        max_agents: args.max_agents,
        max_gpus: args.max_gpus,
        max_ranks: args.max_ranks,
        max_jobs: args.max_jobs,
    };
    let tls = server_tls(&args, &file)?;
    let peer_ca_file = args.tls_ca_file.clone().or(file.tls_ca_file.clone());
    let id = args.id.or(file.id).unwrap_or(1);
    let data_dir = args
        .data_dir
        .or(file.data_dir)
        .unwrap_or_else(|| DEFAULT_DATA_DIR.into());
    let mut config = CoordinatorConfig::new(id, data_dir);
    let listen_given = args.listen.is_some() || file.listen.is_some();
    if let Some(listen) = args.listen.or(file.listen) {
        config.listen = listen;
    }
    config.advertise = args.advertise.or(file.advertise);
    if let Some(v) = args.max_push_bytes.or(file.max_push_bytes) {
        config.max_push_bytes = v;
    }
    if let Some(v) = args.max_pushes_in_flight.or(file.max_pushes_in_flight) {
        config.max_pushes_in_flight = v;
    }
    if let Some(v) = args.max_connections.or(file.max_connections) {
        config.connections.max_connections = v;
    }
    if let Some(v) = args
        .max_connections_per_source
        .or(file.max_connections_per_source)
    {
        config.connections.max_per_source = v;
    }
    if let Some(v) = args.min_free_bytes.or(file.min_free_bytes) {
        config.min_free_bytes = v;
    }
    if let Some(s) = args.expire_after_s.or(file.expire_after_s) {
        config.expire_after = std::time::Duration::from_secs(s);
    }
    if let Some(v) = args.history_windows.or(file.history_windows) {
        config.limits.history_windows = v;
    }
    if let Some(v) = args.snapshot_every_entries.or(file.snapshot_every_entries) {
        config.snapshot_every_entries = v;
    }
    if let Some(v) = args.snapshot_chunk_bytes.or(file.snapshot_chunk_bytes) {
        config.snapshot_chunk_bytes = v;
    }
    config.credentials = credentials;
    config.tls = tls;
    if let Some(v) = args
        .metrics_rank_series
        .as_deref()
        .or(file.metrics_rank_series.as_deref())
    {
        config.metrics_rank_series = v.parse().map_err(usage)?;
    }
    config.peer_ca_file = peer_ca_file;
    config.engine = whole.engine;
    apply_limits(&limit_flags, &whole.limits, &mut config).map_err(usage)?;
    config.planner = whole.actions;
    config.notify = notify_config(&args.notify, &whole.notify);
    config.remote_write =
        crate::remote_write_config::resolve(&args.remote_write, &whole.remote_write)
            .map_err(usage)?;
    let join = args.join || file.join.unwrap_or(false);
    match args.peers.or(file.peers) {
        Some(_) if join => return Err(usage("--join and --peers exclude each other")),
        Some(text) => {
            let peers = parse_peers(&text).map_err(|e| usage(format!("--peers: {e}")))?;
            // Without --listen, listen where the peers will look for us.
            if !listen_given {
                if let Some(own) = peers.get(&config.id) {
                    config.listen = own.clone();
                }
            }
            config.formation = Formation::Peers(peers);
        }
        None if join => config.formation = Formation::Join,
        None => {}
    }
    config.validate().map_err(usage)?;
    Ok(config)
}

/// The secrets, read from their files: flags and the environment first,
/// then the `[coordinator]` table.
fn credentials(args: &CoordinatorArgs, file: &CoordinatorFile) -> Result<Credentials, Failure> {
    let either = |flag: &Option<PathBuf>, key: &Option<PathBuf>| flag.clone().or(key.clone());
    let one = |path: Option<PathBuf>| -> Result<Option<Secret>, Failure> {
        path.as_deref().map(read_secret).transpose().map_err(usage)
    };
    let cluster_secret = one(either(&args.cluster_secret_file, &file.cluster_secret_file))?;
    let token_file = either(&args.agent_token_file, &file.agent_token_file);
    let agent_tokens = token_file
        .as_deref()
        .map(read_agent_tokens)
        .transpose()
        .map_err(usage)?;
    if let (Some(tokens), Some(path)) = (&agent_tokens, &token_file) {
        let unbound: Vec<String> = tokens
            .iter()
            .filter(|t| t.agents.is_none())
            .map(|t| t.line.to_string())
            .collect();
        if !unbound.is_empty() {
            tracing::warn!(
                file = %path.display(),
                lines = %unbound.join(", "),
                "agent tokens bound to no agent: whoever holds one can push as any agent; put the agent ids (or node names) each token may push as after it, on its line"
            );
        }
    }
    let admin_token = match (
        one(either(&args.admin_token_file, &file.admin_token_file))?,
        args.admin_token.as_ref().or(file.admin_token.as_ref()),
    ) {
        (Some(token), _) => Some(token),
        (None, Some(text)) => {
            tracing::warn!("the admin token is given as a value, which other users may see (ps, a shared config file); prefer --admin-token-file");
            Some(Secret::new(text).map_err(|e| usage(format!("the admin token {e}")))?)
        }
        (None, None) => None,
    };
    Ok(Credentials {
        cluster_secret,
        agent_tokens,
        admin_token,
        open_reads: !args.closed_reads && file.open_reads.unwrap_or(true),
        insecure: args.insecure || file.insecure.unwrap_or(false),
    })
}

/// The `[limits]` table and `--max-*` flags, into the cluster view's and
/// the engine's bounds (see [`gpumon_runtime::config::resolve_limits`]).
fn apply_limits(
    flags: &LimitsFile,
    file: &LimitsFile,
    config: &mut CoordinatorConfig,
) -> Result<(), LimitError> {
    resolve_limits(flags, file, &mut config.limits, &mut config.engine)
}

/// TLS on the listener, from the flags (or their environment), else the
/// `[coordinator]` table; the files are checked when the replica starts.
fn server_tls(
    args: &CoordinatorArgs,
    file: &CoordinatorFile,
) -> Result<Option<ServerTls>, Failure> {
    let cert = args.tls_cert_file.clone().or(file.tls_cert_file.clone());
    let key = args.tls_key_file.clone().or(file.tls_key_file.clone());
    let client_ca_file = args
        .tls_client_ca_file
        .clone()
        .or(file.tls_client_ca_file.clone());
    match identity(cert, key).map_err(usage)? {
        Some(identity) => Ok(Some(ServerTls {
            identity,
            client_ca_file,
        })),
        None if client_ca_file.is_some() => Err(usage(
            "--tls-client-ca-file needs TLS on this replica: give --tls-cert-file and --tls-key-file",
        )),
        None => Ok(None),
    }
}

/// The notifier's config: the `[notify]` table, each kind's list replaced
/// by its flags when any are given (validated with the rest of the config).
pub fn notify_config(args: &NotifyArgs, file: &NotifyFile) -> NotifyConfig {
    let mut config = NotifyConfig::from_file(file);
    for (kind, urls) in [
        (ReceiverKind::Webhook, &args.notify_webhook),
        (ReceiverKind::Slack, &args.notify_slack),
        (ReceiverKind::Alertmanager, &args.notify_alertmanager),
    ] {
        if !urls.is_empty() {
            config.set(kind, urls);
        }
    }
    if let Some(d) = &args.dashboard_url {
        config.dashboard_url = Some(d.clone());
    }
    config
}

pub async fn run(args: CoordinatorArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let config = resolve(args, config_file)?;
    let coordinator = match Coordinator::start(config).await {
        Ok(c) => c,
        Err(e @ StartError::Config(_)) => return Err(usage(e)),
        Err(e) => {
            return Err(Failure::Runtime(
                anyhow::Error::new(e).context("coordinator failed to start"),
            ))
        }
    };
    println!(
        "gpumon coordinator {} serving {}",
        coordinator.id(),
        coordinator.api_url()
    );
    shutdown::signal().await;
    tracing::info!("shutting down");
    coordinator.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(
        flags: &LimitsFile,
        file: &LimitsFile,
        engine_max_gpus: Option<usize>,
    ) -> Result<CoordinatorConfig, String> {
        let mut config = CoordinatorConfig::new(1, "data".into());
        if let Some(v) = engine_max_gpus {
            config.engine.max_gpus = v;
        }
        apply_limits(flags, file, &mut config)
            .map(|()| config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn one_number_bounds_the_view_and_the_engine_flag_over_file() {
        let none = LimitsFile::default();
        let c = limits(&none, &none, None).unwrap();
        assert_eq!((c.limits.max_gpus, c.engine.max_gpus), (65_536, 65_536));
        assert_eq!(c.engine.max_ranks_per_job, c.limits.max_ranks);

        let file = LimitsFile {
            max_gpus: Some(100),
            max_jobs: Some(7),
            ..LimitsFile::default()
        };
        let c = limits(&none, &file, None).unwrap();
        assert_eq!(
            (c.limits.max_gpus, c.engine.max_gpus, c.engine.max_jobs),
            (100, 100, 7)
        );
        let flags = LimitsFile {
            max_gpus: Some(200),
            ..LimitsFile::default()
        };
        assert_eq!(limits(&flags, &file, None).unwrap().engine.max_gpus, 200);
        // The engine's own key may repeat the limit, not contradict it.
        assert!(limits(&none, &file, Some(100)).is_ok());
        let err = limits(&none, &file, Some(50)).unwrap_err();
        assert!(err.contains("[limits] max_gpus"), "{err}");
        let zero = LimitsFile {
            max_agents: Some(0),
            ..LimitsFile::default()
        };
        assert!(limits(&zero, &none, None)
            .unwrap_err()
            .contains("--max-agents"));
    }
}
