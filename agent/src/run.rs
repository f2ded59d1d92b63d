//! The agent's main loop: sample, attribute, fold into windows, hand to the uplink.
//!
//! Sampling never waits on the network: windows go to the uplink task
//! through a bounded channel with `try_send`; when the uplink is that far
//! behind, the window is dropped and counted (the uplink's own buffer holds
//! the real backlog).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use gpumon_common::window::WindowFolder;
use gpumon_proto::Hello;
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use crate::config::{AgentConfig, SourceSpec};
use crate::discovery::RankFinder;
use crate::source::nvml::NvmlSource;
use crate::source::sim::{SimSettings, SimSource};
use crate::source::{GpuSource, NoSource};
use crate::uplink::Uplink;

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
}

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A random incarnation id: it only has to differ between agent starts.
fn new_incarnation() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.write_u32(std::process::id());
    h.finish()
}

fn make_source(
    config: &AgentConfig,
    start_ms: u64,
) -> Result<(Box<dyn GpuSource>, bool), AgentError> {
    Ok(match config.source {
        SourceSpec::Nvml => match NvmlSource::new() {
            Ok(s) => (Box::new(s), true),
            Err(e) => {
                tracing::warn!(error = %e, "NVML unavailable: this agent samples no GPU and relays hook data only");
                (Box::new(NoSource), false)
            }
        },
        SourceSpec::Sim(scenario) => {
            let p = &config.sim;
            let mut settings = SimSettings::new(scenario, p.nodes, p.node_index, p.gpus_per_node);
            settings.seed = p.seed;
            settings.job.clone_from(&p.job);
            settings.start_ms = start_ms;
            (Box::new(SimSource::new(settings)?), false)
        }
        SourceSpec::None => (Box::new(NoSource), false),
    })
}

/// Runs the agent until `shutdown` turns true; then flushes briefly and returns.
pub async fn run(
    config: AgentConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    config.validate().map_err(AgentError::Config)?;
    let start_ms = now_ms();
    let (mut source, attribute) = make_source(&config, start_ms)?;
    let mut finder = attribute.then(|| RankFinder::new(PathBuf::from("/proc")));
    let hello = Hello {
        agent_id: config.agent_id.clone(),
        incarnation: new_incarnation(),
        node: config.node_name.clone(),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        source: source.name(),
        gpus: source.gpus(),
    };
    tracing::info!(
        agent = %hello.agent_id, node = %hello.node, source = %hello.source, gpus = hello.gpus.len(),
        coordinators = ?config.coordinators, "agent starting"
    );
    let uplink = Uplink::new(
        config.coordinators.clone(),
        hello,
        config.max_buffered_batches,
        config.max_batch_bytes,
    );
    let (tx, rx) = mpsc::channel(WINDOW_CHANNEL);
    let uplink_task = tokio::spawn(uplink.run(rx));

    let mut sample_tick = tokio::time::interval(config.sample_interval);
    sample_tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut window_tick =
        tokio::time::interval_at(tokio::time::Instant::now() + config.window, config.window);
    window_tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut folder = WindowFolder::new();
    let mut last_error: Option<String> = None;
    let mut windows_dropped = 0u64;
    loop {
        tokio::select! {
            _ = sample_tick.tick() => {
                match source.sample(now_ms()) {
                    Ok(mut samples) => {
                        if let Some(finder) = finder.as_mut() {
                            finder.attribute(&mut samples);
                        }
                        samples.iter().for_each(|s| folder.add(s));
                        last_error = None;
                    }
                    Err(e) => {
                        let text = e.to_string();
                        if last_error.as_deref() != Some(text.as_str()) {
                            tracing::warn!(error = %text, "sampling failed; will keep trying");
                            last_error = Some(text);
                        }
                    }
                }
            }
            _ = window_tick.tick() => {
                let windows = folder.take();
                if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(windows) {
                    windows_dropped += 1;
                    tracing::warn!(windows_dropped, "uplink is behind; dropped a window set");
                }
            }
            _ = shutdown.changed() => break,
        }
    }
    let rest = folder.take();
    if !rest.is_empty() {
        let _ = tx.try_send(rest);
    }
    drop(tx);
    let _ = uplink_task.await;
    tracing::info!("agent stopped");
    Ok(())
}
