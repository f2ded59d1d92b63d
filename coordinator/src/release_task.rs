//! The leader's release planner task: every `interval_ms`, on the leader
//! only, it runs the pure planner (`gpumon_core::actions::plan_releases`)
//! over the applied state and proposes what it returns through the
//! replica's one write path (`service::Proposer`). The
//! book re-checks every rule at apply time, so a proposal racing a leader
//! change, or a new leader planning again, cannot issue an action twice.

use std::time::Duration;

use gpumon_core::actions::{plan_dumps, plan_releases, IssueOutcome, PlannerConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, CommandV1};
use crate::service::Proposer;

/// Starts the planner; it ends when `stop` turns true.
pub fn spawn(
    proposer: Proposer,
    state_machine: StateMachine,
    config: PlannerConfig,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if !config.enabled {
            return;
        }
        let every = Duration::from_millis(config.interval_ms);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !proposer.leads() {
                continue;
            }
            let requests = {
                let applied = state_machine.read();
                let t = applied.now_t();
                let mut requests = plan_releases(&applied.engine, &applied.actions, t, &config);
                requests.extend(plan_dumps(
                    &applied.hangs,
                    &applied.actions,
                    t,
                    &config.rules(),
                ));
                requests
            };
            if requests.is_empty() {
                continue;
            }
            let command = Command::V1(CommandV1::IssueActions {
                requests: requests.clone(),
                rules: config.rules(),
            });
            match proposer.write(command, "the planned actions").await {
                Ok(result) => {
                    for (req, outcome) in requests.iter().zip(&result.issued) {
                        if let IssueOutcome::Issued { id } = outcome {
                            tracing::info!(id, job = %req.job, rank = req.rank, reason = %req.reason, "planned {}", req.kind.name());
                        }
                    }
                }
                // Lost leadership meanwhile: the new leader plans.
                Err(e) => tracing::debug!(error = %e, "planned actions not committed"),
            }
        }
    })
}
