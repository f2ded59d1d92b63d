//! Memory levels: a GPU whose used memory reaches a fixed share of its
//! capacity raises a `memory_level` alert (warning, then critical), whatever
//! the trend. A node's host RAM has levels of its own, with the same
//! parameters and rules ([`super::host_level`]). The forecast says where memory is going; a level says where it
//! is, which is what a person who set "tell me at 95 %" wants to hear.
//!
//! The level is read from each window's highest sample, so a spike that
//! fills the GPU between two samples of the window still counts. It clears
//! when the highest sample falls `clear_margin_pct` below the warning level,
//! so a GPU that sits on the level does not flap. The alert's subjects are
//! the GPU's ranks, or the GPU itself when it has none, like the OOM
//! forecast's. The level in force is the active episode's severity: the
//! detector keeps no state of its own.

use serde::{Deserialize, Serialize};

use super::alerts::{AlertKind, Severity, Subject};
use super::limits::{Binding, Ceiling};
use super::Engine;
use crate::not_state::NotState;
use crate::units::Bytes;

/// The levels, in percent of a GPU's capacity (or of a host's RAM).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryLevelParams {
    /// Used memory at or above this share raises a warning.
    pub warning_pct: f64,
    /// Used memory at or above this share raises a critical alert.
    pub critical_pct: f64,
    /// The alert clears this many points below `warning_pct`.
    pub clear_margin_pct: f64,
}

impl Default for MemoryLevelParams {
    fn default() -> Self {
        Self {
            warning_pct: 80.0,
            critical_pct: 95.0,
            clear_margin_pct: 2.0,
        }
    }
}

/// Why memory levels cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LevelsError {
    /// Not `0 < warning <= critical <= 100`.
    #[error("memory levels must satisfy 0 < warning_pct ({warning}) <= critical_pct ({critical}) <= 100")]
    Order {
        /// `warning_pct`.
        warning: f64,
        /// `critical_pct`.
        critical: f64,
    },
    /// The margin is not in `[0, warning)`.
    #[error("clear_margin_pct ({margin}) must be at least 0 and below warning_pct ({warning})")]
    Margin {
        /// `clear_margin_pct`.
        margin: f64,
        /// `warning_pct`.
        warning: f64,
    },
}

impl MemoryLevelParams {
    /// The default levels of host RAM: warning at 75 %, critical at 90 %,
    /// lower than a GPU's, as the kernel's OOM killer and swapping start
    /// before RAM is full.
    pub fn host_default() -> Self {
        Self {
            warning_pct: 75.0,
            critical_pct: 90.0,
            clear_margin_pct: 2.0,
        }
    }

    /// Why these levels cannot be used, if they cannot:
    /// `0 < warning <= critical <= 100` and a margin in `[0, warning)`.
    pub fn check(&self) -> Result<(), LevelsError> {
        let (warning, critical, margin) =
            (self.warning_pct, self.critical_pct, self.clear_margin_pct);
        if !(warning > 0.0 && warning <= critical && critical <= 100.0) {
            return Err(LevelsError::Order { warning, critical });
        }
        if !(0.0..warning).contains(&margin) {
            return Err(LevelsError::Margin { margin, warning });
        }
        Ok(())
    }

    /// The level `pct` of the capacity is at, if any.
    pub fn level(&self, pct: f64) -> Option<Severity> {
        if pct >= self.critical_pct {
            Some(Severity::Critical)
        } else if pct >= self.warning_pct {
            Some(Severity::Warning)
        } else {
            None
        }
    }

    /// Whether an active alert clears at `pct`: below the warning level
    /// by the margin.
    pub fn clears(&self, pct: f64) -> bool {
        pct < self.warning_pct - self.clear_margin_pct
    }

    /// The name and percentage of the level a `severity` stands for.
    pub fn named(&self, severity: Severity) -> (&'static str, f64) {
        match severity {
            Severity::Critical => ("critical", self.critical_pct),
            _ => ("warning", self.warning_pct),
        }
    }
}

impl Engine {
    /// Raises, updates or clears the memory-level alerts of one GPU after a
    /// window, read as the share of `ceiling`, the limit its memory meets
    /// first (the GPU's capacity unless a rank's cap or slice is nearer).
    pub(super) fn memory_level(&mut self, node: &str, gpu: u32, t: f64, ceiling: &Ceiling) {
        let Some(track) = self.nodes.get(node).and_then(|n| n.get(&gpu)) else {
            return;
        };
        let params = &self.cfg.memory_levels;
        let pct = ceiling.pct();
        let level = params.level(pct);
        // Below every level there is only closing to do.
        if level.is_none() && !self.alerts.any_active(AlertKind::MemoryLevel) {
            return;
        }
        let clears = params.clears(pct);
        let subjects = track.oom_subjects(node, gpu);
        let figures = level.map(|severity| LevelFigures {
            against: ceiling.against,
            limit: ceiling.limit,
            binding: ceiling.binding.clone(),
            severity,
            level_pct: params.named(severity).1,
        });
        // The messages already read what writing them would give.
        let written = figures
            .as_ref()
            .is_some_and(|f| track.level_messages.wrote(f, &subjects));
        let remember = figures.filter(|_| !written).map(|f| (f, subjects.clone()));
        // Raised on the GPU before its ranks were known: theirs now.
        if !track.ranks.is_empty() && self.alerts.any_active_about_a_gpu(AlertKind::MemoryLevel) {
            let gpu_subject = Subject::Gpu(node.to_owned(), gpu);
            self.alerts.resolve(AlertKind::MemoryLevel, &gpu_subject, t);
        }
        for subject in subjects {
            let key = (AlertKind::MemoryLevel, subject);
            match level {
                Some(severity) => {
                    let (name, at) = params.named(severity);
                    // Held at the same level: the same alert with today's
                    // figures, rewritten where it stands (what raising it
                    // again would leave, without building it anew).
                    if let Some(open) = self.alerts.active_mut(&key).filter(|a| {
                        a.severity == severity
                            && a.node.as_deref() == Some(node)
                            && a.gpu == Some(gpu)
                    }) {
                        open.updated_t = t;
                        if !written {
                            open.message.clear();
                            write_level_message(
                                &mut open.message,
                                (node, gpu),
                                ceiling,
                                (name, at),
                            );
                        }
                        continue;
                    }
                    let subject = key.1;
                    let mut alert = subject.alert(AlertKind::MemoryLevel, t, severity);
                    alert.node = Some(node.to_owned());
                    alert.gpu = Some(gpu);
                    write_level_message(&mut alert.message, (node, gpu), ceiling, (name, at));
                    alert.recommendation = Some(match ceiling.advice() {
                        Some(first) => format!("{first}; {}", level_advice(severity)),
                        None => level_advice(severity).to_owned(),
                    });
                    self.alerts.raise(subject, alert);
                }
                None if clears => {
                    self.alerts.resolve_key(&key, t);
                }
                None => {}
            }
        }
        if let Some(wrote) = remember {
            if let Some(track) = self.nodes.get_mut(node).and_then(|n| n.get_mut(&gpu)) {
                track.level_messages = NotState(LevelMessages(Some(wrote)));
            }
        }
    }
}

/// What a GPU's level messages say: the figures they were written with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LevelFigures {
    against: u64,
    limit: u64,
    binding: Binding,
    severity: Severity,
    level_pct: f64,
}

/// The figures the level alerts of a GPU's subjects were last written
/// with, and those subjects. NVML's used memory seldom moves while the
/// caching allocator keeps its segments, and a GPU held at a level with
/// the same figures and subjects has messages that already read what
/// writing them again would give. Not state (held as a [`NotState`]: a
/// restored replica writes the same text once more).
#[derive(Debug, Clone, Default)]
pub(crate) struct LevelMessages(Option<(LevelFigures, Vec<Subject>)>);

impl LevelMessages {
    /// Whether the latest messages were written with `figures`, for these
    /// `subjects`.
    fn wrote(&self, figures: &LevelFigures, subjects: &[Subject]) -> bool {
        self.0
            .as_ref()
            .is_some_and(|(f, s)| f == figures && s == subjects)
    }
}

/// The message of a GPU's level alert, written into `out`.
fn write_level_message(
    out: &mut String,
    (node, gpu): (&str, u32),
    ceiling: &Ceiling,
    (name, at): (&str, f64),
) {
    use std::fmt::Write;
    let pct = ceiling.pct();
    let _ = match ceiling.binding {
        Binding::Gpu { others: 0, .. } => write!(
            out,
            "GPU {gpu} on {node} uses {pct:.1} % of its {} ({}), at or above the {name} level of {at} %",
            Bytes(ceiling.limit),
            Bytes(ceiling.against),
        ),
        _ => write!(
            out,
            "GPU {gpu} on {node} is at {pct:.1} % of {} ({}), at or above the {name} level of {at} %",
            ceiling.describe(),
            Bytes(ceiling.against),
        ),
    };
}

/// What to do about a GPU at a level.
fn level_advice(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "one more allocation may not fit: lower the batch size, enable activation (gradient) checkpointing, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True if reserved memory is much above allocated",
        _ => "memory is tight: check the forecast and the allocator's reserved vs allocated before the next larger batch or sequence length",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_checked_and_read_from_the_share_of_capacity() {
        let p = MemoryLevelParams::default();
        assert!(p.check().is_ok());
        assert_eq!(p.level(79.9), None);
        assert_eq!(p.level(80.0), Some(Severity::Warning));
        assert_eq!(p.level(95.0), Some(Severity::Critical));
        for bad in [
            (0.0, 95.0, 2.0),
            (90.0, 80.0, 2.0),
            (80.0, 101.0, 2.0),
            (80.0, 95.0, 80.0),
            (80.0, 95.0, -1.0),
            (f64::NAN, 95.0, 2.0),
        ] {
            let p = MemoryLevelParams {
                warning_pct: bad.0,
                critical_pct: bad.1,
                clear_margin_pct: bad.2,
            };
            assert!(p.check().is_err(), "{bad:?} accepted");
        }
    }

    mod engine {
        use super::super::super::{Alert, Engine, EngineConfig, GpuObs, RankObs};
        use super::super::*;

        const TOTAL: u64 = 80 << 30;

        fn observe(e: &mut Engine, t: f64, pct: f64) {
            let used = (pct / 100.0 * TOTAL as f64) as u64;
            e.observe_gpu(&GpuObs {
                t,
                node: "node-0",
                gpu: 3,
                uuid: "GPU-3",
                name: "H100",
                total: TOTAL,
                used_low: used / 2,
                used_high: used,
                used: used / 2,
                util: None,
                sm_clock_mhz: None,
                power_w: None,
                procs: &[],
            });
        }

        fn level_alerts(e: &Engine) -> Vec<(Option<u32>, Severity, Option<f64>)> {
            e.alerts()
                .filter(|a| a.kind == AlertKind::MemoryLevel)
                .map(|a| (a.rank, a.severity, a.resolved_t))
                .collect()
        }

        /// A default engine with rank 5 of `job` placed on GPU 3 of node-0.
        fn with_rank_5_on_gpu_3() -> Engine {
            let mut e = Engine::new(EngineConfig::default());
            e.observe_rank(&RankObs {
                t: 0.0,
                job: "job",
                rank: 5,
                local_rank: 3,
                world_size: 8,
                node: "node-0",
                gpu: 3,
                pid: 77,
            });
            e
        }

        #[test]
        fn a_rank_at_a_level_is_warned_then_critical_and_clears_below_the_margin() {
            let mut e = with_rank_5_on_gpu_3();
            observe(&mut e, 1.0, 50.0);
            assert!(level_alerts(&e).is_empty());
            // The window's highest sample counts, not its newest.
            observe(&mut e, 2.0, 85.0);
            assert_eq!(level_alerts(&e), vec![(Some(5), Severity::Warning, None)]);
            observe(&mut e, 3.0, 96.0);
            assert_eq!(
                level_alerts(&e),
                vec![(Some(5), Severity::Critical, None)],
                "one episode, raised to critical"
            );
            let a = e
                .alerts()
                .find(|a| a.kind == AlertKind::MemoryLevel)
                .unwrap();
            assert_eq!(
                (a.t, a.node.as_deref(), a.gpu),
                (2.0, Some("node-0"), Some(3))
            );
            assert!(
                a.message.contains("96.0 %") && a.message.contains("critical"),
                "{}",
                a.message
            );
            observe(&mut e, 4.0, 79.0);
            assert_eq!(
                level_alerts(&e),
                vec![(Some(5), Severity::Critical, None)],
                "inside the margin: no flapping"
            );
            observe(&mut e, 5.0, 77.0);
            assert_eq!(
                level_alerts(&e),
                vec![(Some(5), Severity::Critical, Some(5.0))]
            );
        }

        #[test]
        fn an_alert_held_at_its_level_reads_as_one_raised_anew_with_the_latest_figures() {
            let level_alert = |e: &Engine| {
                e.alerts()
                    .find(|a| a.kind == AlertKind::MemoryLevel)
                    .cloned()
                    .unwrap()
            };
            let mut held = with_rank_5_on_gpu_3();
            observe(&mut held, 2.0, 96.0);
            observe(&mut held, 3.0, 97.5);
            let mut fresh = with_rank_5_on_gpu_3();
            observe(&mut fresh, 3.0, 97.5);
            let (held, fresh) = (level_alert(&held), level_alert(&fresh));
            assert_eq!(held.t, 2.0, "the episode began at the first sample");
            assert!(held.message.contains("97.5 %"), "{}", held.message);
            assert_eq!(Alert { t: 3.0, ..held }, fresh);
        }

        /// Messages left as they stand while the figures repeat read as those
        /// written anew: an engine restored from a snapshot (which keeps no
        /// record of what the messages were written with) and one that ran on
        /// show the same alerts, whatever the figures and ranks do.
        #[test]
        fn repeated_figures_leave_the_messages_a_restored_engine_would_write() {
            let mut seed = 3u64;
            let mut next = move |n: u64| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) % n
            };
            let mut ran = with_rank_5_on_gpu_3();
            let mut restored = with_rank_5_on_gpu_3();
            for i in 1..400 {
                let t = i as f64;
                // A rank comes and goes now and then.
                if next(25) == 0 {
                    let rank = RankObs {
                        t,
                        job: "job",
                        rank: 6,
                        local_rank: 4,
                        world_size: 8,
                        node: "node-0",
                        gpu: 3,
                        pid: 78 + i,
                    };
                    ran.observe_rank(&rank);
                    restored.observe_rank(&rank);
                }
                let pct = [50.0, 78.0, 81.0, 81.0, 90.0, 96.0, 96.0, 97.0][next(8) as usize];
                for _ in 0..1 + next(3) {
                    observe(&mut ran, t, pct);
                    observe(&mut restored, t, pct);
                }
                if next(10) == 0 {
                    let bytes = postcard::to_allocvec(&restored).unwrap();
                    restored = postcard::from_bytes(&bytes).unwrap();
                }
                let alerts = |e: &Engine| e.alerts().cloned().collect::<Vec<_>>();
                assert_eq!(alerts(&ran), alerts(&restored), "t={t}");
            }
            assert!(ran.alerts().any(|a| a.kind == AlertKind::MemoryLevel));
        }

        #[test]
        fn a_gpu_without_ranks_is_the_subject_and_levels_follow_the_configuration() {
            let mut cfg = EngineConfig::default();
            cfg.memory_levels.warning_pct = 50.0;
            cfg.memory_levels.critical_pct = 60.0;
            let mut e = Engine::new(cfg);
            observe(&mut e, 1.0, 55.0);
            let a = e
                .alerts()
                .next()
                .expect("an alert at 55 % with a 50 % level");
            assert_eq!(
                (a.kind, a.job.as_deref(), a.gpu),
                (AlertKind::MemoryLevel, None, Some(3))
            );
            assert_eq!(a.severity, Severity::Warning);
        }
    }
}
