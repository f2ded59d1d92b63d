//! Actions on training processes as the API shows them: the entries of
//! `GET /api/v1/actions` and the request and answer of `POST /api/v1/actions`.
//!
//! Times named `*_t` are seconds since the Unix epoch (data time).

use serde::{Deserialize, Serialize};

use super::query::Consistency;
use crate::uplink::ActionKind;

/// Where an action stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionOrigin {
    /// The leader's planner.
    Planner,
    /// An admin through `POST /api/v1/actions`.
    Admin,
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// `GET /api/v1/actions`'s query; unknown parameters are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ActionsQuery {
    /// Only this job's actions.
    pub job: Option<String>,
    /// Only actions in this state.
    pub state: Option<ActionState>,
    /// At most this many, the newest (at most 4096, the default).
    pub limit: Option<usize>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// `GET /api/v1/actions`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionsBody {
    /// Matching actions, oldest first.
    pub actions: Vec<ActionEntry>,
    /// Matching actions left out by `limit` (the oldest).
    pub truncated: usize,
}

/// `POST /api/v1/actions`'s body: one action for each of a job's ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct IssueRequest {
    /// What to do.
    pub kind: ActionKind,
    /// The job.
    pub job: String,
    /// Its ranks: 1 to 4096, none repeated.
    pub ranks: Vec<u32>,
    /// Why; by default, that an admin asked and from where.
    #[serde(default)]
    pub reason: Option<String>,
}

/// One rank's answer to `POST /api/v1/actions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssuedAction {
    /// The rank.
    pub rank: u32,
    /// The action's id, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// What became of the request.
    #[serde(flatten)]
    pub outcome: IssueOutcome,
}

/// `POST /api/v1/actions`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssueResponse {
    /// One entry per requested rank, in request order.
    pub actions: Vec<IssuedAction>,
}
