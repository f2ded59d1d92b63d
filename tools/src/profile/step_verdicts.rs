//! Where each rank's step goes, and the job's, in the profile report: the
//! rank's median step and section medians through
//! [`gpumon_core::step_verdict::judge`]; the job's from the median over
//! its ranks of each.

use std::collections::BTreeMap;

use gpumon_core::step_verdict::judge;

use crate::sweep::measures::median;

use super::report::{JobReport, RankReport};

/// Fills `step_verdict` of every rank and job that reported sections.
pub fn add(ranks: &mut [RankReport], jobs: &mut BTreeMap<String, JobReport>) {
    for r in ranks.iter_mut() {
        r.step_verdict = r.step_ms.and_then(|step| {
            judge(
                step.p50,
                r.sections.iter().map(|(name, q)| (name.as_str(), q.p50)),
            )
        });
    }
    for (name, job) in jobs.iter_mut() {
        let of_job: Vec<&RankReport> = ranks.iter().filter(|r| &r.job == name).collect();
        let step = median(
            of_job
                .iter()
                .filter_map(|r| r.step_ms.map(|q| q.p50))
                .collect(),
        );
        let mut sections: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for r in &of_job {
            for (section, q) in &r.sections {
                sections.entry(section.as_str()).or_default().push(q.p50);
            }
        }
        let sections: Vec<(&str, f64)> = sections
            .into_iter()
            .filter_map(|(section, ms)| Some((section, median(ms)?)))
            .collect();
        job.step_verdict = step.and_then(|step| judge(step, sections));
    }
}
