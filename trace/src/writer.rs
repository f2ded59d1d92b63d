//! Writing a trace: a header line, then one JSON record per line.

use std::io::{self, Write};

use super::TRACE_VERSION;
use gpumon_core::records::TraceRecord;

/// Writes trace v1 to any writer (wrap it in a gzip encoder for `.jsonl.gz`).
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header naming `source` (e.g. `gpumon record`).
    pub fn new(mut out: W, source: &str) -> io::Result<Self> {
        let header = serde_json::json!({ "gpumon_trace": TRACE_VERSION, "source": source });
        serde_json::to_writer(&mut out, &header)?;
        out.write_all(b"\n")?;
        Ok(Self { out, records: 0 })
    }

    /// Appends one record.
    pub fn write(&mut self, record: &TraceRecord) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")?;
        self.records += 1;
        Ok(())
    }

    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
