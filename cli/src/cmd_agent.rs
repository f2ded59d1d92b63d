//! `gpumon agent`.

use std::path::Path;
use std::time::Duration;

use gpumon_agent::config::parse_metrics_listen;
use gpumon_agent::{AgentConfig, AgentError};
use gpumon_runtime::config::FileConfig;
use gpumon_runtime::secrets::read_secret;

use crate::args::AgentArgs;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::shutdown;

fn resolve(args: AgentArgs, config_file: Option<&Path>) -> Result<AgentConfig, Failure> {
    let file = match config_file {
        Some(path) => FileConfig::load(path).map_err(usage)?.agent,
        None => Default::default(),
    };
    let node = args
        .node_name
        .or(file.node_name)
        .unwrap_or_else(gpumon_runtime::host::hostname);
    let mut config = AgentConfig::new(&node);
    if let Some(id) = args.agent_id.or(file.agent_id) {
        config.agent_id = id;
    }
    if let Some(c) = args.coordinators.or(file.coordinators) {
        config.coordinators = c
            .into_iter()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect();
    }
    if let Some(source) = args.source.or(file.source) {
        config.source = source.parse().map_err(usage)?;
    }
    if let Some(addr) = args.hook_listen.or(file.hook_listen) {
        config.hook_listen = Some(
            addr.parse()
                .map_err(|e| usage(format!("--hook-listen {addr:?}: {e}")))?,
        );
    }
    if let Some(addr) = args.metrics_listen.or(file.metrics_listen) {
        config.metrics_listen = parse_metrics_listen(&addr).map_err(usage)?;
    }
    if let Some(path) = args
        .agent_token_file
        .as_ref()
        .or(file.agent_token_file.as_ref())
    {
        config.token = Some(read_secret(path).map_err(usage)?);
    }
    config.insecure = args.insecure || file.insecure.unwrap_or(false);
    config.tls = args
        .tls
        .resolve((
            file.tls_ca_file.as_ref(),
            file.tls_cert_file.as_ref(),
            file.tls_key_file.as_ref(),
        ))
        .map_err(usage)?;
    if let Some(ms) = args.sample_interval_ms.or(file.sample_interval_ms) {
        config.sample_interval = Duration::from_millis(ms);
    }
    if let Some(ms) = args.window_ms.or(file.window_ms) {
        config.window = Duration::from_millis(ms);
    }
    if let Some(v) = args.max_buffered_batches.or(file.max_buffered_batches) {
        config.max_buffered_batches = v;
    }
    if let Some(v) = args.max_batch_bytes.or(file.max_batch_bytes) {
        config.max_batch_bytes = v;
    }
    let sim = &mut config.sim;
    sim.nodes = args.sim_nodes.or(file.sim_nodes).unwrap_or(sim.nodes);
    sim.node_index = args
        .sim_node_index
        .or(file.sim_node_index)
        .unwrap_or(sim.node_index);
    sim.gpus_per_node = args.sim_gpus.or(file.sim_gpus).unwrap_or(sim.gpus_per_node);
    sim.seed = args.sim_seed.or(file.sim_seed).unwrap_or(sim.seed);
    if let Some(job) = args.sim_job.or(file.sim_job) {
        sim.job = job;
    }
    config.validate().map_err(usage)?;
    Ok(config)
}

pub async fn run(args: AgentArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let config = resolve(args, config_file)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown::signal().await;
        let _ = stop.send(true);
    });
    match gpumon_agent::run(config, stopped).await {
        Ok(()) => Ok(()),
        Err(e @ (AgentError::Config(_) | AgentError::Source(_) | AgentError::Hook(_))) => {
            Err(usage(e))
        }
    }
}
