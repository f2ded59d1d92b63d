//! The release planner: which ranks should give cached memory back, now.
//!
//! A job qualifies when its OOM forecast (its earliest rank's, after the
//! engine's hysteresis) is at warning or above and the predicted OOM falls
//! within `horizon_s`. Within it, every live rank whose caching allocator
//! holds at least `min_reclaimable_bytes` it could return (reserved minus
//! allocated minus the free parts of split blocks, which `empty_cache`
//! cannot return) gets a `release_cache`, unless the book says it has one
//! outstanding or had one too recently. Releasing on every rank that holds
//! cache, not only the forecast one, is deliberate: ranks of a job run in
//! lockstep, and the next collective's buffers land on all of them.

use gpumon_proto::ActionKind;
use serde::Deserialize;

use super::book::{ActionBook, ActionOrigin, ActionRequest, IssueRules};
use crate::advice::reclaimable_bytes;
use crate::engine::{Engine, Risk};
use crate::units::fmt_bytes;

/// `[actions]` in the coordinator's configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// Plan releases at all [default: true]. `POST /api/v1/actions` works either way.
    pub enabled: bool,
    /// Act on jobs whose predicted OOM is at most this far ahead, seconds [default: 600].
    pub horizon_s: f64,
    /// Release only on ranks holding at least this much reclaimable cache, bytes [default: 512 MiB].
    pub min_reclaimable_bytes: u64,
    /// An action not finished this long after it was issued expires, seconds [default: 120].
    pub ttl_s: f64,
    /// The planner acts on a rank at most once per this many seconds [default: 600].
    pub min_interval_s: f64,
    /// How often the leader runs the planner, milliseconds [default: 1000].
    pub interval_ms: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        let rules = IssueRules::default();
        Self {
            enabled: true,
            horizon_s: 600.0,
            min_reclaimable_bytes: 512 << 20,
            ttl_s: rules.ttl_s,
            min_interval_s: rules.min_interval_s,
            interval_ms: 1000,
        }
    }
}

impl PlannerConfig {
    /// The timing rules issued actions carry.
    pub fn rules(&self) -> IssueRules {
        IssueRules {
            ttl_s: self.ttl_s,
            min_interval_s: self.min_interval_s,
        }
    }

    /// Checks the values; the error names the field.
    pub fn validate(&self) -> Result<(), PlannerConfigError> {
        let positive = [("horizon_s", self.horizon_s), ("ttl_s", self.ttl_s)];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(PlannerConfigError::NotPositive { name, value });
            }
        }
        if !(self.min_interval_s.is_finite() && self.min_interval_s >= 0.0) {
            return Err(PlannerConfigError::MinInterval {
                value: self.min_interval_s,
            });
        }
        if !(50..=600_000).contains(&self.interval_ms) {
            return Err(PlannerConfigError::Interval {
                value: self.interval_ms,
            });
        }
        Ok(())
    }
}

/// Why an `[actions]` table cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlannerConfigError {
    /// `horizon_s` or `ttl_s` is not a positive number.
    #[error("[actions] {name} must be a positive number of seconds, not {value}")]
    NotPositive {
        /// The key.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// `min_interval_s` is negative or not a number.
    #[error("[actions] min_interval_s must be zero or more seconds, not {value}")]
    MinInterval {
        /// Its value.
        value: f64,
    },
    /// `interval_ms` is outside 50..=600000.
    #[error("[actions] interval_ms {value} is outside 50..=600000")]
    Interval {
        /// Its value.
        value: u64,
    },
}

/// The releases to issue now; `t` is the data time the book will apply them at.
pub fn plan_releases(
    engine: &Engine,
    book: &ActionBook,
    t: f64,
    cfg: &PlannerConfig,
) -> Vec<ActionRequest> {
    let mut out = Vec::new();
    if !cfg.enabled {
        return out;
    }
    let rules = cfg.rules();
    for (job, summary) in engine.jobs() {
        if summary.ended_t.is_some() {
            continue;
        }
        let Some(f) = summary.forecast else {
            continue;
        };
        let ahead_s = f.forecast.predicted_oom_t - f.forecast.t;
        let within = ahead_s.is_finite() && ahead_s <= cfg.horizon_s;
        if f.risk_level < Risk::Warning || !within {
            continue;
        }
        for r in summary.ranks.iter().filter(|r| r.ended_t.is_none()) {
            let (Some(allocated), Some(reserved)) = (r.allocated_bytes, r.reserved_bytes) else {
                continue;
            };
            let reclaimable =
                reclaimable_bytes(reserved, allocated, r.inactive_split_bytes.unwrap_or(0));
            if reclaimable < cfg.min_reclaimable_bytes
                || !book.may_plan(ActionKind::ReleaseCache, &job, r.rank, t, &rules)
            {
                continue;
            }
            out.push(ActionRequest {
                kind: ActionKind::ReleaseCache,
                job: job.clone(),
                rank: r.rank,
                reason: format!(
                    "{job} is forecast to run out of memory in {:.0} s (rank {}, risk {:?}); rank {} holds {} of cache it can release",
                    ahead_s.max(0.0),
                    f.rank,
                    f.risk_level,
                    r.rank,
                    fmt_bytes(reclaimable)
                ),
                origin: ActionOrigin::Planner,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::{IssueOutcome, RankPlace};
    use crate::engine::EngineConfig;
    use crate::engine::{AllocObs, GpuObs, RankObs};

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    /// Four ranks on four 40 GiB GPUs for `secs` seconds; rank 2 leaks
    /// 20 MiB/s; ranks 0 and 2 hold 1 GiB of free cache, ranks 1 and 3 16 MiB.
    fn engine(secs: u64) -> Engine {
        let mut e = Engine::new(EngineConfig::default());
        for s in 0..secs {
            let t = s as f64;
            for rank in 0..4u32 {
                let leak = if rank == 2 { 20 * MIB * s } else { 0 };
                let allocated = 16 * GIB + leak;
                let cache = if rank % 2 == 0 { GIB } else { 16 * MIB };
                e.observe_rank(&RankObs {
                    t,
                    job: "job-p",
                    rank,
                    local_rank: rank,
                    world_size: 4,
                    node: "n0",
                    gpu: rank,
                    pid: 100 + rank,
                });
                let used = allocated + cache + GIB / 2;
                e.observe_gpu(&GpuObs {
                    t,
                    node: "n0",
                    gpu: rank,
                    uuid: "GPU",
                    name: "A100",
                    total: 40 * GIB,
                    used_low: used,
                    used_high: used,
                    used,
                    util: None,
                    sm_clock_mhz: None,
                    power_w: None,
                    procs: &[],
                });
                e.observe_alloc(&AllocObs {
                    t,
                    job: "job-p".into(),
                    rank,
                    allocated,
                    reserved: allocated + cache,
                    peak_allocated: None,
                    inactive_split: Some(0),
                    alloc_retries: Some(0),
                    ooms: Some(0),
                    device_total: None,
                    cap: None,
                    cap_source: None,
                });
            }
        }
        e
    }

    #[test]
    fn releases_on_the_ranks_holding_cache_of_a_job_near_oom() {
        let e = engine(400);
        let cfg = PlannerConfig {
            horizon_s: 3600.0,
            ..PlannerConfig::default()
        };
        let plan = plan_releases(&e, &ActionBook::default(), e.now(), &cfg);
        let ranks: Vec<u32> = plan.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, vec![0, 2], "{plan:?}");
        assert!(plan[0].reason.contains("job-p"), "{}", plan[0].reason);

        let mut book = ActionBook::default();
        for r in &plan {
            let out = book.issue(e.now(), r, &cfg.rules(), RankPlace::Live { node: "n0" });
            assert!(matches!(out, IssueOutcome::Issued { .. }));
        }
        assert!(
            plan_releases(&e, &book, e.now(), &cfg).is_empty(),
            "nothing twice while outstanding"
        );
    }

    #[test]
    fn leaves_jobs_alone_beyond_the_horizon_or_when_disabled() {
        let e = engine(400);
        let far = PlannerConfig {
            horizon_s: 10.0,
            ..PlannerConfig::default()
        };
        assert!(plan_releases(&e, &ActionBook::default(), e.now(), &far).is_empty());
        let off = PlannerConfig {
            enabled: false,
            horizon_s: 3600.0,
            ..PlannerConfig::default()
        };
        assert!(plan_releases(&e, &ActionBook::default(), e.now(), &off).is_empty());
        let picky = PlannerConfig {
            horizon_s: 3600.0,
            min_reclaimable_bytes: 2 * GIB,
            ..PlannerConfig::default()
        };
        assert!(plan_releases(&e, &ActionBook::default(), e.now(), &picky).is_empty());
    }

    #[test]
    fn validates_its_fields() {
        assert!(PlannerConfig::default().validate().is_ok());
        let bad = PlannerConfig {
            ttl_s: f64::NAN,
            ..PlannerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("ttl_s"));
    }
}
