//! What each point runs: the grid, the command's arguments and the `--env`
//! variables as templates, checked together so that every placeholder
//! names a parameter and every parameter is used somewhere (a parameter
//! that changes nothing would only repeat the same run).

use std::collections::BTreeSet;

use super::error::SweepError;
use super::grid::{env_name, is_name, Grid, Param, Point};
use super::template::Template;

pub use super::bounds::MAX_ENV;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Plan {
    grid: Grid,
    command: Vec<Template>,
    env: Vec<(String, Template)>,
}

/// What one point runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointCommand {
    /// The command, program first.
    pub argv: Vec<String>,
    /// Variables set for it: the `--env` ones, then `GPUMON_SWEEP_<NAME>`.
    pub env: Vec<(String, String)>,
}

impl Plan {
    /// Checks `--param` flags, the command and `--env NAME=VALUE` flags.
    pub fn new(params: &[String], command: &[String], env: &[String]) -> Result<Self, SweepError> {
        let params: Vec<Param> = params
            .iter()
            .map(|p| Param::parse(p))
            .collect::<Result<_, _>>()?;
        let grid = Grid::new(params)?;
        let names: Vec<&str> = grid.params().iter().map(|p| p.name.as_str()).collect();
        let command: Vec<Template> = command
            .iter()
            .map(|a| Template::parse(a, &names))
            .collect::<Result<_, _>>()?;
        if env.len() > MAX_ENV {
            return Err(SweepError::TooManyEnv { count: env.len() });
        }
        let env: Vec<(String, Template)> = env
            .iter()
            .map(|e| {
                let (var, value) = e
                    .split_once('=')
                    .filter(|(var, _)| is_name(var))
                    .ok_or_else(|| SweepError::EnvForm { flag: e.clone() })?;
                Ok((var.to_owned(), Template::parse(value, &names)?))
            })
            .collect::<Result<_, SweepError>>()?;
        let used: BTreeSet<usize> = command
            .iter()
            .chain(env.iter().map(|(_, t)| t))
            .flat_map(Template::uses)
            .collect();
        if let Some(unused) = names
            .iter()
            .enumerate()
            .find(|(i, _)| !used.contains(i))
            .map(|(_, n)| n)
        {
            return Err(SweepError::Unused {
                name: (*unused).to_owned(),
            });
        }
        Ok(Self { grid, command, env })
    }

    /// The grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// What `point` runs.
    pub fn at(&self, point: &Point) -> PointCommand {
        let values: Vec<&str> = self
            .grid
            .values(point)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let argv = self.command.iter().map(|t| t.fill(&values)).collect();
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|(var, t)| (var.clone(), t.fill(&values)))
            .collect();
        for (name, value) in self.grid.values(point) {
            env.push((env_name(name), value.to_owned()));
        }
        PointCommand { argv, env }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn each_point_gets_its_arguments_and_variables() {
        let plan = Plan::new(
            &strings(&["bs=8,16", "seq=128"]),
            &strings(&["python", "train.py", "--batch-size", "{bs}"]),
            &strings(&["SEQ_LEN={seq}"]),
        )
        .unwrap();
        let last = plan.at(&plan.grid().point(1));
        assert_eq!(
            last.argv,
            strings(&["python", "train.py", "--batch-size", "16"])
        );
        assert_eq!(
            last.env,
            [
                ("SEQ_LEN".to_owned(), "128".to_owned()),
                ("GPUMON_SWEEP_BS".to_owned(), "16".to_owned()),
                ("GPUMON_SWEEP_SEQ".to_owned(), "128".to_owned()),
            ]
        );
    }

    #[test]
    fn a_parameter_used_nowhere_and_a_bad_env_flag_are_refused() {
        let e = Plan::new(
            &strings(&["bs=8", "lr=1e-3"]),
            &strings(&["train", "{bs}"]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--param lr is used nowhere"), "{e}");
        let e = Plan::new(
            &strings(&["bs=8"]),
            &strings(&["train"]),
            &strings(&["1X={bs}"]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--env \"1X={bs}\""), "{e}");
        let e = Plan::new(&strings(&["bs=8"]), &strings(&["train", "{lr}"]), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("{lr}"), "{e}");
    }
}
