//! A real Prometheus server (Debian's `prometheus`) for the tests that
//! scrape coordinators with it, killed when dropped; and its `promtool`.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What to run when Prometheus is missing.
pub const INSTALL: &str = "install it with: apt-get install -y prometheus";

/// A running Prometheus and its web address (`127.0.0.1:PORT`).
pub struct Prometheus {
    child: Child,
    pub web: String,
}

impl Prometheus {
    /// Starts `/usr/bin/prometheus` with `config`, its data in `tsdb`, on a
    /// free loopback port.
    pub fn start(config: &Path, tsdb: &Path) -> Self {
        let binary = Path::new("/usr/bin/prometheus");
        assert!(binary.exists(), "no /usr/bin/prometheus; {INSTALL}");
        let web = format!("127.0.0.1:{}", free_port());
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus ({e}); {INSTALL}"));
        Self { child, web }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `promtool ARGS` with `stdin`; the failure names the install command.
pub fn promtool(args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new("/usr/bin/promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run /usr/bin/promtool ({e}); {INSTALL}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
