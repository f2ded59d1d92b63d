//! `gpumon snapshots list|diff`: the named allocator snapshots the hooks
//! took (`gpumon.snapshot(NAME)`), from a cluster's API or from a profile's
//! JSON report; `diff A B` shows what grew between two of them, by rank and
//! by allocator statistic.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use gpumon_core::hook_records::compare_snapshots;
use gpumon_core::units::fmt_bytes;
use gpumon_proto::api::{
    JobsView, MemorySnapshotComparison, MemorySnapshotsAnswer, NamedMemorySnapshot, StatsDelta,
};

use crate::api_client::{encode_segment, ApiClient};
use crate::args::{SnapshotsAction, SnapshotsArgs, SnapshotsFrom};
use crate::client_settings;
use gpumon_tools::failure::{usage, Failure};
use gpumon_tools::profile::report::ProfileReport;

/// Snapshots by job, from wherever they were asked for.
async fn load(
    from: &SnapshotsFrom,
    job: Option<&str>,
    config_file: Option<&Path>,
) -> Result<BTreeMap<String, Vec<NamedMemorySnapshot>>, Failure> {
    if let Some(path) = &from.profile {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::Runtime)?;
        let report: ProfileReport = serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "{} is not a gpumon profile report: {e}",
                path.display()
            ))
        })?;
        let mut all = report.snapshots;
        if let Some(job) = job {
            all.retain(|j, _| j == job);
        }
        return Ok(all);
    }
    let settings = client_settings::resolve(from.coordinator.clone(), &from.tls, config_file)?;
    let client = ApiClient::new(&settings.coordinator, &settings.tls)
        .map_err(|e| usage(format!("{e:#}")))?;
    let jobs: Vec<String> = match job {
        Some(j) => vec![j.to_owned()],
        None => client
            .get::<JobsView>("/api/v1/jobs")
            .await?
            .jobs
            .into_iter()
            .map(|j| j.job)
            .collect(),
    };
    let mut all = BTreeMap::new();
    for job in jobs {
        let path = format!("/api/v1/jobs/{}/snapshots", encode_segment(&job));
        if let Some(MemorySnapshotsAnswer::List(list)) = client.get_if_found(&path).await? {
            if !list.snapshots.is_empty() {
                all.insert(job, list.snapshots);
            }
        }
    }
    Ok(all)
}

pub async fn run(args: SnapshotsArgs, config_file: Option<&Path>) -> Result<(), Failure> {
    match args.action {
        SnapshotsAction::List { job, from, json } => {
            let all = load(&from, job.as_deref(), config_file).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                print!("{}", render_list(&all));
            }
            Ok(())
        }
        SnapshotsAction::Diff {
            a,
            b,
            job,
            from,
            json,
        } => {
            let all = load(&from, job.as_deref(), config_file).await?;
            let (job, sets) = pick_job(&all, job.as_deref())?;
            let find = |name: &str| {
                sets.iter().find(|s| s.name == name).ok_or_else(|| {
                    usage(format!(
                        "job {job} has no snapshot {name:?}; it has: {}",
                        sets.iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })
            };
            let cmp = compare_snapshots(job, find(&a)?, find(&b)?);
            if json {
                println!("{}", serde_json::to_string_pretty(&cmp)?);
            } else {
                print!("{}", render_diff(&cmp));
            }
            Ok(())
        }
    }
}

/// The one job meant: the one named, else the only one with snapshots.
fn pick_job<'a>(
    all: &'a BTreeMap<String, Vec<NamedMemorySnapshot>>,
    job: Option<&str>,
) -> Result<(&'a str, &'a [NamedMemorySnapshot]), Failure> {
    match (job, all.len()) {
        (Some(j), _) => all
            .get_key_value(j)
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .ok_or_else(|| usage(format!("job {j} has no snapshots"))),
        (None, 1) => Ok(all
            .iter()
            .next()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .expect("one job")),
        (None, 0) => Err(usage(
            "no job has named snapshots (gpumon.snapshot(NAME) takes them)",
        )),
        (None, _) => Err(usage(format!(
            "several jobs have snapshots; name one with --job: {}",
            all.keys().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn render_list(all: &BTreeMap<String, Vec<NamedMemorySnapshot>>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if all.is_empty() {
        out.push_str(
            "no named snapshots (gpumon.snapshot(NAME) in the training script takes them)\n",
        );
    }
    for (job, sets) in all {
        let _ = writeln!(out, "job {job}");
        for s in sets {
            let allocated: u64 = s.ranks.iter().map(|r| r.stats.allocated).sum();
            let _ = writeln!(
                out,
                "  {:<24} {:>4} ranks  allocated {:>10} in all",
                s.name,
                s.ranks.len(),
                fmt_bytes(allocated)
            );
        }
    }
    out
}

/// A signed byte change for people: `+1.2 GiB`, `-512.0 MiB`, `0 B`.
fn signed(d: i128) -> String {
    let magnitude = fmt_bytes(u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX));
    match d.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => magnitude,
    }
}

/// A compared statistic: its name, how to read it, whether it is bytes.
type Category = (&'static str, fn(&StatsDelta) -> Option<i128>, bool);

/// The statistics compared: bytes, then counts.
const CATEGORIES: [Category; 7] = [
    ("allocated", |d| Some(d.allocated), true),
    ("reserved", |d| Some(d.reserved), true),
    ("active", |d| d.active, true),
    ("inactive_split", |d| d.inactive_split, true),
    ("peak_allocated", |d| d.peak_allocated, true),
    ("alloc_retries", |d| d.alloc_retries, false),
    ("ooms", |d| d.ooms, false),
];

fn render_diff(cmp: &MemorySnapshotComparison) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "job {}: {:?} -> {:?}, b - a per rank",
        cmp.job, cmp.a, cmp.b
    );
    let _ = write!(out, "{:>6}", "RANK");
    for (name, ..) in CATEGORIES {
        let _ = write!(out, " {:>15}", name.to_uppercase());
    }
    out.push('\n');
    let mut totals = [0i128; CATEGORIES.len()];
    let mut grew: Option<(i128, u32, &str)> = None;
    for r in &cmp.ranks {
        let _ = write!(out, "{:>6}", r.rank);
        let Some(d) = &r.delta else {
            let missing = if r.a.is_none() { &cmp.a } else { &cmp.b };
            let _ = writeln!(out, "  (not in {missing:?})");
            continue;
        };
        for (i, (name, get, bytes)) in CATEGORIES.iter().enumerate() {
            let cell = match get(d) {
                Some(v) => {
                    totals[i] += v;
                    if *bytes && grew.is_none_or(|g| v > g.0) {
                        grew = Some((v, r.rank, name));
                    }
                    if *bytes {
                        signed(v)
                    } else {
                        format!("{v:+}")
                    }
                }
                None => "-".to_owned(),
            };
            let _ = write!(out, " {cell:>15}");
        }
        out.push('\n');
    }
    let _ = write!(out, "{:>6}", "all");
    for (i, (_, _, bytes)) in CATEGORIES.iter().enumerate() {
        let cell = if *bytes {
            signed(totals[i])
        } else {
            format!("{:+}", totals[i])
        };
        let _ = write!(out, " {cell:>15}");
    }
    out.push('\n');
    if let Some((v, rank, name)) = grew.filter(|g| g.0 > 0) {
        let _ = writeln!(out, "grew most: rank {rank}, {name} {}", signed(v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::api::RankMemorySnapshot;
    use gpumon_proto::AllocStats;

    fn snap(name: &str, ranks: &[(u32, u64, u64)]) -> NamedMemorySnapshot {
        NamedMemorySnapshot {
            name: name.into(),
            first_t: 0.0,
            last_t: 0.0,
            ranks: ranks
                .iter()
                .map(|&(rank, allocated, reserved)| RankMemorySnapshot {
                    rank,
                    t: 0.0,
                    stats: AllocStats {
                        allocated,
                        reserved,
                        active: None,
                        inactive_split: None,
                        peak_allocated: None,
                        peak_reserved: None,
                        alloc_retries: Some(0),
                        ooms: None,
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn the_diff_names_each_rank_the_totals_and_what_grew_most() {
        const GIB: u64 = 1 << 30;
        let a = snap(
            "start",
            &[(0, GIB, 2 * GIB), (1, GIB, 2 * GIB), (2, GIB, GIB)],
        );
        let b = snap("epoch_1", &[(0, 2 * GIB, 2 * GIB), (1, GIB / 2, 2 * GIB)]);
        let text = render_diff(&compare_snapshots("llm", &a, &b));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("\"start\" -> \"epoch_1\""), "{text}");
        assert!(
            lines[2].trim_start().starts_with('0') && lines[2].contains("+1.0 GiB"),
            "{text}"
        );
        assert!(lines[3].contains("-512.0 MiB"), "{text}");
        assert!(lines[4].contains("not in \"epoch_1\""), "{text}");
        assert!(
            lines[5].trim_start().starts_with("all") && lines[5].contains("+512.0 MiB"),
            "{text}"
        );
        assert_eq!(lines[6], "grew most: rank 0, allocated +1.0 GiB");
    }

    #[test]
    fn the_job_is_the_one_named_or_the_only_one() {
        let mut all = BTreeMap::new();
        assert!(pick_job(&all, None).is_err());
        all.insert("a".to_owned(), vec![snap("s", &[])]);
        assert_eq!(pick_job(&all, None).unwrap().0, "a");
        all.insert("b".to_owned(), vec![]);
        assert!(pick_job(&all, None).is_err());
        assert_eq!(pick_job(&all, Some("b")).unwrap().0, "b");
        assert!(pick_job(&all, Some("c")).is_err());
    }
}
