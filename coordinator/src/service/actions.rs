//! Actions on training processes: an admin issuing them, and handing the
//! outstanding ones to the agent of their node.
//!
//! Handing an action out is itself recorded through Raft (`delivered`)
//! before the agent sees it, so a failover neither loses nor repeats it.

use gpumon_core::actions::{ActionOrigin, ActionRequest, IssueOutcome};
use gpumon_proto::api::{IssueRequest, IssueResponse, IssuedAction};
use gpumon_proto::PendingAction;

use super::{Service, ServiceError};
use crate::raft::{Command, CommandV1};

/// Ranks one `POST /api/v1/actions` may name.
pub const MAX_RANKS_PER_REQUEST: usize = 4096;

impl Service {
    /// Issues actions an admin asked for, on the leader; `default_reason`
    /// stands where the request gives none. The job name's form is the
    /// caller's to check.
    pub async fn issue_actions(
        &self,
        req: IssueRequest,
        default_reason: String,
    ) -> Result<IssueResponse, ServiceError> {
        if req.ranks.is_empty() || req.ranks.len() > MAX_RANKS_PER_REQUEST {
            return Err(ServiceError::Invalid(format!(
                "ranks must name 1 to {MAX_RANKS_PER_REQUEST} ranks, not {}",
                req.ranks.len()
            )));
        }
        let mut ranks = req.ranks.clone();
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.len() != req.ranks.len() {
            return Err(ServiceError::Invalid("ranks must not repeat".into()));
        }
        if !self.state_machine.read().cluster.has_job(&req.job) {
            return Err(ServiceError::NotFound(format!("no job {:?}", req.job)));
        }
        self.ensure_leader()?;
        let reason = req.reason.unwrap_or(default_reason);
        let requests: Vec<ActionRequest> = req
            .ranks
            .iter()
            .map(|&rank| ActionRequest {
                kind: req.kind,
                job: req.job.clone(),
                rank,
                reason: reason.clone(),
                origin: ActionOrigin::Admin,
            })
            .collect();
        let rules = self.admin_rules;
        let result = self
            .write(
                Command::V1(CommandV1::IssueActions { requests, rules }),
                "the actions",
            )
            .await?;
        let actions = req
            .ranks
            .iter()
            .zip(result.issued)
            .map(|(&rank, outcome)| {
                let id = match outcome {
                    IssueOutcome::Issued { id }
                    | IssueOutcome::Existing { id }
                    | IssueOutcome::Expired { id } => Some(id),
                    _ => None,
                };
                tracing::info!(job = %req.job, rank, ?outcome, "admin issued {}", req.kind.name());
                IssuedAction {
                    rank,
                    id,
                    outcome: outcome.into(),
                }
            })
            .collect();
        Ok(IssueResponse { actions })
    }

    /// The outstanding actions for ranks on `node`, after recording through
    /// Raft that the planned ones are handed out. Those whose delivery
    /// cannot be recorded are held back for the next push.
    pub(super) async fn hand_out_actions(&self, node: &str) -> Vec<PendingAction> {
        let (planned, mut pending) = {
            let applied = self.state_machine.read();
            let (planned, pending) = applied.actions.hand_out(node);
            if pending.is_empty() {
                return Vec::new();
            }
            (planned, pending)
        };
        if !planned.is_empty() {
            let command = Command::V1(CommandV1::DeliverActions {
                node: node.to_owned(),
                ids: planned.clone(),
            });
            if let Err(e) = self.write(command, "the delivery").await {
                tracing::warn!(error = %e, node, "could not record the delivery of actions; holding them back");
                pending.retain(|a| !planned.contains(&a.id));
            }
        }
        pending
    }
}
