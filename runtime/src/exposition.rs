//! Prometheus exposition formats: which one a scraper asked for, and the
//! text `/metrics` answers in each.
//!
//! The coordinator and the agent encode `/metrics` with `prometheus-client`,
//! which writes OpenMetrics 1.0 text. Prometheus asks for OpenMetrics first;
//! a client that prefers `text/plain` gets the classic text format 0.0.4.
//!
//! Which one: OpenMetrics when the client asks for it at least as much as
//! for `text/plain` (Prometheus does); the classic text otherwise, a missing
//! `Accept` header and `*/*` included. So what `curl` gets, and what tools
//! that read only the classic format get, is the classic text: promtool
//! 2.42's `check metrics` is one (it reads an OpenMetrics counter family
//! `x` with sample `x_total` as two families). The OpenMetrics answer is
//! OpenMetrics as the specification has it. No collector uses the `info`
//! type: a build is a gauge named `…_info` with the value 1.
//!
//! The classic text ([`to_classic`]) names a counter family `x` as its
//! sample, `x_total`, drops `# UNIT` and `# EOF`,
//! turns `unknown` into `untyped`, and unescapes `\"` in help text (the
//! classic format escapes only `\\` and `\n` there). Sample lines are the
//! same in both formats and pass through.
//!
//! ```
//! use gpumon_runtime::exposition::{to_classic, Format};
//! let om = concat!(
//!     "# HELP x_seconds Time.\n# TYPE x_seconds gauge\n# UNIT x_seconds seconds\n",
//!     "x_seconds 1.5\n",
//!     "# HELP y Things.\n# TYPE y counter\ny_total 3\n# EOF\n",
//! );
//! let classic = concat!(
//!     "# HELP x_seconds Time.\n# TYPE x_seconds gauge\nx_seconds 1.5\n",
//!     "# HELP y_total Things.\n# TYPE y_total counter\ny_total 3\n",
//! );
//! assert_eq!(to_classic(om), classic);
//! assert_eq!(Format::OpenMetrics.render(om.to_owned()), om);
//! assert_eq!(Format::from_accept(None), Format::Classic);
//! assert_eq!(Format::from_accept(Some("text/plain;version=0.0.4")), Format::Classic);
//! ```

/// Content type of an OpenMetrics 1.0 text response.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of a classic Prometheus text (0.0.4) response.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, for clients that ask for it.
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4: the default.
    Classic,
}

impl Format {
    /// The format an `Accept` header prefers: OpenMetrics when it names
    /// `application/openmetrics-text` with a quality above 0 and at least
    /// that of `text/plain`; classic otherwise, a missing header and `*/*`
    /// included.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Classic;
        };
        let mut openmetrics: Option<f32> = None;
        let mut plain: Option<f32> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|v| v.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let slot = match media.as_str() {
                "application/openmetrics-text" => &mut openmetrics,
                "text/plain" => &mut plain,
                _ => continue,
            };
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
        match (openmetrics, plain) {
            (Some(om), Some(p)) if om > 0.0 && om >= p => Format::OpenMetrics,
            (Some(om), None) if om > 0.0 => Format::OpenMetrics,
            _ => Format::Classic,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Classic => CLASSIC_CONTENT_TYPE,
        }
    }

    /// `openmetrics` text (as `prometheus-client` writes it) in this format.
    pub fn render(self, openmetrics: String) -> String {
        match self {
            Format::OpenMetrics => openmetrics,
            Format::Classic => to_classic(&openmetrics),
        }
    }
}

/// The classic text format of an OpenMetrics text; see the module docs.
pub fn to_classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // `# HELP` comes before `# TYPE`, which decides the name: hold it.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" if name.ends_with("_total") => (name.to_owned(), "counter"),
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            match help.take() {
                Some((n, text)) if n == rest.split(' ').next().unwrap_or("") => {
                    out.push_str("# HELP ");
                    out.push_str(&name);
                    out.push(' ');
                    push_classic_help(&mut out, text);
                    out.push('\n');
                }
                other => flush_help(&mut out, other),
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            flush_help(&mut out, help.take());
            out.push_str(line);
            out.push('\n');
        }
    }
    flush_help(&mut out, help);
    out
}

/// A `# HELP` with no `# TYPE` after it keeps its name.
fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        push_classic_help(out, text);
        out.push('\n');
    }
}

/// OpenMetrics help text (escapes `\\`, `\n`, `\"`) as classic help text
/// (escapes `\\` and `\n` only).
fn push_classic_help(out: &mut String, text: &str) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push_str("\\\\"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openmetrics_answer_is_the_text_as_written() {
        let om = "# HELP c Count.\n# TYPE c counter\nc_total{k=\"v\"} 2\n# EOF\n";
        assert_eq!(Format::OpenMetrics.render(om.to_owned()), om);
        assert!(Format::Classic
            .render(om.to_owned())
            .starts_with("# HELP c_total Count.\n# TYPE c_total counter\n"));
    }

    #[test]
    fn prometheus_own_accept_header_gets_openmetrics_and_curl_the_classic_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(None), Format::Classic);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Classic);
    }

    #[test]
    fn a_client_preferring_text_plain_gets_the_classic_format() {
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Classic);
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text;q=0.3, text/plain;q=0.9")),
            Format::Classic
        );
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text;q=0, text/plain")),
            Format::Classic
        );
    }

    #[test]
    fn counters_and_infos_are_renamed_and_samples_kept() {
        let om = "# HELP a Build.\n# TYPE a info\na_info{version=\"1\"} 1\n\
                  # HELP c Says \\\"hi\\\" \\\\ twice.\n# TYPE c counter\nc_total{k=\"v\"} 2\n\
                  # HELP u Unknown.\n# TYPE u unknown\nu 1\n# EOF\n";
        let classic = to_classic(om);
        assert_eq!(
            classic,
            "# HELP a_info Build.\n# TYPE a_info gauge\na_info{version=\"1\"} 1\n\
             # HELP c_total Says \"hi\" \\\\ twice.\n# TYPE c_total counter\nc_total{k=\"v\"} 2\n\
             # HELP u Unknown.\n# TYPE u untyped\nu 1\n"
        );
    }
}
