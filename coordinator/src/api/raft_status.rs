//! `GET /api/v1/raft`: this replica's Raft figures and state digest.

use axum::extract::State;
use axum::Json;
use gpumon_proto::api::{PeerReplication, RaftMember, RaftStatus, ReadQuery};
use openraft::{BasicNode, RaftMetrics, ServerState};

use super::error_answers::ReadErrors;
use super::params::OnlyConsistency;
use super::ApiContext;
use crate::raft::standing::{millis, Standing};

/// This replica's Raft figures and state digest.
#[utoipa::path(
    get,
    path = "/api/v1/raft",
    params(ReadQuery),
    responses((status = 200, description = "OK", body = RaftStatus), ReadErrors),
)]
pub async fn raft_status(_: OnlyConsistency, State(state): State<ApiContext>) -> Json<RaftStatus> {
    Json(status(&state))
}

/// The figures, read from openraft's metrics, the log store and the state machine.
pub fn status(state: &ApiContext) -> RaftStatus {
    let inner = &state.inner;
    let m = inner.raft.metrics().borrow().clone();
    let (state_digest_index, state_digest) = inner.state_machine.digest();
    let applied_index = inner.state_machine.applied_index();
    let commit_index = inner.committed.get();
    let membership = m.membership_config.membership();
    let member = |id: u64| RaftMember {
        id,
        addr: membership
            .get_node(&id)
            .map(|n| n.addr.clone())
            .unwrap_or_default(),
    };
    let voters: Vec<RaftMember> = membership.voter_ids().map(member).collect();
    let learners: Vec<RaftMember> = membership.learner_ids().map(member).collect();
    let last_log_index = m.last_log_index;
    let replication = peers_matched(&m, inner.id)
        .map(|(id, matched_index)| PeerReplication {
            id,
            matched_index,
            lag: lag(last_log_index, matched_index),
        })
        .collect();
    let leader_url = crate::service::leader_url(&state.inner.link, &m);
    let standing = Standing::of(&m, inner.id);
    RaftStatus {
        id: inner.id,
        role: match standing {
            Standing::SteppedDown(_) => "stepped_down",
            _ => role(m.state),
        }
        .into(),
        leader: m.current_leader,
        leader_url,
        term: m.current_term,
        last_log_index,
        commit_index,
        applied_index,
        apply_lag: lag(commit_index, applied_index),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        millis_since_quorum_ack: m.millis_since_quorum_ack,
        voters,
        learners,
        replication,
        state_digest,
        state_digest_index,
        view_age_ms: millis(standing.view_age(&inner.contact)),
    }
}

/// Where this leader's peers are: each replica but `me`, and the last log
/// index it has matched (none yet: `None`). Nothing on a follower.
pub fn peers_matched(
    m: &RaftMetrics<u64, BasicNode>,
    me: u64,
) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
    m.replication
        .iter()
        .flatten()
        .filter(move |(id, _)| **id != me)
        .map(|(id, matched)| (*id, matched.map(|l| l.index)))
}

/// How many entries `behind` trails `ahead` (none known counts as before 0).
pub fn lag(ahead: Option<u64>, behind: Option<u64>) -> u64 {
    match (ahead, behind) {
        (Some(a), Some(b)) => a.saturating_sub(b),
        (Some(a), None) => a + 1,
        (None, _) => 0,
    }
}

fn role(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

#[cfg(test)]
mod tests {
    use super::lag;

    #[test]
    fn lag_counts_entries_behind() {
        assert_eq!(lag(Some(10), Some(7)), 3);
        assert_eq!(lag(Some(10), Some(12)), 0);
        assert_eq!(lag(Some(4), None), 5);
        assert_eq!(lag(None, None), 0);
    }
}
