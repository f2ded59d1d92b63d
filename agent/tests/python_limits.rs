//! The Python hook clips its records to the agent's limits so that none is
//! refused for its size; it keeps its own copy of the numbers (it runs
//! without the agent's code). This test reads the hook's modules and fails
//! when one of those numbers differs from the Rust limit it mirrors.

use std::collections::HashMap;
use std::path::Path;

use gpumon_agent::hook_endpoint::{MAX_CLOCK_SKEW_MS, MAX_LINE_BYTES, MAX_RECORDS_PER_REPORT};
use gpumon_core::limits::{
    MAX_DETAIL_BYTES, MAX_LABEL_BYTES, MAX_NAME_BYTES, MAX_SECTIONS, MAX_WORLD_SIZE,
};

/// The module-level `NAME = number` lines of a hook module (`1 << 20` and
/// `768 * 1024` are worked out), by name.
fn constants(module: &str) -> HashMap<String, f64> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python/gpumon")
        .join(module);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()));
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(" = ")?;
            let name = name.trim();
            if !name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return None;
            }
            Some((name.to_owned(), number(value.trim())?))
        })
        .collect()
}

fn number(expr: &str) -> Option<f64> {
    if let Some((a, b)) = expr.split_once(" << ") {
        return Some(number(a)? * 2f64.powf(number(b)?));
    }
    if let Some((a, b)) = expr.split_once(" * ") {
        return Some(number(a)? * number(b)?);
    }
    expr.replace('_', "").parse().ok()
}

fn get(constants: &HashMap<String, f64>, module: &str, name: &str) -> f64 {
    *constants
        .get(name)
        .unwrap_or_else(|| panic!("{module} defines {name} as a number"))
}

#[test]
fn the_python_hook_clips_to_the_agents_limits() {
    let settings = constants("_settings.py");
    let same = [
        ("MAX_RECORDS_PER_REPORT", MAX_RECORDS_PER_REPORT),
        ("MAX_LINE_BYTES", MAX_LINE_BYTES),
        ("MAX_LABEL_BYTES", MAX_LABEL_BYTES),
        ("MAX_DETAIL_BYTES", MAX_DETAIL_BYTES),
        ("MAX_SECTIONS", MAX_SECTIONS),
    ];
    for (name, rust) in same {
        assert_eq!(
            get(&settings, "_settings.py", name),
            rust as f64,
            "_settings.py {name} differs from the agent's"
        );
    }
    // A report line fits in the agent's line; a record is sent only while
    // the agent would still take its time.
    assert!(get(&settings, "_settings.py", "MAX_REPORT_BYTES") < MAX_LINE_BYTES as f64);
    assert!(get(&settings, "_settings.py", "MAX_RECORD_AGE_S") * 1000.0 < MAX_CLOCK_SKEW_MS as f64);

    let env = constants("_env.py");
    assert_eq!(get(&env, "_env.py", "MAX_JOB_BYTES"), MAX_NAME_BYTES as f64);
    assert_eq!(
        get(&env, "_env.py", "MAX_WORLD_SIZE"),
        f64::from(MAX_WORLD_SIZE)
    );
}
