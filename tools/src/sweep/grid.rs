//! The sweep's grid: the `--param NAME=V1,V2,...` flags and every
//! combination of their values, the first parameter outermost (it changes
//! slowest), the way nested loops in the order given would run them.
//!
//! Bounded so that a typo cannot start days of runs: at most
//! [`MAX_PARAMS`] parameters and [`MAX_POINTS`] points, short names and
//! values without control characters (they end up in argv, the environment,
//! file names' neighbours and the reports).

use serde::{Deserialize, Serialize};

use super::error::SweepError;

pub use super::bounds::{MAX_NAME_CHARS, MAX_PARAMS, MAX_POINTS, MAX_VALUE_CHARS};

/// One swept parameter and its values, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    /// Its name, as in `{name}`.
    pub name: String,
    /// Its values.
    pub values: Vec<String>,
}

/// Whether `name` is `[A-Za-z_][A-Za-z0-9_]*` and not too long.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= MAX_NAME_CHARS
}

/// The variable each point's command gets its value in.
pub fn env_name(name: &str) -> String {
    format!("GPUMON_SWEEP_{}", name.to_ascii_uppercase())
}

impl Param {
    /// Parses `NAME=V1,V2,...`.
    pub fn parse(text: &str) -> Result<Self, SweepError> {
        let Some((name, values)) = text.split_once('=') else {
            return Err(SweepError::ParamForm {
                text: text.to_owned(),
            });
        };
        if !is_name(name) {
            return Err(SweepError::ParamName {
                text: text.to_owned(),
                name: name.to_owned(),
            });
        }
        let values: Vec<String> = values.split(',').map(str::to_owned).collect();
        let name_owned = || name.to_owned();
        for v in &values {
            if v.is_empty() {
                return Err(SweepError::EmptyValue {
                    name: name_owned(),
                    text: text.to_owned(),
                });
            }
            if v.chars().any(char::is_control) {
                return Err(SweepError::ControlCharacter {
                    name: name_owned(),
                    value: v.clone(),
                });
            }
            if v.chars().count() > MAX_VALUE_CHARS {
                return Err(SweepError::LongValue { name: name_owned() });
            }
        }
        if let Some(v) = values
            .iter()
            .enumerate()
            .find_map(|(i, v)| values[..i].contains(v).then_some(v))
        {
            return Err(SweepError::Twice {
                name: name_owned(),
                value: v.clone(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            values,
        })
    }
}

/// The parameters, checked together, and their points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    params: Vec<Param>,
    points: usize,
}

/// One point: the index of each parameter's value.
pub type Point = Vec<usize>;

impl Grid {
    /// Checks the parameters together: how many, distinct names (also once
    /// uppercased, as their variables are), and the size of the grid.
    pub fn new(params: Vec<Param>) -> Result<Self, SweepError> {
        if params.is_empty() {
            return Err(SweepError::NoParams);
        }
        if params.len() > MAX_PARAMS {
            return Err(SweepError::TooManyParams {
                count: params.len(),
            });
        }
        for (i, p) in params.iter().enumerate() {
            if let Some(q) = params[..i]
                .iter()
                .find(|q| env_name(&q.name) == env_name(&p.name))
            {
                return Err(SweepError::SameVariable {
                    first: q.name.clone(),
                    second: p.name.clone(),
                    variable: env_name(&p.name),
                });
            }
        }
        let points = params
            .iter()
            .try_fold(1usize, |n, p| n.checked_mul(p.values.len()))
            .filter(|n| *n <= MAX_POINTS)
            .ok_or_else(|| SweepError::TooManyPoints {
                sizes: params
                    .iter()
                    .map(|p| format!("{} {}", p.values.len(), p.name))
                    .collect(),
            })?;
        Ok(Self { params, points })
    }

    /// The parameters, in the order given.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// How many points.
    pub fn len(&self) -> usize {
        self.points
    }

    /// The `n`th point (from 0), the first parameter changing slowest.
    pub fn point(&self, mut n: usize) -> Point {
        let mut idx = vec![0; self.params.len()];
        for (slot, p) in idx.iter_mut().zip(&self.params).rev() {
            *slot = n % p.values.len();
            n /= p.values.len();
        }
        idx
    }

    /// `(name, value)` of each parameter at `point`.
    pub fn values<'a>(&'a self, point: &[usize]) -> Vec<(&'a str, &'a str)> {
        self.params
            .iter()
            .zip(point)
            .map(|(p, &i)| (p.name.as_str(), p.values[i].as_str()))
            .collect()
    }
}

/// With `--stop-after-oom`: the point that ran out of memory with a
/// smaller value of the first parameter and the same values of the others,
/// if one did (then `point` would only run out of memory too, memory
/// growing with the first parameter's values in the order given).
pub fn beyond_oom<'a>(point: &[usize], ooms: &'a [Point]) -> Option<&'a Point> {
    ooms.iter()
        .find(|q| q[0] < point[0] && q[1..] == point[1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(flags: &[&str]) -> Result<Grid, String> {
        Grid::new(
            flags
                .iter()
                .map(|f| Param::parse(f))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn points_run_as_nested_loops_first_parameter_outermost() {
        let g = grid(&["bs=8,16,32", "seq=128,512"]).unwrap();
        assert_eq!(g.len(), 6);
        let order: Vec<Vec<(&str, &str)>> = (0..g.len()).map(|n| g.values(&g.point(n))).collect();
        let mut expected = Vec::new();
        for bs in ["8", "16", "32"] {
            for seq in ["128", "512"] {
                expected.push(vec![("bs", bs), ("seq", seq)]);
            }
        }
        assert_eq!(order, expected);
    }

    #[test]
    fn bad_flags_name_their_problem() {
        for (flag, says) in [
            ("bs", "NAME=V1"),
            ("9bs=1", "not a parameter name"),
            ("b-s=1", "not a parameter name"),
            ("bs=8,,16", "empty value"),
            ("bs=", "empty value"),
            ("bs=8,\u{7}", "control character"),
            ("bs=8,16,8", "\"8\" is given twice"),
        ] {
            let e = Param::parse(flag).unwrap_err().to_string();
            assert!(e.contains(says), "{flag:?}: {e}");
        }
        let long = format!("bs={}", "x".repeat(MAX_VALUE_CHARS + 1));
        assert!(Param::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("longer"));
        assert!(!is_name(&"n".repeat(MAX_NAME_CHARS + 1)));
    }

    #[test]
    fn the_grid_is_bounded_and_its_names_distinct_as_variables() {
        let e = grid(&["a=1,2,3,4,5,6,7,8", "b=1,2,3,4,5,6,7,8", "c=1,2,3,4,5"]).unwrap_err();
        assert!(
            e.contains("more than 256 points") && e.contains("8 a x 8 b x 5 c"),
            "{e}"
        );
        assert!(grid(&["a=1,2,3,4,5,6,7,8", "b=1,2,3,4,5,6,7,8", "c=1,2,3,4"]).is_ok());
        let e = grid(&["a=1", "b=1", "c=1", "d=1", "e=1"]).unwrap_err();
        assert!(e.contains("at most 4"), "{e}");
        let e = grid(&["bs=1", "BS=2"]).unwrap_err();
        assert!(e.contains("GPUMON_SWEEP_BS"), "{e}");
        assert_eq!(env_name("batch_size"), "GPUMON_SWEEP_BATCH_SIZE");
    }

    #[test]
    fn after_an_oom_only_larger_first_values_with_the_same_others_are_skipped() {
        let ooms = vec![vec![1, 0]];
        assert_eq!(beyond_oom(&[2, 0], &ooms), Some(&vec![1, 0]));
        assert_eq!(beyond_oom(&[2, 1], &ooms), None, "another second value");
        assert_eq!(beyond_oom(&[1, 0], &ooms), None, "the point itself");
        assert_eq!(beyond_oom(&[0, 0], &ooms), None, "a smaller value");
    }
}
