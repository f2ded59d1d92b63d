//! The one error body every API route answers with on failure.

use serde::{Deserialize, Serialize};

/// An error body of the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiErrorBody {
    /// Short machine-readable code, e.g. `not_found`.
    pub error: String,
    /// What went wrong and what to do.
    pub message: String,
    /// With `not_leader` (HTTP 421): the leader's base URL, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_url: Option<String>,
}
