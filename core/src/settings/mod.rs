//! Live settings: the detection and notification settings an admin changes
//! while the cluster runs, cluster-wide or for one job.
//!
//! A change is a command of the replicated log ([`SettingsChange`]), so
//! every replica, every restart's replay of the log and `gpumon replay` of
//! a recorded trace apply it at the same point. The engine holds the
//! result ([`Settings`]): the configuration the replica started with, the
//! overrides set since, and what they add up to, cluster-wide and per job.
//! Overrides are kept in the snapshot beside the configuration (see
//! `as_toml`), so a restarted replica keeps them.
//!
//! Which keys change live, their bounds and where they apply: [`keys`].

mod error;
pub mod keys;

use std::collections::BTreeMap;

use gpumon_proto::api::Severity;
use serde::{Deserialize, Serialize};

use crate::engine::config::EngineConfig;
use crate::limits::MAX_NAME_BYTES;
pub use error::SettingsError;
pub use keys::{Key, Kind, Scope, Value, KEYS};

/// Most jobs with settings of their own; a change for one more is refused.
pub const MAX_JOBS_WITH_SETTINGS: usize = 256;

/// One change, as an admin asks for it and the log carries it: values as
/// the text given, checked again where it is applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsChange {
    /// The job it is for; `None`: cluster-wide.
    pub job: Option<String>,
    /// Keys to set, with their values.
    pub set: Vec<(String, String)>,
    /// Keys to put back to what applies without an override.
    pub reset: Vec<String>,
    /// Drop every override of the scope (the job's, or the cluster's).
    pub reset_all: bool,
}

/// Overrides by key name.
pub type Overrides = BTreeMap<String, Value>;

/// The notifier's settings as the overrides make them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NotifyOverrides {
    /// Cluster-wide smallest severity announced, over the configured one.
    pub min_severity: Option<Severity>,
    /// Cluster-wide repeat interval, ms, over the configured one.
    pub repeat_interval_ms: Option<u64>,
    /// Smallest severity announced per job, over the cluster's.
    pub jobs_min_severity: BTreeMap<String, Severity>,
}

impl NotifyOverrides {
    /// The smallest severity announced for an alert of `job` (`None`: not
    /// a job's), `configured` where no override applies.
    pub fn min_severity_for(&self, job: Option<&str>, configured: Severity) -> Severity {
        job.and_then(|j| self.jobs_min_severity.get(j).copied())
            .or(self.min_severity)
            .unwrap_or(configured)
    }
}

/// The engine's settings: what the replica started with, the overrides set
/// live, and the effective configurations they give.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    base: EngineConfig,
    cluster: Overrides,
    jobs: BTreeMap<String, Overrides>,
    effective: EngineConfig,
    job_effective: BTreeMap<String, EngineConfig>,
    notify: NotifyOverrides,
}

impl Settings {
    /// No overrides: `base` applies everywhere.
    pub fn new(base: EngineConfig) -> Self {
        Self {
            effective: base.clone(),
            base,
            cluster: Overrides::new(),
            jobs: BTreeMap::new(),
            job_effective: BTreeMap::new(),
            notify: NotifyOverrides::default(),
        }
    }

    /// The cluster-wide configuration in effect.
    pub fn effective(&self) -> &EngineConfig {
        &self.effective
    }

    /// The configuration in effect for `job`'s ranks.
    pub fn for_job(&self, job: &str) -> &EngineConfig {
        self.job_effective.get(job).unwrap_or(&self.effective)
    }

    /// The configuration the replica started with, before any override.
    pub fn base(&self) -> &EngineConfig {
        &self.base
    }

    /// The cluster-wide overrides.
    pub fn cluster_overrides(&self) -> &Overrides {
        &self.cluster
    }

    /// The overrides of each job that has some.
    pub fn job_overrides(&self) -> &BTreeMap<String, Overrides> {
        &self.jobs
    }

    /// The notifier's overrides.
    pub fn notify(&self) -> &NotifyOverrides {
        &self.notify
    }

    /// The value of `key` in effect cluster-wide (`job` `None`) or for a
    /// job; a notifier key without an override has none here (its value
    /// is the notifier's configuration).
    pub fn value(&self, key: &Key, job: Option<&str>) -> Option<Value> {
        if let Some(v) = job
            .and_then(|j| self.jobs.get(j))
            .and_then(|o| o.get(key.name))
        {
            return Some(*v);
        }
        if let Some(v) = self.cluster.get(key.name) {
            return Some(*v);
        }
        if key.is_notify() {
            return None;
        }
        let cfg = job.map_or(&self.effective, |j| self.for_job(j));
        let table = toml::Table::try_from(cfg).ok()?;
        let (section, field) = key.name.split_once('.')?;
        keys::from_toml(key, table.get(section)?.as_table()?.get(field)?)
    }

    /// Checks `change` against the keys, their bounds and scopes and the
    /// bound on jobs with settings, and what the configuration would become;
    /// the error names the key and what it takes. Nothing changes.
    pub fn check(&self, change: &SettingsChange) -> Result<(), SettingsError> {
        self.changed(change).map(|_| ())
    }

    /// Applies `change` whole, or not at all when [`Settings::check`] fails.
    pub fn apply(&mut self, change: &SettingsChange) -> Result<(), SettingsError> {
        let (scope, overrides) = self.changed(change)?;
        match scope {
            None => self.cluster = overrides,
            Some(job) if overrides.is_empty() => {
                self.jobs.remove(job);
            }
            Some(job) => {
                self.jobs.insert(job.to_owned(), overrides);
            }
        }
        self.rebuild()
    }

    /// The scope a change is for and its overrides after it.
    fn changed<'c>(
        &self,
        change: &'c SettingsChange,
    ) -> Result<(Option<&'c str>, Overrides), SettingsError> {
        let job = change.job.as_deref();
        if let Some(j) = job {
            if j.is_empty() || j.len() > MAX_NAME_BYTES || j.chars().any(char::is_control) {
                return Err(SettingsError::JobName { job: j.to_owned() });
            }
        }
        if change.set.len() + change.reset.len() > 4 * KEYS.len() {
            return Err(SettingsError::TooManyKeys {
                max: 4 * KEYS.len(),
            });
        }
        let current = match job {
            None => &self.cluster,
            Some(j) => self.jobs.get(j).unwrap_or(&EMPTY),
        };
        let mut overrides = if change.reset_all {
            Overrides::new()
        } else {
            current.clone()
        };
        for name in &change.reset {
            let key = known(name, job)?;
            overrides.remove(key.name);
        }
        for (name, text) in &change.set {
            let key = known(name, job)?;
            overrides.insert(key.name.to_owned(), keys::parse(key, text)?);
        }
        if let Some(j) = job {
            let adds = !overrides.is_empty() && !self.jobs.contains_key(j);
            if adds && self.jobs.len() >= MAX_JOBS_WITH_SETTINGS {
                return Err(SettingsError::TooManyJobs);
            }
        }
        let cluster = if job.is_none() {
            &overrides
        } else {
            &self.cluster
        };
        let cfg = with_overrides(&self.base, cluster)?;
        check_config(&cfg)?;
        if job.is_some() {
            check_config(&with_overrides(&cfg, &overrides)?)?;
        }
        Ok((job, overrides))
    }

    /// Recomputes the effective configurations and the notifier's view.
    fn rebuild(&mut self) -> Result<(), SettingsError> {
        self.effective = with_overrides(&self.base, &self.cluster)?;
        self.job_effective = self
            .jobs
            .iter()
            .map(|(job, o)| Ok((job.clone(), with_overrides(&self.effective, o)?)))
            .collect::<Result<_, SettingsError>>()?;
        let severity = |o: &Overrides| match o.get("notify.min_severity") {
            Some(Value::Severity(s)) => Some(*s),
            _ => None,
        };
        self.notify = NotifyOverrides {
            min_severity: severity(&self.cluster),
            repeat_interval_ms: self
                .cluster
                .get("notify.repeat_interval_s")
                .and_then(|v| v.number())
                .map(|s| (s * 1000.0).round() as u64),
            jobs_min_severity: self
                .jobs
                .iter()
                .filter_map(|(j, o)| Some((j.clone(), severity(o)?)))
                .collect(),
        };
        Ok(())
    }
}

/// The cluster-wide configuration in effect: what the engine's detectors
/// read where no one job's settings apply.
impl std::ops::Deref for Settings {
    type Target = EngineConfig;

    fn deref(&self) -> &EngineConfig {
        &self.effective
    }
}

static EMPTY: Overrides = Overrides::new();

/// The key `name`, when it may be set in the scope (`job` `Some`: a job's).
fn known(name: &str, job: Option<&str>) -> Result<&'static Key, SettingsError> {
    let key = keys::key(name).ok_or_else(|| SettingsError::UnknownKey {
        name: name.to_owned(),
    })?;
    if job.is_some() && key.scope == Scope::Cluster {
        return Err(SettingsError::ClusterOnly {
            name: name.to_owned(),
        });
    }
    Ok(key)
}

/// `base` with the engine's overrides in `o` applied.
fn with_overrides(base: &EngineConfig, o: &Overrides) -> Result<EngineConfig, SettingsError> {
    if o.keys().all(|k| k.starts_with(keys::NOTIFY_PREFIX)) {
        return Ok(base.clone());
    }
    let mut table = toml::Table::try_from(base)?;
    for (name, value) in o
        .iter()
        .filter(|(k, _)| !k.starts_with(keys::NOTIFY_PREFIX))
    {
        let (section, field) = name.split_once('.').ok_or(SettingsError::NoSection)?;
        let inner = table
            .get_mut(section)
            .and_then(toml::Value::as_table_mut)
            .ok_or_else(|| SettingsError::UnknownSection {
                section: section.to_owned(),
            })?;
        inner.insert(field.to_owned(), value.toml());
    }
    Ok(toml::Value::Table(table).try_into()?)
}

/// What must hold between keys.
fn check_config(cfg: &EngineConfig) -> Result<(), SettingsError> {
    cfg.memory_levels
        .check()
        .map_err(SettingsError::MemoryLevels)?;
    cfg.host_memory_levels
        .check()
        .map_err(SettingsError::HostMemoryLevels)?;
    let f = &cfg.forecast;
    if !(f.critical_s <= f.high_s && f.high_s <= f.horizon_s) {
        return Err(SettingsError::ForecastOrder {
            critical_s: f.critical_s,
            high_s: f.high_s,
            horizon_s: f.horizon_s,
        });
    }
    Ok(())
}

/// The settings inside a snapshot, as the TOML text of an `[engine]` table
/// in the postcard encoding, holding only the values that differ from the
/// defaults, and the live overrides, if any, under `[live]`: tunables come
/// and go far more often than the state's layout, and TOML names its
/// fields, so a new tunable or an override needs no new snapshot format and
/// leaves the bytes of a snapshot without one as they were (a snapshot
/// without it loads with its default). TOML rather than JSON because it
/// writes every `f64`, infinities and NaN included, and reads it back as it
/// was.
pub(crate) mod as_toml {
    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{keys, EngineConfig, Overrides, Settings};

    /// The table that holds the overrides.
    const LIVE: &str = "live";

    pub fn serialize<S: Serializer>(settings: &Settings, s: S) -> Result<S::Ok, S::Error> {
        let table = |c: &EngineConfig| toml::Table::try_from(c).map_err(S::Error::custom);
        let mut changed = table(&settings.base)?;
        without_defaults(&mut changed, &table(&EngineConfig::default())?);
        if !settings.cluster.is_empty() || !settings.jobs.is_empty() {
            let mut live = toml::Table::new();
            if !settings.cluster.is_empty() {
                live.insert("cluster".into(), overrides_table(&settings.cluster).into());
            }
            if !settings.jobs.is_empty() {
                let jobs: toml::Table = settings
                    .jobs
                    .iter()
                    .map(|(j, o)| (j.clone(), overrides_table(o).into()))
                    .collect();
                live.insert("jobs".into(), jobs.into());
            }
            changed.insert(LIVE.into(), live.into());
        }
        s.serialize_str(&toml::to_string(&changed).map_err(S::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Settings, D::Error> {
        let text = String::deserialize(d)?;
        let mut table: toml::Table = toml::from_str(&text).map_err(D::Error::custom)?;
        let live = table.remove(LIVE);
        let base: EngineConfig = toml::Value::Table(table)
            .try_into()
            .map_err(D::Error::custom)?;
        let mut settings = Settings::new(base);
        if let Some(toml::Value::Table(live)) = live {
            if let Some(toml::Value::Table(c)) = live.get("cluster") {
                settings.cluster = overrides_of(c);
            }
            if let Some(toml::Value::Table(jobs)) = live.get("jobs") {
                settings.jobs = jobs
                    .iter()
                    .filter_map(|(j, o)| Some((j.clone(), overrides_of(o.as_table()?))))
                    .filter(|(_, o)| !o.is_empty())
                    .collect();
            }
            settings.rebuild().map_err(D::Error::custom)?;
        }
        Ok(settings)
    }

    fn overrides_table(o: &Overrides) -> toml::Table {
        o.iter().map(|(k, v)| (k.clone(), v.toml())).collect()
    }

    /// The known keys of a snapshot's overrides, with values they take.
    fn overrides_of(t: &toml::Table) -> Overrides {
        t.iter()
            .filter_map(|(name, value)| {
                let key = keys::key(name)?;
                Some((key.name.to_owned(), keys::from_toml(key, value)?))
            })
            .collect()
    }

    /// Drops from `table` every value equal to the one in `defaults`, and
    /// tables left empty. NaN never equals itself, so it is kept.
    fn without_defaults(table: &mut toml::Table, defaults: &toml::Table) {
        table.retain(|key, value| match (value, defaults.get(key)) {
            (toml::Value::Table(inner), Some(toml::Value::Table(default))) => {
                without_defaults(inner, default);
                !inner.is_empty()
            }
            (value, Some(default)) => value != default,
            (_, None) => true,
        });
    }
}

#[cfg(test)]
mod tests;
