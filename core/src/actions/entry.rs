//! An action as the replicated book keeps it: its state, who asked, what
//! became of a request, and the entry with its history. These are the
//! core's own types, encoded in Raft snapshots and log entries; the API's
//! (`gpumon_proto::api`) are converted from them where they are read
//! (the `From` impls below), so a field added to an answer never changes
//! what the replicas store. The encodings match field for field today.

use gpumon_proto::api;
use gpumon_proto::ActionKind;
use serde::{Deserialize, Serialize};

/// Where an action stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    /// Issued; no agent has pulled it yet.
    Planned,
    /// An agent pulled it for its training process.
    Delivered,
    /// Carried out.
    Done,
    /// The process could not carry it out.
    Failed,
    /// Not carried out in time, or its rank went away.
    Expired,
}

impl ActionState {
    /// Every state, in lifecycle order.
    pub const ALL: [ActionState; 5] = [
        Self::Planned,
        Self::Delivered,
        Self::Done,
        Self::Failed,
        Self::Expired,
    ];

    /// True once nothing more will happen to the action.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Expired)
    }

    /// The name used in the API: `planned`, `delivered`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::Planned => "planned",
            Self::Delivered => "delivered",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }
}

/// Who asked for an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionOrigin {
    /// The leader's planner.
    Planner,
    /// An admin through `POST /api/v1/actions`.
    Admin,
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum IssueOutcome {
    /// A new action.
    Issued {
        /// Its id.
        id: u64,
    },
    /// The rank already has this action outstanding.
    Existing {
        /// The outstanding action's id.
        id: u64,
    },
    /// The rank has ended: the action was recorded and expired at once.
    Expired {
        /// Its id.
        id: u64,
    },
    /// The planner acted on this rank too recently.
    RateLimited {
        /// When it may act again, seconds.
        next_t: f64,
    },
    /// No such rank.
    UnknownRank,
    /// Every kept slot holds an outstanding action.
    Full,
}

/// One action and its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionEntry {
    /// Unique in the cluster, from 1.
    pub id: u64,
    /// What to do.
    pub kind: ActionKind,
    /// Target job.
    pub job: String,
    /// Target rank.
    pub rank: u32,
    /// Who asked.
    pub origin: ActionOrigin,
    /// Why.
    pub reason: String,
    /// Where it stands.
    pub state: ActionState,
    /// The node of the rank when issued: its agent delivers it.
    pub node: Option<String>,
    /// Issued at, seconds (data time).
    pub planned_t: f64,
    /// Expires at, seconds, unless finished.
    pub expires_t: f64,
    /// Pulled by the agent at, seconds.
    pub delivered_t: Option<f64>,
    /// Done, failed or expired at, seconds.
    pub finished_t: Option<f64>,
    /// Bytes released (done).
    pub freed_bytes: Option<u64>,
    /// The step after which it ran (done).
    pub at_step: Option<u64>,
    /// Why it failed or expired.
    pub detail: Option<String>,
    /// What the user's `on_action` callback answered.
    pub response: Option<String>,
}

impl From<ActionState> for api::ActionState {
    fn from(s: ActionState) -> Self {
        match s {
            ActionState::Planned => Self::Planned,
            ActionState::Delivered => Self::Delivered,
            ActionState::Done => Self::Done,
            ActionState::Failed => Self::Failed,
            ActionState::Expired => Self::Expired,
        }
    }
}

impl From<api::ActionState> for ActionState {
    fn from(s: api::ActionState) -> Self {
        match s {
            api::ActionState::Planned => Self::Planned,
            api::ActionState::Delivered => Self::Delivered,
            api::ActionState::Done => Self::Done,
            api::ActionState::Failed => Self::Failed,
            api::ActionState::Expired => Self::Expired,
        }
    }
}

impl From<ActionOrigin> for api::ActionOrigin {
    fn from(o: ActionOrigin) -> Self {
        match o {
            ActionOrigin::Planner => Self::Planner,
            ActionOrigin::Admin => Self::Admin,
        }
    }
}

impl From<IssueOutcome> for api::IssueOutcome {
    fn from(o: IssueOutcome) -> Self {
        match o {
            IssueOutcome::Issued { id } => Self::Issued { id },
            IssueOutcome::Existing { id } => Self::Existing { id },
            IssueOutcome::Expired { id } => Self::Expired { id },
            IssueOutcome::RateLimited { next_t } => Self::RateLimited { next_t },
            IssueOutcome::UnknownRank => Self::UnknownRank,
            IssueOutcome::Full => Self::Full,
        }
    }
}

impl From<&ActionEntry> for api::ActionEntry {
    fn from(e: &ActionEntry) -> Self {
        Self {
            id: e.id,
            kind: e.kind,
            job: e.job.clone(),
            rank: e.rank,
            origin: e.origin.into(),
            reason: e.reason.clone(),
            state: e.state.into(),
            node: e.node.clone(),
            planned_t: e.planned_t,
            expires_t: e.expires_t,
            delivered_t: e.delivered_t,
            finished_t: e.finished_t,
            freed_bytes: e.freed_bytes,
            at_step: e.at_step,
            detail: e.detail.clone(),
            response: e.response.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> ActionEntry {
        ActionEntry {
            id: 7,
            kind: ActionKind::ReleaseCache,
            job: "job".into(),
            rank: 3,
            origin: ActionOrigin::Admin,
            reason: "asked".into(),
            state: ActionState::Done,
            node: Some("node-a".into()),
            planned_t: 1.0,
            expires_t: 2.0,
            delivered_t: Some(1.5),
            finished_t: Some(1.75),
            freed_bytes: Some(1 << 30),
            at_step: Some(12),
            detail: None,
            response: Some("ok".into()),
        }
    }

    #[test]
    fn the_api_entry_says_what_the_book_holds() {
        let e = entry();
        assert_eq!(
            serde_json::to_value(api::ActionEntry::from(&e)).unwrap(),
            serde_json::to_value(&e).unwrap()
        );
    }

    #[test]
    fn every_state_keeps_its_name_both_ways() {
        for s in ActionState::ALL {
            let shown: api::ActionState = s.into();
            assert_eq!(shown.name(), s.name());
            assert_eq!(ActionState::from(shown), s);
        }
    }
}
