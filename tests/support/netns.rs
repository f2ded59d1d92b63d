//! Network namespaces for replicas that must really lose each other: one
//! namespace per replica, each with a veth pair to a bridge in the test's
//! own namespace, which also has an address on the bridge, so the test is
//! a client that can reach every replica. Two kinds of cut:
//!
//! - [`Net::isolate`] takes the replica's link down: nobody reaches it,
//!   the test included;
//! - [`Net::cut_from_peers`] adds blackhole routes inside the replica's
//!   namespace and the others' to each other's addresses: the replicas
//!   lose each other, the test still reaches all of them.
//!
//! Needs root and `ip` (iproute2). Names carry this process's id and a
//! counter, so runs
//! and tests do not collide; everything is deleted on drop.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Port every replica listens on, in its own namespace.
pub const PORT: u16 = 7070;

/// The namespaces and the bridge; removed on drop.
#[derive(Debug)]
pub struct Net {
    tag: String,
    subnet: u32,
    n: usize,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// `n` namespaces on one bridge, or why they cannot be made here (not
    /// root, no `ip`, no namespace support).
    pub fn create(n: usize) -> Result<Self, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let net = Self {
            tag: format!("g{}x{k}", pid % 100_000),
            subnet: 10 + (pid * 7 + k) % 200,
            n,
        };
        net.build().inspect_err(|_| net.teardown())?;
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// The namespace of replica `i` (1-based).
    pub fn ns(&self, i: usize) -> String {
        format!("{}ns{i}", self.tag)
    }

    fn veth(&self, i: usize) -> String {
        format!("{}v{i}", self.tag)
    }

    /// Replica `i`'s address.
    pub fn addr(&self, i: usize) -> String {
        format!("10.213.{}.{i}", self.subnet)
    }

    /// Replica `i`'s `host:port`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("{}:{PORT}", self.addr(i))
    }

    fn build(&self) -> Result<(), String> {
        let bridge = self.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("10.213.{}.254/24", self.subnet),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 1..=self.n {
            let (ns, veth) = (self.ns(i), self.veth(i));
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &bridge])?;
            ip(&["link", "set", &veth, "up"])?;
            let cidr = format!("{}/24", self.addr(i));
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn teardown(&self) {
        for i in 1..=self.n {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }

    /// Nobody reaches replica `i`, nor it anybody.
    pub fn isolate(&self, i: usize) {
        ip(&["link", "set", &self.veth(i), "down"]).expect("link down");
    }

    /// Replica `i` and the other replicas lose each other; the test still
    /// reaches every one.
    pub fn cut_from_peers(&self, i: usize) {
        for j in (1..=self.n).filter(|j| *j != i) {
            ip(&[
                "-n",
                &self.ns(i),
                "route",
                "add",
                "blackhole",
                &self.addr(j),
            ])
            .expect("route");
            ip(&[
                "-n",
                &self.ns(j),
                "route",
                "add",
                "blackhole",
                &self.addr(i),
            ])
            .expect("route");
        }
    }

    /// Undoes [`Self::isolate`] and [`Self::cut_from_peers`] for replica `i`.
    pub fn heal(&self, i: usize) {
        let _ = ip(&["link", "set", &self.veth(i), "up"]);
        for j in (1..=self.n).filter(|j| *j != i) {
            let _ = ip(&[
                "-n",
                &self.ns(i),
                "route",
                "del",
                "blackhole",
                &self.addr(j),
            ]);
            let _ = ip(&[
                "-n",
                &self.ns(j),
                "route",
                "del",
                "blackhole",
                &self.addr(i),
            ]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.teardown();
    }
}
