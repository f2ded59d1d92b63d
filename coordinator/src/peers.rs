//! The `--peers` list: `1=host:port,2=host:port,3=host:port`.
//!
//! It names the voters a fresh cluster is formed with. Every address is
//! checked at start-up (a host and a numeric, non-zero port; no scheme), ids
//! and addresses must be unique, and the replica's own id must be listed, so
//! a typo is an error before anything is written rather than a replica that
//! can never be reached.

use std::collections::BTreeMap;

/// Raft node id → `host:port` of that replica's API (and Raft RPC).
pub type Peers = BTreeMap<u64, String>;

/// Parses `1=host:port,2=host:port`; the error names the offending part.
pub fn parse_peers(text: &str) -> Result<Peers, PeersError> {
    let mut peers = Peers::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let owned = || part.to_owned();
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| PeersError::Form { part: owned() })?;
        let id: u64 = id.trim().parse().map_err(|_| PeersError::Id {
            part: owned(),
            id: id.to_owned(),
        })?;
        if id == 0 {
            return Err(PeersError::IdZero { part: owned() });
        }
        let addr = addr.trim();
        check_addr(addr).map_err(|source| PeersError::Addr {
            part: owned(),
            source,
        })?;
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(PeersError::Twice { id });
        }
    }
    if peers.is_empty() {
        return Err(PeersError::Empty);
    }
    let mut seen = BTreeMap::new();
    for (id, addr) in &peers {
        if let Some(other) = seen.insert(addr.as_str(), *id) {
            return Err(PeersError::SameAddress {
                first: other,
                second: *id,
                addr: addr.clone(),
            });
        }
    }
    Ok(peers)
}

/// Checks that `addr` is `host:port` with a non-zero numeric port.
pub fn check_addr(addr: &str) -> Result<(), AddrError> {
    let owned = || addr.to_owned();
    if addr.contains("://") {
        return Err(AddrError::Scheme { addr: owned() });
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| AddrError::NoPort { addr: owned() })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(AddrError::NoHost { addr: owned() });
    }
    match port.parse::<u16>() {
        Ok(0) => Err(AddrError::PortZero { addr: owned() }),
        Ok(_) => Ok(()),
        Err(_) => Err(AddrError::PortNotNumber {
            addr: owned(),
            port: port.to_owned(),
        }),
    }
}

/// Why an address is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// It starts with a scheme.
    #[error("address {addr:?} must be HOST:PORT, without a scheme")]
    Scheme {
        /// The address.
        addr: String,
    },
    /// It has no `:PORT`.
    #[error("address {addr:?} has no :PORT")]
    NoPort {
        /// The address.
        addr: String,
    },
    /// Its host is empty or holds spaces or slashes.
    #[error("address {addr:?} has no valid host")]
    NoHost {
        /// The address.
        addr: String,
    },
    /// Its port is 0.
    #[error("address {addr:?}: port 0 cannot be reached by peers")]
    PortZero {
        /// The address.
        addr: String,
    },
    /// Its port is not a number below 65536.
    #[error("address {addr:?}: port {port:?} is not a number")]
    PortNotNumber {
        /// The address.
        addr: String,
        /// The port as written.
        port: String,
    },
}

/// Why a `--peers` list cannot form a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeersError {
    /// A part without `=`.
    #[error("peer {part:?} is not ID=HOST:PORT")]
    Form {
        /// The part.
        part: String,
    },
    /// A part whose id is not a number.
    #[error("peer {part:?}: id {id:?} is not a positive integer")]
    Id {
        /// The part.
        part: String,
        /// The id as written.
        id: String,
    },
    /// A part with id 0.
    #[error("peer {part:?}: Raft node ids start at 1")]
    IdZero {
        /// The part.
        part: String,
    },
    /// A part whose address is not `host:port`.
    #[error("peer {part:?}: {source}")]
    Addr {
        /// The part.
        part: String,
        /// What is wrong with the address.
        source: AddrError,
    },
    /// An id listed twice.
    #[error("peer id {id} is listed twice")]
    Twice {
        /// The id.
        id: u64,
    },
    /// No peers at all.
    #[error("--peers is empty; expected ID=HOST:PORT,...")]
    Empty,
    /// Two ids with the same address.
    #[error("peers {first} and {second} have the same address {addr}")]
    SameAddress {
        /// The lower id.
        first: u64,
        /// The higher id.
        second: u64,
        /// Their address.
        addr: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_addresses() {
        let p = parse_peers("1=10.0.0.1:7070, 2=host-b:7070,3=[::1]:7072").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[&2], "host-b:7070");
        assert_eq!(p[&3], "[::1]:7072");
    }

    #[test]
    fn refuses_what_could_never_form_a_cluster() {
        for (bad, says) in [
            ("", "empty"),
            ("1", "ID=HOST:PORT"),
            ("x=a:1", "positive integer"),
            ("0=a:1", "start at 1"),
            ("1=a", "no :PORT"),
            ("1=a:port", "not a number"),
            ("1=a:0", "port 0"),
            ("1=http://a:1", "scheme"),
            ("1=a:1,1=b:1", "twice"),
            ("1=a:1,2=a:1", "same address"),
            ("1=:7070", "no valid host"),
        ] {
            let err = parse_peers(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?} → {err}");
        }
    }
}
