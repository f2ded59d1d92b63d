//! The page as text: the embedded report is the report, user strings cannot
//! leave it, and nothing is fetched from anywhere.

mod browser;

use super::fixtures;
use super::render;
use crate::profile::report::ProfileReport;

const DATA_OPEN: &str = "<script type=\"application/json\" id=\"report-data\">";

/// The text of the report's data element.
fn embedded(page: &str) -> &str {
    let start = page.find(DATA_OPEN).expect("the page embeds the report") + DATA_OPEN.len();
    let len = page[start..]
        .find("</script>")
        .expect("the data element ends");
    &page[start..start + len]
}

/// The page less the data element's text: what gpumon itself wrote.
fn template(page: &str) -> String {
    page.replacen(embedded(page), "", 1)
}

#[test]
fn the_embedded_json_is_the_report() {
    for report in [fixtures::sample(), fixtures::hostile(), fixtures::wide(40)] {
        let page = render(&report);
        let data = embedded(&page);
        let json = serde_json::to_string(&report).unwrap();
        // The escapes are JSON's own: the text means the report's JSON ...
        let unescaped = data
            .replace("\\u003c", "<")
            .replace("\\u003e", ">")
            .replace("\\u0026", "&")
            .replace("\\u2028", "\u{2028}")
            .replace("\\u2029", "\u{2029}");
        assert!(unescaped == json, "the embedded JSON is not the report's");
        // ... and reads back as the report. (serde_json's default float
        // parser may miss the last bit, so both sides go through it.)
        let back: ProfileReport = serde_json::from_str(data).expect("valid JSON");
        let direct: ProfileReport = serde_json::from_str(&json).unwrap();
        assert!(back == direct, "the embedded JSON reads back differently");
        assert_eq!(back.command, report.command);
        assert_eq!(back.marks, report.marks);
        assert_eq!(back.alerts.len(), report.alerts.len());
    }
}

#[test]
fn no_user_string_can_end_the_data_or_start_markup() {
    let report = fixtures::hostile();
    let page = render(&report);
    let data = embedded(&page);
    for c in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
        assert!(!data.contains(c), "{c:?} is in the data unescaped");
    }
    assert!(
        report.command.iter().any(|a| a.contains(fixtures::HOSTILE)),
        "the fixture carries markup"
    );
    // Exactly the page's own two scripts end: the data and the code.
    assert_eq!(page.matches("</script").count(), 2);
    assert_eq!(page.to_ascii_lowercase().matches("<script").count(), 2);
    assert!(
        !page.contains("<img"),
        "markup from the data reached the page"
    );
}

#[test]
fn the_page_refers_to_nothing_outside_itself() {
    for page in [render(&fixtures::sample()), render(&fixtures::hostile())] {
        let lower = page.to_ascii_lowercase();
        for needle in ["http://", "https://", "//cdn", "@import", "url("] {
            assert!(!lower.contains(needle), "the page holds {needle:?}");
        }
        let own = template(&page).to_ascii_lowercase();
        for needle in [
            " src=",
            "<link",
            "<iframe",
            "fetch(",
            "xmlhttprequest",
            "import(",
            "innerhtml",
            "outerhtml",
            "insertadjacenthtml",
            "document.write",
        ] {
            assert!(!own.contains(needle), "the page's own code uses {needle:?}");
        }
    }
}

#[test]
fn a_fresh_nonce_lets_only_the_pages_own_script_and_style_run() {
    let nonce_of = |page: &str| {
        let csp_start = page.find("script-src 'nonce-").expect("a CSP with a nonce") + 18;
        page[csp_start..csp_start + 32].to_owned()
    };
    let report = fixtures::sample();
    let (a, b) = (render(&report), render(&report));
    let nonce = nonce_of(&a);
    assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()), "{nonce}");
    assert_ne!(nonce, nonce_of(&b), "every page has its own nonce");
    assert!(a.contains("default-src 'none'"));
    assert!(a.contains(&format!("<style nonce=\"{nonce}\">")));
    assert!(a.contains(&format!("<script nonce=\"{nonce}\">")));
}

#[test]
fn non_finite_numbers_become_null_and_the_page_is_still_written() {
    let page = render(&fixtures::non_finite());
    let value: serde_json::Value = serde_json::from_str(embedded(&page)).expect("valid JSON");
    assert!(value["ended_t"].is_null());
    assert!(value["ranks"][0]["step_ms"]["p50"].is_null());
}
