//! Memory levels of host RAM: a node whose RAM in use (the window's highest
//! sample of `MemTotal − MemAvailable`, as its agent pushes it) reaches a
//! fixed share of `MemTotal` raises a `memory_level` alert about the host
//! ([`Subject::Host`]): warning, then critical, clearing
//! `clear_margin_pct` below the warning level, like a GPU's levels
//! ([`super::memory_level`], the same parameters and rules; defaults 75 %
//! and 90 %, `[engine.host_memory_levels]`). The alert names the node
//! only: no job, rank or GPU. Like the GPU's levels, it keeps no state but
//! the active episode.

use super::alerts::{AlertKind, Subject};
use super::Engine;
use crate::units::fmt_bytes;

/// What to do about host RAM at a level.
const HOST_ADVICE: &str = "fewer DataLoader workers or a smaller prefetch_factor, memory-mapped datasets, or loading the checkpoint straight to the GPU (map_location)";

impl Engine {
    /// One window of `node`'s host RAM ending at `t`: `used_high` bytes in
    /// use at most, of `total`. Raises, updates or clears the host's alert.
    pub fn observe_host(&mut self, t: f64, node: &str, used_high: u64, total: u64) {
        if !self.tick(t) || total == 0 {
            return;
        }
        let params = &self.cfg.host_memory_levels;
        let used = used_high.min(total);
        let pct = 100.0 * used as f64 / total as f64;
        let subject = Subject::Host(node.to_owned());
        match params.level(pct) {
            Some(severity) => {
                let (name, at) = params.named(severity);
                let mut alert = subject.alert(AlertKind::MemoryLevel, t, severity);
                alert.message = format!(
                    "host RAM on {node} is {pct:.1} % used ({} of {}), at or above the {name} level of {at} %",
                    fmt_bytes(used),
                    fmt_bytes(total)
                );
                alert.recommendation = Some(HOST_ADVICE.to_owned());
                self.alerts.raise(subject, alert);
            }
            None if params.clears(pct) => {
                self.alerts.resolve(AlertKind::MemoryLevel, &subject, t);
            }
            None => {}
        }
    }

    /// Resolves, at `t`, the host alerts of every node `kept` says the
    /// cluster no longer tracks (its agent expired): nothing will clear
    /// them otherwise.
    pub fn forget_hosts(&mut self, t: f64, kept: impl Fn(&str) -> bool) {
        let gone: Vec<Subject> = self
            .alerts
            .active_by_subject()
            .filter(|(s, _)| matches!(s, Subject::Host(node) if !kept(node)))
            .map(|(s, _)| s.clone())
            .collect();
        for subject in gone {
            self.alerts.resolve(AlertKind::MemoryLevel, &subject, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Engine, EngineConfig, Severity};
    use super::*;

    const TOTAL: u64 = 512 << 30;

    fn observe(e: &mut Engine, t: f64, pct: f64) {
        let used = (pct / 100.0 * TOTAL as f64) as u64;
        e.observe_host(t, "node-0", used, TOTAL);
    }

    fn host_alerts(e: &Engine) -> Vec<(Severity, f64, Option<f64>)> {
        e.alerts()
            .filter(|a| a.kind == AlertKind::MemoryLevel)
            .map(|a| (a.severity, a.t, a.resolved_t))
            .collect()
    }

    #[test]
    fn host_ram_is_warned_then_critical_and_clears_below_the_margin() {
        let mut e = Engine::new(EngineConfig::default());
        observe(&mut e, 1.0, 70.0);
        assert!(host_alerts(&e).is_empty(), "below the default 75 %");
        observe(&mut e, 2.0, 76.0);
        assert_eq!(host_alerts(&e), vec![(Severity::Warning, 2.0, None)]);
        let a = e.alerts().next().unwrap();
        assert_eq!(
            (a.node.as_deref(), a.job.as_deref(), a.rank, a.gpu),
            (Some("node-0"), None, None, None),
            "about the host alone"
        );
        assert!(
            a.message.starts_with("host RAM on node-0 is 76.0 % used")
                && a.message.contains("warning level of 75 %"),
            "{}",
            a.message
        );
        assert!(a.recommendation.is_some());
        observe(&mut e, 3.0, 91.0);
        assert_eq!(
            host_alerts(&e),
            vec![(Severity::Critical, 2.0, None)],
            "one episode, raised to critical"
        );
        observe(&mut e, 4.0, 74.0);
        assert_eq!(
            host_alerts(&e),
            vec![(Severity::Critical, 2.0, None)],
            "inside the margin: no flapping"
        );
        observe(&mut e, 5.0, 72.0);
        assert_eq!(host_alerts(&e), vec![(Severity::Critical, 2.0, Some(5.0))]);
        observe(&mut e, 6.0, 80.0);
        assert_eq!(host_alerts(&e).len(), 2, "a new episode");
    }

    #[test]
    fn levels_follow_the_configuration_and_bad_readings_are_ignored() {
        let mut cfg = EngineConfig::default();
        cfg.host_memory_levels.warning_pct = 1.0;
        cfg.host_memory_levels.clear_margin_pct = 0.5;
        let mut e = Engine::new(cfg);
        e.observe_host(1.0, "node-0", 5, 0);
        e.observe_host(f64::NAN, "node-0", 5, 100);
        assert!(host_alerts(&e).is_empty());
        assert_eq!(e.counters().invalid, 1);
        // More in use than there is reads as full.
        e.observe_host(2.0, "node-0", 500, 100);
        assert_eq!(host_alerts(&e), vec![(Severity::Critical, 2.0, None)]);
        assert!(e.alerts().next().unwrap().message.contains("100.0 %"));
    }

    #[test]
    fn the_host_alerts_of_forgotten_nodes_resolve() {
        let mut e = Engine::new(EngineConfig::default());
        e.observe_host(1.0, "node-0", 80, 100);
        e.observe_host(1.0, "node-1", 80, 100);
        e.forget_hosts(9.0, |node| node == "node-1");
        let open: Vec<_> = e
            .alert_book()
            .active()
            .map(|a| a.node.clone().unwrap())
            .collect();
        assert_eq!(open, vec!["node-1".to_owned()]);
        let closed = e.alerts().find(|a| a.node.as_deref() == Some("node-0"));
        assert_eq!(closed.unwrap().resolved_t, Some(9.0));
    }
}
