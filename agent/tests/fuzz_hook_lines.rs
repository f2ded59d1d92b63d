//! Fuzz target of the hook endpoint's request parsing: the JSON lines a
//! training process's hook writes to its agent (`hook_endpoint/protocol.rs`:
//! `parse_request`, `parse_registration`, `parse_ack`; `hook_endpoint/records.rs`:
//! `check_report`), driven through a real server on loopback TCP, since
//! the parsers are the connection's private business.
//!
//! Inputs: valid `register`, `report` (every record type: alloc, step,
//! event, snapshot), `poll` and `ack` lines damaged by the shared mutator
//! with JSON tokens, huge and NaN-ish numbers and bytes that are not UTF-8
//! (never a line break: one line in, one answer out), and random bytes; on
//! a registered connection, so that reports and acks get past `register
//! first`, with actions offered now and then so that some acks match one.
//! First, hostile lines: nested past serde_json's depth limit, just under
//! the 1 MiB line limit, a report over its record limit.
//!
//! Property: every line gets exactly one answer, a JSON object with `ok`
//! true, or false and an `error` sentence; the connection stays open; a
//! report's answer counts at most `MAX_RECORDS_PER_REPORT` records and
//! gives at most `MAX_REASONS` reasons; the hub's counters agree with the
//! answers (refusals, accepted and skipped records).
//!
//! Cases: the defaults below, times `GPUMON_FUZZ_SCALE`, or exactly
//! `GPUMON_FUZZ_CASES`; seed `GPUMON_FUZZ_SEED`; see docs/testing.md.

use gpumon_testkit::fuzz as kit;
mod support;

use gpumon_agent::hook_endpoint::{MAX_LINE_BYTES, MAX_REASONS, MAX_RECORDS_PER_REPORT};
use gpumon_proto::{ActionKind, PendingAction};
use serde_json::{json, Value};
use support::{assert_ok, now_s, register, report, Client, Server};

/// Default cases (one line each; about a second in a debug build).
const CASES: u64 = 20_000;

/// Names of the hook protocol, for the mutator's dictionary beside JSON's.
const HOOK_TOKENS: &[&[u8]] = &[
    b"\"v\"",
    b"\"op\"",
    b"\"register\"",
    b"\"report\"",
    b"\"poll\"",
    b"\"ack\"",
    b"\"records\"",
    b"\"type\"",
    b"\"alloc\"",
    b"\"step\"",
    b"\"event\"",
    b"\"snapshot\"",
    b"\"t\"",
    b"\"sections\"",
    b"\"stats\"",
    b"\"device\"",
    b"\"state\"",
    b"\"done\"",
];

const JOB: &str = "run-7";
const RANK: u32 = 3;

/// Valid request lines for a session of rank 3 of `run-7`.
fn seeds() -> Vec<Vec<u8>> {
    let t = now_s();
    let stats = json!({"allocated": 1, "reserved": 2, "active": 1, "inactive_split": 1,
        "peak_allocated": 2, "peak_reserved": 2, "alloc_retries": 0, "ooms": 0});
    let mut alloc = stats.clone();
    alloc["type"] = json!("alloc");
    alloc["t"] = json!(t);
    alloc["device_used"] = json!(40u64 << 30);
    alloc["device_total"] = json!(80u64 << 30);
    let device =
        json!({"index": 3, "uuid": "GPU-5c0a", "name": "H100", "total_bytes": 85520809984u64});
    let requests = [
        register(4242, JOB, RANK, Some(device)),
        report(vec![
            alloc,
            json!({"type": "step", "t": t, "step": 120, "duration_ms": 212.5, "clock": "cuda",
                   "sections": {"data": 12.1, "forward": 80.2, "backward": 110.0}}),
            json!({"type": "event", "t": t, "name": "eval start", "detail": "epoch 3", "job": JOB, "rank": RANK}),
            json!({"type": "snapshot", "t": t, "name": "before", "stats": stats}),
        ]),
        json!({"v": 1, "op": "poll"}),
        json!({"v": 1, "op": "ack", "id": 1, "state": "done", "freed_bytes": 1u64 << 30,
               "at_step": 130, "response": "batch size 32 -> 24", "detail": null}),
        json!({"v": 1, "op": "ack", "id": 2, "state": "failed", "detail": "no CUDA"}),
    ];
    requests
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap())
        .collect()
}

/// What the answers added up to.
#[derive(Debug, Default)]
struct Tally {
    refused: u64,
    accepted: u64,
    skipped: u64,
}

/// Sends `line`, reads its answer and checks it; `None` for a blank line,
/// which gets no answer.
async fn call(client: &mut Client, line: &[u8], tally: &mut Tally) -> Option<Value> {
    let text = line.strip_suffix(b"\r").unwrap_or(line);
    if text.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let mut framed = line.to_vec();
    framed.push(b'\n');
    client.write(&framed).await;
    let shown = String::from_utf8_lossy(line);
    let answer = client
        .read()
        .await
        .unwrap_or_else(|| panic!("the connection closed after {shown}"));
    match answer["ok"] {
        Value::Bool(true) => {}
        Value::Bool(false) => {
            tally.refused += 1;
            let error = answer["error"].as_str();
            assert!(error.is_some_and(|e| !e.is_empty()), "{answer} to {shown}");
        }
        _ => panic!("{answer} to {shown} has no ok"),
    }
    if let (Some(accepted), Some(skipped)) =
        (answer["accepted"].as_u64(), answer["skipped"].as_u64())
    {
        assert!(
            accepted + skipped <= MAX_RECORDS_PER_REPORT as u64,
            "{answer} to {shown}"
        );
        let reasons = answer["reasons"].as_array().map_or(0, Vec::len) as u64;
        assert_eq!(
            reasons,
            skipped.min(MAX_REASONS as u64),
            "{answer} to {shown}"
        );
        tally.accepted += accepted;
        tally.skipped += skipped;
    }
    Some(answer)
}

fn action(id: u64) -> PendingAction {
    PendingAction {
        id,
        job: JOB.into(),
        rank: RANK,
        kind: ActionKind::ReleaseCache,
        reason: "fuzz".into(),
    }
}

/// Raw values that break a field: out of range, mistyped, not JSON at all.
const VALUES: &[&str] = &[
    "NaN",
    "-1",
    "-0",
    "0",
    "1e400",
    "-1e400",
    "1e-400",
    "18446744073709551616",
    "4294967296",
    "4294967295",
    "1.5",
    "null",
    "true",
    "\"\"",
    "\"7\"",
    "[]",
    "{}",
    "[[[[[[[[1]]]]]]]]",
    "\"\\u0000\\n\\u001b\"",
    "\"\\ud800\"",
];

/// Values counted depth first, the root first.
fn count(v: &Value) -> usize {
    1 + match v {
        Value::Object(map) => map.values().map(count).sum(),
        Value::Array(items) => items.iter().map(count).sum(),
        _ => 0,
    }
}

/// Sets the `n`th value (depth first) to `new`; false when there are fewer.
fn set_nth(v: &mut Value, n: &mut usize, new: &Value) -> bool {
    if *n == 0 {
        *v = new.clone();
        return true;
    }
    *n -= 1;
    match v {
        Value::Object(map) => map.values_mut().any(|c| set_nth(c, n, new)),
        Value::Array(items) => items.iter_mut().any(|c| set_nth(c, n, new)),
        _ => false,
    }
}

/// `seed` with one value inside it replaced by a raw hostile one: long
/// strings and arrays, numbers beyond every type, the wrong kind of value.
fn set_field(rng: &mut kit::Rng, seed: &[u8]) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(seed).unwrap();
    let mut n = 1 + rng.below(count(&v) - 1);
    let placeholder = Value::String("\u{1}".into());
    assert!(set_nth(&mut v, &mut n, &placeholder));
    let raw = match rng.below(8) {
        0 => format!(
            "\"{}\"",
            "x".repeat(*rng.pick(&[127, 128, 129, 256, 257, 1024, 1025, 5000]))
        ),
        1 => format!(
            "[{}]",
            vec!["{}"; *rng.pick(&[32, 33, 1024, 1025])].join(",")
        ),
        2 => format!("{}", rng.interesting_u64()),
        3 => format!("{}e{}", rng.next_u64() as i64, rng.below(700) as i64 - 350),
        _ => (*rng.pick(VALUES)).to_owned(),
    };
    serde_json::to_string(&v)
        .unwrap()
        .replace("\"\\u0001\"", &raw)
        .into_bytes()
}

/// A damaged seed (bytes or one field), or random bytes; never a line break.
fn hook_line(rng: &mut kit::Rng, seeds: &[Vec<u8>], dict: &[&[u8]]) -> Vec<u8> {
    let seed = &seeds[rng.below(seeds.len())];
    match rng.below(16) {
        0 => {
            let len = rng.below(200);
            let mut line = rng.bytes(len);
            line.retain(|&b| b != b'\n');
            line
        }
        1..=8 => set_field(rng, seed),
        _ => kit::mutate(rng, seed, seeds, dict, b"\n"),
    }
}

/// Lines just under the 1 MiB limit and nested past serde_json's depth limit.
fn hostile_lines() -> Vec<Vec<u8>> {
    let t = now_s();
    let mut out = Vec::new();
    for depth in [127, 128, 129, 100_000] {
        let nested = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        out.push(format!(r#"{{"v":1,"op":"report","records":{nested}}}"#));
        out.push(format!(r#"{{"v":1,"op":"report","records":[{{"type":"step","t":{t},"step":1,"duration_ms":1,"sections":{nested}}}]}}"#));
        out.push("[".repeat(depth));
    }
    let long = "x".repeat(MAX_LINE_BYTES - 100);
    out.push(format!(
        r#"{{"v":1,"op":"report","records":[{{"type":"event","t":{t},"name":"{long}"}}]}}"#
    ));
    let many = vec![format!(r#"{{"type":"step","t":{t},"step":1,"duration_ms":1}}"#); 1025];
    out.push(format!(
        r#"{{"v":1,"op":"report","records":[{}]}}"#,
        many.join(",")
    ));
    out.into_iter().map(String::into_bytes).collect()
}

#[tokio::test]
async fn damaged_requests_get_one_answer_each() {
    let proc_root = tempfile::tempdir().unwrap();
    let server = Server::start("127.0.0.1:0", Some(proc_root.path())).await;
    let mut client = server.connect().await;
    let seeds = seeds();
    let mut tally = Tally::default();
    // Register, then actions 1 and 2 are offered, polled and acknowledged.
    for (i, seed) in seeds.iter().enumerate() {
        let answer = call(&mut client, seed, &mut tally).await.unwrap();
        assert_ok(&answer);
        if i == 0 {
            server.hub.offer_actions(vec![action(1), action(2)], 1);
        }
    }
    // The case loop is synchronous: it makes the lines (and marks where an
    // action is offered), then they are sent in order.
    let mut lines = Vec::new();
    let dict = kit::json_dict(HOOK_TOKENS);
    kit::run("hook lines", CASES, |rng| {
        let offer = rng.one_in(200);
        lines.push((offer, hook_line(rng, &seeds, &dict)));
    });
    let mut next_action = 3;
    let mut answer = None;
    for line in hostile_lines() {
        answer = call(&mut client, &line, &mut tally).await;
    }
    let error = answer.unwrap()["error"].to_string();
    assert!(error.contains("at most 1024 records"), "{error}");
    for (offer, line) in &lines {
        if *offer {
            server.hub.offer_actions(vec![action(next_action)], 1);
            next_action += 1;
        }
        call(&mut client, line, &mut tally).await;
    }
    assert_ok(&client.call(json!({"v": 1, "op": "poll"})).await);
    let stats = server.hub.stats();
    assert_eq!(stats.refused, tally.refused);
    assert_eq!(
        (stats.records_accepted, stats.records_skipped),
        (tally.accepted, tally.skipped)
    );
    assert!(tally.accepted > 0 && tally.skipped > 0 && tally.refused > 0);
    eprintln!("hook lines: {tally:?}");
    server.stop().await;
}
