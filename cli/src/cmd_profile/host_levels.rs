//! Memory levels of host RAM: `memory_level` alerts about the host, raised,
//! raised in severity and cleared like the engine's GPU levels (see
//! `gpumon_common::engine::memory_level`), from the profile's own host
//! samples. A cluster's engine sees no host RAM, so these live here.

use gpumon_common::engine::memory_level::MemoryLevelParams;
use gpumon_common::engine::{Alert, AlertKind, Severity, Subject};
use gpumon_common::units::fmt_bytes;

/// Host alert ids start here, apart from the engine's.
const FIRST_ID: u64 = 1 << 40;

/// See the module docs.
#[derive(Debug)]
pub struct HostLevels {
    params: MemoryLevelParams,
    node: String,
    alerts: Vec<Alert>,
    /// Index of the active episode in `alerts`.
    active: Option<usize>,
}

impl HostLevels {
    /// Levels `params` for host `node`.
    pub fn new(params: MemoryLevelParams, node: &str) -> Self {
        Self {
            params,
            node: node.to_owned(),
            alerts: Vec::new(),
            active: None,
        }
    }

    /// One host sample at `t`; returns the episode when it opened or its
    /// severity changed (to be passed on).
    pub fn observe(&mut self, t: f64, used: u64, total: u64) -> Option<&Alert> {
        if total == 0 {
            return None;
        }
        let pct = 100.0 * used as f64 / total as f64;
        let p = &self.params;
        match (p.level(pct), self.active) {
            (Some(severity), active) => {
                let changed = active.is_none_or(|i| self.alerts[i].severity != severity);
                let i = match active {
                    Some(i) => i,
                    None => {
                        let id = FIRST_ID + self.alerts.len() as u64;
                        let mut a = Subject::Gpu(self.node.clone(), 0).alert(
                            AlertKind::MemoryLevel,
                            t,
                            severity,
                        );
                        a.id = id;
                        a.gpu = None;
                        self.alerts.push(a);
                        self.alerts.len() - 1
                    }
                };
                self.active = Some(i);
                let (name, at) = match severity {
                    Severity::Critical => ("critical", p.critical_pct),
                    _ => ("warning", p.warning_pct),
                };
                let a = &mut self.alerts[i];
                a.severity = severity;
                a.updated_t = t;
                a.message = format!(
                    "host RAM on {} is {pct:.1} % used ({} of {}), at or above the {name} level of {at} %",
                    self.node,
                    fmt_bytes(used),
                    fmt_bytes(total)
                );
                a.recommendation = Some(
                    "fewer DataLoader workers or a smaller prefetch_factor, memory-mapped datasets, or loading the checkpoint straight to the GPU (map_location)".to_owned(),
                );
                changed.then_some(&self.alerts[i])
            }
            (None, Some(i)) if pct < p.warning_pct - p.clear_margin_pct => {
                let a = &mut self.alerts[i];
                a.resolved_t = Some(t);
                a.updated_t = t;
                self.active = None;
                None
            }
            _ => None,
        }
    }

    /// Whether host RAM is at its critical level now.
    pub fn critical(&self) -> bool {
        self.active
            .is_some_and(|i| self.alerts[i].severity == Severity::Critical)
    }

    /// Every episode, oldest first.
    pub fn alerts(&self) -> &[Alert] {
        &self.alerts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> HostLevels {
        let params = MemoryLevelParams {
            warning_pct: 75.0,
            critical_pct: 90.0,
            clear_margin_pct: 2.0,
        };
        HostLevels::new(params, "host-a")
    }

    #[test]
    fn host_ram_raises_a_warning_then_critical_then_clears_below_the_margin() {
        let mut h = levels();
        assert!(h.observe(1.0, 50, 100).is_none());
        let a = h.observe(2.0, 80, 100).expect("warning opens");
        assert_eq!(
            (a.kind, a.severity, a.node.as_deref()),
            (AlertKind::MemoryLevel, Severity::Warning, Some("host-a"))
        );
        assert!(a.job.is_none() && a.gpu.is_none());
        assert!(
            h.observe(3.0, 81, 100).is_none(),
            "no change, nothing to pass on"
        );
        assert_eq!(
            h.observe(4.0, 95, 100).unwrap().severity,
            Severity::Critical
        );
        assert!(h.critical());
        assert!(h.observe(5.0, 74, 100).is_none());
        assert!(h.alerts()[0].resolved_t.is_none(), "inside the margin");
        h.observe(6.0, 72, 100);
        assert_eq!(h.alerts().len(), 1);
        assert_eq!(
            (h.alerts()[0].t, h.alerts()[0].resolved_t),
            (2.0, Some(6.0))
        );
        assert!(!h.critical());
        h.observe(7.0, 99, 100);
        assert_eq!(h.alerts().len(), 2, "a new episode");
        assert_ne!(h.alerts()[0].id, h.alerts()[1].id);
    }
}
