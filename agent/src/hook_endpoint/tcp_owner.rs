//! Which process is on the other end of a loopback TCP connection.
//!
//! On a Unix socket the kernel names the connecting process
//! (`SO_PEERCRED`); TCP has no such option. For a loopback peer the kernel
//! still knows: the peer's socket is a row of `/proc/net/tcp` (IPv4) or
//! `/proc/net/tcp6` whose local address is the peer's address and whose
//! remote address is the agent's end of the connection. The row gives the
//! socket's user and inode ([`find_socket`]), and the process that holds
//! the inode is the one whose `/proc/PID/fd` has a link to `socket:[INODE]`
//! ([`find_holder`]). With both, the server treats a TCP peer like a Unix
//! socket peer: the per-user connection cap counts the socket's user, and
//! a `register` must claim the holder's PID ([`super::identity`]).
//!
//! Every step is bounded: the tables are read up to [`MAX_TABLE_BYTES`]
//! and the search for the holder visits only processes of the socket's
//! user (and those whose `/proc` entry is root's: a process that changed
//! its user without `exec` is not dumpable, and its entry shows as root's)
//! and stops at the first match or after [`MAX_FD_ENTRIES`] entries
//! (processes and descriptors). Whatever cannot be found (a table over the
//! bound, a row already gone, a holder the agent may not look at, in a PID
//! namespace it does not see, or past the bound) leaves the peer unknown,
//! as every TCP peer was before: its claims are then checked against the
//! claimed process's environment only.
//!
//! A socket can have several holders: a process that forks after
//! connecting shares its socket with the child. The first found is taken
//! as the peer; a claim for another holder of the same socket also stands
//! ([`holds`]).
//!
//! The tables write each address as the kernel holds it in memory: an IPv4
//! address is one 32-bit word, an IPv6 address four, each in hexadecimal in
//! the machine's byte order (so `127.0.0.1` is `0100007F` on x86), and the
//! port as a number in hexadecimal.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Most bytes read of each of `/proc/net/tcp` and `/proc/net/tcp6`, about
/// 400,000 sockets.
pub const MAX_TABLE_BYTES: u64 = 64 << 20;

/// Most directory entries (processes and their descriptors) looked at in
/// search of a socket's holder.
pub const MAX_FD_ENTRIES: usize = 262_144;

/// The peer's end of a loopback TCP connection, from the kernel's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerSocket {
    /// The user that opened it.
    pub uid: u32,
    /// Its inode: `/proc/PID/fd/N` of each holder links to `socket:[inode]`.
    pub inode: u64,
}

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub uid: u32,
    pub inode: u64,
}

/// What the search for a socket's holder found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// The first process found holding it.
    Pid(u32),
    /// No process the agent can look at holds it.
    NotFound,
    /// The search stopped at [`MAX_FD_ENTRIES`].
    TooMany,
}

/// The socket of the peer at `peer` connected to the agent's `local`
/// address (its end of this connection), or `None` when no table under
/// `<proc_root>/net` has it (a peer that is not loopback, or gone already).
pub(crate) fn find_socket(
    proc_root: &Path,
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<PeerSocket> {
    let (peer, local) = (canonical(peer), canonical(local));
    // An IPv4 peer is in `tcp`, or in `tcp6` as `::ffff:a.b.c.d`.
    let tables = match peer.ip() {
        IpAddr::V4(_) => ["tcp", "tcp6"],
        IpAddr::V6(_) => ["tcp6", "tcp"],
    };
    tables.iter().find_map(|table| {
        let file = File::open(proc_root.join("net").join(table)).ok()?;
        let reader = BufReader::new(file.take(MAX_TABLE_BYTES));
        reader
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| parse_row(&line))
            .find(|row| {
                row.inode != 0 && canonical(row.local) == peer && canonical(row.remote) == local
            })
            .map(|row| PeerSocket {
                uid: row.uid,
                inode: row.inode,
            })
    })
}

/// Parses one row of the tables (`None` for the header or anything else
/// that is not a row): `sl: LOCAL REMOTE st tx:rx tr:when retrnsmt uid
/// timeout inode ...`.
pub(crate) fn parse_row(line: &str) -> Option<Row> {
    let mut fields = line.split_whitespace();
    fields.next()?.strip_suffix(':')?;
    let local = parse_addr(fields.next()?)?;
    let remote = parse_addr(fields.next()?)?;
    let mut rest = fields.skip(4);
    let uid = rest.next()?.parse().ok()?;
    let inode = rest.nth(1)?.parse().ok()?;
    Some(Row {
        local,
        remote,
        uid,
        inode,
    })
}

/// `ADDR:PORT` as the tables write it; see the module docs.
fn parse_addr(field: &str) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Eight hex digits: a 32-bit word in the machine's byte order, as bytes.
fn word(hex: &str) -> Option<[u8; 4]> {
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes)
}

/// The address with an IPv4-mapped IPv6 address as IPv4.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The first process of user `uid` under `proc_root` with a descriptor
/// open on socket `inode`; see the module docs for the bounds.
pub(crate) fn find_holder(proc_root: &Path, uid: u32, inode: u64) -> Holder {
    find_holder_within(proc_root, uid, inode, MAX_FD_ENTRIES)
}

fn find_holder_within(proc_root: &Path, uid: u32, inode: u64, max_entries: usize) -> Holder {
    let Ok(procs) = std::fs::read_dir(proc_root) else {
        return Holder::NotFound;
    };
    let target = socket_link(inode);
    let mut seen = 0usize;
    for entry in procs.flatten() {
        seen += 1;
        if seen > max_entries {
            return Holder::TooMany;
        }
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::fs::metadata(entry.path()).is_ok_and(|m| m.uid() == uid || m.uid() == 0) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            seen += 1;
            if seen > max_entries {
                return Holder::TooMany;
            }
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.into_os_string() == target) {
                return Holder::Pid(pid);
            }
        }
    }
    Holder::NotFound
}

/// Whether process `pid` has a descriptor open on socket `inode` (looking
/// at most at [`MAX_FD_ENTRIES`] of them).
pub(crate) fn holds(proc_root: &Path, pid: u32, inode: u64) -> bool {
    let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return false;
    };
    let target = socket_link(inode);
    fds.flatten()
        .take(MAX_FD_ENTRIES)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.into_os_string() == target))
}

/// What a descriptor open on socket `inode` links to.
fn socket_link(inode: u64) -> OsString {
    OsString::from(format!("socket:[{inode}]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Rows as Linux writes them on a little-endian machine (x86, arm64):
    // a listener on 127.0.0.1:57197, a client 127.0.0.1:49244 connected to
    // it, and the listener's end of that connection.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:DF6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1383313 1 000000009f632c8b 100 0 0 10 0
   1: 0100007F:C05C 0100007F:DF6D 01 00000000:00000000 00:00000000 00000000  1000        0 1383314 2 0000000083fcb0f2 20 0 0 10 -1
   2: 0100007F:DF6D 0100007F:C05C 01 00000000:00000000 00:00000000 00000000     0        0 1383315 1 000000005ee525c3 20 0 0 10 -1
";

    // The same over ::1: a listener on port 34549 and a client from 54722;
    // then a client from 127.0.0.1 as an IPv6 socket sees it
    // (::ffff:127.0.0.1), and a TIME_WAIT row, which has no inode.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:86F5 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1382325 1 00000000f30483cb 100 0 0 10 0
   1: 00000000000000000000000001000000:D5C2 00000000000000000000000001000000:86F5 01 00000000:00000000 00:00000000 00000000  1001        0 1382326 2 00000000f2559617 20 0 0 10 -1
   2: 0000000000000000FFFF00000100007F:C05D 0000000000000000FFFF00000100007F:DF6D 01 00000000:00000000 00:00000000 00000000  1002        0 1382330 2 00000000f2559618 20 0 0 10 -1
   3: 00000000000000000000000001000000:D5C3 00000000000000000000000001000000:86F5 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn parses_ipv4_rows() {
        let rows: Vec<Row> = TCP.lines().filter_map(parse_row).collect();
        assert_eq!(rows.len(), 3, "the header is no row");
        assert_eq!(
            rows[1],
            Row {
                local: addr("127.0.0.1:49244"),
                remote: addr("127.0.0.1:57197"),
                uid: 1000,
                inode: 1_383_314,
            }
        );
        assert_eq!(rows[0].remote, addr("0.0.0.0:0"));
        // Not loopback, to see the byte order: 10.1.2.3:8080.
        let row = parse_row("0: 0302010A:1F90 0100007F:0016 01 0:0 0:0 0 7 0 99").unwrap();
        assert_eq!(
            (row.local, row.remote, row.uid, row.inode),
            (addr("10.1.2.3:8080"), addr("127.0.0.1:22"), 7, 99)
        );
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn parses_ipv6_rows() {
        let rows: Vec<Row> = TCP6.lines().filter_map(parse_row).collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            Row {
                local: addr("[::1]:54722"),
                remote: addr("[::1]:34549"),
                uid: 1001,
                inode: 1_382_326,
            }
        );
        assert_eq!(rows[2].local, addr("[::ffff:127.0.0.1]:49245"));
        assert_eq!(rows[3].inode, 0);
        // fd00::1234:5678 shows each word's bytes reversed.
        let row = parse_row(
            "0: 000000FD000000000000000078563412:0050 00000000000000000000000001000000:0001 01 0:0 0:0 0 0 0 5",
        )
        .unwrap();
        assert_eq!(row.local, addr("[fd00::1234:5678]:80"));
    }

    #[test]
    fn refuses_what_is_not_a_row() {
        for bad in [
            "",
            "  sl  local_address rem_address   st",
            "0 0100007F:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: 0100007G:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: 0100007F:DF6D 00000000:0000 0A 0:0 0:0 0 0 0",
            "0: 0100007F:DF6D 00000000:0000 0A 0:0 0:0 0 -1 0 1",
            "0: 0100007F:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 x",
            "0: 0100007F:1DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: 100007F:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: +100007F:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
            "0: 0000000000000000000000000100000é:DF6D 00000000:0000 0A 0:0 0:0 0 0 0 1",
        ] {
            assert_eq!(parse_row(bad), None, "{bad:?}");
        }
    }

    /// A `/proc` with the tables above and `holders`: (pid, descriptors
    /// linking to these targets).
    fn fake_proc(holders: &[(u32, &[&str])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("net");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("tcp"), TCP).unwrap();
        std::fs::write(net.join("tcp6"), TCP6).unwrap();
        for (pid, links) in holders {
            let fd = root.path().join(pid.to_string()).join("fd");
            std::fs::create_dir_all(&fd).unwrap();
            for (n, link) in links.iter().enumerate() {
                std::os::unix::fs::symlink(link, fd.join(n.to_string())).unwrap();
            }
        }
        root
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn finds_the_peers_row_not_the_agents_end() {
        let root = fake_proc(&[]);
        let found = |peer: &str, local: &str| find_socket(root.path(), addr(peer), addr(local));
        let peer = PeerSocket {
            uid: 1000,
            inode: 1_383_314,
        };
        assert_eq!(found("127.0.0.1:49244", "127.0.0.1:57197"), Some(peer));
        assert_eq!(
            found("127.0.0.1:57197", "127.0.0.1:49244"),
            Some(PeerSocket {
                uid: 0,
                inode: 1_383_315
            }),
            "the agent's end is a row too, seen from the other side"
        );
        assert_eq!(found("127.0.0.1:49244", "127.0.0.1:57198"), None);
        assert_eq!(found("127.0.0.2:49244", "127.0.0.1:57197"), None);
        assert_eq!(
            found("[::1]:54722", "[::1]:34549"),
            Some(PeerSocket {
                uid: 1001,
                inode: 1_382_326
            })
        );
        // An IPv4 peer of an IPv6 socket, given either way.
        let mapped = Some(PeerSocket {
            uid: 1002,
            inode: 1_382_330,
        });
        assert_eq!(found("127.0.0.1:49245", "127.0.0.1:57197"), mapped);
        assert_eq!(
            found("[::ffff:127.0.0.1]:49245", "[::ffff:127.0.0.1]:57197"),
            mapped
        );
        // TIME_WAIT: no socket any more.
        assert_eq!(found("[::1]:54723", "[::1]:34549"), None);
        // No tables at all.
        let empty = tempfile::tempdir().unwrap();
        let none = find_socket(empty.path(), addr("127.0.0.1:1"), addr("127.0.0.1:2"));
        assert_eq!(none, None);
    }

    #[test]
    fn finds_the_first_holder_of_the_users_processes() {
        let me = rustix::process::geteuid().as_raw();
        let root = fake_proc(&[
            (300, &["/dev/null", "pipe:[7]"]),
            (301, &["socket:[1383314]", "socket:[1383315]"]),
        ]);
        std::fs::create_dir_all(root.path().join("self")).unwrap();
        assert_eq!(find_holder(root.path(), me, 1_383_314), Holder::Pid(301));
        assert!(holds(root.path(), 301, 1_383_314));
        assert!(!holds(root.path(), 300, 1_383_314));
        assert!(!holds(root.path(), 302, 1_383_314));
        assert_eq!(find_holder(root.path(), me, 1_383_313), Holder::NotFound);
        // Another user's processes are not searched (root's always are):
        // a process of user 4242 holding a socket of 4242's, for a test
        // running as root (only root can give the entry away).
        let other = root.path().join("302");
        std::fs::create_dir_all(other.join("fd")).unwrap();
        std::os::unix::fs::symlink("socket:[1382326]", other.join("fd").join("0")).unwrap();
        if std::os::unix::fs::lchown(&other, Some(4242), None).is_ok() {
            assert_eq!(find_holder(root.path(), 4242, 1_382_326), Holder::Pid(302));
            assert_eq!(find_holder(root.path(), 4243, 1_382_326), Holder::NotFound);
        } else if me != 0 {
            let stranger = me.wrapping_add(1);
            assert_eq!(
                find_holder(root.path(), stranger, 1_383_314),
                Holder::NotFound
            );
        }
        // Over the bound the answer is "unknown", not "nobody".
        assert_eq!(
            find_holder_within(root.path(), me, 1_383_314, 1),
            Holder::TooMany
        );
        assert_eq!(
            find_holder(Path::new("/nonexistent-proc"), me, 1),
            Holder::NotFound
        );
    }

    /// A real connection over loopback, both ends in this process: the
    /// client's socket is found in the real tables and held by this process.
    #[cfg(target_os = "linux")]
    #[test]
    fn finds_this_processs_socket_in_the_real_proc() {
        let root = Path::new(crate::discovery::DEFAULT_PROC_ROOT);
        let me = std::process::id();
        let uid = rustix::process::geteuid().as_raw();
        for ip in ["127.0.0.1", "::1"] {
            let Ok(listener) = std::net::TcpListener::bind((ip, 0)) else {
                assert_eq!(ip, "::1", "IPv4 loopback is always there");
                continue; // a machine without IPv6
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (_server_end, from) = listener.accept().unwrap();
            assert_eq!(from, client.local_addr().unwrap());
            let socket = find_socket(root, from, listener.local_addr().unwrap())
                .unwrap_or_else(|| panic!("{ip}: no row for {from}"));
            assert_eq!(socket.uid, uid);
            assert_eq!(find_holder(root, uid, socket.inode), Holder::Pid(me));
            assert!(holds(root, me, socket.inode));
        }
    }
}
