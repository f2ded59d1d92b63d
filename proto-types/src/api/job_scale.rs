//! Reading a big job without every rank's whole history: the query of
//! `GET /api/v1/jobs/{job}` (time range, the worst ranks only, fewer points,
//! one node), the compact line it gives the ranks left out, and
//! `GET /api/v1/jobs/{job}/summary`: per-node aggregates and a rank x time
//! matrix of used share for a heatmap. At 8,000 ranks the full detail is
//! tens of MB; these answers stay within a few MB whatever the job's size.
//!
//! Times named `since`/`until` are data time in seconds since the Unix
//! epoch; `*_ms` are milliseconds. A used share is memory used / capacity.

use serde::{Deserialize, Serialize};

use super::query::Consistency;

/// Most worst ranks `ranks=top:K` may ask for.
pub const MAX_TOP_RANKS: u32 = 1000;
/// Most points per history `points=N` may ask for.
pub const MAX_POINTS: u32 = 2000;
/// Most rows (ranks) of the summary's matrix; later ranks are counted in
/// `rows_omitted`.
pub const MAX_MATRIX_ROWS: usize = 8192;
/// Most time columns of the summary's matrix.
pub const MAX_MATRIX_COLUMNS: u32 = 240;
/// Columns when `columns` is not given.
pub const DEFAULT_MATRIX_COLUMNS: u32 = 120;
/// A matrix cell's value for a full GPU; a cell holds
/// `round(share * CELL_FULL)`.
pub const CELL_FULL: u8 = 250;
/// A matrix cell with no data.
pub const CELL_EMPTY: u8 = 255;

/// `GET /api/v1/jobs/{job}`'s query. Without any, the answer is every rank
/// with its whole history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    /// Oldest history point returned: data time, seconds since the epoch.
    pub since: Option<f64>,
    /// Newest history point returned: data time, seconds since the epoch.
    pub until: Option<f64>,
    /// `all` (the default) or `top:K` (1 to 1000): history only for the K
    /// worst ranks (an active alert first, then the highest used share),
    /// the rest as compact lines in `others`.
    pub ranks: Option<String>,
    /// `lines` (the default) lists the ranks left out by `ranks=top:K` in
    /// `others`; `none` leaves them out.
    pub rest: Option<RestLines>,
    /// At most this many points per history (1 to 2000), each the maximum
    /// of its time bucket.
    pub points: Option<u32>,
    /// Only the ranks on this node.
    pub node: Option<String>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// What `ranks=top:K` says of the ranks it leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RestLines {
    /// A compact line each.
    #[default]
    Lines,
    /// Nothing.
    None,
}

/// A rank left out of the detail: where it runs and its memory now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankLine {
    /// Global rank.
    pub rank: u32,
    /// Node name.
    pub node: String,
    /// GPU index on that node.
    pub gpu: u32,
    /// Memory the rank's process holds now, bytes.
    pub used_bytes: u64,
    /// The GPU's capacity, bytes.
    pub total_bytes: u64,
    /// What is wrong with it, if anything.
    pub flags: Vec<RankFlag>,
}

/// A flag on a [`RankLine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RankFlag {
    /// An alert about the rank is active.
    Alert,
    /// Its process ended.
    Ended,
    /// Its node's agent has gone quiet.
    Lost,
    /// The engine flags it as leaking.
    Leak,
    /// The engine flags it as holding more than its peers.
    Imbalance,
    /// The engine flags it as a straggler.
    Straggler,
    /// The engine flags it as fragmenting.
    Fragmentation,
}

/// `GET /api/v1/jobs/{job}/summary`'s query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct JobSummaryQuery {
    /// Start of the matrix's time range: data time, seconds since the
    /// epoch; the job's oldest point when absent.
    pub since: Option<f64>,
    /// End of the matrix's time range; the job's newest point when absent.
    pub until: Option<f64>,
    /// Time columns of the matrix, 1 to 240 (120 when absent); fewer when
    /// no rank has that many windows in the range.
    pub columns: Option<u32>,
    /// How fresh the answer must be.
    pub consistency: Option<Consistency>,
}

/// `GET /api/v1/jobs/{job}/summary`: a job at a glance, whatever its size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobScaleSummary {
    /// Job id.
    pub job: String,
    /// `WORLD_SIZE`.
    pub world_size: u32,
    /// Ranks the view holds for the job.
    pub ranks_total: u32,
    /// Ranks with an active alert.
    pub ranks_alerting: u32,
    /// Per node, by name.
    pub nodes: Vec<NodeAggregate>,
    /// Used share per rank and time bucket.
    pub heatmap: RankTimeMatrix,
}

/// One node's ranks of the job, aggregated. Shares are each rank's memory
/// now over its GPU's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeAggregate {
    /// Node name.
    pub node: String,
    /// The job's ranks on it.
    pub ranks: u32,
    /// Lowest used share.
    pub min_share: f64,
    /// Median used share.
    pub median_share: f64,
    /// Highest used share.
    pub max_share: f64,
    /// The rank with the highest used share.
    pub worst_rank: u32,
    /// Its ranks with an active alert.
    pub alerts: u32,
}

/// Ranks x time buckets of used share (the highest window in the bucket),
/// rows in rank order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankTimeMatrix {
    /// The rank of each row.
    pub ranks: Vec<u32>,
    /// Ranks past the most rows (8,192) left out.
    pub rows_omitted: u32,
    /// Columns per row: as asked, or the most windows one rank has in the
    /// range when that is fewer.
    pub columns: u32,
    /// Bucket edges, ms: column `c` holds windows ending from `edges_ms[c]`
    /// to before `edges_ms[c + 1]` (the last includes its end);
    /// `columns + 1` values.
    pub edges_ms: Vec<u64>,
    /// Base64 of `rows x columns` bytes, row after row: `round(share * 250)`,
    /// 255 where the rank has no window in the bucket.
    pub cells: String,
}
