//! Where the hook endpoint listens: `unix:PATH` or a loopback `HOST:PORT`.
//!
//! The hook endpoint trusts what a connected process tells it about itself
//! (checked against the kernel and `/proc` where possible), so it must never
//! be reachable from another machine (docs/operations.md, "Security"). A [`HookAddr`]
//! is therefore valid by construction: parsing refuses any TCP host that is
//! not loopback, and the socket path's length is checked against the
//! kernel's `sun_path` limit so the error comes here, with a clear message,
//! rather than from `bind`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

/// Longest Unix socket path, bytes: `sun_path` is 108 bytes on Linux,
/// including the terminating NUL.
pub const MAX_UNIX_PATH_BYTES: usize = 107;

/// The address of the hook endpoint; see the module docs.
///
/// Parsed from `unix:PATH`, `IP:PORT`, `[IPV6]:PORT` or `localhost:PORT`;
/// [`fmt::Display`] writes the same syntax back (IPv6 in brackets), so
/// `addr.to_string().parse()` gives `addr` again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HookAddr(Kind);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Kind {
    Unix(PathBuf),
    Tcp { host: Host, port: u16 },
}

/// A loopback host: an IP in 127.0.0.0/8 or `::1`, or the name `localhost`
/// (kept as written so the address displays as the user gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Host {
    Localhost,
    Ip(IpAddr),
}

/// Why a hook address was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HookAddrError {
    /// Neither `unix:PATH` nor `HOST:PORT`.
    #[error("hook address {0:?} is neither unix:PATH nor HOST:PORT (e.g. unix:/run/gpumon/hook.sock or 127.0.0.1:7071)")]
    Syntax(String),
    /// `unix:` with nothing after it.
    #[error("hook address {0:?} has an empty socket path")]
    EmptyPath(String),
    /// The socket path does not fit in `sun_path`.
    #[error("hook socket path {path:?} is {len} bytes long; Unix socket paths are limited to {MAX_UNIX_PATH_BYTES} bytes: choose a shorter one")]
    PathTooLong {
        /// The path as given.
        path: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The port is not a number in 0..=65535.
    #[error("hook address {0:?} has no valid port (0..=65535)")]
    Port(String),
    /// The host is not loopback.
    #[error("hook address {0:?} is not loopback: the hook endpoint listens only on 127.0.0.0/8, ::1, localhost or a Unix socket (unix:PATH), never where another machine can reach it")]
    NotLoopback(String),
}

impl HookAddr {
    /// A Unix socket at `path`.
    ///
    /// # Errors
    ///
    /// When the path is empty or longer than [`MAX_UNIX_PATH_BYTES`].
    pub fn unix(path: impl Into<PathBuf>) -> Result<Self, HookAddrError> {
        let path = path.into();
        let len = path.as_os_str().len();
        let shown = || path.display().to_string();
        if len == 0 {
            return Err(HookAddrError::EmptyPath(format!("unix:{}", shown())));
        }
        if len > MAX_UNIX_PATH_BYTES {
            return Err(HookAddrError::PathTooLong { path: shown(), len });
        }
        Ok(Self(Kind::Unix(path)))
    }

    /// A TCP address, which must be loopback.
    ///
    /// # Errors
    ///
    /// [`HookAddrError::NotLoopback`] for any other IP.
    pub fn tcp(addr: SocketAddr) -> Result<Self, HookAddrError> {
        if !addr.ip().is_loopback() {
            return Err(HookAddrError::NotLoopback(addr.to_string()));
        }
        Ok(Self(Kind::Tcp {
            host: Host::Ip(addr.ip()),
            port: addr.port(),
        }))
    }

    /// The socket path, for a Unix address.
    pub fn unix_path(&self) -> Option<&Path> {
        match &self.0 {
            Kind::Unix(path) => Some(path),
            Kind::Tcp { .. } => None,
        }
    }

    /// The socket address to bind, for a TCP address. `localhost` is
    /// 127.0.0.1: it is not looked up, so a resolver cannot move the
    /// endpoint off loopback.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match &self.0 {
            Kind::Unix(_) => None,
            Kind::Tcp { host, port } => {
                let ip = match host {
                    Host::Localhost => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    Host::Ip(ip) => *ip,
                };
                Some(SocketAddr::new(ip, *port))
            }
        }
    }

    /// The same address on another port (a TCP address bound to port 0
    /// reports its real port this way); a Unix address is returned as is.
    pub(crate) fn with_port(&self, port: u16) -> Self {
        match &self.0 {
            Kind::Unix(_) => self.clone(),
            Kind::Tcp { host, .. } => Self(Kind::Tcp { host: *host, port }),
        }
    }
}

impl FromStr for HookAddr {
    type Err = HookAddrError;

    fn from_str(s: &str) -> Result<Self, HookAddrError> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(HookAddrError::EmptyPath(s.to_owned()));
            }
            return Self::unix(path);
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            rest.split_once("]:")
                .ok_or_else(|| HookAddrError::Syntax(s.to_owned()))?
        } else {
            // A bare IPv6 address (`::1:7071`) splits at its last colon too.
            s.rsplit_once(':')
                .ok_or_else(|| HookAddrError::Syntax(s.to_owned()))?
        };
        if host.is_empty() {
            return Err(HookAddrError::Syntax(s.to_owned()));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| HookAddrError::Port(s.to_owned()))?;
        let host = if host.eq_ignore_ascii_case("localhost") {
            Host::Localhost
        } else {
            match host.parse::<IpAddr>() {
                Ok(ip) if ip.is_loopback() => Host::Ip(ip),
                _ => return Err(HookAddrError::NotLoopback(s.to_owned())),
            }
        };
        Ok(Self(Kind::Tcp { host, port }))
    }
}

impl fmt::Display for HookAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Unix(path) => write!(f, "unix:{}", path.display()),
            Kind::Tcp {
                host: Host::Localhost,
                port,
            } => write!(f, "localhost:{port}"),
            Kind::Tcp {
                host: Host::Ip(ip),
                port,
            } => write!(f, "{}", SocketAddr::new(*ip, *port)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn round_trip(s: &str, shown: &str) {
        let addr: HookAddr = s.parse().unwrap();
        assert_eq!(addr.to_string(), shown);
        assert_eq!(shown.parse::<HookAddr>().unwrap(), addr);
    }

    #[test]
    fn parses_and_displays_every_form() {
        round_trip("unix:/run/gpumon/hook.sock", "unix:/run/gpumon/hook.sock");
        round_trip("unix:relative/hook.sock", "unix:relative/hook.sock");
        round_trip("127.0.0.1:7071", "127.0.0.1:7071");
        round_trip("127.9.8.7:0", "127.9.8.7:0");
        round_trip("[::1]:7071", "[::1]:7071");
        round_trip("::1:7071", "[::1]:7071");
        round_trip("localhost:7071", "localhost:7071");
        round_trip("LocalHost:7071", "localhost:7071");
    }

    #[test]
    fn addresses_resolve_without_a_lookup() {
        let a: HookAddr = "localhost:9".parse().unwrap();
        assert_eq!(a.tcp_addr(), Some("127.0.0.1:9".parse().unwrap()));
        assert_eq!(a.unix_path(), None);
        assert_eq!(a.with_port(10).to_string(), "localhost:10");
        let u: HookAddr = "unix:/x/y".parse().unwrap();
        assert_eq!(u.unix_path(), Some(Path::new("/x/y")));
        assert_eq!(u.tcp_addr(), None);
    }

    #[test]
    fn refuses_anything_another_machine_could_reach() {
        for bad in [
            "0.0.0.0:7071",
            "10.0.0.5:7071",
            "[::]:7071",
            "[fd00::1]:7071",
            "[::ffff:127.0.0.1]:7071",
            "gpu-node-7:7071",
            "localhost.evil.example:7071",
        ] {
            let e = bad.parse::<HookAddr>().unwrap_err();
            assert!(matches!(e, HookAddrError::NotLoopback(_)), "{bad}: {e}");
            assert!(e.to_string().contains("loopback"), "{e}");
        }
        let e = HookAddr::tcp("192.168.1.2:1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("192.168.1.2:1"), "{e}");
        assert!(HookAddr::tcp("127.0.0.1:1".parse().unwrap()).is_ok());
    }

    #[test]
    fn refuses_malformed_addresses_with_the_reason() {
        let err = |s: &str| s.parse::<HookAddr>().unwrap_err();
        assert!(matches!(err("hook.sock"), HookAddrError::Syntax(_)));
        assert!(matches!(err(":7071"), HookAddrError::Syntax(_)));
        assert!(matches!(err("[::1]7071"), HookAddrError::Syntax(_)));
        assert!(matches!(err("127.0.0.1:http"), HookAddrError::Port(_)));
        assert!(matches!(err("127.0.0.1:70000"), HookAddrError::Port(_)));
        assert!(matches!(err("unix:"), HookAddrError::EmptyPath(_)));
        let long = format!("unix:/{}", "s".repeat(MAX_UNIX_PATH_BYTES));
        let e = err(&long);
        assert!(
            matches!(e, HookAddrError::PathTooLong { len: 108, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("107 bytes"), "{e}");
        assert!(err("unix").to_string().contains("unix:PATH"));
    }
}
