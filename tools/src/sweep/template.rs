//! `{name}` placeholders in an argument or a variable's value: parsed once,
//! filled in for every point. `{{` and `}}` stand for literal braces; any
//! other `{` must open a placeholder, so a brace that was meant literally
//! (a JSON argument, say) is an error that says how to write it, never a
//! value silently left out.

use super::error::SweepError;

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// The parameter with this index.
    Param(usize),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Parses `text`, resolving each placeholder's name to its index in
    /// `names`.
    pub fn parse(text: &str, names: &[&str]) -> Result<Self, SweepError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    let closed = loop {
                        match chars.next() {
                            Some('}') => break true,
                            Some(c) => name.push(c),
                            None => break false,
                        }
                    };
                    if !closed || !super::grid::is_name(&name) {
                        return Err(SweepError::NotPlaceholder {
                            name,
                            closed,
                            text: text.to_owned(),
                        });
                    }
                    let Some(i) = names.iter().position(|n| *n == name) else {
                        return Err(SweepError::UnknownPlaceholder {
                            name,
                            text: text.to_owned(),
                        });
                    };
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Param(i));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Self(pieces))
    }

    /// The indexes of the parameters it uses.
    pub fn uses(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().filter_map(|p| match p {
            Piece::Param(i) => Some(*i),
            Piece::Text(_) => None,
        })
    }

    /// The text with each placeholder replaced by `values[index]`.
    pub fn fill(&self, values: &[&str]) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Param(i) => values[*i],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 2] = ["batch_size", "seq"];

    fn fill(text: &str) -> Result<String, String> {
        Template::parse(text, &NAMES)
            .map(|t| t.fill(&["32", "512"]))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn placeholders_are_filled_alone_inside_arguments_and_beside_escaped_braces() {
        assert_eq!(fill("{batch_size}").unwrap(), "32");
        assert_eq!(fill("--bs={batch_size}").unwrap(), "--bs=32");
        assert_eq!(fill("{batch_size}x{seq}.log").unwrap(), "32x512.log");
        assert_eq!(fill("plain").unwrap(), "plain");
        assert_eq!(
            fill("{{\"bs\": {batch_size}}}").unwrap(),
            "{\"bs\": 32}",
            "{{ and }} are literal braces"
        );
        assert_eq!(fill("{{seq}}").unwrap(), "{seq}");
        assert_eq!(fill("a}b").unwrap(), "a}b", "a lone }} is itself");
        let t = Template::parse("{seq}-{seq}", &NAMES).unwrap();
        assert_eq!(t.uses().collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn unknown_names_and_stray_braces_are_errors_that_say_so() {
        let e = fill("--lr={lr}").unwrap_err();
        assert!(e.contains("{lr}") && e.contains("--param lr="), "{e}");
        for bad in ["{}", "{\"a\": 1}", "{batch_size", "{9x}"] {
            let e = fill(bad).unwrap_err();
            assert!(
                e.contains("not a placeholder") && e.contains("{{"),
                "{bad}: {e}"
            );
        }
    }
}
