//! The settings that may change while the cluster runs: each key, what it
//! takes, where it applies, and its bounds.
//!
//! A key is the dotted path of the value in the coordinator's TOML
//! (`[engine.straggler] min_loss_ms` is `straggler.min_loss_ms`), except
//! the notifier's, which start with `notify.`. Only the keys listed here
//! change live: sizes that shape the state (`max_jobs`, window widths,
//! history lengths) are read at start-up, where a change has no partial
//! effect to explain.

use gpumon_proto::api::Severity;

use super::SettingsError;

/// What a key takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A number within `[min, max]`.
    Number {
        /// Smallest value taken.
        min: f64,
        /// Largest value taken.
        max: f64,
    },
    /// An alert severity: `warning`, `high` or `critical`.
    Severity,
}

/// Where a key's value is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide only: it judges GPUs or nodes, which no one job owns.
    Cluster,
    /// Cluster-wide, and for one job over the cluster-wide value.
    Job,
}

/// One live key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Its name, as `gpumon config set` and the API take it.
    pub name: &'static str,
    /// What it takes.
    pub kind: Kind,
    /// Where it may be set.
    pub scope: Scope,
    /// What it does, in a few words (`gpumon config show`, the docs).
    pub about: &'static str,
}

impl Key {
    /// Whether the key belongs to the notifier rather than the engine.
    pub fn is_notify(&self) -> bool {
        self.name.starts_with(NOTIFY_PREFIX)
    }

    /// What it takes, as the error for a bad value says it.
    pub fn bounds(&self) -> String {
        match self.kind {
            Kind::Number { min, max } => format!("a number from {min} to {max}"),
            Kind::Severity => "warning, high or critical".to_owned(),
        }
    }
}

/// The prefix of the notifier's keys.
pub const NOTIFY_PREFIX: &str = "notify.";

const fn number(name: &'static str, min: f64, max: f64, scope: Scope, about: &'static str) -> Key {
    Key {
        name,
        kind: Kind::Number { min, max },
        scope,
        about,
    }
}

const DAY_S: f64 = 86_400.0;

/// Every live key, in the order `gpumon config show` lists them.
pub const KEYS: &[Key] = &[
    number(
        "straggler.min_slowdown",
        0.001,
        1.0,
        Scope::Job,
        "smallest slowdown of interest, share of the step",
    ),
    number(
        "straggler.k_sigma",
        0.1,
        10.0,
        Scope::Job,
        "smallest CUSUM reference, in units of the job's noise",
    ),
    number(
        "straggler.h_sigma",
        1.0,
        100.0,
        Scope::Job,
        "alarm threshold, in units of the job's noise",
    ),
    number(
        "straggler.min_loss_frac",
        0.0,
        1.0,
        Scope::Job,
        "smallest loss worth an alert, share of the step",
    ),
    number(
        "straggler.min_loss_ms",
        0.0,
        60_000.0,
        Scope::Job,
        "smallest loss worth an alert, ms per step",
    ),
    number(
        "straggler.min_duration_s",
        0.0,
        3_600.0,
        Scope::Job,
        "how long a rank stays slower before it is named, s",
    ),
    number(
        "straggler.stage_min_frac",
        0.0,
        1.0,
        Scope::Job,
        "smallest pipeline stage imbalance worth a finding, share of the step",
    ),
    number(
        "imbalance.min_excess_frac",
        0.0,
        1.0,
        Scope::Job,
        "smallest excess over the ranks' median, share of capacity",
    ),
    number(
        "imbalance.min_excess_bytes",
        0.0,
        1e15,
        Scope::Job,
        "smallest excess over the ranks' median, bytes",
    ),
    number(
        "imbalance.z_min",
        0.0,
        100.0,
        Scope::Job,
        "smallest robust z-score of an outlier rank",
    ),
    number(
        "leak.min_rise_frac",
        0.0,
        1.0,
        Scope::Job,
        "smallest rise over the horizon that is a leak, share of capacity",
    ),
    number(
        "leak.p_max",
        1e-9,
        1.0,
        Scope::Job,
        "largest p-value of a leak's trend",
    ),
    number(
        "fragmentation.min_cached_frac",
        0.0,
        1.0,
        Scope::Job,
        "smallest cache, reserved but unallocated, share of capacity",
    ),
    number(
        "outside.growth_frac",
        0.0,
        100.0,
        Scope::Job,
        "growth of memory outside the allocator that raises an alert, share of its level after start-up",
    ),
    number(
        "outside.min_growth_bytes",
        0.0,
        1e15,
        Scope::Job,
        "smallest growth of memory outside the allocator that raises an alert, bytes",
    ),
    number(
        "forecast.horizon_s",
        60.0,
        30.0 * DAY_S,
        Scope::Cluster,
        "how far ahead an OOM is forecast, s",
    ),
    number(
        "forecast.high_s",
        1.0,
        30.0 * DAY_S,
        Scope::Cluster,
        "an OOM sooner than this is high severity, s",
    ),
    number(
        "forecast.critical_s",
        1.0,
        30.0 * DAY_S,
        Scope::Cluster,
        "an OOM sooner than this is critical, s",
    ),
    number(
        "memory_levels.warning_pct",
        1.0,
        100.0,
        Scope::Cluster,
        "GPU memory level of a warning, % of capacity",
    ),
    number(
        "memory_levels.critical_pct",
        1.0,
        100.0,
        Scope::Cluster,
        "GPU memory level of a critical alert, % of capacity",
    ),
    number(
        "host_memory_levels.warning_pct",
        1.0,
        100.0,
        Scope::Cluster,
        "host RAM level of a warning, %",
    ),
    number(
        "host_memory_levels.critical_pct",
        1.0,
        100.0,
        Scope::Cluster,
        "host RAM level of a critical alert, %",
    ),
    Key {
        name: "notify.min_severity",
        kind: Kind::Severity,
        scope: Scope::Job,
        about: "alerts below this severity are not announced",
    },
    number(
        "notify.repeat_interval_s",
        60.0,
        7.0 * DAY_S,
        Scope::Cluster,
        "time between notifications of an alert that keeps firing, s",
    ),
];

/// The key named `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// A key's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A number.
    Number(f64),
    /// A severity.
    Severity(Severity),
}

impl Value {
    /// The number, for a numeric key.
    pub fn number(self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(n),
            Value::Severity(_) => None,
        }
    }

    /// As `gpumon config show` and the API write it.
    pub fn text(self) -> String {
        match self {
            Value::Number(n) => format!("{n}"),
            Value::Severity(s) => severity_name(s).to_owned(),
        }
    }

    /// As TOML holds it.
    pub(super) fn toml(self) -> toml::Value {
        match self {
            Value::Number(n) => toml::Value::Float(n),
            Value::Severity(s) => toml::Value::String(severity_name(s).to_owned()),
        }
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Warning => "warning",
        Severity::High => "high",
        Severity::Critical => "critical",
    }
}

/// The value `text` gives `key`, or why it cannot be one; the message names
/// the key and what it takes.
pub fn parse(key: &Key, text: &str) -> Result<Value, SettingsError> {
    let bad = || SettingsError::Value {
        name: key.name,
        text: text.to_owned(),
        bounds: key.bounds(),
    };
    match key.kind {
        Kind::Number { min, max } => {
            let n: f64 = text.trim().parse().map_err(|_| bad())?;
            if n.is_finite() && (min..=max).contains(&n) {
                Ok(Value::Number(n))
            } else {
                Err(bad())
            }
        }
        Kind::Severity => match text.trim() {
            "warning" => Ok(Value::Severity(Severity::Warning)),
            "high" => Ok(Value::Severity(Severity::High)),
            "critical" => Ok(Value::Severity(Severity::Critical)),
            _ => Err(bad()),
        },
    }
}

/// The value a TOML value holds for `key` (a snapshot's), or `None`.
pub(super) fn from_toml(key: &Key, value: &toml::Value) -> Option<Value> {
    match value {
        toml::Value::Float(n) => parse(key, &n.to_string()).ok(),
        toml::Value::Integer(n) => parse(key, &n.to_string()).ok(),
        toml::Value::String(s) => parse(key, s).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_key_names_a_number_of_the_engine_config() {
        let table = toml::Table::try_from(crate::engine::EngineConfig::default()).unwrap();
        for k in KEYS.iter().filter(|k| !k.is_notify()) {
            let (section, field) = k.name.split_once('.').unwrap();
            let value = table[section].as_table().unwrap().get(field);
            assert!(
                matches!(value, Some(toml::Value::Float(_))),
                "{} is {value:?} in [engine]",
                k.name
            );
        }
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_key_and_its_bounds() {
        let k = key("straggler.min_loss_ms").unwrap();
        assert_eq!(parse(k, "5").unwrap(), Value::Number(5.0));
        for bad in ["-1", "1e9", "NaN", "inf", "five"] {
            let err = parse(k, bad).unwrap_err().to_string();
            assert!(
                err.contains("straggler.min_loss_ms") && err.contains("from 0 to 60000"),
                "{err}"
            );
        }
        let s = key("notify.min_severity").unwrap();
        assert_eq!(
            parse(s, "critical").unwrap(),
            Value::Severity(Severity::Critical)
        );
        assert!(parse(s, "loud")
            .unwrap_err()
            .to_string()
            .contains("warning, high or critical"));
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len());
    }
}
