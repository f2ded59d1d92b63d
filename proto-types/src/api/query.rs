//! The query parameter every read takes: how fresh its answer must be.

use serde::{Deserialize, Serialize};

/// `?consistency=`: `local` (the default) answers from this replica's
/// applied state; `linearizable` reflects every write committed before the
/// request (a follower forwards the read to the leader).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// This replica's applied state, which may trail the leader by the
    /// apply lag (the default).
    #[default]
    Local,
    /// Every write committed before the request: the leader confirms it
    /// still leads and catches up; a follower forwards the read to it.
    Linearizable,
}

impl Consistency {
    /// The parameter's value: `local` or `linearizable`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Linearizable => "linearizable",
        }
    }
}

/// The query of a read that takes no parameter of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}
