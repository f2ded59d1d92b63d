//! `gpumon run [--agent ADDR] -- COMMAND...`: runs a training command (e.g.
//! `torchrun ...`) with the gpumon hook injected and no change to the script.
//!
//! It writes the embedded Python package to a cache directory, puts it and
//! its `sitecustomize` on PYTHONPATH and sets `GPUMON_AGENT`, so every
//! Python process torchrun starts calls `gpumon.init()` when torchrun's
//! variables are present. Without `--agent` it uses the node's agent when
//! one answers at `local_agent::NODE_AGENT_SOCKET` (an agent running as
//! root serves every user), else the user's own address. When no agent
//! answers there it starts one (`gpumon agent --hook-listen ADDR`) for the
//! command's lifetime, under an agent id of its own so it never merges
//! with the node's agent. Signals are passed on; the exit status is the
//! command's.

pub(crate) mod local_agent;
pub(crate) mod python;

use std::process::Stdio;

use gpumon_agent::HookAddr;

use crate::args::RunArgs;
use crate::failure::{usage, Failure};
use crate::shutdown;

/// Sends a signal by name to a process, through `kill(1)` (no unsafe code here).
pub(crate) fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

pub async fn run(args: RunArgs) -> Result<(), Failure> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(usage("give the command to run after --, e.g. gpumon run -- torchrun --nproc-per-node 8 train.py"));
    };
    let addr_text = match args.agent {
        Some(a) => a,
        None => local_agent::default_addr().await,
    };
    let addr: HookAddr = addr_text
        .parse()
        .map_err(|e| usage(format!("--agent {addr_text:?}: {e}")))?;
    let package = python::materialize()
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot write the hook package: {e}")))?;

    let started = if local_agent::answers(&addr).await {
        tracing::info!(%addr, "using the agent already serving there");
        None
    } else {
        let agent = local_agent::start(&addr, args.coordinators.as_deref(), args.source.as_deref())
            .await
            .map_err(Failure::Runtime)?;
        eprintln!(
            "gpumon: started an agent at {addr} (log: {})",
            agent.log.display()
        );
        Some(agent)
    };

    let pythonpath = python::pythonpath(&package, std::env::var_os("PYTHONPATH").as_deref());
    let mut child = match tokio::process::Command::new(program)
        .args(rest)
        .env("PYTHONPATH", pythonpath)
        .env("GPUMON_AGENT", addr.to_string())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            if let Some(agent) = started {
                agent.stop().await;
            }
            return Err(usage(format!("cannot run {program:?}: {e}")));
        }
    };
    let pid = child.id();
    // Ctrl-C reaches the command through the terminal's process group; a
    // SIGTERM sent to gpumon alone is passed on.
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = shutdown::signal() => {
            if let Some(pid) = pid {
                signal(pid, "TERM");
            }
            child.wait().await?
        }
    };
    if let Some(agent) = started {
        agent.stop().await;
    }
    if status.success() {
        return Ok(());
    }
    let code = status.code().map_or(1, |c| c.clamp(1, 255) as u8);
    Err(Failure::Exit(
        code,
        format!("{program} exited with {status}"),
    ))
}
