//! Who may hold one of the listener's connections, and for how long.
//!
//! A client that connects and then says nothing (or one byte now and then)
//! costs the coordinator a socket and a task for as long as it likes. So
//! every connection is admitted against two caps ([`ConnectionLimits`]:
//! [`MAX_CONNECTIONS`] in all and [`MAX_PER_SOURCE`] from one source by
//! default; a source is an IPv4 address, or an IPv6 /64, which one host can
//! fill on its own), and TLS handshakes against
//! [`MAX_HANDSHAKES`] in all and [`MAX_HANDSHAKES_PER_SOURCE`] from one
//! source: a flood of stalled connections from one source takes that
//! source's places, not its neighbours'. A connection past a cap is closed
//! at once and counted.
//!
//! An admitted connection must then send its first bytes within
//! [`FIRST_BYTES_WITHIN`] and may go [`IDLE_TIMEOUT`] without a byte in
//! either direction before it is closed (longer than the 90 s a pooled
//! client connection of reqwest idles, so a client never reuses one the
//! server is closing). See [`crate::ApiStream`].

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections held at once, all sources together (the default).
pub const MAX_CONNECTIONS: usize = 4096;
/// Connections held at once from one source (the default).
pub const MAX_PER_SOURCE: usize = 512;
/// TLS handshakes in progress at once, all sources together.
pub const MAX_HANDSHAKES: usize = 256;
/// TLS handshakes in progress at once from one source.
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 32;
/// Longest wait for a connection's first bytes after it is accepted (after
/// its TLS handshake on TLS).
pub const FIRST_BYTES_WITHIN: Duration = Duration::from_secs(10);
/// Longest a connection may pass no byte either way.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The connection caps of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections held at once, all sources together.
    pub max_connections: usize,
    /// Connections held at once from one source.
    pub max_per_source: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            max_per_source: MAX_PER_SOURCE,
        }
    }
}

impl ConnectionLimits {
    /// `Err` names the setting that cannot work: a zero cap, or a
    /// per-source cap above the total.
    pub fn check(&self) -> Result<(), LimitsError> {
        if self.max_connections == 0 || self.max_per_source == 0 {
            return Err(LimitsError::Zero);
        }
        if self.max_per_source > self.max_connections {
            return Err(LimitsError::SourceAboveTotal {
                per_source: self.max_per_source,
                total: self.max_connections,
            });
        }
        Ok(())
    }
}

/// Connection limits that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A cap of 0.
    #[error("max_connections and max_connections_per_source must be at least 1")]
    Zero,
    /// The per-source cap above the total.
    #[error("max_connections_per_source ({per_source}) must not exceed max_connections ({total})")]
    SourceAboveTotal {
        /// `max_connections_per_source`.
        per_source: usize,
        /// `max_connections`.
        total: usize,
    },
}

/// Where a connection comes from, for the per-source cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// An IPv4 address (or an IPv4-mapped IPv6 one).
    V4([u8; 4]),
    /// The /64 prefix of an IPv6 address.
    V6([u8; 8]),
}

impl Source {
    /// The source of a peer at `ip`.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4.octets()),
                None => {
                    let mut prefix = [0; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    Self::V6(prefix)
                }
            },
        }
    }
}

/// Places for connections: `total` in all, `per_source` from one source
/// (by default a [`Source`]; the hook endpoint counts by user).
#[derive(Debug)]
pub struct Admissions<K = Source> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Admissions<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Inner<K> {
    total: usize,
    per_source: usize,
    held: Mutex<Held<K>>,
    refused: AtomicU64,
}

#[derive(Debug)]
struct Held<K> {
    total: usize,
    /// Sources holding a place now: at most `total` entries.
    by_source: HashMap<K, usize>,
}

impl Admissions<Source> {
    /// A place for a connection from `ip`; see [`Admissions::admit_from`].
    pub fn admit(&self, ip: IpAddr) -> Option<Admission<Source>> {
        self.admit_from(Source::of(ip))
    }
}

impl<K: Hash + Eq + Copy> Admissions<K> {
    /// Caps of `total` places and `per_source` from one source.
    pub fn new(total: usize, per_source: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total,
                per_source,
                held: Mutex::new(Held {
                    total: 0,
                    by_source: HashMap::new(),
                }),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// A place for a connection from `source`, held until the returned
    /// guard drops; `None` (counted) when a cap is reached.
    pub fn admit_from(&self, source: K) -> Option<Admission<K>> {
        self.try_admit_from(source).ok()
    }

    /// [`Admissions::admit_from`], saying which cap refused: the source's
    /// share first, then the total.
    pub fn try_admit_from(&self, source: K) -> Result<Admission<K>, Full> {
        let mut held = self.lock();
        let of_source = held.by_source.get(&source).copied().unwrap_or(0);
        let full = if of_source >= self.inner.per_source {
            Some(Full::Source)
        } else if held.total >= self.inner.total {
            Some(Full::Total)
        } else {
            None
        };
        if let Some(full) = full {
            drop(held);
            self.inner.refused.fetch_add(1, Relaxed);
            return Err(full);
        }
        held.total += 1;
        held.by_source.insert(source, of_source + 1);
        Ok(Admission {
            inner: self.inner.clone(),
            source,
        })
    }

    /// Connections refused so far for a cap.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Relaxed)
    }

    /// Places held now, and sources holding them.
    pub fn held(&self) -> (usize, usize) {
        let held = self.lock();
        (held.total, held.by_source.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<K>> {
        lock(&self.inner)
    }
}

// A panic while the lock is held leaves the counts consistent (each change
// is one statement), so a poisoned lock is taken as it is.
fn lock<K>(inner: &Inner<K>) -> std::sync::MutexGuard<'_, Held<K>> {
    inner.held.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which cap refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The source holds its share.
    Source,
    /// Every place is taken.
    Total,
}

/// One admitted connection's place; given back on drop.
#[derive(Debug)]
pub struct Admission<K: Hash + Eq + Copy = Source> {
    inner: Arc<Inner<K>>,
    source: K,
}

impl<K: Hash + Eq + Copy> Drop for Admission<K> {
    fn drop(&mut self) {
        let mut held = lock(&self.inner);
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                held.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_cannot_take_the_places_of_others_and_places_come_back() {
        let places = Admissions::new(5, 2);
        let a1 = places.admit(ip("10.0.0.1")).unwrap();
        let _a2 = places.admit(ip("10.0.0.1")).unwrap();
        assert!(places.admit(ip("10.0.0.1")).is_none(), "per source");
        assert!(
            places.admit(ip("::ffff:10.0.0.1")).is_none(),
            "the same IPv4 host"
        );
        let _b = places.admit(ip("10.0.0.2")).unwrap();
        let _c1 = places.admit(ip("2001:db8::1")).unwrap();
        let _c2 = places.admit(ip("2001:db8::2")).unwrap();
        assert!(places.admit(ip("2001:db8::3")).is_none(), "one IPv6 /64");
        assert!(places.admit(ip("10.0.0.3")).is_none(), "in all");
        assert_eq!(places.refused(), 4);
        drop(a1);
        assert_eq!(places.held(), (4, 3));
        let _a3 = places.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(places.held(), (5, 4));
    }

    #[test]
    fn limits_that_cannot_work_are_named() {
        assert!(ConnectionLimits::default().check().is_ok());
        let zero = ConnectionLimits {
            max_connections: 0,
            max_per_source: 0,
        };
        assert!(zero.check().unwrap_err().to_string().contains("at least 1"));
        let over = ConnectionLimits {
            max_connections: 10,
            max_per_source: 11,
        };
        let why = over.check().unwrap_err().to_string();
        assert!(why.contains("max_connections_per_source (11)"), "{why}");
    }

    #[test]
    fn sources_are_forgotten_when_their_last_connection_goes() {
        let places = Admissions::new(10_000, 1);
        let held: Vec<_> = (0..1000u32)
            .map(|i| places.admit(IpAddr::from(i.to_be_bytes())).unwrap())
            .collect();
        assert_eq!(places.held(), (1000, 1000));
        drop(held);
        assert_eq!(places.held(), (0, 0));
    }
}
