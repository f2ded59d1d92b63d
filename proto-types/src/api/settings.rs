//! Live settings (`/api/v1/config`): what the detection engine and the
//! notifier run with, and changes to it, cluster-wide or for one job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::query::Consistency;

/// `GET /api/v1/config`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ConfigQuery {
    /// The values in effect for this job's ranks.
    pub job: Option<String>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// One live key and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SettingView {
    /// The key (`straggler.min_loss_ms`).
    pub key: String,
    /// The value in effect (for the job asked about, or cluster-wide), as
    /// text; `null` for a notifier key without an override (the replica's
    /// `[notify]` configuration applies).
    pub value: Option<String>,
    /// Where the value comes from: `config` (the coordinator's TOML),
    /// `cluster` (set live for the cluster) or `job` (set live for the job).
    pub source: String,
    /// `cluster` (GPUs and nodes: cluster-wide only) or `job` (may also be
    /// set for one job).
    pub scope: String,
    /// What it takes.
    pub takes: String,
    /// What it does.
    pub about: String,
}

/// `GET /api/v1/config`'s answer, and `POST`'s after the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfigBody {
    /// The job the values are for; `null`: cluster-wide.
    pub job: Option<String>,
    /// Every live key.
    pub settings: Vec<SettingView>,
    /// The live overrides set for the cluster, by key.
    pub cluster_overrides: BTreeMap<String, String>,
    /// The live overrides of each job that has some, by job and key.
    pub job_overrides: BTreeMap<String, BTreeMap<String, String>>,
}

/// `POST /api/v1/config`'s body: set and reset keys, cluster-wide or for
/// one job, in one change that applies whole or not at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigChange {
    /// The job it is for; absent: cluster-wide.
    #[serde(default)]
    pub job: Option<String>,
    /// Keys to set: a number, or a severity's name.
    #[serde(default)]
    pub set: BTreeMap<String, SettingInput>,
    /// Keys to put back to what applies without an override.
    #[serde(default)]
    pub reset: Vec<String>,
    /// Drop every override of the scope first.
    #[serde(default)]
    pub reset_all: bool,
}

/// A value to set: a number, or a name (a severity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum SettingInput {
    /// A number.
    Number(f64),
    /// A name.
    Text(String),
}

impl SettingInput {
    /// The value as text, as the log carries it.
    pub fn text(&self) -> String {
        match self {
            SettingInput::Number(n) => n.to_string(),
            SettingInput::Text(s) => s.clone(),
        }
    }
}
