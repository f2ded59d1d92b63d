//! Why a sweep's flags are refused before anything runs: a `--param` that
//! does not parse, a grid too large, a placeholder that names nothing, an
//! `--env` of the wrong form or a parameter used nowhere. The text is the
//! usage error `gpumon sweep` prints.

use thiserror::Error;

use super::bounds::{MAX_ENV, MAX_NAME_CHARS, MAX_PARAMS, MAX_POINTS, MAX_VALUE_CHARS};

/// Refused sweep flags.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SweepError {
    /// A `--param` without `=`.
    #[error("--param {text:?}: write NAME=V1,V2,...")]
    ParamForm {
        /// The flag's value.
        text: String,
    },
    /// A `--param` whose name is not a name.
    #[error(
        "--param {text:?}: {name:?} is not a parameter name (letters, digits and _, not first a digit, at most {MAX_NAME_CHARS})"
    )]
    ParamName {
        /// The flag's value.
        text: String,
        /// The name in it.
        name: String,
    },
    /// A `--param` with an empty value.
    #[error("--param {name}: an empty value in {text:?}")]
    EmptyValue {
        /// The parameter.
        name: String,
        /// The flag's value.
        text: String,
    },
    /// A value with a control character.
    #[error("--param {name}: a control character in {value:?}")]
    ControlCharacter {
        /// The parameter.
        name: String,
        /// The value.
        value: String,
    },
    /// A value longer than [`MAX_VALUE_CHARS`].
    #[error("--param {name}: a value longer than {MAX_VALUE_CHARS} characters")]
    LongValue {
        /// The parameter.
        name: String,
    },
    /// A value given twice for one parameter.
    #[error("--param {name}: {value:?} is given twice")]
    Twice {
        /// The parameter.
        name: String,
        /// The value.
        value: String,
    },
    /// No `--param` at all.
    #[error("give at least one --param NAME=V1,V2,...")]
    NoParams,
    /// More parameters than [`MAX_PARAMS`].
    #[error("{count} parameters; a sweep takes at most {MAX_PARAMS}")]
    TooManyParams {
        /// The parameters given.
        count: usize,
    },
    /// Two parameters whose variables would be the same.
    #[error("--param {first} and --param {second} would both be {variable}")]
    SameVariable {
        /// The earlier parameter.
        first: String,
        /// The later one.
        second: String,
        /// The variable both would set.
        variable: String,
    },
    /// More points than [`MAX_POINTS`].
    #[error(
        "the grid ({}) has more than {MAX_POINTS} points; sweep fewer values",
        .sizes.join(" x ")
    )]
    TooManyPoints {
        /// Each parameter's `<values> <name>`.
        sizes: Vec<String>,
    },
    /// More `--env` flags than [`MAX_ENV`].
    #[error("{count} --env flags; at most {MAX_ENV}")]
    TooManyEnv {
        /// The flags given.
        count: usize,
    },
    /// An `--env` that is not `VAR=VALUE`.
    #[error("--env {flag:?}: write VAR=VALUE")]
    EnvForm {
        /// The flag's value.
        flag: String,
    },
    /// A parameter neither the command nor an `--env` uses.
    #[error(
        "--param {name} is used nowhere: put {{{name}}} in the command or in an --env VAR={{{name}}}"
    )]
    Unused {
        /// The parameter.
        name: String,
    },
    /// A `{` that opens no placeholder.
    #[error(
        "{} in {text:?} is not a placeholder: write {{NAME}} for a parameter, {{{{ and }}}} for literal braces",
        opening(.name, .closed)
    )]
    NotPlaceholder {
        /// What follows the brace, up to the closing one if any.
        name: String,
        /// Whether a `}` closed it.
        closed: bool,
        /// The argument or value it is in.
        text: String,
    },
    /// A placeholder that names no parameter.
    #[error("{{{name}}} in {text:?} names no --param (give --param {name}=V1,V2,...)")]
    UnknownPlaceholder {
        /// The name in it.
        name: String,
        /// The argument or value it is in.
        text: String,
    },
}

/// The placeholder as written: `{name}`, or `{name` when never closed.
fn opening(name: &str, closed: &bool) -> String {
    if *closed {
        format!("{{{name}}}")
    } else {
        format!("{{{name}")
    }
}
