//! A real Prometheus server (Debian's `prometheus`) for the tests that
//! scrape coordinators with it or write to it, killed when dropped; and
//! its `promtool`.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What to run when Prometheus is missing.
pub const INSTALL: &str = "install it with: apt-get install -y prometheus";

/// A running Prometheus and its web address (`127.0.0.1:PORT`).
pub struct Prometheus {
    child: Child,
    pub web: String,
}

/// How Prometheus runs beyond its config file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Accept remote-write on `/api/v1/write`.
    pub remote_write_receiver: bool,
}

impl Prometheus {
    /// Starts `/usr/bin/prometheus` with `config`, its data in `tsdb`, on a
    /// free loopback port.
    pub fn start(config: &Path, tsdb: &Path) -> Self {
        Self::start_with(config, tsdb, Options::default())
    }

    /// Like [`Prometheus::start`], with `options`.
    pub fn start_with(config: &Path, tsdb: &Path, options: Options) -> Self {
        let binary = Path::new("/usr/bin/prometheus");
        assert!(binary.exists(), "no /usr/bin/prometheus; {INSTALL}");
        let web = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address={web}"));
        if options.remote_write_receiver {
            command.arg("--web.enable-remote-write-receiver");
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus ({e}); {INSTALL}"));
        Self { child, web }
    }
}

impl Prometheus {
    /// Waits until `/-/ready` answers 200, bounded by `within`.
    pub async fn wait_ready(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let url = format!("http://{}/-/ready", self.web);
        loop {
            if let Ok(resp) = super::http().get(&url).send().await {
                if resp.status().is_success() {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Prometheus at {} not ready within {within:?}",
                self.web
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
