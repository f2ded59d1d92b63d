//! Headless Chromium (Debian's `chromium`) in tests: the flags it needs on
//! a build machine, and reading the DOM it serializes (`--dump-dom`): start
//! tags with their attributes, and the text a reader sees. Shared by the
//! end-to-end tests of pages (`tests/support/`) and the HTML report's
//! browser tests (`tools/src/profile/html/tests/browser.rs`, unit tests
//! of `gpumon-tools`), so it needs nothing but std.

use std::collections::BTreeMap;

/// Headless, with no sandbox (containers run as root), no GPU, and nothing
/// of its own reaching the network; add `--user-data-dir` with a fresh
/// folder.
pub const HEADLESS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// A start tag of a serialized DOM.
#[derive(Debug)]
pub struct Tag {
    pub name: String,
    pub attrs: BTreeMap<String, String>,
}

impl Tag {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.get(name).map(String::as_str)
    }

    pub fn has_class(&self, class: &str) -> bool {
        self.attr("class")
            .is_some_and(|c| c.split_whitespace().any(|c| c == class))
    }
}

pub fn find(tags: &[Tag], pred: impl Fn(&Tag) -> bool) -> Option<&Tag> {
    tags.iter().find(|t| pred(t))
}

/// Every start tag of `html` as Chromium serializes it (attribute values
/// quoted; `<` in text escaped), with entity-decoded attribute values. The
/// text of scripts and styles is code, not markup, and is passed over.
pub fn parse_tags(html: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if name_len == 0 {
            continue; // an end tag, a comment or the doctype
        }
        let name = rest[..name_len].to_ascii_lowercase();
        rest = &rest[name_len..];
        let mut attrs = BTreeMap::new();
        loop {
            rest = rest.trim_start();
            if rest.is_empty() || rest.starts_with('>') || rest.starts_with("/>") {
                break;
            }
            let key_len = rest
                .find(|c: char| c.is_whitespace() || c == '=' || c == '>' || c == '/')
                .unwrap_or(rest.len())
                .max(1);
            let key = rest[..key_len].to_ascii_lowercase();
            rest = &rest[key_len..];
            let mut value = String::new();
            if let Some(v) = rest.strip_prefix('=') {
                let (quoted, end) = match v.chars().next() {
                    Some(q @ ('"' | '\'')) => {
                        (true, v[1..].find(q).map(|e| e + 1).unwrap_or(v.len()))
                    }
                    _ => (
                        false,
                        v.find(|c: char| c.is_whitespace() || c == '>')
                            .unwrap_or(v.len()),
                    ),
                };
                value = unescape(&v[usize::from(quoted)..end]);
                rest = &v[(end + usize::from(quoted)).min(v.len())..];
            }
            attrs.insert(key, value);
        }
        if RAW_TEXT.contains(&name.as_str()) {
            rest = skip_raw_text(rest, &name);
        }
        out.push(Tag { name, attrs });
    }
    out
}

/// Elements whose content is not markup.
const RAW_TEXT: [&str; 2] = ["script", "style"];

/// What follows the end tag of the raw-text element `name` that `rest` is
/// inside of (all of it is inside when the end tag is missing).
fn skip_raw_text<'a>(rest: &'a str, name: &str) -> &'a str {
    let end = format!("</{name}");
    match rest.to_ascii_lowercase().find(&end) {
        Some(i) => &rest[i..],
        None => "",
    }
}

/// The text a reader sees: `html` less its tags, scripts and styles, with
/// entities decoded.
pub fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        text.push_str(&rest[..i]);
        let tag = &rest[i + 1..];
        let name_len = tag
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tag.len());
        let name = tag[..name_len].to_ascii_lowercase();
        rest = tag.find('>').map_or("", |e| &tag[e + 1..]);
        if RAW_TEXT.contains(&name.as_str()) {
            rest = skip_raw_text(rest, &name);
        }
    }
    text.push_str(rest);
    unescape(&text)
}

pub fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_parsed_with_their_attributes() {
        let tags = parse_tags(
            r#"<!DOCTYPE html><tr class="alert active" data-rank="2" data-alert-kind="leak" data-job="a &quot;b&quot; &amp; c" hidden><td>x &lt;y</td></tr><br/>"#,
        );
        let names: Vec<&str> = tags.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["tr", "td", "br"]);
        assert!(tags[0].has_class("active"));
        assert_eq!(tags[0].attr("data-rank"), Some("2"));
        assert_eq!(tags[0].attr("data-job"), Some("a \"b\" & c"));
        assert_eq!(tags[0].attr("hidden"), Some(""));
        // A script's text may name a tag; it is no element.
        let tags = parse_tags("<script>// <canvas> is drawn</script><style>a<b{}</style><b>");
        let names: Vec<&str> = tags.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["script", "style", "b"]);
    }

    #[test]
    fn visible_text_is_the_text_without_code() {
        assert_eq!(
            visible_text("<p>a &lt;b&gt;<script>x <i>y</i></script> c<style>p{}</style></p>"),
            "a <b> c"
        );
    }
}
