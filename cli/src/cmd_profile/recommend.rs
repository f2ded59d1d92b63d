//! What to change, with the numbers behind it, from a finished report.
//!
//! The memory model is the usual one for training: between steps a rank
//! holds its parameters, gradients and optimizer state (the allocator's
//! lowest `allocated` after the first step, the *floor*); within a step it
//! adds activations, which scale with the batch (peak allocated less the
//! floor). Memory outside the allocator (the CUDA context, other libraries)
//! is what the GPU used beyond the allocator's reserved. So the batch that
//! keeps a rank under its warning level is the current one times
//! `(target - outside - floor) / activations`.

use std::collections::BTreeMap;

use gpumon_common::engine::{AlertKind, Risk};
use gpumon_common::units::fmt_bytes;

use super::report::{ProfileReport, RankReport, Recommendation};

/// Fragmentation worth a setting: reserved beyond allocated at peak, as a
/// share of the GPU, and at least this many bytes.
const CACHE_GAP_SHARE: f64 = 0.10;
const CACHE_GAP_MIN: u64 = 1 << 30;
/// Activations worth checkpointing: this share of the peak.
const ACTIVATION_SHARE: f64 = 0.5;
/// Headroom worth a larger batch: the batch could grow by this factor.
const GROWTH_WORTH_SAYING: f64 = 1.5;

/// Every recommendation for the report, most urgent first.
pub fn recommendations(report: &ProfileReport) -> Vec<Recommendation> {
    let mut out = Vec::new();
    for r in &report.ranks {
        let Some(total) = gpu_total(report, r) else {
            continue;
        };
        batch_size(report, r, total, &mut out);
        cache_gap(r, total, &mut out);
        if let Some(rate) = r.leak_bytes_per_s.filter(|_| r.leak) {
            out.push(rec(
                "leak",
                r,
                format!(
                    "rank {} of {} keeps {}/s more memory every step: a tensor outlives its step (a loss kept with its graph instead of loss.item(), a growing list or cache); compare two gpumon.snapshot() calls a few hundred steps apart",
                    r.rank, r.job, fmt_bytes(rate as u64)
                ),
                [("leak_bytes_per_s", rate)],
            ));
        }
    }
    for a in report
        .alerts
        .iter()
        .filter(|a| a.kind == AlertKind::Straggler)
    {
        let (Some(job), Some(rank)) = (&a.job, a.rank) else {
            continue;
        };
        let section = a
            .section
            .clone()
            .unwrap_or_else(|| "its own work".to_owned());
        out.push(Recommendation {
            kind: "straggler".into(),
            job: Some(job.clone()),
            rank: Some(rank),
            text: format!(
                "rank {rank} of {job} is the straggler, in {section}: every other rank waits for it at each collective; look at its data pipeline, its GPU's clocks and neighbours, or an uneven split of the batch"
            ),
            numbers: a.slowdown.map(|s| ("slowdown".to_owned(), s)).into_iter().collect(),
        });
    }
    let host = &report.host;
    let host_critical = report.alerts.iter().any(|a| {
        a.kind == AlertKind::MemoryLevel
            && a.job.is_none()
            && a.gpu.is_none()
            && a.severity >= gpumon_common::engine::Severity::Critical
    });
    if host.total_bytes > 0 && host_critical {
        out.push(Recommendation {
            kind: "host_memory".into(),
            job: None,
            rank: None,
            text: format!(
                "host RAM reached its critical level ({} of {}; the command's processes held {}): fewer DataLoader workers or a smaller prefetch_factor, memory-mapped datasets, or map_location straight to the GPU when loading checkpoints",
                fmt_bytes(host.peak_used_bytes),
                fmt_bytes(host.total_bytes),
                fmt_bytes(host.peak_rss_bytes)
            ),
            numbers: BTreeMap::from([
                ("peak_used_bytes".to_owned(), host.peak_used_bytes as f64),
                ("peak_rss_bytes".to_owned(), host.peak_rss_bytes as f64),
            ]),
        });
    }
    out
}

fn gpu_total(report: &ProfileReport, r: &RankReport) -> Option<u64> {
    report
        .gpus
        .iter()
        .find(|g| Some(&g.node) == r.node.as_ref() && Some(g.gpu) == r.gpu)
        .map(|g| g.total_bytes)
        .filter(|&t| t > 0)
}

fn rec<const N: usize>(
    kind: &str,
    r: &RankReport,
    text: String,
    numbers: [(&str, f64); N],
) -> Recommendation {
    Recommendation {
        kind: kind.to_owned(),
        job: Some(r.job.clone()),
        rank: Some(r.rank),
        text,
        numbers: numbers
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    }
}

/// The batch that keeps the rank under the warning level; checkpointing
/// where activations dominate a tight rank.
fn batch_size(report: &ProfileReport, r: &RankReport, total: u64, out: &mut Vec<Recommendation>) {
    let (Some(peak), Some(floor)) = (r.peak_allocated_bytes, r.floor_allocated_bytes) else {
        return;
    };
    let activations = peak.saturating_sub(floor);
    if activations == 0 {
        return;
    }
    let outside = r
        .peak_reserved_bytes
        .map_or(0, |res| r.peak_used_bytes.saturating_sub(res));
    let warning = report.levels.gpu_warning_pct / 100.0;
    let target = warning * total as f64;
    let fraction = (target - outside as f64 - floor as f64) / activations as f64;
    let tight = r.ooms > 0
        || report.exit.oom
        || r.risk >= Risk::Warning
        || r.peak_used_bytes as f64 >= target;
    let numbers = [
        ("batch_fraction", fraction.max(0.0)),
        ("activation_bytes", activations as f64),
        ("floor_bytes", floor as f64),
        ("outside_allocator_bytes", outside as f64),
        ("target_bytes", target),
    ];
    let who = format!("rank {} of {}", r.rank, r.job);
    if fraction <= 0.0 {
        out.push(rec(
            "batch_size",
            r,
            format!(
                "{who}: parameters, gradients and optimizer state alone ({}) leave no room under the {}% level of {}: shard them (FSDP or ZeRO), train in bf16, or use an 8-bit optimizer",
                fmt_bytes(floor), report.levels.gpu_warning_pct, fmt_bytes(total)
            ),
            numbers,
        ));
        return;
    }
    if tight && fraction < 1.0 {
        out.push(rec(
            "batch_size",
            r,
            format!(
                "{who}: a batch of at most {:.0} % of the current one keeps it under the {}% level ({} of {}): activations took {} at peak over {} of parameters, gradients and optimizer state",
                100.0 * fraction, report.levels.gpu_warning_pct, fmt_bytes(target as u64), fmt_bytes(total),
                fmt_bytes(activations), fmt_bytes(floor)
            ),
            numbers,
        ));
    } else if !tight && fraction >= GROWTH_WORTH_SAYING {
        out.push(rec(
            "batch_size",
            r,
            format!(
                "{who}: memory has room for a batch about {fraction:.1} times the current one under the {}% level (activations {} at peak, {} held between steps)",
                report.levels.gpu_warning_pct, fmt_bytes(activations), fmt_bytes(floor)
            ),
            numbers,
        ));
    }
    if tight && activations as f64 >= ACTIVATION_SHARE * peak as f64 {
        out.push(rec(
            "gradient_checkpointing",
            r,
            format!(
                "{who}: activations are {:.0} % of the peak ({}): activation (gradient) checkpointing of the largest blocks (torch.utils.checkpoint) trades roughly a third more compute for most of that memory, without changing the batch",
                100.0 * activations as f64 / peak as f64, fmt_bytes(activations)
            ),
            [("activation_bytes", activations as f64), ("peak_allocated_bytes", peak as f64)],
        ));
    }
}

/// `expandable_segments` where the allocator held much more than its tensors.
fn cache_gap(r: &RankReport, total: u64, out: &mut Vec<Recommendation>) {
    let (Some(reserved), Some(allocated)) = (r.peak_reserved_bytes, r.peak_allocated_bytes) else {
        return;
    };
    let gap = reserved.saturating_sub(allocated);
    let large = gap as f64 >= CACHE_GAP_SHARE * total as f64 && gap >= CACHE_GAP_MIN;
    if !(large || r.fragmentation) {
        return;
    }
    out.push(rec(
        "expandable_segments",
        r,
        format!(
            "rank {} of {}: the caching allocator held {} more than its tensors at peak; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets it grow segments instead of keeping fragments, usually returning most of that",
            r.rank, r.job, fmt_bytes(gap)
        ),
        [("cache_gap_bytes", gap as f64)],
    ));
}
