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
pub fn parse_peers(text: &str) -> Result<Peers, String> {
    let mut peers = Peers::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("peer {part:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer {part:?}: id {id:?} is not a positive integer"))?;
        if id == 0 {
            return Err(format!("peer {part:?}: Raft node ids start at 1"));
        }
        let addr = addr.trim();
        check_addr(addr).map_err(|e| format!("peer {part:?}: {e}"))?;
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("peer id {id} is listed twice"));
        }
    }
    if peers.is_empty() {
        return Err("--peers is empty; expected ID=HOST:PORT,...".into());
    }
    let mut seen = BTreeMap::new();
    for (id, addr) in &peers {
        if let Some(other) = seen.insert(addr.as_str(), *id) {
            return Err(format!(
                "peers {other} and {id} have the same address {addr}"
            ));
        }
    }
    Ok(peers)
}

/// Checks that `addr` is `host:port` with a non-zero numeric port.
pub fn check_addr(addr: &str) -> Result<(), String> {
    if addr.contains("://") {
        return Err(format!(
            "address {addr:?} must be HOST:PORT, without a scheme"
        ));
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("address {addr:?} has no :PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(format!("address {addr:?} has no valid host"));
    }
    match port.parse::<u16>() {
        Ok(0) => Err(format!(
            "address {addr:?}: port 0 cannot be reached by peers"
        )),
        Ok(_) => Ok(()),
        Err(_) => Err(format!("address {addr:?}: port {port:?} is not a number")),
    }
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
            let err = parse_peers(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?} → {err}");
        }
    }
}
