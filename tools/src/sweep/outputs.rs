//! Where the sweep writes, and writing it: the JSON, the CSV and the HTML
//! page, each replaced whole (through a temporary file beside it) after
//! every point, so a long sweep stopped midway still leaves its results.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::report::SweepReport;
use crate::args::SweepArgs;

/// The output files and the work directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The JSON results.
    pub json: PathBuf,
    /// The CSV results.
    pub csv: PathBuf,
    /// The HTML page, when asked for.
    pub html: Option<PathBuf>,
    /// Each point's profile report and output.
    pub work: PathBuf,
}

impl Paths {
    /// From the flags and their defaults.
    pub fn new(args: &SweepArgs) -> Self {
        let json = args
            .json
            .clone()
            .unwrap_or_else(|| PathBuf::from("gpumon-sweep.json"));
        let beside = json
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_owned);
        Self {
            csv: args
                .csv
                .clone()
                .unwrap_or_else(|| json.with_extension("csv")),
            html: args.html.clone(),
            work: args
                .work_dir
                .clone()
                .unwrap_or_else(|| beside.join("gpumon-sweep")),
            json,
        }
    }

    /// The files written, for people.
    pub fn written(&self) -> String {
        let mut files = vec![
            self.json.display().to_string(),
            self.csv.display().to_string(),
        ];
        files.extend(self.html.iter().map(|h| h.display().to_string()));
        files.join(", ")
    }
}

/// Writes `bytes` to `path` through a temporary file beside it.
fn replace(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes every output of `report`.
pub fn write(report: &SweepReport, paths: &Paths) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(report).context("cannot encode the results")?;
    replace(&paths.json, &json)?;
    replace(&paths.csv, super::csv::render(report).as_bytes())?;
    if let Some(html) = &paths.html {
        replace(html, super::html::render(report).as_bytes())?;
    }
    Ok(())
}
