//! Reading each GPU's windows for export to long-term storage (the
//! coordinator's Prometheus remote-write): per GPU, its identity, the
//! figures of its newest window and its memory history, so an exporter can
//! take the windows it has not sent yet without copying the rest.

use std::ops::Bound;

use gpumon_proto::api::HistoryPoint;

use super::{Cluster, GpuEntry, History};

/// One GPU as the view holds it now.
#[derive(Debug, Clone, Copy)]
pub struct GpuSeries<'a> {
    /// GPU uuid, the view's key.
    pub uuid: &'a str,
    /// Its node.
    pub node: &'a str,
    /// Its index on the node.
    pub index: u32,
    /// Its capacity, bytes.
    pub total_bytes: u64,
    /// Mean utilization of its newest window, percent (finite).
    pub util_pct: Option<f32>,
    /// End of its newest window, ms; 0 before any.
    pub last_end_ms: u64,
    /// The job of the ranks on it in its newest window, when they all
    /// belong to one.
    pub job: Option<&'a str>,
    /// The rank on it in its newest window, when there is exactly one.
    pub rank: Option<u32>,
    history: &'a History,
}

impl<'a> GpuSeries<'a> {
    fn of(uuid: &'a str, g: &'a GpuEntry) -> Self {
        let mut jobs = g.live_ranks.iter().map(|(job, _)| job.as_str());
        let first = jobs.next();
        let job = first.filter(|j| jobs.all(|other| other == *j));
        let rank = match g.live_ranks.as_slice() {
            [(_, rank)] => Some(*rank),
            _ => None,
        };
        Self {
            uuid,
            node: &g.node,
            index: g.info.index,
            total_bytes: g.info.total_bytes,
            util_pct: g.util_pct,
            last_end_ms: g.last_end_ms,
            job,
            rank,
            history: &g.history,
        }
    }

    /// The memory windows kept that end after `t_ms`, oldest first
    /// (window ends never decrease along a GPU's history).
    pub fn windows_after(&self, t_ms: u64) -> impl Iterator<Item = HistoryPoint> + 'a {
        let newer = self
            .history
            .iter()
            .rev()
            .take_while(|p| p.t_ms > t_ms)
            .count();
        self.history.iter().skip(self.history.len() - newer)
    }
}

impl Cluster {
    /// Every GPU tracked, by uuid.
    pub fn gpu_series(&self) -> impl Iterator<Item = GpuSeries<'_>> {
        self.gpu_series_after(None)
    }

    /// The GPUs tracked whose uuid sorts after `after` (all with `None`),
    /// by uuid: a reader can go through them a part at a time.
    pub fn gpu_series_after(&self, after: Option<&str>) -> impl Iterator<Item = GpuSeries<'_>> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.gpus
            .range::<str, _>((from, Bound::Unbounded))
            .map(|(uuid, g)| GpuSeries::of(uuid, g))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{batch, rank, window};
    use super::super::{Cluster, Limits};

    #[test]
    fn windows_after_a_time_are_the_newer_ones_oldest_first() {
        let mut state = Cluster::new(Limits::default());
        let ends = [10_000, 11_000, 12_000, 13_000];
        for (seq, end) in (1..).zip(ends) {
            state.apply_push(&batch(seq, 1, vec![window(0, end, Vec::new())]));
        }
        let g = state.gpu_series().next().unwrap();
        let after = |t| g.windows_after(t).map(|p| p.t_ms).collect::<Vec<_>>();
        assert_eq!(after(0), ends);
        assert_eq!(after(11_000), [12_000, 13_000]);
        assert_eq!(after(11_500), [12_000, 13_000]);
        assert!(after(13_000).is_empty());
        assert_eq!(g.last_end_ms, 13_000);
    }

    #[test]
    fn gpus_can_be_read_a_part_at_a_time() {
        let mut state = Cluster::new(Limits::default());
        let windows = (0..4).map(|i| window(i, 5_000, Vec::new())).collect();
        state.apply_push(&batch(1, 1, windows));
        let uuids = |after| {
            state
                .gpu_series_after(after)
                .map(|g| g.uuid.to_owned())
                .collect::<Vec<_>>()
        };
        let all = uuids(None);
        assert_eq!(all.len(), 4);
        assert_eq!(uuids(Some(all[1].as_str())), all[2..]);
        assert!(uuids(Some(all[3].as_str())).is_empty());
    }

    #[test]
    fn job_and_rank_are_named_only_when_unambiguous() {
        let mut state = Cluster::new(Limits::default());
        let on = |job: &str, r: u32| (100 + r, 1 << 20, Some(rank(job, r)));
        state.apply_push(&batch(
            1,
            1,
            vec![
                window(0, 5_000, vec![on("j", 0)]),
                window(1, 5_000, vec![on("m", 0), on("m", 1)]),
                window(2, 5_000, vec![on("j", 1), on("k", 0)]),
                window(3, 5_000, Vec::new()),
            ],
        ));
        let got: Vec<_> = state
            .gpu_series()
            .map(|g| (g.index, g.job, g.rank))
            .collect();
        assert_eq!(
            got,
            [
                (0, Some("j"), Some(0)),
                (1, Some("m"), None),
                (2, None, None),
                (3, None, None),
            ]
        );
    }
}
