//! The alerts a leader hands an agent in its reply to a push, for the
//! hooks of the agent's training processes: the active alerts about the
//! ranks live on the agent's node, about its GPUs and about its host, most
//! severe first (then the most recently changed), at most a given number.
//! A read of the replicated state: nothing records what was handed out, so
//! every reply repeats what is still active and the agent posts each
//! (id, severity) once.

use gpumon_proto::{NodeAlert, MAX_NODE_ALERT_KIND_BYTES, MAX_NODE_ALERT_MESSAGE_BYTES};

use super::Replicated;
use crate::actions::RankPlace;
use crate::engine::{Alert, Subject};
use crate::limits::prefix_within;

impl Replicated {
    /// At most `max` active alerts about `node`: its live ranks, its GPUs,
    /// its host. Reads the active alerts only.
    pub fn node_alerts(&self, node: &str, max: usize) -> Vec<NodeAlert> {
        let about_node = |subject: &Subject| match subject {
            Subject::Rank(job, rank) => {
                matches!(self.cluster.rank_place(job, *rank), RankPlace::Live { node: n } if n == node)
            }
            Subject::Gpu(n, _) | Subject::Host(n) => n == node,
        };
        let mut picked: Vec<&Alert> = self
            .engine
            .alert_book()
            .active_by_subject()
            .filter(|(subject, _)| about_node(subject))
            .map(|(_, alert)| alert)
            .collect();
        picked.sort_by(|a, b| {
            (b.severity.cmp(&a.severity))
                .then(b.updated_t.total_cmp(&a.updated_t))
                .then(a.id.cmp(&b.id))
        });
        picked.truncate(max);
        picked.into_iter().map(node_alert).collect()
    }
}

/// An alert as the reply carries it, its texts cut to their limits.
fn node_alert(a: &Alert) -> NodeAlert {
    let t_ms = (a.updated_t * 1000.0).max(0.0);
    NodeAlert {
        id: a.id,
        kind: prefix_within(a.kind.as_str(), MAX_NODE_ALERT_KIND_BYTES).to_owned(),
        severity: a.severity,
        message: prefix_within(&a.message, MAX_NODE_ALERT_MESSAGE_BYTES).to_owned(),
        job: a.job.clone(),
        rank: a.rank,
        // `as` saturates; a NaN time reads as 0.
        t_ms: t_ms as u64,
    }
}

#[cfg(test)]
mod tests {
    use gpumon_proto::api::Severity;
    use gpumon_proto::{
        BytesStat, GpuInfo, GpuWindow, HostMemory, ProcWindow, PushBatch, RankInfo,
    };

    use super::*;
    use crate::cluster::Limits;
    use crate::engine::EngineConfig;
    use crate::transition::{Command, CommandV1};

    const GIB: u64 = 1 << 30;
    const T0: u64 = 1_700_000_000_000;

    /// A window of GPU `gpu` on `node` at `pct` % used, with rank `rank` of
    /// job `job` on it.
    fn window(node: &str, gpu: u32, pct: u64, job: &str, rank: u32) -> GpuWindow {
        let used = pct * 80 * GIB / 100;
        GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{node}-{gpu}"),
                index: gpu,
                name: "H100".into(),
                total_bytes: 80 * GIB,
            },
            start_ms: T0,
            end_ms: T0 + 2_000,
            samples: 4,
            used_bytes: BytesStat::single(used),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: vec![ProcWindow {
                pid: 100 + rank,
                used_bytes: BytesStat::single(used),
                rank: Some(RankInfo {
                    job: job.into(),
                    rank,
                    local_rank: gpu,
                    world_size: 64,
                    master_addr: None,
                    master_port: None,
                }),
            }],
        }
    }

    fn push(node: &str, windows: Vec<GpuWindow>, host_pct: Option<u64>) -> Command {
        let batch = PushBatch {
            agent_id: node.into(),
            incarnation: 1,
            seq: 1,
            node: node.into(),
            dropped_batches: 0,
            windows,
            hook: vec![],
            acks: vec![],
        };
        let host = host_pct.map(|pct| HostMemory {
            t_ms: T0 + 2_000,
            total_bytes: 100 * GIB,
            used_max_bytes: pct * GIB,
        });
        Command::V1(CommandV1::PushPlaced(gpumon_proto::PushBatchV2 {
            batch,
            placements: vec![],
            host,
        }))
    }

    #[test]
    fn a_node_hears_of_its_ranks_and_its_host_most_severe_first() {
        let mut r = Replicated::new(Limits::default(), &EngineConfig::default());
        // node-a: rank 0 critical (96 %), rank 1 warning (85 %), rank 2
        // fine; host at the warning level. node-b: rank 3 critical, host
        // critical.
        let a = vec![
            window("node-a", 0, 96, "job", 0),
            window("node-a", 1, 85, "job", 1),
            window("node-a", 2, 10, "job", 2),
        ];
        r.apply(push("node-a", a, Some(80)), false);
        let b = vec![window("node-b", 0, 97, "job", 3)];
        r.apply(push("node-b", b, Some(95)), false);

        let heard = r.node_alerts("node-a", 64);
        let got: Vec<_> = heard
            .iter()
            .map(|a| (a.severity, a.job.as_deref(), a.rank))
            .collect();
        assert_eq!(got.len(), 3, "{heard:?}");
        assert_eq!(got[0], (Severity::Critical, Some("job"), Some(0)));
        assert!(got[1..].contains(&(Severity::Warning, Some("job"), Some(1))));
        assert!(
            got[1..].contains(&(Severity::Warning, None, None)),
            "the host's"
        );
        let host = heard.iter().find(|a| a.job.is_none()).unwrap();
        assert_eq!(host.kind, "memory_level");
        assert!(
            host.message.starts_with("host RAM on node-a"),
            "{}",
            host.message
        );
        assert_eq!(host.t_ms, T0 + 2_000);
        for a in &heard {
            let episode = r.engine.alerts().find(|e| e.id == a.id).unwrap();
            assert_eq!(
                (episode.severity, &episode.message),
                (a.severity, &a.message)
            );
        }

        let b: Vec<_> = r
            .node_alerts("node-b", 64)
            .into_iter()
            .map(|a| (a.severity, a.rank))
            .collect();
        assert_eq!(b.len(), 2);
        assert!(b.iter().all(|(s, _)| *s == Severity::Critical));
        assert!(r.node_alerts("node-c", 64).is_empty());
    }

    #[test]
    fn the_list_is_bounded_keeping_the_most_severe() {
        let mut r = Replicated::new(Limits::default(), &EngineConfig::default());
        let windows = (0..8)
            .map(|i| window("node-a", i, if i < 3 { 97 } else { 85 }, "job", i))
            .collect();
        r.apply(push("node-a", windows, None), false);
        assert_eq!(r.node_alerts("node-a", 64).len(), 8);
        let top = r.node_alerts("node-a", 3);
        assert_eq!(top.len(), 3);
        assert!(
            top.iter().all(|a| a.severity == Severity::Critical),
            "{top:?}"
        );
        assert!(r.node_alerts("node-a", 0).is_empty());
    }

    #[test]
    fn an_ended_rank_is_on_no_node() {
        let mut r = Replicated::new(Limits::default(), &EngineConfig::default());
        r.apply(
            push("node-a", vec![window("node-a", 0, 96, "job", 0)], None),
            false,
        );
        assert_eq!(r.node_alerts("node-a", 64).len(), 1);
        // The rank moves to node-b: node-a no longer hears of it.
        let mut moved = window("node-b", 0, 96, "job", 0);
        moved.start_ms += 4_000;
        moved.end_ms += 4_000;
        r.apply(push("node-b", vec![moved], None), false);
        assert!(r.node_alerts("node-a", 64).is_empty());
        assert_eq!(r.node_alerts("node-b", 64).len(), 1);
    }
}
