//! Whether an address names this machine only: the one rule the
//! coordinator (its `--listen`) and the agent (its coordinator URLs) use to
//! decide that running without secrets is safe.

/// Whether `host_port` (`HOST:PORT`, `[V6]:PORT`, or a bare host) names a
/// loopback host: an IP in 127.0.0.0/8 or `::1`, or `localhost`.
pub fn is_loopback_authority(host_port: &str) -> bool {
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => host_port,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a base URL (`http://HOST:PORT/...`) names a loopback host.
pub fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    is_loopback_authority(rest.split('/').next().unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_others() {
        for yes in [
            "127.0.0.1:7070",
            "127.9.9.9:1",
            "[::1]:7070",
            "localhost:7070",
            "LOCALHOST",
        ] {
            assert!(is_loopback_authority(yes), "{yes}");
        }
        for no in [
            "0.0.0.0:7070",
            "10.0.0.5:7070",
            "[::]:7070",
            "example.com:7070",
            "::1",
        ] {
            assert!(!is_loopback_authority(no), "{no}");
        }
        assert!(is_loopback_url("http://127.0.0.1:7070/api"));
        assert!(is_loopback_url("https://[::1]:7070"));
        assert!(!is_loopback_url("http://10.0.0.1:7070"));
    }
}
