use std::io::{BufReader, Cursor, Write};

use super::*;

const HEADER: &str = "{\"gpumon_trace\": 1, \"source\": \"test\"}\n";

fn read_all(text: &str) -> (Vec<TraceRecord>, ReadStats) {
    let mut r = TraceReader::new(Cursor::new(text.as_bytes().to_vec())).unwrap();
    let records: Vec<TraceRecord> = (&mut r).collect::<Result<_, _>>().unwrap();
    (records, r.stats().clone())
}

#[test]
fn reads_every_record_type_and_ignores_unknown_fields() {
    let text = format!(
        "{HEADER}{}\n{}\n{}\n{}\n{}\n",
        r#"{"type":"gpu","node":"n0","gpu":1,"uuid":"GPU-1","name":"A100","total":100,"used":40,"util":50,"procs":[{"pid":7,"used":30}],"t":0.5,"future":true}"#,
        r#"{"type":"rank","job":"j","rank":1,"local_rank":1,"world_size":2,"node":"n0","gpu":1,"pid":7,"t":0.5}"#,
        r#"{"type":"alloc","job":"j","rank":1,"allocated":20,"reserved":30,"alloc_retries":2,"t":1.0}"#,
        r#"{"type":"step","job":"j","rank":1,"step":3,"duration_ms":1000.5,"sections":{"forward":300},"t":1.2}"#,
        r#"{"type":"event","job":"j","rank":0,"name":"eval start","t":2}"#,
    );
    let (records, stats) = read_all(&text);
    assert_eq!(records.len(), 5);
    let TraceRecord::Gpu(g) = &records[0] else {
        panic!("{:?}", records[0])
    };
    assert_eq!(
        (g.used, g.total, g.util, g.procs.len()),
        (40, 100, Some(50.0), 1)
    );
    assert!(
        matches!(&records[2], TraceRecord::Alloc(a) if a.alloc_retries == Some(2) && a.ooms.is_none())
    );
    assert!(matches!(&records[3], TraceRecord::Step(s) if s.sections["forward"] == 300.0));
    assert_eq!(records[4].t(), 2.0);
    assert_eq!(stats.records, 5);
    assert_eq!(stats.invalid, 0);
}

#[test]
fn skips_and_counts_unknown_types_and_impossible_values() {
    let text = format!(
        "{HEADER}{}\n\n{}\n{}\n{}\n{}\n{}\n",
        r#"{"type":"hologram","t":1}"#,
        r#"{"type":"gpu","node":"n0","gpu":0,"uuid":"u","total":100,"used":400,"t":1}"#,
        r#"{"type":"gpu","node":"n0","gpu":0,"uuid":"u","total":100,"used":-5,"t":1}"#,
        r#"{"type":"alloc","job":"j","rank":0,"allocated":50,"reserved":10,"t":1}"#,
        r#"{"type":"step","job":"j","rank":0,"step":1,"duration_ms":10,"t":-1e9}"#,
        r#"{"type":"gpu","node":"n0","gpu":0,"uuid":"u","total":100,"used":50,"t":2}"#,
    );
    let (records, stats) = read_all(&text);
    assert_eq!(records.len(), 1, "only the last gpu record is sound");
    assert_eq!(stats.unknown_types.get("hologram"), Some(&1));
    assert_eq!(stats.invalid, 4);
    assert_eq!(stats.blank_lines, 1);
    assert!(
        stats.examples[0].starts_with("line 4:"),
        "{:?}",
        stats.examples
    );
}

#[test]
fn a_line_that_is_not_json_is_an_error_naming_it() {
    let text = format!(
        "{HEADER}{}\n{{\"type\": \"gpu\", oops\n",
        r#"{"type":"event","job":"j","rank":0,"name":"x","t":0}"#
    );
    let mut r = TraceReader::new(Cursor::new(text.into_bytes())).unwrap();
    assert!(r.next_record().unwrap().is_some());
    let err = r.next_record().unwrap_err();
    assert!(
        matches!(err, TraceError::Malformed { line: 3, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("line 3: not valid JSON"),
        "{err}"
    );
}

#[test]
fn refuses_a_missing_header_or_another_version() {
    let err = TraceReader::new(Cursor::new(b"{\"type\":\"gpu\"}\n".to_vec())).unwrap_err();
    assert!(matches!(err, TraceError::BadHeader(_)), "{err}");
    let err = TraceReader::new(Cursor::new(b"{\"gpumon_trace\": 2}\n".to_vec())).unwrap_err();
    assert!(err.to_string().contains("version 2"), "{err}");
    let err = TraceReader::new(Cursor::new(Vec::new())).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}

#[test]
fn refuses_an_overlong_line() {
    let mut text = HEADER.as_bytes().to_vec();
    text.extend(std::iter::repeat_n(b' ', MAX_LINE_BYTES + 10));
    let mut r = TraceReader::new(BufReader::new(Cursor::new(text))).unwrap();
    assert!(matches!(
        r.next_record(),
        Err(TraceError::LineTooLong { line: 2 })
    ));
}

#[test]
fn what_the_writer_writes_the_reader_reads_back() {
    let (records, _) = read_all(&format!(
        "{HEADER}{}\n{}\n",
        r#"{"type":"gpu","node":"n0","gpu":1,"uuid":"GPU-1","name":"A100","total":100,"used":40,"power_w":300.5,"t":0.5}"#,
        r#"{"type":"event","job":"j","rank":0,"name":"ckpt","detail":"step 10","t":2}"#,
    ));
    let mut w = TraceWriter::new(Vec::new(), "roundtrip").unwrap();
    for r in &records {
        w.write(r).unwrap();
    }
    let bytes = w.finish().unwrap();
    let mut back = TraceReader::new(Cursor::new(bytes)).unwrap();
    assert_eq!(back.source(), "roundtrip");
    let again: Vec<TraceRecord> = (&mut back).collect::<Result<_, _>>().unwrap();
    assert_eq!(again, records);
}

#[test]
fn opens_gzip_by_its_magic_bytes_whatever_the_name() {
    let dir = tempdir();
    let plain = dir.join("a.jsonl.gz");
    std::fs::write(
        &plain,
        format!(
            "{HEADER}{}\n",
            r#"{"type":"event","job":"j","rank":0,"name":"x","t":0}"#
        ),
    )
    .unwrap();
    let zipped = dir.join("b.jsonl");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    std::fs::write(&zipped, enc.finish().unwrap()).unwrap();
    for path in [&plain, &zipped] {
        let records: Vec<_> = open(path).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(records.len(), 1, "{}", path.display());
    }
    let Err(err) = open(&dir.join("missing.jsonl")) else {
        panic!("a missing file opened")
    };
    assert!(err.to_string().contains("missing.jsonl"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reads_a_public_corpus_trace_completely() {
    // Counts by type from Python's json module over the same file.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces/fragmentation-0.jsonl.gz");
    let mut r = open(&path).unwrap();
    let mut counts = [0u64; 5];
    let mut last_t = f64::MIN;
    let mut max_back = 0.0f64;
    for rec in &mut r {
        let rec = rec.unwrap();
        let i = match rec {
            TraceRecord::Gpu(_) => 0,
            TraceRecord::Rank(_) => 1,
            TraceRecord::Alloc(_) => 2,
            TraceRecord::Step(_) => 3,
            TraceRecord::Event(_) => 4,
        };
        counts[i] += 1;
        max_back = max_back.max(last_t - rec.t());
        last_t = last_t.max(rec.t());
    }
    assert_eq!(counts, [6200, 8, 1384, 1760, 0]);
    assert_eq!(r.stats().invalid, 0);
    assert!(max_back < 5.0, "records are in order up to small skew");
}

#[test]
fn never_panics_on_mutated_lines() {
    let good = r#"{"type":"gpu","node":"n0","gpu":1,"uuid":"GPU-1","total":100,"used":40,"util":50,"procs":[{"pid":7,"used":30}],"t":0.5}"#;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"{}[]\":,-0123456789.eEtnulfasr \\x";
    for _ in 0..2000 {
        let mut line = good.as_bytes().to_vec();
        for _ in 0..(1 + next() % 4) {
            let i = (next() as usize) % line.len();
            match next() % 3 {
                0 => line[i] = alphabet[(next() as usize) % alphabet.len()],
                1 => {
                    line.remove(i);
                }
                _ => line.insert(i, alphabet[(next() as usize) % alphabet.len()]),
            }
        }
        let mut text = HEADER.as_bytes().to_vec();
        text.extend_from_slice(&line);
        let r = TraceReader::new(Cursor::new(text)).unwrap();
        for item in r {
            if item.is_err() {
                break;
            }
        }
    }
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpumon-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
