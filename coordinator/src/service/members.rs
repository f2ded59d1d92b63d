//! Membership changes, on the leader only: adding a replica as a learner,
//! waiting until it has caught up, then making it a voter; removing one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use gpumon_proto::api::AddMember;
use openraft::{BasicNode, ChangeMembers, StoredMembership};

use super::{write_error, Service, ServiceError};
use crate::peers::check_addr;

/// How long a new replica may take to catch up before it stays a learner.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(120);

impl Service {
    /// The membership as this replica knows it now.
    fn membership(&self) -> Arc<StoredMembership<u64, BasicNode>> {
        self.proposer
            .raft
            .metrics()
            .borrow()
            .membership_config
            .clone()
    }

    /// Adds replica `req.id` at `req.addr`: as a learner that has caught
    /// up, then (unless `req.learner`) as a voter.
    pub async fn add_member(&self, req: AddMember) -> Result<(), ServiceError> {
        if req.id == 0 {
            return Err(ServiceError::Invalid("Raft node ids start at 1".into()));
        }
        check_addr(&req.addr).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.ensure_leader()?;
        let membership = self.membership();
        let current = membership.membership();
        if let Some(node) = current.get_node(&req.id) {
            if node.addr != req.addr {
                return Err(ServiceError::Conflict(format!(
                    "replica {} is already a member at {}; remove it first to move it",
                    req.id, node.addr
                )));
            }
        }
        if let Some((other, _)) = current
            .nodes()
            .find(|(id, n)| **id != req.id && n.addr == req.addr)
        {
            return Err(ServiceError::Conflict(format!(
                "{} is already the address of replica {other}",
                req.addr
            )));
        }
        let is_voter = current.voter_ids().any(|v| v == req.id);
        if current.get_node(&req.id).is_none() {
            self.answers(&req.addr).await?;
        }
        tracing::info!(id = req.id, addr = %req.addr, "adding a replica as a learner");
        let node = BasicNode {
            addr: req.addr.clone(),
        };
        tokio::time::timeout(CATCH_UP_WITHIN, self.proposer.raft.add_learner(req.id, node, true))
            .await
            .map_err(|_| {
                ServiceError::Unavailable(format!(
                    "replica {} did not catch up within {CATCH_UP_WITHIN:?}; it stays a learner. Is it running at {}?",
                    req.id, req.addr
                ))
            })?
            .map_err(|e| write_error(&self.proposer.link, e, "the new member"))?;
        if !req.learner && !is_voter {
            tracing::info!(id = req.id, "promoting the replica to voter");
            self.change(ChangeMembers::AddVoterIds(BTreeSet::from([req.id])))
                .await?;
        }
        Ok(())
    }

    /// Removes replica `id`, voter or learner; never the last voter.
    pub async fn remove_member(&self, id: u64) -> Result<(), ServiceError> {
        self.ensure_leader()?;
        let membership = self.membership();
        let current = membership.membership();
        if current.get_node(&id).is_none() {
            return Err(ServiceError::NotFound(format!(
                "replica {id} is not a member"
            )));
        }
        let voters: BTreeSet<u64> = current.voter_ids().collect();
        if voters.len() == 1 && voters.contains(&id) {
            return Err(ServiceError::Conflict(format!(
                "replica {id} is the last voter; a cluster cannot remove its last voter"
            )));
        }
        tracing::info!(id, "removing a replica");
        if voters.contains(&id) {
            self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id])))
                .await?;
        }
        // A voter that was removed above stays a learner until removed as a node.
        let still_node = self.membership().membership().get_node(&id).is_some();
        if still_node {
            self.change(ChangeMembers::RemoveNodes(BTreeSet::from([id])))
                .await?;
        }
        Ok(())
    }

    /// Refuses an address where no live replica answers: a voter that can
    /// never vote would cost the cluster its majority.
    async fn answers(&self, addr: &str) -> Result<(), ServiceError> {
        let url = format!("{}/healthz", self.proposer.link.url(addr));
        match self.probe.get(&url).send().await {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(ServiceError::Unavailable(format!(
                "the replica at {addr} answers {} on /healthz; add it once it is up (started with --join)",
                resp.status()
            ))),
            Err(e) => Err(ServiceError::Invalid(format!(
                "nothing answers at {addr} ({e}); start the new replica with --join first"
            ))),
        }
    }

    async fn change(&self, change: ChangeMembers<u64, BasicNode>) -> Result<(), ServiceError> {
        self.proposer
            .raft
            .change_membership(change, false)
            .await
            .map(|_| ())
            .map_err(|e| write_error(&self.proposer.link, e, "the membership change"))
    }
}
