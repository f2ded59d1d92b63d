//! Every JSON body of the coordinator's HTTP API (`/api/v1/...`): what the
//! routes answer, what they accept and their query parameters. The
//! coordinator serves these types, the CLI and the tests read them back,
//! and with the `openapi` feature they derive the schemas of the OpenAPI
//! document the coordinator serves at `/api/v1/openapi.json`.
//!
//! - [`cluster`]: the cluster, its agents, nodes and GPUs;
//! - [`jobs`]: jobs, their ranks' placement, memory history and step times;
//! - [`job_scale`]: a big job's worst ranks, time range, node aggregates and heatmap matrix;
//! - [`analysis`]: the detection engine's forecasts and flags;
//! - [`step_verdict`]: where a step's time goes, and what bounds it;
//! - [`alerts`]: alert episodes;
//! - [`actions`]: actions on training processes;
//! - [`memory_snapshots`]: named memory (allocator) snapshots and their comparison;
//! - [`raft`]: Raft figures and membership changes;
//! - [`settings`]: live settings, cluster-wide and per job;
//! - [`query`]: the `consistency` parameter every read takes;
//! - [`error`]: the error body.
//!
//! These are answers. The replicated state keeps its own types in
//! `gpumon-core` (alert episodes, actions, forecasts, markers, step times,
//! history points, ingest counters, processes), converted to these where
//! they are read, so a field added here never changes a Raft snapshot. What
//! the state shares with this module is vocabulary that the wire protocol
//! and the settings use as well ([`AlertKind`], [`Severity`], [`Risk`]),
//! and the core's read functions (summaries, job slices, step verdicts,
//! snapshot comparisons) build these answers directly.

pub mod actions;
pub mod alerts;
pub mod analysis;
pub mod cluster;
pub mod error;
pub mod job_scale;
pub mod jobs;
pub mod memory_snapshots;
pub mod query;
pub mod raft;
pub mod settings;
pub mod step_verdict;

pub use actions::{
    ActionEntry, ActionOrigin, ActionState, ActionsBody, ActionsQuery, IssueOutcome, IssueRequest,
    IssueResponse, IssuedAction,
};
pub use alerts::{Alert, AlertKind, AlertsBody, AlertsQuery, Severity};
pub use analysis::{
    DeviceSummary, JobForecast, JobSummary, LimitKind, Marker, MemoryLimit, OomForecast,
    RankSummary, Risk,
};
pub use cluster::{
    AgentView, ClusterView, GpuView, IngestCounters, NodeView, NodesView, ProcessView,
    RejectedPushes, ReplicaStatus,
};
pub use error::ApiErrorBody;
pub use job_scale::{
    JobQuery, JobScaleSummary, JobSummaryQuery, NodeAggregate, RankFlag, RankLine, RankTimeMatrix,
    RestLines,
};
pub use jobs::{
    HistoryPoint, JobDetail, JobView, JobWithAnalysis, JobsView, RankDetail, RankSteps, RankView,
    SectionTime,
};
pub use memory_snapshots::{
    MemorySnapshotComparison, MemorySnapshotList, MemorySnapshotsAnswer, MemorySnapshotsQuery,
    NamedMemorySnapshot, RankMemoryComparison, RankMemorySnapshot, StatsDelta,
};
pub use query::{Consistency, ReadQuery};
pub use raft::{AddMember, PeerReplication, RaftMember, RaftStatus};
pub use settings::{ConfigBody, ConfigChange, ConfigQuery, SettingInput, SettingView};
pub use step_verdict::{StepBound, StepPart, StepVerdict};
