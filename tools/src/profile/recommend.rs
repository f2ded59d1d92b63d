//! What to change, with the numbers behind it, from a finished report. The
//! judgements it shares with the engine and the planner (how big a cache
//! gap is worth a setting) are `gpumon_core::advice`'s.
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

use gpumon_core::advice::cache_gap_worth_a_setting;
use gpumon_core::engine::{AlertKind, Risk};
use gpumon_core::units::fmt_bytes;

use super::report::{ProfileReport, RankReport, Recommendation};

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
        // A leak's growth is not the batch's: it gets its own advice.
        if !r.leak {
            batch_size(report, r, &Limit::of(r, total), &mut out);
        }
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
            && a.severity >= gpumon_core::engine::Severity::Critical
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

/// What a rank's batch must fit under: its GPU's capacity, or the limit
/// its memory met first (a cap bounds `reserved` alone, so memory outside
/// the allocator does not count against it).
struct Limit {
    bytes: u64,
    outside_counts: bool,
    /// The limit in words, after "the N% level of".
    named: String,
}

impl Limit {
    fn of(r: &RankReport, gpu_total: u64) -> Self {
        use gpumon_proto::api::LimitKind;
        match &r.memory_limit {
            Some(l) if l.kind == LimitKind::Cap => Self {
                bytes: l.limit_bytes,
                outside_counts: false,
                named: format!("its {} allocator cap", fmt_bytes(l.limit_bytes)),
            },
            Some(l) if l.kind == LimitKind::MigSlice => Self {
                bytes: l.limit_bytes,
                outside_counts: true,
                named: format!("its {} MIG slice", fmt_bytes(l.limit_bytes)),
            },
            _ => Self {
                bytes: gpu_total,
                outside_counts: true,
                named: fmt_bytes(gpu_total),
            },
        }
    }
}

/// What counts against `limit` at the rank's peak: `reserved` for a cap,
/// the process's memory otherwise.
fn held_against(r: &RankReport, limit: &Limit) -> u64 {
    match r.peak_reserved_bytes {
        Some(reserved) if !limit.outside_counts => reserved,
        _ => r.peak_used_bytes,
    }
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
fn batch_size(
    report: &ProfileReport,
    r: &RankReport,
    limit: &Limit,
    out: &mut Vec<Recommendation>,
) {
    let (Some(peak), Some(floor)) = (r.peak_allocated_bytes, r.floor_allocated_bytes) else {
        return;
    };
    let activations = peak.saturating_sub(floor);
    if activations == 0 {
        return;
    }
    let outside = r
        .peak_reserved_bytes
        .filter(|_| limit.outside_counts)
        .map_or(0, |res| r.peak_used_bytes.saturating_sub(res));
    let warning = report.levels.gpu_warning_pct / 100.0;
    let target = warning * limit.bytes as f64;
    let fraction = (target - outside as f64 - floor as f64) / activations as f64;
    let tight = r.ooms > 0
        || report.exit.oom
        || r.risk >= Risk::Warning
        || held_against(r, limit) as f64 >= target;
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
                fmt_bytes(floor), report.levels.gpu_warning_pct, limit.named
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
                100.0 * fraction, report.levels.gpu_warning_pct, fmt_bytes(target as u64), limit.named,
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
    let large = cache_gap_worth_a_setting(gap, total);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::html::fixtures;

    const GIB: u64 = 1 << 30;

    /// The sample report with its first rank on an 80 GiB GPU: `floor`
    /// between steps, `peak` allocated, `reserved` at peak, `used` on the
    /// device.
    fn one_rank(floor: u64, peak: u64, reserved: u64, used: u64, leak: bool) -> ProfileReport {
        let mut r = fixtures::sample();
        r.alerts.clear();
        r.exit.oom = false;
        r.ranks.truncate(1);
        let g = r
            .gpus
            .iter_mut()
            .find(|g| Some(&g.node) == r.ranks[0].node.as_ref() && Some(g.gpu) == r.ranks[0].gpu)
            .unwrap();
        g.total_bytes = 80 * GIB;
        let k = &mut r.ranks[0];
        (
            k.floor_allocated_bytes,
            k.peak_allocated_bytes,
            k.peak_reserved_bytes,
        ) = (Some(floor), Some(peak), Some(reserved));
        (k.peak_used_bytes, k.leak, k.fragmentation, k.ooms) = (used, leak, false, 0);
        k.leak_bytes_per_s = leak.then_some(1e6);
        k.risk = Risk::None;
        r
    }

    fn kinds(recs: &[Recommendation]) -> Vec<&str> {
        recs.iter().map(|r| r.kind.as_str()).collect()
    }

    #[test]
    fn a_tight_rank_gets_the_batch_that_fits_under_the_warning_level() {
        // 20 GiB held, 50 GiB of activations, 1 GiB outside the allocator:
        // under 64 GiB (80 % of 80) the batch may be (64 - 1 - 20) / 50.
        let r = one_rank(20 * GIB, 70 * GIB, 71 * GIB, 72 * GIB, false);
        let recs = recommendations(&r);
        let batch = recs
            .iter()
            .find(|x| x.kind == "batch_size")
            .expect("batch advice");
        let f = batch.numbers["batch_fraction"];
        assert!((f - 43.0 / 50.0).abs() < 1e-9, "{f}");
        assert!(batch.text.contains("86 %"), "{}", batch.text);
        assert_eq!(batch.numbers["outside_allocator_bytes"], GIB as f64);
        assert!(
            kinds(&recs).contains(&"gradient_checkpointing"),
            "activations are 5/7 of the peak"
        );
    }

    #[test]
    fn a_capped_rank_s_batch_fits_under_its_cap_not_its_gpu() {
        // 4 GiB held, 10 GiB of activations, 15 GiB reserved under a 16 GiB
        // cap on an 80 GiB GPU: tight under its cap (80 % of 16 GiB), room
        // to spare on the GPU. The memory outside the allocator (1 GiB)
        // does not count against a cap.
        let mut r = one_rank(4 * GIB, 14 * GIB, 15 * GIB, 16 * GIB, false);
        r.ranks[0].memory_limit = Some(gpumon_proto::api::MemoryLimit {
            kind: gpumon_proto::api::LimitKind::Cap,
            cap_source: Some(gpumon_proto::CapSource::MemoryFraction),
            limit_bytes: 16 * GIB,
            used_bytes: 15 * GIB,
            description: "the 16.0 GiB cap".into(),
        });
        let recs = recommendations(&r);
        let batch = recs
            .iter()
            .find(|x| x.kind == "batch_size")
            .expect("batch advice");
        let f = batch.numbers["batch_fraction"];
        let expected = (0.8 * 16.0 - 4.0) / 10.0;
        assert!((f - expected).abs() < 1e-9, "{f}");
        assert_eq!(batch.numbers["outside_allocator_bytes"], 0.0);
        assert!(
            batch.text.contains("its 16.0 GiB allocator cap"),
            "{}",
            batch.text
        );
    }

    #[test]
    fn a_leaking_rank_is_told_about_its_leak_not_its_batch() {
        let r = one_rank(20 * GIB, 70 * GIB, 71 * GIB, 72 * GIB, true);
        let recs = recommendations(&r);
        assert!(kinds(&recs).contains(&"leak"));
        assert!(
            !kinds(&recs).contains(&"batch_size")
                && !kinds(&recs).contains(&"gradient_checkpointing"),
            "{:?}",
            kinds(&recs)
        );
    }

    #[test]
    fn a_roomy_rank_may_grow_its_batch_and_a_wide_cache_gap_suggests_expandable_segments() {
        let r = one_rank(10 * GIB, 14 * GIB, 15 * GIB, 16 * GIB, false);
        let recs = recommendations(&r);
        let batch = recs
            .iter()
            .find(|x| x.kind == "batch_size")
            .expect("room to grow");
        assert!(batch.numbers["batch_fraction"] > 1.5 && batch.text.contains("times the current"));
        assert!(!kinds(&recs).contains(&"expandable_segments"));
        let r = one_rank(10 * GIB, 14 * GIB, 24 * GIB, 25 * GIB, false);
        let gap = recommendations(&r)
            .into_iter()
            .find(|x| x.kind == "expandable_segments")
            .expect("10 GiB cached beyond the tensors");
        assert_eq!(gap.numbers["cache_gap_bytes"], (10 * GIB) as f64);
    }

    #[test]
    fn a_floor_that_alone_does_not_fit_asks_for_sharding() {
        let r = one_rank(66 * GIB, 70 * GIB, 71 * GIB, 72 * GIB, false);
        let recs = recommendations(&r);
        let batch = recs.iter().find(|x| x.kind == "batch_size").unwrap();
        assert!(batch.text.contains("FSDP"), "{}", batch.text);
        assert_eq!(batch.numbers["batch_fraction"], 0.0);
    }
}
