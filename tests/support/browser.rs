//! Headless Chromium (Debian's `chromium`) for tests of pages: the DOM
//! after the page's scripts ran, and screenshots. The flags keep it off the
//! network and out of the machine's own profile.

use std::path::Path;
use std::time::Duration;

const CHROMIUM: &str = "chromium";
/// A run of Chromium, page load and 15 s of (virtual) polling included.
const CHROMIUM_WITHIN: Duration = Duration::from_secs(120);

/// Panics with how to install Chromium when it is missing.
pub async fn require_chromium() {
    match tokio::process::Command::new(CHROMIUM).arg("--version").output().await {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`{CHROMIUM} --version` failed ({}): {}; reinstall it: apt-get install -y chromium",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "cannot run `{CHROMIUM}` ({e}); this test drives headless Chromium: apt-get install -y chromium"
        ),
    }
}

/// Headless Chromium on `url` with `extra` arguments; its stdout.
pub async fn chromium(url: &str, extra: &[String]) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(CHROMIUM);
    cmd.args(super::chromium::HEADLESS)
        .args(["--disable-quic", "--virtual-time-budget=15000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(CHROMIUM_WITHIN, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish with {url} within {CHROMIUM_WITHIN:?}"))
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed on {url} ({}): {}",
        out.status,
        tail(&out.stderr)
    );
    out.stdout
}

/// The DOM of `url` once its scripts ran, serialized.
pub async fn dump_dom(url: &str) -> String {
    let out = chromium(url, &["--dump-dom".into()]).await;
    String::from_utf8(out).expect("the DOM is UTF-8")
}

/// A screenshot of `url` into `path`, of `size` (width, height) pixels.
pub async fn screenshot(url: &str, path: &Path, size: (u32, u32)) {
    let _ = std::fs::remove_file(path);
    chromium(
        url,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={},{}", size.0, size.1),
        ],
    )
    .await;
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A PNG of `width` x `height` with more in it than a blank page.
#[track_caller]
pub fn assert_png(path: &Path, width: u32, height: u32) {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (width, height), "{}", path.display());
    // A blank page of this size compresses to a few KiB; cells, charts and
    // text take far more.
    assert!(
        bytes.len() > 40_000,
        "{} holds {} bytes: a blank page?",
        path.display(),
        bytes.len()
    );
}
