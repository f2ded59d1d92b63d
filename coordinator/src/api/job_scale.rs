//! The parts of a big job the dashboard asks for instead of its whole
//! detail: `GET /api/v1/jobs/{job}` with parameters (the worst ranks,
//! a time range, fewer points, one node) and `GET /api/v1/jobs/{job}/summary`
//! (per-node aggregates and the rank x time matrix). The read lock is held
//! only to copy what the answer needs (compact lines, the chosen ranks'
//! histories, a row of bucket maxima per rank); choosing, thinning and
//! aggregating happen after it is released.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use gpumon_core::hook_records::RankSteps;
use gpumon_core::job_scale::{base64, downsample_max, matrix_edges, node_aggregates, worst_ranks};
use gpumon_proto::api::job_scale::MAX_MATRIX_ROWS;
use gpumon_proto::api::{
    ApiErrorBody, JobScaleSummary, JobSummary, JobSummaryQuery, JobWithAnalysis, RankFlag,
    RankLine, RankTimeMatrix, RestLines,
};

use super::error_answers::ReadErrors;
use super::job_params::{summary_params, JobParams};
use super::params::check_job_name;
use super::{ApiContext, ApiError};
use crate::raft::state_machine::Applied;

fn no_job(job: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no job {job:?}; GET /api/v1/jobs lists the known jobs"
    ))
}

/// Every rank of the job as a line, with [`RankFlag::Alert`] on those an
/// active alert is about.
fn lines_with_alerts(applied: &Applied, job: &str) -> Option<Vec<RankLine>> {
    let mut lines = applied.cluster.job_lines(job)?;
    let alerting: BTreeSet<u32> = applied
        .engine
        .alerts()
        .filter(|a| a.is_active() && a.job.as_deref() == Some(job))
        .filter_map(|a| a.rank)
        .collect();
    for l in &mut lines {
        if alerting.contains(&l.rank) {
            l.flags.insert(0, RankFlag::Alert);
        }
    }
    Some(lines)
}

/// `GET /api/v1/jobs/{job}` with parameters.
pub fn job_part(state: &ApiContext, job: &str, p: JobParams) -> Result<JobWithAnalysis, ApiError> {
    let (mut lines, chosen, everything, mut answer) = {
        let applied = state.inner.state_machine.read();
        let mut lines = lines_with_alerts(&applied, job).ok_or_else(|| no_job(job))?;
        if let Some(node) = &p.node {
            lines.retain(|l| &l.node == node);
        }
        let chosen: BTreeSet<u32> = match p.top {
            Some(k) => worst_ranks(&lines, k),
            None => lines.iter().map(|l| l.rank).collect(),
        };
        // Nothing left out: the engine's and the hook's ranks stay whole
        // (they may know ranks the view does not).
        let everything = p.node.is_none() && chosen.len() == lines.len();
        let detail = applied
            .cluster
            .job_detail_of(job, &chosen, p.range)
            .ok_or_else(|| no_job(job))?;
        let steps: BTreeMap<u32, RankSteps> = applied
            .steps
            .job(job)
            .map(|s| {
                s.iter()
                    .filter(|(r, _)| everything || chosen.contains(r))
                    .map(|(r, s)| (*r, s.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let (step_verdict, step_verdicts) = gpumon_core::step_verdict::of_ranks(&steps);
        let answer = JobWithAnalysis {
            detail,
            analysis: applied.engine.job(job),
            steps: steps.iter().map(|(r, s)| (*r, s.into())).collect(),
            step_verdict,
            step_verdicts,
            ranks_total: None,
            others: None,
        };
        (lines, chosen, everything, answer)
    };
    let total = lines.len() as u32;
    if let Some(analysis) = &mut answer.analysis {
        add_engine_flags(&mut lines, analysis);
        analysis
            .ranks
            .retain(|r| everything || chosen.contains(&r.rank));
    }
    if let Some(n) = p.points {
        for r in &mut answer.detail.ranks {
            r.history = downsample_max(&r.history, n);
        }
    }
    answer.ranks_total = Some(total);
    if p.top.is_some() && p.rest == RestLines::Lines {
        lines.retain(|l| !chosen.contains(&l.rank));
        answer.others = Some(lines);
    }
    Ok(answer)
}

/// The engine's flags on each line (after the view's own).
fn add_engine_flags(lines: &mut [RankLine], analysis: &JobSummary) {
    let by_rank: BTreeMap<u32, _> = analysis.ranks.iter().map(|r| (r.rank, r)).collect();
    for l in lines {
        let Some(s) = by_rank.get(&l.rank) else {
            continue;
        };
        for (on, flag) in [
            (s.leak, RankFlag::Leak),
            (s.imbalance, RankFlag::Imbalance),
            (s.straggler, RankFlag::Straggler),
            (s.fragmentation, RankFlag::Fragmentation),
        ] {
            if on {
                l.flags.push(flag);
            }
        }
    }
}

/// Per-node aggregates of the job's ranks and the rank x time matrix of
/// used share, bounded whatever the job's size.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{job}/summary",
    params(("job" = String, Path, description = "The job's name."), JobSummaryQuery),
    responses(
        (status = 200, description = "OK", body = JobScaleSummary),
        (status = 404, description = "No such job.", body = ApiErrorBody),
        ReadErrors,
    ),
)]
pub async fn summary(
    State(state): State<ApiContext>,
    Path(job): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<JobScaleSummary>, ApiError> {
    let p = summary_params(query.as_deref())?;
    check_job_name(&job)?;
    let (lines, world_size, edges_ms, rows) = {
        let applied = state.inner.state_machine.read();
        let lines = lines_with_alerts(&applied, &job).ok_or_else(|| no_job(&job))?;
        let world_size = applied
            .cluster
            .job_detail_of(&job, &BTreeSet::new(), p.range)
            .map_or(0, |d| d.world_size);
        let span = applied.cluster.job_time_span(&job, p.range);
        let (first, last, most) = span.unwrap_or((0, 0, usize::MAX));
        let start = p.range.since_ms.unwrap_or(first);
        let end = p.range.until_ms.unwrap_or(last).max(start);
        // No more columns than windows: more would leave every other one empty.
        let columns = p
            .columns
            .min(u32::try_from(most).unwrap_or(u32::MAX))
            .max(1);
        let edges_ms = matrix_edges(start, end, columns);
        let rows = applied
            .cluster
            .job_matrix_rows(&job, &edges_ms, MAX_MATRIX_ROWS);
        (lines, world_size, edges_ms, rows)
    };
    let columns = edges_ms.len() as u32 - 1;
    let mut cells = Vec::with_capacity(rows.len() * columns as usize);
    for (_, row) in &rows {
        cells.extend_from_slice(row);
    }
    Ok(Json(JobScaleSummary {
        job,
        world_size,
        ranks_total: lines.len() as u32,
        ranks_alerting: lines
            .iter()
            .filter(|l| l.flags.contains(&RankFlag::Alert))
            .count() as u32,
        nodes: node_aggregates(&lines),
        heatmap: RankTimeMatrix {
            ranks: rows.iter().map(|(r, _)| *r).collect(),
            rows_omitted: lines.len().saturating_sub(rows.len()) as u32,
            columns,
            edges_ms,
            cells: base64(&cells),
        },
    }))
}
