//! The sweep as one self-contained HTML page (`--html FILE`): the page,
//! its style and script (`assets/`) and the results (the JSON output) in
//! one file that needs no server and fetches nothing (its
//! Content-Security-Policy forbids it). The script puts every text in
//! through `textContent`; the embedded JSON has `<`, `>`, `&` and the
//! JavaScript line separators escaped, so no value can end its script
//! element.

use super::report::SweepReport;
use crate::profile::html::escape_json_for_html;

const PAGE: &str = include_str!("assets/page.html");
const CSS: &str = include_str!("assets/page.css");
const JS: &str = include_str!("assets/page.js");

/// The page of `report`.
pub fn render(report: &SweepReport) -> String {
    // Serializing plain data with string keys cannot fail.
    let json = serde_json::to_string(report).unwrap_or_else(|_| "null".to_owned());
    PAGE.replacen("/*gpumon:css*/", CSS, 1)
        .replacen("/*gpumon:js*/", JS, 1)
        .replacen("/*gpumon:data*/", &escape_json_for_html(&json), 1)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sweep::grid::Param;
    use crate::sweep::report::{Measures, PointResult, Status, SWEEP_VERSION};

    #[test]
    fn values_cannot_end_the_script_and_read_back_unchanged() {
        let evil = "</script><img src=x onerror=alert(1)>&\u{2028}";
        let report = SweepReport {
            gpumon_sweep: SWEEP_VERSION,
            command: vec!["train".into(), "{tag}".into()],
            env: Vec::new(),
            params: vec![Param {
                name: "tag".into(),
                values: vec![evil.into()],
            }],
            grid_points: 1,
            started_t: 0.0,
            ended_t: 1.0,
            points: vec![PointResult {
                point: 1,
                params: BTreeMap::from([("tag".to_owned(), evil.to_owned())]),
                status: Status::Failed,
                exit_code: Some(1),
                exit_signal: None,
                reason: Some(evil.into()),
                measures: Measures::default(),
                report: None,
                log: None,
                wall_s: 1.0,
            }],
            skipped: Vec::new(),
            interrupted: false,
        };
        let page = render(&report);
        let start = page.find("type=\"application/json\">").unwrap() + 24;
        let end = start + page[start..].find("</script>").unwrap();
        let embedded = &page[start..end];
        assert!(!embedded.contains('<') && !embedded.contains('>') && !embedded.contains('&'));
        let back: SweepReport = serde_json::from_str(embedded).unwrap();
        assert_eq!(back, report);
        assert!(!page.contains("/*gpumon:"), "every part filled in");
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing fetched"
        );
    }
}
