//! Reading a trace line by line, with bounded lines and counted skips.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::Deserialize;
use thiserror::Error;

use super::fields::{self, Fields, Kind, Scratch, Verdict};
use super::skip::Skip;
use super::TRACE_VERSION;
use super::{parse, scan};
use gpumon_core::records::RecordRef;
use gpumon_core::records::{
    AllocRecord, EventRecord, GpuRecord, RankRecord, SettingsRecord, StallRecord, StepRecord,
    TraceRecord,
};

/// Longest line accepted, bytes; a `gpu` record with hundreds of processes is a few KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Distinct unknown type names counted one by one; the rest count as `(other)`.
const MAX_UNKNOWN_NAMES: usize = 32;
/// Reasons kept for skipped records.
const MAX_EXAMPLES: usize = 8;
/// Buffer size of the file and of the decompressed stream, bytes.
const INPUT_BUF_BYTES: usize = 256 << 10;

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
    fn skip(&mut self, line: u64, reason: Skip) {
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
///
/// [`TraceReader::next_ref`] is the fast way through a trace: one pass per
/// line, strings borrowed from the line, no allocation per record but a
/// step's `sections` vector. [`TraceReader::next_record`] and the `Iterator`
/// impl hand out owned records on top of it. Both skip, count and fail alike.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: R,
    line: u64,
    buf: LineBuf,
    fields: Fields,
    scratch: Scratch,
    kind: Kind,
    parsers: Parsers,
    source: String,
    stats: ReadStats,
}

/// Which parsers a reader tries before the careful path; tests compare them
/// line for line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(super) enum Parsers {
    /// The canonical scanner, then the serde_json pass, then the careful path.
    All,
    /// The serde_json pass, then the careful path.
    Serde,
    /// The careful path only: the reference.
    Careful,
}

/// Opens a trace file, gzip-compressed or not (decided by the magic bytes).
pub fn open(path: &Path) -> Result<TraceReader<Box<dyn BufRead + Send>>, TraceError> {
    let file = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
    from_reader(file)
}

/// Reads a trace from any byte source, gzip-compressed or not (decided by the
/// magic bytes), e.g. a file already open or a trace held in memory.
pub fn from_reader<'r, R: Read + Send + 'r>(
    input: R,
) -> Result<TraceReader<Box<dyn BufRead + Send + 'r>>, TraceError> {
    let mut input = BufReader::with_capacity(INPUT_BUF_BYTES, input);
    let gzipped = input.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn BufRead + Send + 'r> = if gzipped {
        Box::new(BufReader::with_capacity(
            INPUT_BUF_BYTES,
            MultiGzDecoder::new(input),
        ))
    } else {
        Box::new(input)
    };
    TraceReader::new(input)
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the header line.
    pub fn new(input: R) -> Result<Self, TraceError> {
        let mut reader = Self {
            input,
            line: 0,
            buf: LineBuf::default(),
            fields: Fields::default(),
            scratch: Scratch::default(),
            kind: Kind::default(),
            parsers: Parsers::All,
            source: String::new(),
            stats: ReadStats::default(),
        };
        if !reader.read_line()? {
            return Err(TraceError::BadHeader("the file is empty".into()));
        }
        let header: Header = serde_json::from_slice(reader.buf.as_bytes())
            .map_err(|e| TraceError::BadHeader(e.to_string()))?;
        if header.gpumon_trace != TRACE_VERSION {
            return Err(TraceError::UnsupportedVersion(header.gpumon_trace));
        }
        reader.source = header.source;
        Ok(reader)
    }

    /// Restricts the parsers tried (tests compare them).
    #[cfg(test)]
    pub(super) fn with_parsers(mut self, parsers: Parsers) -> Self {
        self.parsers = parsers;
        self
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
        let buf = self.buf.start();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.input).take(limit).read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(false);
        }
        self.line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > MAX_LINE_BYTES {
            return Err(TraceError::LineTooLong { line: self.line });
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        self.buf.finish();
        Ok(true)
    }

    /// The next valid record, borrowed from the reader, `None` at the end.
    ///
    /// Skips blank lines, unknown types and impossible records, counting them
    /// in [`TraceReader::stats`]; a line that is not JSON is
    /// [`TraceError::Malformed`], one over [`MAX_LINE_BYTES`] is
    /// [`TraceError::LineTooLong`].
    pub fn next_ref(&mut self) -> Result<Option<RecordRef<'_>>, TraceError> {
        if !self.advance()? {
            return Ok(None);
        }
        // The record was parsed and checked by `advance` into `fields`; only
        // now is it borrowed, so that skipping lines never fights a borrow.
        let line = self.buf.text().unwrap_or_default();
        Ok(Some(self.fields.record(self.kind, line, &self.scratch)))
    }

    /// The next valid record, owned, `None` at the end; see [`TraceReader::next_ref`].
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>, TraceError> {
        Ok(self.next_ref()?.map(RecordRef::into_owned))
    }

    /// Reads lines until one holds a sound record, left in `fields` and `kind`;
    /// false at the end of the input.
    fn advance(&mut self) -> Result<bool, TraceError> {
        loop {
            if !self.read_line()? {
                return Ok(false);
            }
            if self.buf.as_bytes().iter().all(u8::is_ascii_whitespace) {
                self.stats.blank_lines += 1;
                continue;
            }
            let line = self.line;
            let fast = match self.buf.text() {
                Some(text) if self.parsers != Parsers::Careful => {
                    let (fields, scratch) = (&mut self.fields, &mut self.scratch);
                    let scanned = match self.parsers {
                        Parsers::All => scan::scan_line(text, fields, scratch),
                        _ => None,
                    };
                    match scanned.or_else(|| parse::parse_line(text, fields, scratch)) {
                        Some(()) => fields::verdict(text, fields, scratch),
                        None => None,
                    }
                }
                _ => None,
            };
            let kind = match fast {
                Some(Verdict::Record(kind)) => kind,
                Some(Verdict::Unknown(ty)) => {
                    self.stats.unknown(ty);
                    continue;
                }
                Some(Verdict::NoType) => {
                    self.stats.skip(line, Skip::NoType);
                    continue;
                }
                None => match self.careful()? {
                    Some(kind) => kind,
                    None => continue,
                },
            };
            match self.fields.sanitize(kind, &mut self.scratch) {
                Ok(()) => {
                    self.kind = kind;
                    self.stats.records += 1;
                    return Ok(true);
                }
                Err(reason) => self.stats.skip(line, reason),
            }
        }
    }

    /// The careful path for a line the fast path gave up on: the type first,
    /// then the typed record, each with serde_json's own message. Loads a
    /// record into `fields` and returns its type, or counts a skip.
    fn careful(&mut self) -> Result<Option<Kind>, TraceError> {
        let bytes = self.buf.as_bytes();
        let line = self.line;
        let probe: Probe<'_> =
            serde_json::from_slice(bytes).map_err(|e| TraceError::Malformed {
                line,
                reason: e.to_string(),
            })?;
        let parsed = match probe.ty.as_deref() {
            Some("gpu") => typed::<GpuRecord>(bytes).map(TraceRecord::Gpu),
            Some("rank") => typed::<RankRecord>(bytes).map(TraceRecord::Rank),
            Some("alloc") => typed::<AllocRecord>(bytes).map(TraceRecord::Alloc),
            Some("step") => typed::<StepRecord>(bytes).map(TraceRecord::Step),
            Some("event") => typed::<EventRecord>(bytes).map(TraceRecord::Event),
            Some("stall") => typed::<StallRecord>(bytes).map(TraceRecord::Stall),
            Some("settings") => typed::<SettingsRecord>(bytes).map(TraceRecord::Settings),
            Some(other) => {
                self.stats.unknown(other);
                return Ok(None);
            }
            None => Err(Skip::NoType),
        };
        match parsed {
            Ok(record) => Ok(Some(self.fields.load(record, &mut self.scratch))),
            Err(reason) => {
                self.stats.skip(line, reason);
                Ok(None)
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

fn typed<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Skip> {
    Ok(serde_json::from_slice(bytes)?)
}

/// The current line: kept as a `String` when it is UTF-8 (nearly always), so
/// that records can borrow `&str`s from it without checking UTF-8 again.
#[derive(Debug, Default)]
struct LineBuf {
    text: String,
    bytes: Vec<u8>,
    is_text: bool,
}

impl LineBuf {
    /// Empties the buffer for the next line (keeping its capacity).
    fn start(&mut self) -> &mut Vec<u8> {
        if self.is_text {
            self.bytes = std::mem::take(&mut self.text).into_bytes();
            self.is_text = false;
        }
        self.bytes.clear();
        &mut self.bytes
    }

    /// Marks the line complete: text if it is UTF-8.
    fn finish(&mut self) {
        match String::from_utf8(std::mem::take(&mut self.bytes)) {
            Ok(text) => {
                self.text = text;
                self.is_text = true;
            }
            Err(e) => self.bytes = e.into_bytes(),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        if self.is_text {
            self.text.as_bytes()
        } else {
            &self.bytes
        }
    }

    fn text(&self) -> Option<&str> {
        self.is_text.then_some(self.text.as_str())
    }
}
