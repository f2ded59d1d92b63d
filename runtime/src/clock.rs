//! The wall clock, in the unit records, pushes and the coordinator's checks
//! carry: milliseconds since the Unix epoch.
//!
//! It lives here, with what every process runs around the core: the core's
//! engine and transition take time from the data and never read a clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, from the wall clock; 0 for a clock set
/// before 1970, `u64::MAX` past the year 584 million.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
