//! `gpumon record`: a trace v1 file from a live cluster.
//!
//! It reads a coordinator's `GET /api/v1/stream` (one trace record per line,
//! `t` absolute in seconds since the Unix epoch) and writes each record with
//! `t` rebased to the first record's, so the trace starts near 0. Records up
//! to [`MAX_SKEW_S`] older than the first (clock skew between nodes) are kept
//! with a slightly negative `t`, which trace readers accept; older ones are
//! left out and counted. Lines that are not trace records are skipped and
//! counted; `gap` lines (batches the coordinator dropped because this client
//! fell behind) are copied through, rebased, for readers to count.
//!
//! The trace is written to `FILE.partial` and renamed to FILE when recording
//! stops (Ctrl-C, SIGTERM, `--duration`, or the coordinator ending the
//! stream), so FILE is always a complete trace; gzip-compressed when FILE
//! ends in `.gz`. A summary line goes to standard error.

use std::ffi::OsString;
use std::fs::File;
use std::future::Future;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use anyhow::{anyhow, Context};
use flate2::write::GzEncoder;
use flate2::Compression;
use gpumon_trace::{TraceRecord, TraceWriter, MAX_LINE_BYTES};
use serde_json::Value;
use tokio::time::Instant;

use crate::args::RecordArgs;
use crate::client_settings;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::shutdown;

/// Seconds a record may be older than the first and still be kept (the
/// trace reader accepts `t` down to -60).
pub const MAX_SKEW_S: f64 = 60.0;
/// Bound on connecting and on waiting for the response head.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(args: RecordArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    let settings = client_settings::resolve(args.coordinator.clone(), &args.tls, config_file)?;
    let duration = match args.duration {
        None => None,
        Some(secs) => Some(
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    usage(format!(
                        "--duration {secs}: give a positive number of seconds"
                    ))
                })?,
        ),
    };
    let base = settings.coordinator.trim_end_matches('/').to_owned();
    match reqwest::Url::parse(&base) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(usage(format!(
                "--coordinator {:?}: give a coordinator's base URL such as http://127.0.0.1:7070",
                settings.coordinator
            )))
        }
    }
    if args.output.file_name().is_none() {
        return Err(usage(format!(
            "--output {}: give a file name",
            args.output.display()
        )));
    }

    let mut stop = pin!(shutdown::signal());
    let mut deadline = pin!(until(duration.map(|d| Instant::now() + d)));

    let url = format!("{base}/api/v1/stream");
    let client = gpumon_net::client_builder(&settings.tls)?
        .connect_timeout(CONNECT_TIMEOUT)
        .build()?;
    let mut resp = tokio::select! {
        _ = &mut stop => {
            eprintln!("record: interrupted before {base} answered; nothing recorded");
            return Ok(());
        }
        r = tokio::time::timeout(CONNECT_TIMEOUT, client.get(&url).send()) => r
            .map_err(|_| anyhow!("cannot reach the coordinator at {base}: no answer within {} s", CONNECT_TIMEOUT.as_secs()))?
            .with_context(|| format!("cannot reach the coordinator at {base}"))?,
    };
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(anyhow!("{url} answered {status}: {body}").into());
    }

    let partial = partial_path(&args.output);
    let file =
        File::create(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    let sink = if args.output.extension().is_some_and(|e| e == "gz") {
        Sink::Gzip(Box::new(GzEncoder::new(
            BufWriter::new(file),
            Compression::default(),
        )))
    } else {
        Sink::Plain(BufWriter::new(file))
    };
    let result = record(&mut resp, sink, &base, &mut stop, &mut deadline).await;
    let (file, summary, ended) = match result {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e
                .context(format!("cannot write {}", args.output.display()))
                .into());
        }
    };
    let commit = file
        .sync_all()
        .and_then(|()| std::fs::rename(&partial, &args.output));
    if let Err(e) = commit {
        let _ = std::fs::remove_file(&partial);
        return Err(anyhow::Error::new(e)
            .context(format!("cannot write {}", args.output.display()))
            .into());
    }
    eprintln!("{}", summary.line(&args.output));
    match ended {
        Ended::Stopped => Ok(()),
        Ended::ByCoordinator => {
            eprintln!("record: {base} ended the stream (coordinator shutting down?)");
            Ok(())
        }
        Ended::Broken(e) => Err(anyhow::Error::new(e)
            .context(format!(
                "the stream from {base} broke; what arrived before is in {}",
                args.output.display()
            ))
            .into()),
    }
}

/// Why recording stopped.
enum Ended {
    /// Ctrl-C, SIGTERM or `--duration`.
    Stopped,
    /// The coordinator ended the response.
    ByCoordinator,
    /// The connection failed.
    Broken(reqwest::Error),
}

/// Streams into `sink` until stopped; the finished file, the counts and why it ended.
async fn record(
    resp: &mut reqwest::Response,
    sink: Sink,
    base: &str,
    stop: &mut (impl Future<Output = ()> + Unpin),
    deadline: &mut (impl Future<Output = ()> + Unpin),
) -> anyhow::Result<(File, Summary, Ended)> {
    let mut recorder = Recorder::new(sink, &format!("gpumon record {base}"))?;
    eprintln!("record: recording from {base}; Ctrl-C stops");
    let ended = loop {
        tokio::select! {
            biased;
            _ = &mut *stop => break Ended::Stopped,
            _ = &mut *deadline => break Ended::Stopped,
            chunk = resp.chunk() => match chunk {
                Ok(Some(bytes)) => recorder.feed(&bytes)?,
                Ok(None) => break Ended::ByCoordinator,
                Err(e) => break Ended::Broken(e),
            },
        }
    };
    let (sink, summary) = recorder.finish()?;
    Ok((sink.finish()?, summary, ended))
}

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// `FILE.partial`, beside FILE.
fn partial_path(output: &Path) -> PathBuf {
    let mut name = OsString::from(output.as_os_str());
    name.push(".partial");
    PathBuf::from(name)
}

/// The file being written, compressed or not.
enum Sink {
    Plain(BufWriter<File>),
    Gzip(Box<GzEncoder<BufWriter<File>>>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

impl Sink {
    /// Writes what is buffered, and the gzip trailer; returns the file.
    fn finish(self) -> io::Result<File> {
        let buffered = match self {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => (*w).finish()?,
        };
        buffered.into_inner().map_err(|e| e.into_error())
    }
}

/// What was recorded.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    /// Trace records written.
    records: u64,
    /// Latest rebased `t`, seconds.
    end_t: f64,
    /// Lines that were not trace records.
    skipped: u64,
    /// Records more than [`MAX_SKEW_S`] older than the first.
    too_old: u64,
    /// `gap` lines copied through.
    gaps: u64,
    /// Batches those gaps stand for.
    dropped_batches: u64,
}

impl Summary {
    fn line(&self, output: &Path) -> String {
        let mut line = format!(
            "recorded {} records ({:.1} s of trace) to {}",
            self.records,
            self.end_t,
            output.display()
        );
        if self.skipped > 0 {
            line += &format!("; {} lines skipped (not trace records)", self.skipped);
        }
        if self.too_old > 0 {
            line += &format!(
                "; {} records over {MAX_SKEW_S} s older than the first left out",
                self.too_old
            );
        }
        if self.gaps > 0 {
            line += &format!(
                "; {} gaps: the coordinator dropped {} batches this client fell behind on",
                self.gaps, self.dropped_batches
            );
        }
        line
    }
}

/// Splits the stream into lines, rebases their time and writes them.
struct Recorder<W: Write> {
    out: W,
    /// The incomplete line at the end of the last chunk.
    pending: Vec<u8>,
    /// Dropping the rest of a line over [`MAX_LINE_BYTES`].
    discarding: bool,
    /// Absolute `t` of the first record.
    origin: Option<f64>,
    summary: Summary,
}

impl<W: Write> Recorder<W> {
    fn new(out: W, source: &str) -> io::Result<Self> {
        // The header exactly as the trace writer writes it; records follow the
        // same way (serde_json, one per line) but directly, since `gap` lines,
        // which the writer has no method for, go in between.
        let out = TraceWriter::new(out, source)?.finish()?;
        Ok(Self {
            out,
            pending: Vec::new(),
            discarding: false,
            origin: None,
            summary: Summary::default(),
        })
    }

    /// Takes the next bytes of the stream.
    fn feed(&mut self, mut data: &[u8]) -> io::Result<()> {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&data[..nl], &data[nl + 1..]);
            data = rest;
            if self.discarding {
                self.discarding = false;
            } else if self.pending.is_empty() {
                self.line(head)?;
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(head);
                self.line(&line)?;
                line.clear();
                self.pending = line;
            }
        }
        if !self.discarding {
            self.pending.extend_from_slice(data);
            if self.pending.len() > MAX_LINE_BYTES {
                self.summary.skipped += 1;
                self.discarding = true;
                self.pending = Vec::new();
            }
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> io::Result<()> {
        let line = line.trim_ascii();
        if line.is_empty() {
            return Ok(());
        }
        if let Ok(mut record) = serde_json::from_slice::<TraceRecord>(line) {
            let t = record.t();
            let origin = *self.origin.get_or_insert(t);
            let Some(rel) = rebase(t, origin) else {
                self.summary.too_old += 1;
                return Ok(());
            };
            set_t(&mut record, rel);
            self.write_line(&record)?;
            self.summary.records += 1;
            self.summary.end_t = self.summary.end_t.max(rel);
            return Ok(());
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(mut gap)) if gap.get("type").is_some_and(|t| t == "gap") => {
                let rel = match (gap.get("t").and_then(Value::as_f64), self.origin) {
                    (Some(t), Some(origin)) => rebase(t, origin).unwrap_or(-MAX_SKEW_S),
                    _ => 0.0,
                };
                gap.insert("t".into(), rel.into());
                self.summary.gaps += 1;
                self.summary.dropped_batches += gap
                    .get("dropped_batches")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.write_line(&gap)
            }
            _ => {
                self.summary.skipped += 1;
                Ok(())
            }
        }
    }

    fn write_line(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }

    /// Takes an unterminated last line, flushes; the writer and the counts.
    fn finish(mut self) -> io::Result<(W, Summary)> {
        if !self.discarding && !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.line(&line)?;
        }
        self.out.flush()?;
        Ok((self.out, self.summary))
    }
}

/// `t` relative to `origin`, to the microsecond (absolute epoch seconds have
/// no more precision, and `0.2999999523` would only bloat the file); `None`
/// when more than [`MAX_SKEW_S`] before it.
fn rebase(t: f64, origin: f64) -> Option<f64> {
    let rel = ((t - origin) * 1e6).round() / 1e6;
    (rel >= -MAX_SKEW_S).then_some(rel)
}

fn set_t(record: &mut TraceRecord, t: f64) {
    match record {
        TraceRecord::Gpu(r) => r.t = t,
        TraceRecord::Rank(r) => r.t = t,
        TraceRecord::Alloc(r) => r.t = t,
        TraceRecord::Step(r) => r.t = t,
        TraceRecord::Event(r) => r.t = t,
        TraceRecord::Stall(r) => r.t = t,
        TraceRecord::Settings(r) => r.t = t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = r#"{"type":"gpu","t":1700000000.3,"node":"n0","gpu":0,"uuid":"GPU-0","name":"H100","total":100,"used":40,"procs":[{"pid":7,"used":30}]}"#;
    const RANK: &str = r#"{"type":"rank","t":1700000000.3,"job":"j","rank":0,"local_rank":0,"world_size":1,"node":"n0","gpu":0,"pid":7}"#;

    fn lines(out: &[u8]) -> Vec<Value> {
        std::str::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn records_are_rebased_to_the_first_and_split_anywhere() {
        let later = GPU.replace("1700000000.3", "1700000002.05");
        let skewed = GPU.replace("1700000000.3", "1699999999.8");
        let stream = format!("{RANK}\n{GPU}\n{later}\n{skewed}\n");
        let mut rec = Recorder::new(Vec::new(), "gpumon record test").unwrap();
        // Chunks cut through lines.
        for chunk in stream.as_bytes().chunks(7) {
            rec.feed(chunk).unwrap();
        }
        let (out, summary) = rec.finish().unwrap();
        let v = lines(&out);
        assert_eq!(v[0]["gpumon_trace"], 1);
        assert_eq!(v[0]["source"], "gpumon record test");
        let ts: Vec<f64> = v[1..].iter().map(|r| r["t"].as_f64().unwrap()).collect();
        assert_eq!(ts, [0.0, 0.0, 1.75, -0.5]);
        assert_eq!(v[2]["used"], 40);
        assert_eq!(summary.records, 4);
        assert_eq!(summary.end_t, 1.75);
        assert_eq!(summary.skipped, 0);
    }

    #[test]
    fn junk_is_skipped_too_old_left_out_gaps_copied() {
        let ancient = GPU.replace("1700000000.3", "1699999000.0");
        let gap = r#"{"type":"gap","t":1700000001.3,"dropped_batches":5}"#;
        let stream =
            format!("{GPU}\nnot json\n{{\"type\":\"gpu\",\"t\":1}}\n\n{ancient}\n{gap}\n{RANK}");
        let mut rec = Recorder::new(Vec::new(), "s").unwrap();
        rec.feed(stream.as_bytes()).unwrap();
        let (out, summary) = rec.finish().unwrap();
        let v = lines(&out);
        assert_eq!(v.len(), 4, "{v:?}");
        assert_eq!(v[2]["type"], "gap");
        assert_eq!(v[2]["t"], 1.0);
        assert_eq!(v[2]["dropped_batches"], 5);
        assert_eq!(
            v[3]["type"], "rank",
            "an unterminated last line still counts"
        );
        assert_eq!(
            summary,
            Summary {
                records: 2,
                end_t: 0.0,
                skipped: 2,
                too_old: 1,
                gaps: 1,
                dropped_batches: 5,
            }
        );
        let line = summary.line(Path::new("t.jsonl"));
        assert!(
            line.starts_with("recorded 2 records (0.0 s of trace) to t.jsonl"),
            "{line}"
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_next_kept() {
        let mut rec = Recorder::new(Vec::new(), "s").unwrap();
        let big = vec![b'x'; MAX_LINE_BYTES / 2 + 1];
        rec.feed(&big).unwrap();
        rec.feed(&big).unwrap();
        rec.feed(&big).unwrap();
        rec.feed(format!("xx\n{GPU}\n").as_bytes()).unwrap();
        let (out, summary) = rec.finish().unwrap();
        assert_eq!(lines(&out).len(), 2);
        assert_eq!(summary.skipped, 1);
        assert_eq!(summary.records, 1);
    }

    #[test]
    fn a_streamed_window_is_recorded_as_the_stream_mapped_it() {
        use gpumon_proto::{BytesStat, GpuInfo, GpuWindow, ProcWindow, RankInfo};
        use gpumon_trace::from_window::{gpu_record, rank_records};
        let w = GpuWindow {
            gpu: GpuInfo {
                uuid: "GPU-0".into(),
                index: 0,
                name: "H100".into(),
                total_bytes: 100,
            },
            start_ms: 1_700_000_000_000,
            end_ms: 1_700_000_000_500,
            samples: 4,
            used_bytes: BytesStat {
                min: 20,
                max: 60,
                last: 35,
                mean: 40,
            },
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: vec![ProcWindow {
                pid: 7,
                used_bytes: BytesStat::single(30),
                rank: Some(RankInfo {
                    job: "j".into(),
                    rank: 0,
                    local_rank: 0,
                    world_size: 1,
                    master_addr: None,
                    master_port: None,
                }),
            }],
        };
        // What the coordinator's stream sends for the window.
        let mut mapped: Vec<TraceRecord> = rank_records("n0", &w).map(TraceRecord::Rank).collect();
        mapped.push(TraceRecord::Gpu(gpu_record("n0", &w)));
        let mut stream = Vec::new();
        for r in &mapped {
            serde_json::to_writer(&mut stream, r).unwrap();
            stream.push(b'\n');
        }
        let mut rec = Recorder::new(Vec::new(), "s").unwrap();
        rec.feed(&stream).unwrap();
        let (out, _) = rec.finish().unwrap();
        let mut reader = gpumon_trace::from_reader(&out[..]).unwrap();
        let mut recorded = Vec::new();
        while let Some(r) = reader.next_ref().unwrap() {
            recorded.push(r.to_owned());
        }
        for r in &mut mapped {
            set_t(r, 0.0);
        }
        assert_eq!(
            recorded, mapped,
            "the least and newest used survive recording"
        );
    }

    #[test]
    fn the_written_trace_reads_back_gzip_or_not() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["t.jsonl", "t.jsonl.gz"] {
            let path = dir.path().join(name);
            let file = File::create(&path).unwrap();
            let sink = if name.ends_with(".gz") {
                Sink::Gzip(Box::new(GzEncoder::new(
                    BufWriter::new(file),
                    Compression::default(),
                )))
            } else {
                Sink::Plain(BufWriter::new(file))
            };
            let mut rec = Recorder::new(sink, "s").unwrap();
            rec.feed(format!("{RANK}\n{GPU}\n").as_bytes()).unwrap();
            let (sink, _) = rec.finish().unwrap();
            sink.finish().unwrap();
            let mut reader = gpumon_trace::open(&path).unwrap();
            let mut n = 0;
            while reader.next_ref().unwrap().is_some() {
                n += 1;
            }
            assert_eq!(n, 2, "{name}");
        }
        assert_eq!(
            partial_path(Path::new("d/t.jsonl.gz")),
            Path::new("d/t.jsonl.gz.partial")
        );
    }
}
