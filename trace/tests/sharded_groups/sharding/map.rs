//! [`GroupMap`]: which group holds a job, and which is a node's home.
//!
//! The routing table the meta group would replicate and hand to agents: the
//! number of groups, and pins that hold a job in a group other than its
//! hash's (a job being moved, or kept where it is while the groups grow).
//! Everything else follows from the names.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::hash::bucket_of;
use gpumon_core::cluster::is_valid_name;

/// Most groups a map may have: far past any fleet one group's ingest
/// cannot carry (see docs/sharding.md), small enough for every agent to
/// hold a connection to each.
pub const MAX_GROUPS: u32 = 1024;
/// Most pinned jobs: pins are for jobs on the move, not a second table of
/// every job.
pub const MAX_PINS: usize = 4096;

/// A Raft group, numbered from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupId(pub u32);

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "group {}", self.0)
    }
}

/// Why a map was not built or changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MapError {
    /// No groups, or more than [`MAX_GROUPS`].
    #[error("a map has 1 to {MAX_GROUPS} groups, not {0}")]
    GroupCount(u32),
    /// A pin to a group the map does not have.
    #[error("{group} is not in a map of {groups} groups (0 to {})", groups.saturating_sub(1))]
    NoSuchGroup {
        /// The group asked for.
        group: GroupId,
        /// Groups in the map.
        groups: u32,
    },
    /// A pin for a name no job can have.
    #[error("{0:?} is not a job name: 1 to 256 bytes without control characters")]
    BadJob(String),
    /// Past [`MAX_PINS`].
    #[error("{MAX_PINS} jobs are pinned already; unpin the moved ones first")]
    TooManyPins,
}

/// The routing table: groups, and the jobs pinned to one. Decoding checks
/// what [`GroupMap::new`] and [`GroupMap::pin`] check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawMap")]
pub struct GroupMap {
    groups: u32,
    pins: BTreeMap<String, GroupId>,
}

/// A map as decoded, before its checks.
#[derive(Deserialize)]
struct RawMap {
    groups: u32,
    pins: BTreeMap<String, GroupId>,
}

impl TryFrom<RawMap> for GroupMap {
    type Error = MapError;

    fn try_from(raw: RawMap) -> Result<Self, MapError> {
        let mut map = GroupMap::new(raw.groups)?;
        for (job, group) in raw.pins {
            map.pin(&job, group)?;
        }
        Ok(map)
    }
}

impl GroupMap {
    /// A map of `groups` groups and no pins.
    pub fn new(groups: u32) -> Result<Self, MapError> {
        if groups == 0 || groups > MAX_GROUPS {
            return Err(MapError::GroupCount(groups));
        }
        Ok(Self {
            groups,
            pins: BTreeMap::new(),
        })
    }

    /// How many groups.
    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// Every group, in order.
    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> {
        (0..self.groups).map(GroupId)
    }

    /// The group the hash gives `job`, pins aside.
    pub fn hashed_group(&self, job: &str) -> GroupId {
        GroupId(bucket_of(job, self.groups))
    }

    /// The group that holds `job`: its pin, else its hash's.
    pub fn group_of_job(&self, job: &str) -> GroupId {
        self.pins
            .get(job)
            .copied()
            .unwrap_or_else(|| self.hashed_group(job))
    }

    /// The home group of `node`: where its hello, its host RAM and the
    /// windows of its idle GPUs go.
    pub fn home_of_node(&self, node: &str) -> GroupId {
        GroupId(bucket_of(node, self.groups))
    }

    /// Holds `job` in `group` whatever its hash says; returns the pin it
    /// replaced.
    pub fn pin(&mut self, job: &str, group: GroupId) -> Result<Option<GroupId>, MapError> {
        if group.0 >= self.groups {
            return Err(MapError::NoSuchGroup {
                group,
                groups: self.groups,
            });
        }
        if !is_valid_name(job) {
            return Err(MapError::BadJob(job.to_owned()));
        }
        if !self.pins.contains_key(job) && self.pins.len() >= MAX_PINS {
            return Err(MapError::TooManyPins);
        }
        Ok(self.pins.insert(job.to_owned(), group))
    }

    /// Lets `job` follow its hash again; returns its pin, if it had one.
    pub fn unpin(&mut self, job: &str) -> Option<GroupId> {
        self.pins.remove(job)
    }

    /// The pinned jobs and their groups, by job.
    pub fn pins(&self) -> impl Iterator<Item = (&str, GroupId)> {
        self.pins.iter().map(|(job, group)| (job.as_str(), *group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_counts_out_of_range_are_refused() {
        assert_eq!(GroupMap::new(0), Err(MapError::GroupCount(0)));
        assert_eq!(
            GroupMap::new(MAX_GROUPS + 1),
            Err(MapError::GroupCount(MAX_GROUPS + 1))
        );
        assert_eq!(
            GroupMap::new(MAX_GROUPS).map(|m| m.groups()),
            Ok(MAX_GROUPS)
        );
    }

    #[test]
    fn one_group_holds_everything() {
        let map = GroupMap::new(1).unwrap();
        for name in ["job-a", "job-b", "node-0", ""] {
            assert_eq!(map.group_of_job(name), GroupId(0));
            assert_eq!(map.home_of_node(name), GroupId(0));
        }
    }

    #[test]
    fn jobs_follow_the_hash_until_pinned() {
        let mut map = GroupMap::new(16).unwrap();
        // bucket_of("job-a", 16) is 8 (see hash.rs).
        assert_eq!(map.group_of_job("job-a"), GroupId(8));
        assert_eq!(map.pin("job-a", GroupId(3)), Ok(None));
        assert_eq!(map.group_of_job("job-a"), GroupId(3));
        assert_eq!(map.hashed_group("job-a"), GroupId(8));
        assert_eq!(map.pin("job-a", GroupId(5)), Ok(Some(GroupId(3))));
        assert_eq!(map.pins().collect::<Vec<_>>(), [("job-a", GroupId(5))]);
        assert_eq!(map.unpin("job-a"), Some(GroupId(5)));
        assert_eq!(map.group_of_job("job-a"), GroupId(8));
        assert_eq!(map.unpin("job-a"), None);
    }

    #[test]
    fn bad_pins_are_refused_and_change_nothing() {
        let mut map = GroupMap::new(4).unwrap();
        let err = map.pin("job-a", GroupId(4)).unwrap_err();
        assert_eq!(
            err,
            MapError::NoSuchGroup {
                group: GroupId(4),
                groups: 4
            }
        );
        assert_eq!(
            err.to_string(),
            "group 4 is not in a map of 4 groups (0 to 3)"
        );
        assert_eq!(
            map.pin("", GroupId(1)),
            Err(MapError::BadJob(String::new()))
        );
        assert_eq!(
            map.pin("job\n", GroupId(1)),
            Err(MapError::BadJob("job\n".into()))
        );
        assert_eq!(map.pins().count(), 0);
    }

    #[test]
    fn pins_are_bounded() {
        let mut map = GroupMap::new(2).unwrap();
        for i in 0..MAX_PINS {
            map.pin(&format!("job-{i}"), GroupId(1)).unwrap();
        }
        assert_eq!(map.pin("one-more", GroupId(1)), Err(MapError::TooManyPins));
        // Moving a pinned job again is not a new pin.
        assert_eq!(map.pin("job-0", GroupId(0)), Ok(Some(GroupId(1))));
    }

    #[test]
    fn the_map_round_trips_through_serde() {
        let mut map = GroupMap::new(4).unwrap();
        map.pin("job-a", GroupId(2)).unwrap();
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, r#"{"groups":4,"pins":{"job-a":2}}"#);
        assert_eq!(serde_json::from_str::<GroupMap>(&json).unwrap(), map);
        for bad in [
            r#"{"groups":0,"pins":{}}"#,
            r#"{"groups":4,"pins":{"job-a":4}}"#,
            r#"{"groups":4,"pins":{"":1}}"#,
        ] {
            assert!(serde_json::from_str::<GroupMap>(bad).is_err(), "{bad}");
        }
    }
}
