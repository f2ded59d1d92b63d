//! Fuzz target of the trace reader (`gpumon_trace::from_reader`,
//! `TraceReader::next_ref` and `next_record`), on whole traces.
//!
//! `trace_props.rs` damages one record line between two sound ones; this
//! target damages whole files: the header, several lines at once, line
//! breaks added and removed, every record type in its canonical form (the
//! scanner's path) and spaced out (the serde path), gzip-compressed traces
//! with damaged compressed bytes, and hostile lines: deep nesting, huge and
//! NaN-ish numbers, invalid UTF-8, lines at and past `MAX_LINE_BYTES`.
//!
//! Property: nothing panics. A bad header is a header error. After it,
//! every line is a record (with a finite time), a counted skip, or the
//! error that ends the read, naming the line it is on; a damaged gzip
//! stream may end the read with an I/O error. What the reader accepts,
//! the writer writes and the reader accepts again, all of it.
//!
//! Cases: the defaults below, times `GPUMON_FUZZ_SCALE`, or exactly
//! `GPUMON_FUZZ_CASES`; seed `GPUMON_FUZZ_SEED`; see docs/testing.md.

use gpumon_testkit::fuzz as kit;

use std::io::{Cursor, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use gpumon_trace::{
    from_reader, TraceError, TraceReader, TraceRecord, TraceWriter, MAX_LINE_BYTES,
};
use kit::Rng;

/// Default cases (a few seconds in a debug build).
const CASES: u64 = 30_000;

const HEADER: &str = r#"{"gpumon_trace": 1, "source": "fuzz"}"#;

/// One line of each record type, canonical as `gpumon record` writes them,
/// and lines the reader skips.
const LINES: &[&str] = &[
    r#"{"type":"gpu","node":"node-0","gpu":0,"uuid":"GPU-030f5d59","name":"A100-40GB","total":42505076736,"used":1073741824,"util":97,"sm_clock_mhz":1980,"power_w":70.5,"procs":[{"pid":4242,"used":1048576},{"pid":7,"used":0}],"t":1.5}"#,
    r#"{"type":"gpu","node":"node-1","gpu":1,"uuid":"GPU-a009","name":"A100","total":42505076736,"used":0,"procs":[],"t":0.0}"#,
    r#"{"type":"rank","job":"job-1","rank":3,"local_rank":3,"world_size":8,"node":"node-0","gpu":3,"pid":4242,"t":0.5}"#,
    r#"{"type":"alloc","job":"job-1","rank":0,"allocated":25363757669,"reserved":25857884160,"peak_allocated":25471561428,"inactive_split":231793638,"alloc_retries":0,"ooms":0,"t":5.001}"#,
    r#"{"type":"step","job":"job-1","rank":0,"step":12,"duration_ms":1292.15,"sections":{"data":42.86,"forward":382.33,"backward":758.94},"t":5.872}"#,
    r#"{"type":"event","job":"job-1","rank":1,"name":"eval \"start\"","detail":"epoch 3\n\u00e9","t":7.25}"#,
    r#"{"type":"event","job":"job-1","rank":1,"name":"ckpt","t":8}"#,
    r#"{"type":"hologram","x":[1,{"y":null}]}"#,
    r#"{"t":1}"#,
    "",
];

/// Names of the trace format, for the mutator's dictionary beside JSON's.
const TRACE_TOKENS: &[&[u8]] = &[
    b"\"t\"",
    b"\"type\"",
    b"\"gpu\"",
    b"\"rank\"",
    b"\"alloc\"",
    b"\"step\"",
    b"\"event\"",
    b"\"procs\"",
    b"\"sections\"",
    b"\"used\"",
    b"\"total\"",
    b"\"detail\"",
    b"\n",
    b"\n\n",
];

/// The same line with spaces after `:` and `,`: valid JSON the canonical
/// scanner leaves to the serde path.
fn spaced(line: &str) -> String {
    line.replace("\":", "\": ").replace(",\"", ", \"")
}

/// A trace of 1..=12 seed lines, some spaced out.
fn seed_trace(rng: &mut Rng) -> Vec<u8> {
    let mut text = format!("{HEADER}\n");
    for _ in 0..=rng.below(12) {
        let line = *rng.pick(LINES);
        let line = if rng.one_in(3) {
            spaced(line)
        } else {
            line.to_owned()
        };
        text.push_str(&line);
        text.push_str(if rng.one_in(8) { "\r\n" } else { "\n" });
    }
    text.into_bytes()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// What a read came to.
#[derive(Debug, Default)]
struct Outcome {
    records: Vec<TraceRecord>,
    skipped: u64,
    error: Option<String>,
}

/// Lines passed over: blank, of an unknown type, or invalid.
fn skipped<R: std::io::BufRead>(r: &TraceReader<R>) -> u64 {
    let s = r.stats();
    s.invalid + s.blank_lines + s.unknown_types.values().sum::<u64>()
}

/// Reads `bytes` to the end or the first error, checking the property.
/// `io_may_fail`: a damaged gzip stream may end the read with an I/O error.
fn read_all(bytes: &[u8], owned: bool, io_may_fail: bool) -> Outcome {
    let mut r = match from_reader(Cursor::new(bytes)) {
        Ok(r) => r,
        Err(e) => {
            match &e {
                TraceError::BadHeader(_) | TraceError::UnsupportedVersion(_) => {}
                TraceError::LineTooLong { line } => assert_eq!(*line, 1),
                TraceError::Io(_) => assert!(io_may_fail, "{e}"),
                TraceError::Malformed { .. } => panic!("a header is not a record line: {e}"),
            }
            return Outcome {
                error: Some(e.to_string()),
                ..Outcome::default()
            };
        }
    };
    let mut out = Outcome::default();
    loop {
        let next = if owned {
            r.next_record()
        } else {
            r.next_ref().map(|rec| rec.map(|rec| rec.to_owned()))
        };
        match next {
            Ok(Some(record)) => {
                assert!(record.t().is_finite(), "{record:?}");
                out.records.push(record);
            }
            Ok(None) => {
                assert_eq!(out.records.len() as u64 + skipped(&r), r.lines_read() - 1);
                break;
            }
            Err(e) => {
                match &e {
                    TraceError::Malformed { line, .. } | TraceError::LineTooLong { line } => {
                        assert_eq!(*line, r.lines_read(), "{e}");
                        assert_eq!(out.records.len() as u64 + skipped(&r), line - 2);
                        assert!(e.to_string().starts_with("line "), "{e}");
                    }
                    TraceError::Io(_) => assert!(io_may_fail, "{e}"),
                    _ => panic!("a header error after the header: {e}"),
                }
                out.error = Some(e.to_string());
                break;
            }
        }
    }
    assert_eq!(r.stats().records, out.records.len() as u64);
    out.skipped = skipped(&r);
    out
}

/// What the reader accepted, written again, reads back whole.
fn check_rewrite(records: &[TraceRecord]) {
    let mut w = TraceWriter::new(Vec::new(), "fuzz").unwrap();
    for record in records {
        w.write(record).unwrap();
    }
    let again = read_all(&w.finish().unwrap(), true, false);
    assert_eq!(again.error, None);
    assert_eq!((again.records.len(), again.skipped), (records.len(), 0));
}

#[test]
fn seed_traces_read_whole() {
    let out = read_all(
        &format!("{HEADER}\n{}\n", LINES.join("\n")).into_bytes(),
        false,
        false,
    );
    assert_eq!((out.records.len(), out.skipped, out.error), (7, 3, None));
    let spaced: Vec<String> = LINES.iter().map(|l| spaced(l)).collect();
    let out = read_all(
        &format!("{HEADER}\n{}\n", spaced.join("\n")).into_bytes(),
        true,
        false,
    );
    assert_eq!((out.records.len(), out.skipped, out.error), (7, 3, None));
}

#[test]
fn damaged_traces_are_records_skips_or_an_error_naming_the_line() {
    let (mut read, mut failed) = (0u64, 0u64);
    let dict = kit::json_dict(TRACE_TOKENS);
    kit::run("trace", CASES, |rng| {
        let trace = seed_trace(rng);
        let mut damaged = if rng.one_in(8) {
            // The header alone, damaged.
            let end = trace.iter().position(|&b| b == b'\n').unwrap();
            let mut header = kit::mutate(rng, &trace[..end], &[], &dict, b"\n");
            header.extend_from_slice(&trace[end..]);
            header
        } else if rng.one_in(2) {
            kit::mutate(rng, &trace, std::slice::from_ref(&trace), &dict, &[])
        } else {
            // One record line damaged, the others sound.
            let mut lines: Vec<&[u8]> = trace.split(|&b| b == b'\n').collect();
            let i = 1 + rng.below(lines.len() - 1);
            let line = kit::mutate(rng, lines[i], &[], &dict, b"\n");
            lines[i] = &line;
            lines.join(&b'\n')
        };
        if rng.one_in(6) {
            damaged = gzip(&damaged);
            if rng.one_in(2) {
                // Damage past the magic bytes, so the reader still inflates.
                let body = kit::mutate(rng, &damaged[2..], &[], &[], &[]);
                damaged.truncate(2);
                damaged.extend(body);
            }
        }
        let gzipped = damaged.starts_with(&[0x1f, 0x8b]);
        let out = read_all(&damaged, rng.one_in(2), gzipped);
        if out.error.is_some() {
            failed += 1;
        }
        read += out.records.len() as u64;
        check_rewrite(&out.records);
    });
    eprintln!("trace: {read} records read, {failed} reads ended by an error");
    assert!(read > 0 && failed > 0);
}

/// `line` between two sound records: the first comes back, then `line` is
/// a record, a skip, or the error naming line 3.
fn check_hostile(line: &[u8]) {
    let mut trace = format!("{HEADER}\n{}\n", LINES[3]).into_bytes();
    trace.extend_from_slice(line);
    trace.push(b'\n');
    trace.extend_from_slice(LINES[4].as_bytes());
    for owned in [false, true] {
        let out = read_all(&trace, owned, false);
        assert!(!out.records.is_empty());
        if let Some(error) = &out.error {
            assert!(error.starts_with("line 3"), "{error}");
        }
    }
}

fn nested(depth: usize, open: &str, close: &str) -> Vec<u8> {
    let mut line = br#"{"type":"gpu","x":"#.to_vec();
    line.extend(open.repeat(depth).bytes());
    line.extend(close.repeat(depth).bytes());
    line.push(b'}');
    line
}

#[test]
fn hostile_lines_are_records_skips_or_an_error_naming_the_line() {
    for depth in [64, 127, 128, 129, 1_000, 100_000] {
        check_hostile(&nested(depth, "[", "]"));
        check_hostile(&nested(depth, r#"{"a":"#, "}"));
        check_hostile(&nested(depth, "[", ""));
    }
    let huge = format!("1{}", "0".repeat(4000));
    for number in [
        "NaN",
        "-Infinity",
        "1e999999999",
        "-0.0e-999999",
        huge.as_str(),
    ] {
        for field in ["t", "used", "total", "gpu", "duration_ms", "step"] {
            let line = LINES[0].replace("\"t\":1.5", &format!("\"t\":1.5,\"{field}\":{number}"));
            check_hostile(line.as_bytes());
            let line = LINES[4].replace("\"t\":5.872", &format!("\"{field}\":{number}"));
            check_hostile(line.as_bytes());
        }
    }
    check_hostile(b"{\"type\":\"event\",\"job\":\"\xff\xfe\",\"rank\":0,\"name\":\"x\",\"t\":1}");
    check_hostile(b"{\"type\":\"ev\xc3nt\"}");
    check_hostile(b"\xef\xbb\xbf{\"type\":\"rank\"}");
    for len in [
        MAX_LINE_BYTES - 1,
        MAX_LINE_BYTES,
        MAX_LINE_BYTES + 1,
        3 * MAX_LINE_BYTES,
    ] {
        let pad = len.saturating_sub(LINES[6].len());
        let line = LINES[6].replace("\"ckpt\"", &format!("\"{}\"", "x".repeat(pad)));
        check_hostile(line.as_bytes());
        check_hostile(&vec![b' '; len]);
    }
}
