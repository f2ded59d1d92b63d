//! Reports built by hand for the HTML tests: a ten-minute run of one
//! four-rank job on two GPUs with the findings a user would look for (a
//! leaking rank with an OOM forecast, a straggler, a rank without the hook),
//! a hostile copy whose every user-written string is markup, a 512-rank run,
//! an empty run and one with non-finite numbers.

use std::collections::BTreeMap;

use gpumon_core::engine::{Alert, AlertKind, Risk, Severity, Subject};
use gpumon_proto::api::OomForecast;

use crate::profile::report::{
    ExitInfo, GpuReport, HostReport, JobReport, Levels, Mark, ProfileReport, Quantiles, RankReport,
    Recommendation, Summary, PROFILE_VERSION,
};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;
/// 2024-05-01 13:26:40 UTC.
pub const START: f64 = 1_714_570_000.0;
pub const LENGTH: f64 = 600.0;
pub const JOB: &str = "job-7";
/// Markup that must show as text: it closes a script element and starts an
/// element with a handler.
pub const HOSTILE: &str = "</script><img src=x onerror=alert(1)>";

/// How one simulated rank uses memory and time.
struct Profile {
    /// Allocated between steps.
    floor: u64,
    /// Activations at the end of a step, on top of the floor.
    activations: u64,
    /// Growth, bytes per second.
    leak: f64,
    /// Step time, seconds.
    step_s: f64,
}

impl Profile {
    fn allocated(&self, e: f64) -> u64 {
        let phase = (e / self.step_s).fract();
        self.floor + (self.activations as f64 * phase) as u64 + (self.leak * e) as u64
    }

    fn reserved(&self, e: f64) -> u64 {
        let top = self.floor + self.activations + (self.leak * e) as u64;
        top.div_ceil(GIB / 2) * (GIB / 2)
    }
}

fn profiles() -> [Profile; 4] {
    let plain = |step_s| Profile {
        floor: 8 * GIB,
        activations: 6 * GIB,
        leak: 0.0,
        step_s,
    };
    [
        plain(1.0),
        plain(1.0),
        Profile {
            leak: 60.0 * MIB as f64,
            ..plain(1.0)
        },
        plain(1.35),
    ]
}

fn q(p50: f64, p90: f64) -> Quantiles {
    Quantiles { p50, p90 }
}

fn forecast(t: f64, level: f64, slope: f64, capacity: u64) -> OomForecast {
    let usable = capacity as f64 * 0.995;
    let margin = 2.0 * GIB as f64;
    let predicted = t + (usable - margin - level) / slope;
    OomForecast {
        t,
        predicted_oom_t: predicted,
        earliest_oom_t: predicted - 60.0,
        latest_oom_t: predicted + 90.0,
        confidence: 0.9,
        slope_bytes_per_s: slope,
        level_bytes: level,
        margin_bytes: margin,
        usable_bytes: usable,
        risk: Risk::High,
    }
}

fn rank_report(rank: u32, p: &Profile, hook: bool) -> RankReport {
    let timeline: Vec<_> = if hook {
        (0..=LENGTH as u32)
            .map(|s| {
                let e = f64::from(s);
                (START + e, [p.allocated(e), p.reserved(e)])
            })
            .collect()
    } else {
        Vec::new()
    };
    let peak = |i: usize| timeline.iter().map(|(_, v)| v[i]).max();
    let mean = |i: usize| {
        (!timeline.is_empty())
            .then(|| timeline.iter().map(|(_, v)| v[i]).sum::<u64>() / timeline.len() as u64)
    };
    let step_ms = p.step_s * 1000.0;
    let sections: BTreeMap<String, Quantiles> = if hook {
        [
            ("data", 0.05),
            ("forward", 0.3),
            ("backward", 0.5),
            ("optimizer", 0.1),
        ]
        .into_iter()
        .map(|(name, share)| {
            let slow = if name == "backward" {
                step_ms - 1000.0
            } else {
                0.0
            };
            let ms = 1000.0 * share + slow;
            (name.to_owned(), q(ms, ms * 1.1))
        })
        .collect()
    } else {
        BTreeMap::new()
    };
    RankReport {
        job: JOB.into(),
        rank,
        node: Some("node-a".into()),
        gpu: Some(rank / 2),
        pid: Some(4100 + rank),
        peak_allocated_bytes: peak(0),
        avg_allocated_bytes: mean(0),
        peak_reserved_bytes: peak(1),
        avg_reserved_bytes: mean(1),
        floor_allocated_bytes: hook.then_some(p.floor),
        peak_used_bytes: p.reserved(LENGTH) + GIB,
        outside_allocator_bytes: None,
        outside_allocator_baseline_bytes: None,
        memory_limit: None,
        ooms: 0,
        steps: if hook { (LENGTH / p.step_s) as u64 } else { 0 },
        step_ms: hook.then(|| q(step_ms, step_ms * 1.08)),
        sections,
        step_verdict: None,
        leak: p.leak > 0.0,
        leak_bytes_per_s: (p.leak > 0.0).then_some(p.leak),
        fragmentation: false,
        imbalance: false,
        straggler: p.step_s > 1.2,
        slowdown: (p.step_s > 1.2).then_some(p.step_s),
        risk: if p.leak > 0.0 { Risk::High } else { Risk::None },
        forecast: (p.leak > 0.0).then(|| {
            let e = LENGTH - 10.0;
            forecast(START + e, p.reserved(e) as f64, p.leak, 80 * GIB)
        }),
        timeline,
    }
}

fn gpu_report(gpu: u32, ranks: &[&Profile]) -> GpuReport {
    let total = 80 * GIB;
    let used = |e: f64| ranks.iter().map(|p| p.reserved(e) + GIB).sum::<u64>();
    let timeline: Vec<_> = (0..=(LENGTH as u32) / 2)
        .map(|s| {
            let e = f64::from(s * 2);
            (START + e, [used(e), used(e) + GIB / 4])
        })
        .collect();
    let leaking = ranks.iter().any(|p| p.leak > 0.0);
    GpuReport {
        node: "node-a".into(),
        gpu,
        uuid: format!("GPU-0000000{gpu}-aaaa-bbbb-cccc-dddddddddddd"),
        name: "NVIDIA H100 80GB HBM3".into(),
        total_bytes: total,
        peak_used_bytes: timeline.iter().map(|(_, v)| v[1]).max().unwrap_or(0),
        avg_used_bytes: timeline.iter().map(|(_, v)| v[0]).sum::<u64>() / timeline.len() as u64,
        avg_util_pct: Some(if leaking { 71.5 } else { 93.0 }),
        risk: if leaking { Risk::High } else { Risk::None },
        forecast: leaking.then(|| {
            let e = LENGTH - 10.0;
            let slope = ranks.iter().map(|p| p.leak).sum();
            forecast(START + e, used(e) as f64, slope, total)
        }),
        timeline,
    }
}

fn alert(subject: Subject, kind: AlertKind, e: f64, severity: Severity, message: &str) -> Alert {
    let mut a = subject.alert(kind, START + e, severity);
    a.message = message.into();
    a
}

fn alerts(ranks: &[RankReport]) -> Vec<Alert> {
    let leaky = Subject::Rank(JOB.into(), 2);
    let mut leak = alert(
        leaky.clone(),
        AlertKind::Leak,
        120.0,
        Severity::Warning,
        "rank 2 keeps 60 MiB/s it never gives back",
    );
    leak.rate_bytes_per_s = ranks[2].leak_bytes_per_s;
    leak.recommendation = Some(
        "look for tensors kept across steps (losses kept with their graph, growing lists)".into(),
    );
    let mut oom = alert(
        leaky,
        AlertKind::OomPredicted,
        300.0,
        Severity::High,
        "rank 2 is forecast to run out of memory",
    );
    let f = ranks[2].forecast.expect("rank 2 has a forecast");
    oom.predicted_oom_t = Some(f.predicted_oom_t);
    oom.predicted_oom_interval = Some([f.earliest_oom_t, f.latest_oom_t]);
    oom.confidence = Some(f.confidence);
    oom.rate_bytes_per_s = Some(f.slope_bytes_per_s);
    let mut slow = alert(
        Subject::Rank(JOB.into(), 3),
        AlertKind::Straggler,
        90.0,
        Severity::Warning,
        "rank 3 is 1.35x slower than its peers",
    );
    slow.slowdown = Some(1.35);
    slow.section = Some("backward".into());
    let mut level = alert(
        Subject::Gpu("node-a".into(), 1),
        AlertKind::MemoryLevel,
        565.0,
        Severity::Warning,
        "GPU 1 of node-a is above 80 % of its memory",
    );
    level.reclaimable_bytes = Some((3 * GIB) as f64);
    let mut frag = alert(
        Subject::Rank(JOB.into(), 0),
        AlertKind::Fragmentation,
        200.0,
        Severity::Warning,
        "rank 0 reserves far more than it allocates",
    );
    frag.resolved_t = Some(START + 260.0);
    let mut all = vec![slow, leak, frag, oom, level];
    for (id, a) in (1..).zip(&mut all) {
        a.id = id;
    }
    all
}

fn recommendations() -> Vec<Recommendation> {
    let rec = |kind: &str, rank: Option<u32>, text: &str, numbers: &[(&str, f64)]| Recommendation {
        kind: kind.into(),
        job: Some(JOB.into()),
        rank,
        text: text.into(),
        numbers: numbers.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    };
    vec![
        rec(
            "leak",
            Some(2),
            "Rank 2 grows 60 MiB/s: it would run out of memory about 18 minutes in.",
            &[("rate_bytes_per_s", 60.0 * MIB as f64)],
        ),
        rec(
            "straggler",
            Some(3),
            "Rank 3 is 1.35x slower, in backward: check its GPU's clocks and neighbours.",
            &[("slowdown", 1.35)],
        ),
        rec(
            "batch_size",
            None,
            "The batch could grow by about a third on the ranks that do not leak.",
            &[
                ("batch_fraction", 0.33),
                ("headroom_bytes", (30 * GIB) as f64),
            ],
        ),
    ]
}

fn marks() -> Vec<Mark> {
    let mark = |e: f64, rank: u32, name: &str, detail: Option<&str>| Mark {
        t: START + e,
        job: JOB.into(),
        rank,
        name: name.into(),
        detail: detail.map(Into::into),
        snapshot: None,
    };
    vec![
        mark(5.0, 0, "model", Some("1.3B parameters")),
        Mark {
            snapshot: Some([8 * GIB, 14 * GIB]),
            ..mark(60.0, 2, "after warmup", None)
        },
        mark(300.0, 0, "eval start", Some("epoch 1")),
        mark(345.0, 0, "eval end", None),
    ]
}

fn host() -> HostReport {
    let timeline: Vec<_> = (0..=(LENGTH as u32) / 5)
        .map(|s| {
            let e = f64::from(s * 5);
            let rss = 20 * GIB + (e * 8.0 * MIB as f64) as u64;
            (START + e, [90 * GIB + rss, rss])
        })
        .collect();
    HostReport {
        total_bytes: 512 * GIB,
        peak_used_bytes: timeline.iter().map(|(_, v)| v[0]).max().unwrap_or(0),
        avg_used_bytes: 110 * GIB,
        peak_rss_bytes: timeline.iter().map(|(_, v)| v[1]).max().unwrap_or(0),
        avg_rss_bytes: 22 * GIB,
        timeline,
    }
}

/// The ten-minute, four-rank run.
pub fn sample() -> ProfileReport {
    let p = profiles();
    // Rank 1 runs without the hook: only its GPU's memory is known.
    let ranks: Vec<RankReport> = (0..4u32)
        .map(|r| rank_report(r, &p[r as usize], r != 1))
        .collect();
    let gpus = vec![
        gpu_report(0, &[&p[0], &p[1]]),
        gpu_report(1, &[&p[2], &p[3]]),
    ];
    let job = JobReport {
        world_size: 4,
        forecast_rank: Some(2),
        forecast: ranks[2].forecast,
        step_verdict: None,
    };
    ProfileReport {
        gpumon_profile: PROFILE_VERSION,
        command: [
            "torchrun",
            "--nproc-per-node",
            "4",
            "train.py",
            "--lr",
            "3e-4",
            "--name",
            "run a",
        ]
        .map(String::from)
        .to_vec(),
        started_t: START,
        ended_t: START + LENGTH,
        exit: ExitInfo {
            code: Some(0),
            ..ExitInfo::default()
        },
        source: "nvml".into(),
        levels: Levels {
            gpu_warning_pct: 80.0,
            gpu_critical_pct: 95.0,
            host_warning_pct: 90.0,
            host_critical_pct: 95.0,
        },
        host: host(),
        alerts: alerts(&ranks),
        gpus,
        ranks,
        jobs: [(JOB.to_owned(), job)].into(),
        marks: marks(),
        allocator_snapshots: vec!["/tmp/gpumon-snapshots/job-7-rank2-after-warmup.pickle".into()],
        recommendations: recommendations(),
        summary: Summary {
            windows: 600,
            hook_records: 2100,
            windows_skipped: 0,
            hook_records_skipped: 3,
            host_samples: 121,
            marks_dropped: 0,
        },
        snapshots: BTreeMap::new(),
        actions: Vec::new(),
    }
}

/// The sample with markup in every string a user or a script wrote, each
/// prefixed by the field it is in, and a line separator in the command.
pub fn hostile() -> ProfileReport {
    let evil = |field: &str| format!("{field}{HOSTILE}");
    let mut r = sample();
    r.command.push(evil("arg"));
    r.command.push("a\u{2028}b\u{2029}c".into());
    r.source = evil("source");
    r.exit = ExitInfo {
        code: None,
        signal: Some(9),
        oom: true,
        oom_reason: Some(evil("reason")),
        interrupted: false,
    };
    let job = evil("job");
    for rank in &mut r.ranks {
        rank.job = job.clone();
        rank.node = Some(evil("node"));
        rank.sections = std::mem::take(&mut rank.sections)
            .into_iter()
            .map(|(k, v)| (format!("{k}{HOSTILE}"), v))
            .collect();
    }
    for gpu in &mut r.gpus {
        gpu.node = evil("node");
        gpu.name = evil("model");
    }
    r.jobs = std::mem::take(&mut r.jobs)
        .into_values()
        .map(|j| (job.clone(), j))
        .collect();
    for m in &mut r.marks {
        m.job = job.clone();
        m.name = evil("mark");
        m.detail = Some(evil("detail\u{2028}"));
    }
    for a in &mut r.alerts {
        a.job = a.job.as_ref().map(|_| job.clone());
        a.message = evil("message");
        a.recommendation = Some(evil("advice"));
        a.section = Some(evil("section"));
    }
    for rec in &mut r.recommendations {
        rec.job = Some(job.clone());
        rec.text = evil("recommendation");
        rec.kind = evil("kind");
        rec.numbers = [(evil("number"), 1.0)].into();
    }
    r.allocator_snapshots = vec![evil("/tmp/snapshot")];
    r
}

/// `n` ranks of one job on `n` GPUs, sampled every 5 s; every 37th rank
/// leaks and rank 300 (far past the charts' bound) straggles.
pub fn wide(n: u32) -> ProfileReport {
    let mut r = sample();
    let base = profiles();
    r.ranks = (0..n)
        .map(|rank| {
            let p = Profile {
                floor: 12 * GIB + u64::from(rank % 16) * GIB / 4,
                leak: if rank % 37 == 5 {
                    12.0 * MIB as f64
                } else {
                    0.0
                },
                step_s: if rank == 300 { 1.5 } else { 1.0 },
                ..base[0]
            };
            let mut report = rank_report(rank, &p, true);
            report.gpu = Some(rank);
            report.timeline.retain(|(t, _)| (*t - START) % 5.0 == 0.0);
            report.forecast = None;
            report
        })
        .collect();
    r.gpus.clear();
    r.marks.retain(|m| m.rank < n);
    r.jobs.insert(
        JOB.into(),
        JobReport {
            world_size: n,
            forecast_rank: None,
            forecast: None,
            step_verdict: None,
        },
    );
    r
}

/// A command that ran on no GPU and sent nothing.
pub fn empty() -> ProfileReport {
    ProfileReport {
        gpumon_profile: PROFILE_VERSION,
        command: vec!["true".into()],
        started_t: START,
        ended_t: START + 0.2,
        exit: ExitInfo {
            code: Some(0),
            ..ExitInfo::default()
        },
        source: "nvml".into(),
        levels: sample().levels,
        host: HostReport::default(),
        gpus: Vec::new(),
        ranks: Vec::new(),
        jobs: BTreeMap::new(),
        marks: Vec::new(),
        allocator_snapshots: Vec::new(),
        alerts: Vec::new(),
        recommendations: Vec::new(),
        summary: Summary::default(),
        snapshots: BTreeMap::new(),
        actions: Vec::new(),
    }
}

/// The sample with NaN and infinities where floats are: they reach the JSON
/// as null.
pub fn non_finite() -> ProfileReport {
    let mut r = sample();
    r.ended_t = f64::NAN;
    r.levels.gpu_warning_pct = f64::INFINITY;
    r.host.timeline[3].0 = f64::NAN;
    for rank in &mut r.ranks {
        rank.step_ms = Some(q(f64::NAN, f64::INFINITY));
        rank.slowdown = Some(f64::NAN);
        rank.timeline
            .iter_mut()
            .step_by(7)
            .for_each(|p| p.0 = f64::NAN);
        if let Some(f) = &mut rank.forecast {
            f.slope_bytes_per_s = f64::NAN;
        }
    }
    r.gpus[1].avg_util_pct = Some(f64::NAN);
    r.marks[0].t = f64::NEG_INFINITY;
    r.alerts[0].t = f64::NAN;
    r.recommendations[0]
        .numbers
        .insert("rate_bytes_per_s".into(), f64::NAN);
    r
}
