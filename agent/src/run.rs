//! The agent's main loop: sample, attribute, fold into windows, hand to the uplink.
//!
//! Each hand-over carries, beside its windows, the Kubernetes placement the
//! rank finder keeps for their processes (none outside Kubernetes) and the
//! window's host RAM (the highest use of the readings taken at each sample
//! tick; none with a simulated source, whose nodes are not this host).
//!
//! Sampling never waits on the network: windows go to the uplink task
//! through a bounded channel with `try_send`; when the uplink is that far
//! behind, the window is dropped and counted (the uplink's own buffer holds
//! the real backlog).
//!
//! With a hook address, the hook endpoint is bound first (a bad address or
//! a live agent on the socket stops the start with [`AgentError::Hook`]);
//! each window tick then also drains the hook records and action acks
//! gathered in its [`HookHub`] into the same hand-over. Hook records wait in
//! the hub (bounded, oldest dropped and counted) while the channel is full,
//! so a slow uplink never loses them here. A source that plays the hook
//! itself (the simulator) hands its records over the same way.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use gpumon_core::window::WindowFolder;
use gpumon_proto::Hello;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use crate::config::{AgentConfig, SourceSpec};
use crate::discovery::RankFinder;
use crate::hook_endpoint::{HookError, HookHub, HookServer, HookSource};
use crate::host::HostFolder;
use crate::metrics::{AgentMetrics, MetricsServer, Sources};
use crate::source::nvml::NvmlSource;
use crate::source::sim::{SimSettings, SimSource};
use crate::source::{GpuSource, NoSource};
use crate::uplink::{Outgoing, Uplink};
use gpumon_runtime::clock::wall_ms;

/// Windows queued between the sampler and the uplink task.
const WINDOW_CHANNEL: usize = 16;

/// Why the agent could not run.
#[derive(Debug, Error)]
pub enum AgentError {
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The simulator settings are invalid.
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    /// The hook endpoint cannot listen (the message names the address and
    /// the operating system's reason).
    #[error(transparent)]
    Hook(#[from] HookError),
}

/// A random incarnation id: it only has to differ between agent starts.
fn new_incarnation() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(wall_ms());
    h.write_u32(std::process::id());
    h.finish()
}

/// Without a GPU of its own to sample, the agent builds samples from hook
/// reports when it serves hooks, and samples nothing otherwise.
fn no_gpu_source(hub: Option<&Arc<HookHub>>) -> Box<dyn GpuSource> {
    match hub {
        Some(hub) => Box::new(HookSource::new(hub.clone())),
        None => Box::new(NoSource),
    }
}

/// The source to sample and whether its processes need attributing to ranks.
fn make_source(
    config: &AgentConfig,
    start_ms: u64,
    hub: Option<&Arc<HookHub>>,
) -> Result<(Box<dyn GpuSource>, bool), AgentError> {
    Ok(match config.source {
        SourceSpec::Nvml => match NvmlSource::new() {
            Ok(s) => (Box::new(s), true),
            Err(e) if hub.is_some() => {
                tracing::warn!(error = %e, "NVML unavailable: this agent samples no GPU and builds GPU samples from hook reports only");
                (no_gpu_source(hub), false)
            }
            Err(e) => {
                tracing::warn!(error = %e, "NVML unavailable and no hook endpoint (--hook-listen): this agent samples no GPU");
                (Box::new(NoSource), false)
            }
        },
        SourceSpec::Sim(scenario) => {
            let p = &config.sim;
            let mut settings = SimSettings::new(scenario, p.nodes, p.node_index, p.gpus_per_node);
            settings.seed = p.seed;
            settings.job.clone_from(&p.job);
            settings.start_ms = start_ms;
            settings.hook = p.hook;
            (Box::new(SimSource::new(settings)?), false)
        }
        SourceSpec::None => (no_gpu_source(hub), false),
    })
}

/// The running hook endpoint.
struct Hooks {
    hub: Arc<HookHub>,
    /// Dropping it stops the server.
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Hooks {
    /// Binds the hook endpoint when configured and serves it in a task.
    async fn start(config: &AgentConfig) -> Result<Option<Hooks>, AgentError> {
        let Some(addr) = &config.hook_listen else {
            return Ok(None);
        };
        let hub = Arc::new(HookHub::new(&config.agent_id, &config.node_name));
        let server = HookServer::bind(addr, hub.clone()).await?;
        tracing::info!(address = %server.local_addr(), "hook endpoint listening");
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        Ok(Some(Hooks { hub, stop, task }))
    }

    /// Closes every connection (failing the actions their sessions leave
    /// unfinished) and removes the socket file.
    async fn stop(self) {
        drop(self.stop);
        let _ = self.task.await;
    }
}

/// This window's hand-over: the windows with the placements `finder`
/// keeps for their processes and the window's host RAM, plus the hub's
/// records and acks and the source's own hook records when the channel has
/// room for them (otherwise they keep in the hub and the source).
fn outgoing(
    windows: Vec<gpumon_proto::GpuWindow>,
    host: Option<gpumon_proto::HostMemory>,
    finder: Option<&RankFinder>,
    hub: Option<&Arc<HookHub>>,
    source: &mut dyn GpuSource,
    room: bool,
) -> Outgoing {
    let (mut hook, acks) = match hub {
        Some(hub) if room => hub.take_outgoing(),
        _ => (Vec::new(), Vec::new()),
    };
    if room {
        hook.extend(source.take_hook_records());
    }
    let placements = finder.map_or_else(Vec::new, |f| f.placements_for(&windows));
    Outgoing {
        windows,
        hook,
        acks,
        placements,
        host,
    }
}

/// The agent's sampling side, without the uplink: the source, the hook
/// endpoint and the attribution of processes to ranks. [`run`] hands its
/// windows to the uplink; `gpumon profile` applies them in-process.
pub struct Sampler {
    config: AgentConfig,
    hooks: Option<Hooks>,
    source: Box<dyn GpuSource>,
    finder: Option<RankFinder>,
    host: Option<HostFolder>,
    hello: Hello,
    counts: Arc<AgentMetrics>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("hello", &self.hello)
            .field("hooks", &self.hooks.is_some())
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Checks the configuration, binds the hook endpoint (when configured)
    /// and opens the source.
    pub async fn start(config: AgentConfig) -> Result<Sampler, AgentError> {
        config
            .validate()
            .map_err(|e| AgentError::Config(e.to_string()))?;
        let hooks = Hooks::start(&config).await?;
        let hub = hooks.as_ref().map(|h| h.hub.clone());
        let (source, attribute) = match make_source(&config, wall_ms(), hub.as_ref()) {
            Ok(made) => made,
            Err(e) => {
                if let Some(hooks) = hooks {
                    hooks.stop().await;
                }
                return Err(e);
            }
        };
        let finder = attribute.then(|| RankFinder::new(PathBuf::from("/proc")));
        let host = match config.source {
            SourceSpec::Sim(_) => None,
            _ => config.host_meminfo.clone().map(HostFolder::new),
        };
        let hello = Hello {
            agent_id: config.agent_id.clone(),
            incarnation: new_incarnation(),
            node: config.node_name.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            source: source.name(),
            gpus: source.gpus(),
        };
        Ok(Sampler {
            config,
            hooks,
            source,
            finder,
            host,
            hello,
            counts: Arc::new(AgentMetrics::default()),
        })
    }

    /// What this agent says of itself to a coordinator.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The hook endpoint's hub, when the agent serves hooks.
    pub fn hub(&self) -> Option<Arc<HookHub>> {
        self.hooks.as_ref().map(|h| h.hub.clone())
    }

    /// The agent's own counters.
    pub fn counts(&self) -> Arc<AgentMetrics> {
        self.counts.clone()
    }

    /// Samples and folds until `shutdown` turns true, handing each window's
    /// [`Outgoing`] to `tx` without waiting (a full channel drops the window
    /// set and counts it); then stops the hook endpoint and hands over what
    /// is left. Dropping `tx` at the end tells the receiver it was the last.
    pub async fn run(mut self, tx: mpsc::Sender<Outgoing>, mut shutdown: watch::Receiver<bool>) {
        let hub = self.hub();
        let counts = self.counts.clone();
        let mut sample_tick = tokio::time::interval(self.config.sample_interval);
        sample_tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let window = self.config.window;
        let mut window_tick =
            tokio::time::interval_at(tokio::time::Instant::now() + window, window);
        window_tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut folder = WindowFolder::new();
        let mut last_error: Option<String> = None;
        let mut windows_dropped = 0u64;
        loop {
            tokio::select! {
                _ = sample_tick.tick() => {
                    if let Some(host) = self.host.as_mut() {
                        host.sample(wall_ms());
                    }
                    match self.source.sample(wall_ms()) {
                        Ok(mut samples) => {
                            if let Some(finder) = self.finder.as_mut() {
                                finder.attribute(&mut samples);
                            }
                            samples.iter().for_each(|s| folder.add(s));
                            counts.sampled(samples.len());
                            last_error = None;
                        }
                        Err(e) => {
                            counts.sample_failed();
                            let text = e.to_string();
                            if last_error.as_deref() != Some(text.as_str()) {
                                tracing::warn!(error = %text, "sampling failed; will keep trying");
                                last_error = Some(text);
                            }
                        }
                    }
                }
                _ = window_tick.tick() => {
                    // The sampler is the only sender, so room seen here is still
                    // there at `try_send`.
                    let host = self.host.as_mut().and_then(HostFolder::take);
                    let out = outgoing(folder.take(), host, self.finder.as_ref(), hub.as_ref(), self.source.as_mut(), tx.capacity() > 0);
                    if out.is_empty() {
                        continue;
                    }
                    counts.built(&out.windows);
                    if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(out) {
                        windows_dropped += 1;
                        counts.window_set_dropped();
                        tracing::warn!(windows_dropped, "uplink is behind; dropped a window set");
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
        // Stop the hook endpoint first, so the acks of actions its sessions
        // leave unfinished make it into the last hand-over.
        if let Some(hooks) = self.hooks.take() {
            hooks.stop().await;
        }
        let rest = outgoing(
            folder.take(),
            self.host.as_mut().and_then(HostFolder::take),
            self.finder.as_ref(),
            hub.as_ref(),
            self.source.as_mut(),
            tx.capacity() > 0,
        );
        if !rest.is_empty() {
            let _ = tx.try_send(rest);
        }
    }
}

/// Runs the agent until `shutdown` turns true; then flushes briefly and returns.
pub async fn run(config: AgentConfig, shutdown: watch::Receiver<bool>) -> Result<(), AgentError> {
    let tls = config
        .tls
        .config()
        .map_err(|e| AgentError::Config(e.to_string()))?;
    let sampler = Sampler::start(config.clone()).await?;
    let hub = sampler.hub();
    let hello = sampler.hello().clone();
    tracing::info!(
        agent = %hello.agent_id, node = %hello.node, source = %hello.source, gpus = hello.gpus.len(),
        coordinators = ?config.coordinators, "agent starting"
    );
    let mut uplink = Uplink::new(
        config.coordinators.clone(),
        hello,
        config.max_buffered_batches,
        config.max_batch_bytes,
    )
    .with_token(config.token.clone())
    .with_tls(tls);
    if let Some(hub) = &hub {
        uplink = uplink.with_hook_hub(hub.clone());
    }
    let metrics_server = match config.metrics_listen {
        Some(addr) => {
            let sources = Sources {
                node: config.node_name.clone(),
                agent_id: config.agent_id.clone(),
                agent: sampler.counts(),
                uplink: uplink.stats(),
                hub: hub.clone(),
            };
            MetricsServer::start(addr, sources).await
        }
        None => None,
    };
    let (tx, rx) = mpsc::channel(WINDOW_CHANNEL);
    let uplink_task = tokio::spawn(uplink.run(rx));
    sampler.run(tx, shutdown).await;
    let _ = uplink_task.await;
    if let Some(server) = metrics_server {
        server.stop().await;
    }
    tracing::info!("agent stopped");
    Ok(())
}
