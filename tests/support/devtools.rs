//! Headless Chromium driven in real time over the DevTools protocol, for
//! what a page measures of itself with its fetches included (the dashboard's
//! first render). `browser.rs` runs Chromium on a virtual clock
//! (`--virtual-time-budget`), which stands still while fetches are pending,
//! and `--dump-dom` without it serializes the page at its load event, before
//! the first answers; neither can time a page that fetches its data.
//!
//! The protocol runs on a pipe (`--remote-debugging-pipe`: commands in on
//! fd 3, answers out on fd 4, each a JSON message ended by a NUL byte), so
//! nothing listens on a port and no WebSocket client is needed: `sh` puts
//! the test's pipes to Chromium's stdin and stdout on those descriptors.
//! Every wait is bounded; Chromium is killed when the page drops.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::Instant;

const CHROMIUM: &str = "chromium";
/// One protocol answer, Chromium's start included on a loaded machine.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How often `wait_for` asks again: a cheap evaluation between the page's
/// tasks, often enough to see a change within a poll of the dashboard.
const POLL: Duration = Duration::from_millis(50);

/// A page open in headless Chromium, on the real clock.
#[derive(Debug)]
pub struct LivePage {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    /// The protocol session attached to the page.
    session: String,
    next_id: u64,
    /// The profile (`profile/`) and Chromium's stderr (`stderr.log`).
    dir: tempfile::TempDir,
}

impl LivePage {
    /// Starts Chromium on `url` and attaches to its page; navigation starts
    /// with the browser, so the page's clock (`performance.now()`) starts
    /// at its navigation, not at this call.
    pub async fn open(url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(CHROMIUM)
            .args(super::chromium::HEADLESS)
            .args(["--disable-quic", "--remote-debugging-pipe"])
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join("profile").display()
            ))
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
        let to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        let mut page = Self {
            child,
            to,
            from,
            session: String::new(),
            next_id: 0,
            dir,
        };
        // The page's target appears once the browser made its window.
        let deadline = Instant::now() + ANSWER_WITHIN;
        let target = loop {
            let targets = page
                .call(None, "Target.getTargets", json!({}))
                .await
                .unwrap_or_else(|e| page.fail(&format!("Target.getTargets: {e}")));
            let found = targets["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .map(|t| t["targetId"].clone());
            if let Some(id) = found {
                break id;
            }
            if Instant::now() >= deadline {
                page.fail(&format!(
                    "no page target within {ANSWER_WITHIN:?}: {targets}"
                ));
            }
            tokio::time::sleep(POLL).await;
        };
        let attached = page
            .call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await
            .unwrap_or_else(|e| page.fail(&format!("Target.attachToTarget: {e}")));
        page.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        page
    }

    /// `expression`'s value in the page (JSON; `null` for `undefined`), or
    /// why there is none (an exception, or no document yet).
    pub async fn eval(&mut self, expression: &str) -> Result<Value, String> {
        let session = self.session.clone();
        let answer = self
            .call(
                Some(&session),
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true }),
            )
            .await?;
        if let Some(e) = answer.get("exceptionDetails") {
            return Err(e.to_string());
        }
        Ok(answer["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// The first value of `expression` other than `null` (or `false`),
    /// asked every 50 ms for up to `within` of real time; panics with the
    /// last answer when there is none by then.
    pub async fn wait_for(&mut self, expression: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let last = match self.eval(expression).await {
                Ok(Value::Null | Value::Bool(false)) => "null".to_owned(),
                Ok(value) => return value,
                // Early on the page may have no document yet.
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "`{expression}` still {last} after {within:?} of real time"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Closes the browser and waits for it (bounded; killed otherwise).
    pub async fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({})).await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// Sends `method` (to the page's session, or the browser's) and reads up
    /// to its answer, passing over events; its `result` or its `error`.
    async fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        let answer = tokio::time::timeout(ANSWER_WITHIN, async {
            self.to.write_all(&bytes).await?;
            self.to.flush().await?;
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if self.from.read_until(0, &mut buf).await? == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                let msg: Value = serde_json::from_slice(buf.strip_suffix(&[0]).unwrap_or(&buf))
                    .map_err(std::io::Error::other)?;
                if msg["id"] == id {
                    return Ok(msg);
                }
            }
        })
        .await;
        match answer {
            Ok(Ok(msg)) => match msg.get("error") {
                Some(e) => Err(e.to_string()),
                None => Ok(msg["result"].clone()),
            },
            Ok(Err(e)) => self.fail(&format!("{method}: the pipe from chromium: {e}")),
            Err(_) => self.fail(&format!("{method}: no answer within {ANSWER_WITHIN:?}")),
        }
    }

    /// Panics with `what` and the tail of Chromium's stderr.
    #[track_caller]
    fn fail(&self, what: &str) -> ! {
        let log = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        panic!(
            "chromium: {what}\n{}",
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
}
