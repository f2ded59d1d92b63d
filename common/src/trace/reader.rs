//! Reading a trace line by line, with bounded lines and counted skips.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::Deserialize;
use thiserror::Error;

use super::record::{AllocRecord, EventRecord, GpuRecord, RankRecord, StepRecord, TraceRecord};
use super::TRACE_VERSION;

/// Longest line accepted, bytes; a `gpu` record with hundreds of processes is a few KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Distinct unknown type names counted one by one; the rest count as `(other)`.
const MAX_UNKNOWN_NAMES: usize = 32;
/// Reasons kept for skipped records.
const MAX_EXAMPLES: usize = 8;
/// Most negative `t` believed (clock skew before the first record), seconds.
const MIN_T: f64 = -60.0;
/// Largest capacity believed, bytes (1 PiB).
const MAX_BYTES: u64 = 1 << 50;

/// Why a trace cannot be read on.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("reading the trace: {0}")]
    Io(#[from] io::Error),
    /// The first line is not a gpumon trace header.
    #[error("not a gpumon trace: line 1 must be a header like {{\"gpumon_trace\": 1, ...}} ({0})")]
    BadHeader(String),
    /// The header names a version this build does not read.
    #[error("gpumon trace version {0} is not supported; this build reads version {TRACE_VERSION}")]
    UnsupportedVersion(u64),
    /// A line is not JSON.
    #[error("line {line}: not valid JSON: {reason}")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// serde_json's reason, with the column.
        reason: String,
    },
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("line {line} is longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong {
        /// 1-based line number.
        line: u64,
    },
}

/// What the reader skipped, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records returned.
    pub records: u64,
    /// Blank lines passed over.
    pub blank_lines: u64,
    /// Records of unknown types, by type name.
    pub unknown_types: BTreeMap<String, u64>,
    /// Well-formed records with impossible values, skipped.
    pub invalid: u64,
    /// The first few reasons for skips, with line numbers.
    pub examples: Vec<String>,
}

impl ReadStats {
    fn skip(&mut self, line: u64, reason: String) {
        self.invalid += 1;
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(format!("line {line}: {reason}"));
        }
    }

    fn unknown(&mut self, ty: &str) {
        let key = if self.unknown_types.len() < MAX_UNKNOWN_NAMES
            || self.unknown_types.contains_key(ty)
        {
            ty.chars().take(64).collect()
        } else {
            "(other)".to_owned()
        };
        *self.unknown_types.entry(key).or_default() += 1;
    }
}

#[derive(Deserialize)]
struct Header {
    gpumon_trace: u64,
    #[serde(default)]
    source: String,
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Cow<'a, str>>,
}

/// Reads records from a trace; see the module docs for what it tolerates.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: R,
    line: u64,
    buf: Vec<u8>,
    source: String,
    stats: ReadStats,
}

/// Opens a trace file, gzip-compressed or not (decided by the magic bytes).
pub fn open(path: &Path) -> Result<TraceReader<Box<dyn BufRead + Send>>, TraceError> {
    let file = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
    let mut file = BufReader::with_capacity(256 << 10, file);
    let gzipped = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn BufRead + Send> = if gzipped {
        Box::new(BufReader::with_capacity(
            256 << 10,
            MultiGzDecoder::new(file),
        ))
    } else {
        Box::new(file)
    };
    TraceReader::new(input)
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the header line.
    pub fn new(input: R) -> Result<Self, TraceError> {
        let mut reader = Self {
            input,
            line: 0,
            buf: Vec::new(),
            source: String::new(),
            stats: ReadStats::default(),
        };
        if !reader.read_line()? {
            return Err(TraceError::BadHeader("the file is empty".into()));
        }
        let header: Header = serde_json::from_slice(&reader.buf)
            .map_err(|e| TraceError::BadHeader(e.to_string()))?;
        if header.gpumon_trace != TRACE_VERSION {
            return Err(TraceError::UnsupportedVersion(header.gpumon_trace));
        }
        reader.source = header.source;
        Ok(reader)
    }

    /// The header's `source`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What was read and skipped so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// Lines read so far, the header included.
    pub fn lines_read(&self) -> u64 {
        self.line
    }

    /// Reads the next line into `buf`; false at the end of the input.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(false);
        }
        self.line += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        } else if self.buf.len() > MAX_LINE_BYTES {
            return Err(TraceError::LineTooLong { line: self.line });
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(true)
    }

    /// The next valid record, `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>, TraceError> {
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                self.stats.blank_lines += 1;
                continue;
            }
            let line = self.line;
            let probe: Probe<'_> =
                serde_json::from_slice(&self.buf).map_err(|e| TraceError::Malformed {
                    line,
                    reason: e.to_string(),
                })?;
            let parsed = match probe.ty.as_deref() {
                Some("gpu") => typed::<GpuRecord>(&self.buf).map(TraceRecord::Gpu),
                Some("rank") => typed::<RankRecord>(&self.buf).map(TraceRecord::Rank),
                Some("alloc") => typed::<AllocRecord>(&self.buf).map(TraceRecord::Alloc),
                Some("step") => typed::<StepRecord>(&self.buf).map(TraceRecord::Step),
                Some("event") => typed::<EventRecord>(&self.buf).map(TraceRecord::Event),
                Some(other) => {
                    let other = other.to_owned();
                    self.stats.unknown(&other);
                    continue;
                }
                None => Err("a record without a \"type\"".to_owned()),
            };
            match parsed.and_then(sanitize) {
                Ok(record) => {
                    self.stats.records += 1;
                    return Ok(Some(record));
                }
                Err(reason) => self.stats.skip(line, reason),
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn typed<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// Rejects impossible records and drops impossible optional gauges.
fn sanitize(mut record: TraceRecord) -> Result<TraceRecord, String> {
    let t = record.t();
    if !t.is_finite() || t < MIN_T {
        return Err(format!("time {t} is not a plausible trace time"));
    }
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0);
    match &mut record {
        TraceRecord::Gpu(g) => {
            if g.total == 0 || g.total > MAX_BYTES {
                return Err(format!(
                    "gpu total {} bytes is zero or above 1 PiB",
                    g.total
                ));
            }
            if g.used > g.total {
                return Err(format!(
                    "gpu used {} bytes exceeds total {}",
                    g.used, g.total
                ));
            }
            g.util = finite(g.util);
            g.sm_clock_mhz = finite(g.sm_clock_mhz);
            g.power_w = finite(g.power_w);
            g.procs.retain(|p| p.used <= g.total);
        }
        TraceRecord::Alloc(a) => {
            if a.reserved > MAX_BYTES || a.allocated > a.reserved {
                return Err(format!(
                    "alloc allocated {} above reserved {}",
                    a.allocated, a.reserved
                ));
            }
        }
        TraceRecord::Step(s) => {
            if !s.duration_ms.is_finite() || s.duration_ms < 0.0 {
                return Err(format!("step duration {} ms is impossible", s.duration_ms));
            }
            s.sections.retain(|_, ms| ms.is_finite() && *ms >= 0.0);
        }
        TraceRecord::Rank(r) => {
            if r.rank >= r.world_size {
                return Err(format!("rank {} of world size {}", r.rank, r.world_size));
            }
        }
        TraceRecord::Event(_) => {}
    }
    Ok(record)
}
