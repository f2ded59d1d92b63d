//! Reading parts of a big job from the view: compact lines of every rank,
//! the detail of chosen ranks within a time range, and a row of bucket
//! maxima per rank for the heatmap. Each copies only what its answer needs,
//! so the API's read lock is held briefly; the rest of the work is in
//! [`crate::job_scale`], outside the lock.

use std::collections::BTreeSet;

use gpumon_proto::api::{JobDetail, RankDetail, RankFlag, RankLine};

use super::Cluster;
use crate::job_scale::{bucket_row, TimeRange};

impl Cluster {
    /// One compact line per rank of the job, in rank order (flags: ended,
    /// lost); `None` for a job never seen.
    pub fn job_lines(&self, job: &str) -> Option<Vec<RankLine>> {
        let up = self.nodes_up();
        let lines: Vec<RankLine> = self
            .job_ranks(job)
            .map(|(_, r)| {
                let mut flags = Vec::new();
                if r.ended_ms.is_some() {
                    flags.push(RankFlag::Ended);
                } else if !up.contains(r.node.as_str()) {
                    flags.push(RankFlag::Lost);
                }
                RankLine {
                    rank: r.info.rank,
                    node: r.node.clone(),
                    gpu: r.gpu_index,
                    used_bytes: r.used_bytes,
                    total_bytes: r.total_bytes,
                    flags,
                }
            })
            .collect();
        (!lines.is_empty()).then_some(lines)
    }

    /// [`Self::job_detail`] for the ranks in `chosen` only, each history
    /// kept to the points within `range`.
    pub fn job_detail_of(
        &self,
        job: &str,
        chosen: &BTreeSet<u32>,
        range: TimeRange,
    ) -> Option<JobDetail> {
        let up = self.nodes_up();
        let mut seen = false;
        let mut world_size = 0;
        let mut live = false;
        let mut ranks = Vec::new();
        for (_, r) in self.job_ranks(job) {
            seen = true;
            world_size = world_size.max(r.info.world_size);
            live |= r.ended_ms.is_none();
            if chosen.contains(&r.info.rank) {
                ranks.push(RankDetail {
                    view: super::read::rank_view(r, &up),
                    history: r
                        .history
                        .iter()
                        .filter(|p| range.contains(p.t_ms))
                        .collect(),
                });
            }
        }
        seen.then(|| JobDetail {
            job: job.to_owned(),
            world_size,
            live,
            ranks,
        })
    }

    /// The oldest and newest window end among the job's rank histories
    /// within `range`, and the most points one rank has there.
    pub fn job_time_span(&self, job: &str, range: TimeRange) -> Option<(u64, u64, usize)> {
        let mut span: Option<(u64, u64, usize)> = None;
        for (_, r) in self.job_ranks(job) {
            let mut inside = r.history.iter().filter(|p| range.contains(p.t_ms));
            let Some(first) = inside.next() else {
                continue;
            };
            let (mut last, mut count) = (first.t_ms, 1);
            for p in inside {
                last = p.t_ms;
                count += 1;
            }
            span = Some(match span {
                None => (first.t_ms, last, count),
                Some((a, b, n)) => (a.min(first.t_ms), b.max(last), n.max(count)),
            });
        }
        span
    }

    /// For the first `max_rows` ranks of the job in rank order: the rank and
    /// its row of bucket maxima over `edges_ms` (see [`bucket_row`]).
    pub fn job_matrix_rows(
        &self,
        job: &str,
        edges_ms: &[u64],
        max_rows: usize,
    ) -> Vec<(u32, Vec<u8>)> {
        self.job_ranks(job)
            .take(max_rows)
            .map(|(_, r)| {
                (
                    r.info.rank,
                    bucket_row(r.history.iter(), r.total_bytes, edges_ms),
                )
            })
            .collect()
    }
}
