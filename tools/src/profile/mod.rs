//! `gpumon profile [--json FILE] [--html FILE] -- CMD ARGS...`: one node,
//! no cluster. Runs a training command (a plain `python train.py` or a
//! `torchrun` line) with the hook injected, samples its GPUs (NVML, or the
//! hook's memory source where there is none), host RAM and the command's
//! process tree, runs the cluster's engine in-process (`embedded`: GPU
//! and host RAM levels included), passes its alerts to the command's hooks
//! as an agent does in a cluster (`to_hooks`), shows
//! a live line on a terminal, and when the command ends (also on Ctrl-C, or
//! when it dies of an OOM) writes a JSON report ([`report`]) and the same
//! report as one self-contained HTML page ([`html`]), and passes the
//! command's exit status on.

mod build;
mod embedded;
mod host;
pub mod html;
mod observed;
mod recommend;
pub mod report;
mod series;
pub mod signals;
mod status_line;
mod step_verdicts;
mod to_hooks;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use gpumon_agent::hook_endpoint::HookHub;
use gpumon_agent::uplink::Outgoing;
use gpumon_agent::{AgentConfig, HookAddr, Sampler, SourceSpec};
use gpumon_core::engine::{EngineConfig, Severity, Subject};
use gpumon_runtime::config::FileConfig;
use tokio::sync::{mpsc, watch};

use crate::args::ProfileArgs;
use crate::failure::{usage, Failure};
use crate::run::{local_agent, python};
use build::{HostRun, RunFacts};
use embedded::Embedded;
use host::HostSampler;
use report::{ExitInfo, Levels};
use series::{PeakMean, Timeline, TIMELINE_POINTS};

/// Window sets queued between the sampler and the engine.
const WINDOW_CHANNEL: usize = 64;
/// Time between two redraws of the live line.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The engine settings of this run: the config file's (or the defaults),
/// with the GPU and host RAM levels the flags give.
fn settings(args: &ProfileArgs, config_file: Option<&Path>) -> Result<EngineConfig, Failure> {
    let mut engine = match config_file {
        Some(path) => FileConfig::load(path).map_err(usage)?.engine,
        None => EngineConfig::default(),
    };
    let gpu = &mut engine.memory_levels;
    gpu.warning_pct = args.gpu_warning_pct.unwrap_or(gpu.warning_pct);
    gpu.critical_pct = args.gpu_critical_pct.unwrap_or(gpu.critical_pct);
    gpu.check().map_err(|e| usage(format!("GPU levels: {e}")))?;
    let host = &mut engine.host_memory_levels;
    host.warning_pct = args.host_warning_pct.unwrap_or(host.warning_pct);
    host.critical_pct = args.host_critical_pct.unwrap_or(host.critical_pct);
    host.check()
        .map_err(|e| usage(format!("host levels: {e}")))?;
    Ok(engine)
}

/// Whether the engine holds `node`'s host RAM at its critical level now.
fn host_critical(engine: &Embedded, node: &str) -> bool {
    let host = Subject::Host(node.to_owned());
    engine
        .state()
        .engine
        .alert_book()
        .active_by_subject()
        .any(|(s, a)| *s == host && a.severity == Severity::Critical)
}

/// Whether the command is a torchrun line, whose workers carry their own
/// identity (then no process is made rank 0 of a world of one).
fn is_torchrun(command: &[String]) -> bool {
    let base = |s: &str| {
        Path::new(s)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned()
    };
    command.first().is_some_and(|p| base(p) == "torchrun")
        || command.windows(2).any(|w| {
            w[0] == "-m" && (w[1] == "torch.distributed.run" || w[1] == "torch.distributed.launch")
        })
}

/// The job name of a plain command: `profile-` and the script's stem.
fn default_job(command: &[String]) -> String {
    let script = command
        .iter()
        .skip(1)
        .find(|a| a.ends_with(".py"))
        .or(command.first())
        .map(|s| {
            Path::new(s)
                .file_stem()
                .and_then(|n| n.to_str())
                .unwrap_or("run")
                .to_owned()
        })
        .unwrap_or_else(|| "run".to_owned());
    let clean: String = script
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("profile-{clean}")
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes `bytes` to `path` through a temporary file beside it.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("partial");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// The host's side of the run as it goes, for the report (its levels are
/// the engine's).
struct HostWatch {
    sampler: HostSampler,
    run: HostRun,
    last: Option<(u64, u64)>,
}

impl HostWatch {
    fn sample(&mut self) {
        let Some(s) = self.sampler.sample() else {
            return;
        };
        let run = &mut self.run;
        run.total = s.total;
        run.used.add(s.used);
        run.rss.add(s.tree_rss);
        run.timeline.push(unix_now(), [s.used, s.tree_rss]);
        run.samples += 1;
        self.last = Some((s.used, s.total));
    }
}

pub async fn run(args: ProfileArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(usage(
            "give the command to profile after --, e.g. gpumon profile -- python train.py",
        ));
    };
    let engine_config = settings(&args, config_file)?;
    let outputs = Outputs::of(&args);
    let source: SourceSpec = args
        .source
        .as_deref()
        .unwrap_or("nvml")
        .parse()
        .map_err(|e| usage(format!("--source: {e}")))?;
    let package = python::materialize()
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot write the hook package: {e}")))?;
    let (run_dir, addr) = hook_socket()?;
    let node = gpumon_runtime::host::hostname();
    let sampler = Sampler::start(agent_config(&node, source, &addr, &args))
        .await
        .map_err(|e| Failure::Runtime(e.into()))?;
    let hub = sampler.hub();
    let source_name = sampler.hello().source.clone();
    let engine = Embedded::new(&engine_config, sampler.hello().clone());

    let mut cmd = command(&args, program, rest, &package, &addr, &outputs.snapshot_dir);
    let started_t = unix_now();
    let started = Instant::now();
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(usage(format!("cannot run {program:?}: {e}")));
        }
    };
    let (stop, stopped) = watch::channel(false);
    let (tx, rx) = mpsc::channel(WINDOW_CHANNEL);
    let sampler_task = tokio::spawn(sampler.run(tx, stopped));
    let mut watched = Watched::new(child, rx, engine, hub);
    let live = !args.quiet && std::io::stderr().is_terminal();
    let interval = Duration::from_millis(args.interval_ms);
    let (status, interrupted) = watched.until_exit(live, interval, started).await?;
    let ended_t = unix_now();
    if live {
        status_line::clear();
    }
    // The hook sent its last records before its process ended; stop the
    // sampler, which hands over what it holds, and apply the rest.
    let _ = stop.send(true);
    watched.drain().await;
    let _ = sampler_task.await;
    let _ = std::fs::remove_dir_all(&run_dir);

    let facts = RunFacts {
        command: args.command.clone(),
        started_t,
        ended_t,
        exit: exit_info(&watched.engine, &node, status, interrupted),
        levels: levels(&engine_config),
        source: source_name,
    };
    let report = build::build(&watched.engine, &watched.host.run, facts);
    write_reports(&report, &outputs)?;
    passed_on(program, status)
}

/// Where the run writes: the JSON and HTML reports and the hook's
/// allocator snapshots.
struct Outputs {
    json: PathBuf,
    html: PathBuf,
    snapshot_dir: PathBuf,
}

impl Outputs {
    /// From the flags: `gpumon-profile.json`, the HTML report beside the
    /// JSON one, snapshots in the JSON report's folder unless told.
    fn of(args: &ProfileArgs) -> Self {
        let json = args
            .json
            .clone()
            .unwrap_or_else(|| PathBuf::from("gpumon-profile.json"));
        let html = args
            .html
            .clone()
            .unwrap_or_else(|| json.with_extension("html"));
        let snapshot_dir = match &args.snapshot_dir {
            Some(d) => d.clone(),
            None => json
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_owned),
        };
        Outputs {
            json,
            html,
            snapshot_dir,
        }
    }
}

/// The hook endpoint: a socket of this run's own, in a private folder
/// (returned with it) that the caller removes at the end.
fn hook_socket() -> Result<(PathBuf, HookAddr), Failure> {
    let runtime_dir = local_agent::runtime_dir();
    let run_dir = runtime_dir.join(format!("profile-{}", std::process::id()));
    for dir in [&runtime_dir, &run_dir] {
        gpumon_agent::private_dir::ensure_private_dir(dir)
            .map_err(|why| Failure::Runtime(anyhow::anyhow!(why)))?;
    }
    let addr: HookAddr = format!("unix:{}", run_dir.join("hook.sock").display())
        .parse()
        .map_err(|e| usage(format!("hook socket under {}: {e}", run_dir.display())))?;
    Ok((run_dir, addr))
}

/// The in-process agent's configuration: it samples `source` and serves the
/// hook on `addr`, with no `/metrics` and no coordinators.
fn agent_config(
    node: &str,
    source: SourceSpec,
    addr: &HookAddr,
    args: &ProfileArgs,
) -> AgentConfig {
    let mut config = AgentConfig::new(node);
    config.agent_id = format!("{node}-profile-{}", std::process::id());
    config.source = source;
    config.hook_listen = Some(addr.clone());
    config.metrics_listen = None;
    config.sample_interval = Duration::from_millis(args.interval_ms);
    config.window = Duration::from_millis(args.window_ms.max(args.interval_ms));
    config
}

/// The command to profile, with the hook injected and pointed at `addr`.
fn command(
    args: &ProfileArgs,
    program: &str,
    rest: &[String],
    package: &Path,
    addr: &HookAddr,
    snapshot_dir: &Path,
) -> tokio::process::Command {
    let job = args
        .job
        .clone()
        .unwrap_or_else(|| default_job(&args.command));
    let pythonpath = python::pythonpath(package, std::env::var_os("PYTHONPATH").as_deref());
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest)
        .env("PYTHONPATH", pythonpath)
        .env("GPUMON_AGENT", addr.to_string())
        .env("GPUMON_JOB", &job)
        .env("GPUMON_SNAPSHOT_DIR", snapshot_dir);
    if !is_torchrun(&args.command) {
        cmd.env("GPUMON_STANDALONE", "1");
    }
    cmd
}

/// The running command and what watches it: the sampler's windows, the
/// embedded engine, the hook hub and the host's RAM.
struct Watched {
    child: tokio::process::Child,
    pid: u32,
    windows: mpsc::Receiver<Outgoing>,
    engine: Embedded,
    hub: Option<Arc<HookHub>>,
    host: HostWatch,
}

impl Watched {
    fn new(
        child: tokio::process::Child,
        windows: mpsc::Receiver<Outgoing>,
        engine: Embedded,
        hub: Option<Arc<HookHub>>,
    ) -> Self {
        let pid = child.id().unwrap_or(0);
        let host = HostWatch {
            sampler: HostSampler::new(pid),
            run: HostRun {
                total: 0,
                used: PeakMean::default(),
                rss: PeakMean::default(),
                timeline: Timeline::new(TIMELINE_POINTS),
                samples: 0,
            },
            last: None,
        };
        Watched {
            child,
            pid,
            windows,
            engine,
            hub,
            host,
        }
    }

    /// Until the command exits: applies each window set to the engine and
    /// relays its alerts and actions to the hooks, samples the host every
    /// `interval`, redraws the live line, and passes a Ctrl-C (or SIGTERM)
    /// on to the command, escalating to SIGKILL if it does not end. Returns
    /// its exit status and whether it was interrupted.
    async fn until_exit(
        &mut self,
        live: bool,
        interval: Duration,
        started: Instant,
    ) -> Result<(ExitStatus, bool), Failure> {
        let Watched {
            child,
            pid,
            windows,
            engine,
            hub,
            host,
        } = self;
        let pid = *pid;
        let mut host_tick = tokio::time::interval(interval);
        let mut status_tick = tokio::time::interval(STATUS_EVERY);
        let mut interrupted = false;
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut signals = signals::Signals::new();
        let mut next_stop: Option<signals::Next> = None;
        let status: ExitStatus = loop {
            tokio::select! {
                Some(out) = windows.recv() => {
                    engine.apply(out);
                    if let Some(hub) = hub.as_deref() {
                        to_hooks::relay(hub, engine);
                        to_hooks::hand_out_actions(hub, engine);
                    }
                }
                _ = host_tick.tick() => host.sample(),
                _ = status_tick.tick(), if live => {
                    status_line::draw(&status_line::line(engine, started.elapsed().as_secs_f64(), host.last));
                }
                status = child.wait() => break status?,
                stop = signals.next(), if !interrupted => {
                    interrupted = true;
                    let (now, next, after) = signals::first_step(stop);
                    if let (Some(name), true) = (now, pid > 0) {
                        crate::run::signal(pid, name);
                    }
                    next_stop = Some(next);
                    deadline = Some(tokio::time::Instant::now() + after);
                }
                _ = sleep_until(deadline), if deadline.is_some() => {
                    let (name, then) = signals::after(next_stop.unwrap_or(signals::Next::Kill));
                    if name == "KILL" {
                        let _ = child.start_kill();
                    } else if pid > 0 {
                        crate::run::signal(pid, name);
                    }
                    next_stop = then.map(|t| t.0);
                    deadline = then.map(|t| tokio::time::Instant::now() + t.1);
                }
            }
        };
        Ok((status, interrupted))
    }

    /// Applies the window sets still queued, until the sampler has stopped.
    async fn drain(&mut self) {
        while let Some(out) = self.windows.recv().await {
            self.engine.apply(out);
        }
    }
}

/// How the command ended, for the report: an OOM is one the engine observed,
/// or a SIGKILL while host RAM was at its critical level.
fn exit_info(engine: &Embedded, node: &str, status: ExitStatus, interrupted: bool) -> ExitInfo {
    let observed_oom = engine.observed().oom.clone();
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    let host_oom = signal == Some(9) && host_critical(engine, node);
    ExitInfo {
        code: status.code(),
        signal,
        oom: observed_oom.is_some() || host_oom,
        oom_reason: observed_oom.or_else(|| {
            host_oom.then(|| "killed (SIGKILL) while host RAM was at its critical level: likely the kernel's OOM killer".to_owned())
        }),
        interrupted,
    }
}

/// The memory levels in force, as the report states them.
fn levels(engine_config: &EngineConfig) -> Levels {
    Levels {
        gpu_warning_pct: engine_config.memory_levels.warning_pct,
        gpu_critical_pct: engine_config.memory_levels.critical_pct,
        host_warning_pct: engine_config.host_memory_levels.warning_pct,
        host_critical_pct: engine_config.host_memory_levels.critical_pct,
    }
}

/// Writes the JSON and HTML reports and says where they are.
fn write_reports(report: &report::ProfileReport, outputs: &Outputs) -> Result<(), Failure> {
    let json = serde_json::to_vec_pretty(report).context("cannot encode the report")?;
    write_atomic(&outputs.json, &json).map_err(Failure::Runtime)?;
    write_atomic(&outputs.html, html::render(report).as_bytes()).map_err(Failure::Runtime)?;
    eprintln!(
        "gpumon: report in {} and {} ({} alerts, {} recommendations)",
        outputs.json.display(),
        outputs.html.display(),
        report.alerts.len(),
        report.recommendations.len()
    );
    Ok(())
}

/// The command's exit status, passed on: success, its exit code, or 128
/// plus the signal that killed it.
fn passed_on(program: &str, status: ExitStatus) -> Result<(), Failure> {
    if status.success() {
        return Ok(());
    }
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    let code = match (status.code(), signal) {
        (Some(c), _) => c.clamp(1, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(1, 255) as u8,
        _ => 1,
    };
    Err(Failure::Exit(
        code,
        format!("{program} exited with {status}"),
    ))
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
