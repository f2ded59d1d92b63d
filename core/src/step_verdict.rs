//! Where a training step's time goes, and what bounds it, from the step
//! anatomy the hook reports (`data`, `forward`, `backward`, `optimizer`,
//! `comm_wait`, the script's own sections) and the step's length. Pure: the
//! profile report and the API both call [`judge`] on their own numbers.
//!
//! The rule, in this order: a step is **input-bound** when waiting for the
//! next batch takes [`BOUND_SHARE`] of it or more, **communication-bound**
//! when waiting in collectives does, **host-bound** when the time outside
//! every timed section does (Python between calls, logging, host-device
//! syncs); where several do, the largest names it. Otherwise forward,
//! backward and the optimizer take the step: **compute-bound**, the healthy
//! case. Under DDP the gradient all-reduce waits inside `backward` (in
//! C++), so a DDP job's communication shows as compute here; under FSDP
//! and pipelines the hook times it apart as `comm_wait`.

use std::collections::BTreeMap;

use gpumon_proto::api::{StepBound, StepPart, StepVerdict};

use crate::hook_records::RankSteps;

use crate::engine::robust_stats::median_in_place;

/// The share of the step that makes a part its bound.
pub const BOUND_SHARE: f64 = 0.25;

/// The sections that wait for input, for peers, and do the model's work.
const INPUT: &[&str] = &["data"];
const COMMUNICATION: &[&str] = &["comm_wait"];

/// The verdict on a step of `step_ms` whose sections took `sections` (name,
/// ms per step); `None` without a positive step or any section.
pub fn judge<'a>(
    step_ms: f64,
    sections: impl IntoIterator<Item = (&'a str, f64)>,
) -> Option<StepVerdict> {
    if !(step_ms.is_finite() && step_ms > 0.0) {
        return None;
    }
    let mut parts: Vec<StepPart> = sections
        .into_iter()
        .filter(|(_, ms)| ms.is_finite() && *ms >= 0.0)
        .map(|(name, ms)| StepPart {
            name: name.to_owned(),
            ms,
            share: ms / step_ms,
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    let timed: f64 = parts.iter().map(|p| p.ms).sum();
    let rest = (step_ms - timed).max(0.0);
    parts.push(StepPart {
        name: "untimed".into(),
        ms: rest,
        share: rest / step_ms,
    });
    parts.sort_by(|a, b| b.ms.total_cmp(&a.ms).then_with(|| a.name.cmp(&b.name)));
    let share_of = |names: &[&str]| -> f64 {
        parts
            .iter()
            .filter(|p| names.contains(&p.name.as_str()))
            .map(|p| p.share)
            .sum()
    };
    let candidates = [
        (StepBound::Input, share_of(INPUT)),
        (StepBound::Communication, share_of(COMMUNICATION)),
        (StepBound::Host, share_of(&["untimed"])),
    ];
    let bound = candidates
        .iter()
        .filter(|(_, share)| *share >= BOUND_SHARE)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(StepBound::Compute, |(b, _)| *b);
    let pct = |share: f64| (share * 100.0).round();
    let (evidence, next) = match bound {
        StepBound::Input => (
            format!(
                "waiting for the next batch takes {:.0} % of the {step_ms:.0} ms step",
                pct(share_of(INPUT))
            ),
            "more DataLoader workers (num_workers), pin_memory=True and a larger prefetch_factor; \
             then a faster data path (decoding, storage)",
        ),
        StepBound::Communication => (
            format!(
                "waiting in collectives takes {:.0} % of the {step_ms:.0} ms step",
                pct(share_of(COMMUNICATION))
            ),
            "look for a straggler first (a slow rank makes every other wait); then overlap \
             communication with compute (FSDP prefetching, larger buckets) and check the network",
        ),
        StepBound::Host => (
            format!(
                "{:.0} % of the {step_ms:.0} ms step is outside every timed section",
                pct(share_of(&["untimed"]))
            ),
            "find the host work between the sections: logging, .item() and synchronize calls, \
             Python overhead; torch.compile or CUDA graphs cut the launch cost",
        ),
        StepBound::Compute => (
            format!(
                "forward, backward and the optimizer take {:.0} % of the {step_ms:.0} ms step",
                pct(1.0 - share_of(INPUT) - share_of(COMMUNICATION) - share_of(&["untimed"]))
            ),
            "the model's own work is the limit: mixed precision (bf16), torch.compile, fused \
             optimizers, or a larger batch where memory allows",
        ),
    };
    Some(StepVerdict {
        step_ms,
        parts,
        bound,
        evidence,
        next: next.to_owned(),
    })
}

/// The job's verdict (the median over `ranks` of each smoothed time) and
/// each rank's own, from the step times the state keeps.
pub fn of_ranks(
    ranks: &BTreeMap<u32, RankSteps>,
) -> (Option<StepVerdict>, BTreeMap<u32, StepVerdict>) {
    let each: BTreeMap<u32, StepVerdict> = ranks
        .iter()
        .filter_map(|(&rank, s)| {
            let sections = s.sections.iter().map(|(n, t)| (n.as_str(), t.mean_ms));
            Some((rank, judge(s.mean_duration_ms, sections)?))
        })
        .collect();
    let step = median(ranks.values().map(|s| s.mean_duration_ms).collect());
    let mut sections: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in ranks.values() {
        for (name, t) in &s.sections {
            sections.entry(name.as_str()).or_default().push(t.mean_ms);
        }
    }
    let sections: Vec<(&str, f64)> = sections
        .into_iter()
        .filter_map(|(name, ms)| Some((name, median(ms)?)))
        .collect();
    (step.and_then(|step| judge(step, sections)), each)
}

/// The median of `v`'s finite values.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    median_in_place(&mut v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(step: f64, sections: &[(&str, f64)]) -> StepVerdict {
        judge(step, sections.iter().copied()).unwrap()
    }

    #[test]
    fn a_slow_data_path_is_input_bound() {
        let v = verdict(
            100.0,
            &[("data", 40.0), ("forward", 25.0), ("backward", 30.0)],
        );
        assert_eq!(v.bound, StepBound::Input);
        assert!(
            v.evidence.contains("40 % of the 100 ms step"),
            "{}",
            v.evidence
        );
        assert_eq!(v.parts[0].name, "data");
        let rest = v.parts.iter().find(|p| p.name == "untimed").unwrap();
        assert!((rest.ms - 5.0).abs() < 1e-9);
    }

    #[test]
    fn collectives_and_untimed_host_work_and_the_healthy_case() {
        let fsdp = verdict(
            100.0,
            &[
                ("forward", 20.0),
                ("backward", 25.0),
                ("comm_wait", 45.0),
                ("data", 2.0),
            ],
        );
        assert_eq!(fsdp.bound, StepBound::Communication);
        let host = verdict(100.0, &[("forward", 20.0), ("backward", 30.0)]);
        assert_eq!(host.bound, StepBound::Host, "{}", host.evidence);
        let healthy = verdict(
            100.0,
            &[
                ("data", 5.0),
                ("forward", 30.0),
                ("backward", 50.0),
                ("optimizer", 10.0),
            ],
        );
        assert_eq!(healthy.bound, StepBound::Compute);
        assert!(healthy.evidence.contains("90 %"), "{}", healthy.evidence);
    }

    #[test]
    fn the_largest_of_several_bounds_names_it() {
        let v = verdict(
            100.0,
            &[("data", 30.0), ("comm_wait", 40.0), ("forward", 20.0)],
        );
        assert_eq!(v.bound, StepBound::Communication);
    }

    #[test]
    fn nothing_to_judge() {
        assert!(judge(0.0, [("data", 1.0)]).is_none());
        assert!(judge(f64::NAN, [("data", 1.0)]).is_none());
        assert!(judge(10.0, []).is_none());
    }
}
