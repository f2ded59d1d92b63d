//! The HTML report of `gpumon profile --html FILE`: one file that opens in
//! any browser with nothing beside it and no network.
//!
//! The page is the report's JSON in a `<script type="application/json">`
//! element plus the stylesheet and script of `tools/assets/profile/`, which
//! draw the charts on `<canvas>` and build every table in the browser. The
//! report's strings are the user's (command line, mark names, messages), so
//! the JSON is escaped to hold no `<`, `>` or `&` (nothing in it can end the
//! element or start markup) and the script puts text into the page with
//! `textContent` only. A Content-Security-Policy with a fresh nonce lets only
//! the page's own script and style run and forbids every network request.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::report::ProfileReport;

/// The stylesheet.
const CSS: &str = include_str!("../../assets/profile/profile.css");

/// The script, in the order its parts are joined; they share one scope.
const SCRIPTS: [&str; 9] = [
    include_str!("../../assets/profile/format.js"),
    include_str!("../../assets/profile/dom.js"),
    include_str!("../../assets/profile/chart.js"),
    include_str!("../../assets/profile/timeline.js"),
    include_str!("../../assets/profile/heatmap.js"),
    include_str!("../../assets/profile/sections.js"),
    include_str!("../../assets/profile/tables.js"),
    include_str!("../../assets/profile/header.js"),
    include_str!("../../assets/profile/main.js"),
];

/// The whole page for `report`.
pub fn render(report: &ProfileReport) -> String {
    // Serializing this type cannot fail (string keys only; non-finite
    // floats become null); should it ever, the page says so instead.
    let data = serde_json::to_string(report).unwrap_or_else(|_| "null".to_owned());
    let data = escape_json_for_html(&data);
    let nonce = nonce();
    let mut page = String::with_capacity(data.len() + 64 * 1024);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    page.push_str(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src data:; \
         base-uri 'none'; form-action 'none'\">\n"
    ));
    page.push_str("<title>gpumon profile</title>\n");
    page.push_str(&format!("<style nonce=\"{nonce}\">\n{CSS}</style>\n"));
    page.push_str("</head>\n<body>\n<main id=\"report\" data-rendered=\"pending\">\n");
    page.push_str(
        "<noscript><p class=\"placeholder\">This report is drawn by JavaScript; \
         enable it, or read the same data with <code>gpumon profile --json</code>.</p></noscript>\n",
    );
    page.push_str("</main>\n<script type=\"application/json\" id=\"report-data\">");
    page.push_str(&data);
    page.push_str(&format!(
        "</script>\n<script nonce=\"{nonce}\">\n(function () {{\n'use strict';\n"
    ));
    for part in SCRIPTS {
        page.push_str(part);
        page.push('\n');
    }
    page.push_str("})();\n</script>\n</body>\n</html>\n");
    page
}

/// JSON that is safe inside a `<script>` element and still the same JSON:
/// `<`, `>`, `&` and the two JavaScript line terminators can only occur in
/// JSON strings, where their `\u` escapes mean the same characters.
pub fn escape_json_for_html(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            _ => out.push(c),
        }
    }
    out
}

/// 128 unpredictable bits in hex, for the page's CSP nonce: std's hasher
/// keys are drawn from the OS's randomness, and the report's author cannot
/// know them, so markup smuggled into the data could not carry the nonce.
fn nonce() -> String {
    let a = RandomState::new().hash_one(0x9e37_79b9_u32);
    let b = RandomState::new().hash_one(0x85eb_ca6b_u32);
    format!("{a:016x}{b:016x}")
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
