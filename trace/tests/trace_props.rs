//! Property tests of the trace reader: whatever a line holds, the reader
//! never panics, and each line ends up as a record, a counted skip, or an
//! error naming that line; what the writer writes reads back unchanged.

use std::collections::BTreeMap;
use std::io::Cursor;

use gpumon_trace::{
    AllocRecord, CapSource, CollectiveArrival, EventRecord, GpuRecord, GroupWait, ProcRecord,
    RankRecord, StepRecord, TraceError, TraceReader, TraceRecord, TraceWriter,
};
use proptest::prelude::*;

const HEADER: &[u8] = b"{\"gpumon_trace\": 1, \"source\": \"props\"}\n";
/// Bytes the writer holds exactly: 1 PiB.
const MAX_BYTES: u64 = 1 << 50;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 192,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A time or gauge as traces hold them: milliseconds precision (serde_json
/// reads back more digits than that only to within an ulp).
fn millis(range: std::ops::Range<i64>) -> impl Strategy<Value = f64> {
    range.prop_map(|v| v as f64 / 1000.0)
}

/// Any text, control characters, quotes and backslashes included.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..10).prop_map(String::from_iter)
}

/// A short name, mostly plain, sometimes needing escapes.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9-]{1,12}", 1 => text()]
}

fn gauge() -> impl Strategy<Value = Option<f64>> {
    prop::option::of(millis(0..10_000_000))
}

fn percent() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(0..=100u64)
}

fn gpu() -> impl Strategy<Value = TraceRecord> {
    (1..=MAX_BYTES)
        .prop_flat_map(|total| {
            (
                (
                    millis(-60_000..10_000_000_000),
                    name(),
                    any::<u32>(),
                    name(),
                    name(),
                ),
                (Just(total), 0..=total, gauge(), gauge(), gauge()),
                prop::collection::vec(
                    (any::<u32>(), 0..=total).prop_map(|(pid, used)| ProcRecord { pid, used }),
                    0..4,
                ),
                // A window's least and newest used, as percent of its peak.
                (percent(), percent()),
            )
        })
        .prop_map(
            |((t, node, gpu, uuid, name), (total, used, util, sm, power), procs, (min, last))| {
                let share =
                    |p: Option<u64>| p.map(|p| (u128::from(used) * u128::from(p) / 100) as u64);
                TraceRecord::Gpu(GpuRecord {
                    t,
                    node,
                    gpu,
                    uuid,
                    name,
                    total,
                    used,
                    used_min: share(min),
                    used_last: share(last),
                    util,
                    sm_clock_mhz: sm,
                    power_w: power,
                    procs,
                })
            },
        )
}

fn rank() -> impl Strategy<Value = TraceRecord> {
    (1..u32::MAX)
        .prop_flat_map(|world_size| {
            (
                millis(-60_000..10_000_000_000),
                name(),
                0..world_size,
                any::<u32>(),
                Just(world_size),
                name(),
                any::<u32>(),
                any::<u32>(),
            )
        })
        .prop_map(|(t, job, rank, local_rank, world_size, node, gpu, pid)| {
            TraceRecord::Rank(RankRecord {
                t,
                job,
                rank,
                local_rank,
                world_size,
                node,
                gpu,
                pid,
            })
        })
}

fn alloc() -> impl Strategy<Value = TraceRecord> {
    (0..=MAX_BYTES)
        .prop_flat_map(|reserved| {
            (
                (millis(-60_000..10_000_000_000), name(), any::<u32>()),
                (0..=reserved, Just(reserved)),
                [
                    prop::option::of(any::<u64>()),
                    prop::option::of(any::<u64>()),
                    prop::option::of(any::<u64>()),
                    prop::option::of(any::<u64>()),
                ],
                device_limit(),
            )
        })
        .prop_map(
            |((t, job, rank), (allocated, reserved), [peak, split, retries, ooms], limit)| {
                let (device_total, cap) = limit;
                TraceRecord::Alloc(AllocRecord {
                    device_total,
                    cap: cap.map(|c| c.0),
                    cap_source: cap.map(|c| c.1),
                    t,
                    job,
                    rank,
                    allocated,
                    reserved,
                    peak_allocated: peak,
                    inactive_split: split,
                    alloc_retries: retries,
                    ooms,
                })
            },
        )
}

/// A device as the process sees it and a cap within it, each maybe absent.
fn device_limit() -> impl Strategy<Value = (Option<u64>, Option<(u64, CapSource)>)> {
    (1..=MAX_BYTES, any::<bool>()).prop_flat_map(|(device, known)| {
        let source = prop_oneof![
            Just(CapSource::MemoryFraction),
            Just(CapSource::AllocConf),
            Just(CapSource::Allocator),
        ];
        (
            Just(known.then_some(device)),
            prop::option::of((1..=device, source)),
        )
    })
}

fn step() -> impl Strategy<Value = TraceRecord> {
    (
        millis(-60_000..10_000_000_000),
        name(),
        any::<u32>(),
        any::<u64>(),
        millis(0..100_000_000),
        prop::collection::btree_map(name(), millis(0..100_000_000), 0..5),
        prop::collection::vec((name(), any::<u32>(), millis(0..100_000_000)), 0..3),
        prop::collection::vec(
            (
                name(),
                any::<u64>(),
                name(),
                millis(0..100_000_000),
                millis(0..100_000_000),
                millis(0..100_000_000),
            ),
            0..3,
        ),
    )
        .prop_map(
            |(t, job, rank, step, duration_ms, sections, waits, listed)| {
                TraceRecord::Step(StepRecord {
                    group: None,
                    t,
                    job,
                    rank,
                    step,
                    duration_ms,
                    sections,
                    waits: waits
                        .into_iter()
                        .map(|(group, calls, wait_ms)| GroupWait {
                            group,
                            calls,
                            wait_ms,
                        })
                        .collect(),
                    collectives: listed
                        .into_iter()
                        .map(
                            |(group, seq, op, entered_ms, left_ms, wait_ms)| CollectiveArrival {
                                group,
                                seq,
                                op,
                                entered_ms,
                                left_ms,
                                wait_ms,
                            },
                        )
                        .collect(),
                })
            },
        )
}

fn event() -> impl Strategy<Value = TraceRecord> {
    (
        millis(-60_000..10_000_000_000),
        name(),
        any::<u32>(),
        text(),
        prop::option::of(text()),
    )
        .prop_map(|(t, job, rank, name, detail)| {
            TraceRecord::Event(EventRecord {
                t,
                job,
                rank,
                name,
                detail,
            })
        })
}

/// A record the reader accepts as it is.
fn record() -> impl Strategy<Value = TraceRecord> {
    prop_oneof![gpu(), rank(), alloc(), step(), event()]
}

/// Values that break a field: not JSON, negative, beyond f64 or u64, mistyped.
const BAD_VALUES: &[&str] = &[
    "NaN",
    "-1",
    "-0",
    "1e400",
    "-1e400",
    "1e-400",
    "18446744073709551616",
    "4294967296",
    "9007199254740993",
    "0.1e1",
    "null",
    "true",
    "\"7\"",
    "[]",
    "{}",
    "",
];

/// Ways to damage a valid line.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, &'static str),
    SetField(usize, &'static str),
    SetType(&'static str),
    DropField(usize),
    ShiftTime(f64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let bad = prop::sample::select(BAD_VALUES);
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            any::<u8>().prop_filter("one line", |b| *b != b'\n')
        )
            .prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), bad.clone()).prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), bad).prop_map(|(i, v)| Mutation::SetField(i, v)),
        prop::sample::select(&["gpu", "rank", "alloc", "step", "event", "hologram", ""][..])
            .prop_map(Mutation::SetType),
        any::<usize>().prop_map(Mutation::DropField),
        (-100.0..100.0f64).prop_map(Mutation::ShiftTime),
    ]
}

/// `record` as one JSON line, damaged by `mutation` (never into two lines).
fn mutate(record: &TraceRecord, mutation: &Mutation) -> Vec<u8> {
    let line = serde_json::to_string(record).unwrap();
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line).unwrap();
    let keys: Vec<String> = map.keys().cloned().collect();
    let mut bytes = line.into_bytes();
    match *mutation {
        Mutation::Truncate(i) => bytes.truncate(i % (bytes.len() + 1)),
        Mutation::Flip(i, b) => {
            let i = i % bytes.len();
            bytes[i] = b;
        }
        Mutation::Insert(i, v) => {
            let i = i % (bytes.len() + 1);
            bytes.splice(i..i, v.bytes());
        }
        Mutation::SetField(i, v) => {
            // Raw text, so that NaN and 1e400 reach the reader as written.
            let key = &keys[i % keys.len()];
            map.insert(key.clone(), serde_json::Value::String("\u{1}".into()));
            let json = serde_json::to_string(&map).unwrap();
            bytes = json.replace("\"\\u0001\"", v).into_bytes();
        }
        Mutation::SetType(ty) => {
            map.insert("type".into(), ty.into());
            bytes = serde_json::to_vec(&map).unwrap();
        }
        Mutation::DropField(i) => {
            map.remove(&keys[i % keys.len()]);
            bytes = serde_json::to_vec(&map).unwrap();
        }
        Mutation::ShiftTime(dt) => {
            map.insert("t".into(), (record.t() + dt).into());
            bytes = serde_json::to_vec(&map).unwrap();
        }
    }
    bytes
}

fn trace_of(lines: &[&[u8]]) -> Vec<u8> {
    let mut text = HEADER.to_vec();
    for line in lines {
        text.extend_from_slice(line);
        text.push(b'\n');
    }
    text
}

/// Lines the reader passed over, by reason.
fn skipped(r: &TraceReader<Cursor<Vec<u8>>>) -> u64 {
    let stats = r.stats();
    stats.invalid + stats.blank_lines + stats.unknown_types.values().sum::<u64>()
}

/// Reads `middle` between two sound records: both come back, and `middle`
/// is a record, a counted skip, or an error naming line 3.
fn check_between(before: &TraceRecord, middle: &[u8], after: &TraceRecord) {
    let (a, c) = (
        serde_json::to_vec(before).unwrap(),
        serde_json::to_vec(after).unwrap(),
    );
    let mut r = TraceReader::new(Cursor::new(trace_of(&[&a, middle, &c]))).unwrap();
    let first = r.next_record().unwrap().expect("the first record");
    assert_eq!(&first, before);
    let mut records = vec![];
    loop {
        match r.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => break,
            Err(TraceError::Malformed { line, .. } | TraceError::LineTooLong { line }) => {
                assert_eq!(line, 3, "the error names the damaged line");
                assert_eq!(r.lines_read(), 3);
                assert!(records.is_empty());
                return;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(records.last(), Some(after));
    assert_eq!(r.lines_read(), 4);
    assert_eq!(
        r.stats().records + skipped(&r),
        3,
        "each line is a record or a counted skip: {:?}",
        r.stats()
    );
    assert_eq!(records.len() as u64 + 1, r.stats().records);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn what_the_writer_writes_reads_back_unchanged(records in prop::collection::vec(record(), 1..8)) {
        let mut w = TraceWriter::new(Vec::new(), "props").unwrap();
        for record in &records {
            w.write(record).unwrap();
        }
        let mut r = TraceReader::new(Cursor::new(w.finish().unwrap())).unwrap();
        let back: Vec<TraceRecord> = (&mut r).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&back, &records);
        prop_assert_eq!(r.stats().records, records.len() as u64);
        prop_assert_eq!(skipped(&r), 0);
        // Borrowed, then owned: the same records.
        let mut w = TraceWriter::new(Vec::new(), "props").unwrap();
        for record in &records {
            w.write(record).unwrap();
        }
        let mut r = TraceReader::new(Cursor::new(w.finish().unwrap())).unwrap();
        for record in &records {
            let borrowed = r.next_ref().unwrap().expect("as many records");
            prop_assert_eq!(&borrowed.to_owned(), record);
        }
        prop_assert!(r.next_ref().unwrap().is_none());
    }

    #[test]
    fn a_damaged_line_is_a_record_a_skip_or_an_error_naming_it(
        before in record(), middle in record(), after in record(), how in mutation()
    ) {
        check_between(&before, &mutate(&middle, &how), &after);
    }

    #[test]
    fn random_bytes_are_a_record_a_skip_or_an_error_naming_them(
        before in record(),
        middle in prop::collection::vec(any::<u8>().prop_filter("one line", |b| *b != b'\n'), 0..300),
        after in record(),
    ) {
        check_between(&before, &middle, &after);
    }

    #[test]
    fn every_line_is_accounted_for_until_an_error(
        lines in prop::collection::vec(
            prop_oneof![
                record().prop_map(|r| serde_json::to_vec(&r).unwrap()),
                (record(), mutation()).prop_map(|(r, m)| mutate(&r, &m)),
                Just(Vec::new()),
            ],
            0..24,
        )
    ) {
        let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let mut r = TraceReader::new(Cursor::new(trace_of(&refs))).unwrap();
        let mut seen = BTreeMap::<&str, u64>::new();
        let error = loop {
            match r.next_ref() {
                Ok(Some(record)) => {
                    *seen.entry(record.type_name()).or_default() += 1;
                    prop_assert!(record.t().is_finite());
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        let read = seen.values().sum::<u64>();
        prop_assert_eq!(read, r.stats().records);
        match error {
            None => {
                prop_assert_eq!(r.lines_read(), lines.len() as u64 + 1);
                prop_assert_eq!(read + skipped(&r), lines.len() as u64);
            }
            Some(TraceError::Malformed { line, .. } | TraceError::LineTooLong { line }) => {
                prop_assert_eq!(line, r.lines_read());
                prop_assert!(line >= 2 && line <= lines.len() as u64 + 1);
                // Every line before the bad one was a record or a counted skip.
                prop_assert_eq!(read + skipped(&r), line - 2);
            }
            Some(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}
