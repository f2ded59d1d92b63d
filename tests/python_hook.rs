//! Runs the Python hook's own unit tests (`agent/python/tests`, stdlib
//! `unittest`), so `cargo test` covers the package that `gpumon run`
//! injects: once with the system's `python3` (no torch: the tests use
//! `gpumon.testing.FakeAllocator` and `FakeTorch`, and the real-torch ones
//! skip), and once with the Python that has real torch (`GPUMON_TEST_PYTHON`,
//! set by `scripts/test`), where the CPU-clock test on a real model runs.

use std::path::Path;
use std::process::{Command, Output};

/// Runs the unit tests verbosely with `python`; fails unless they pass.
fn unit_tests(python: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/python");
    let out: Output = Command::new(python)
        .args(["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."])
        .current_dir(&root)
        .env_remove("PYTHONPATH")
        .env_remove("GPUMON_AGENT")
        .env_remove("GPUMON_SECTION_CLOCK")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap_or_else(|e| panic!("{python} runs (the test command installs it): {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "python unit tests failed:\n{stderr}");
    assert!(
        stderr.contains("\nOK") && stderr.contains("Ran "),
        "unexpected unittest output:\n{stderr}"
    );
    stderr
}

#[test]
fn the_python_hook_passes_its_unit_tests() {
    unit_tests("python3");
}

#[test]
fn with_real_torch_the_cpu_clock_times_a_real_model() {
    if std::env::var_os("GPUMON_SKIP_TORCH_TESTS").is_some_and(|v| v == "1") {
        eprintln!(
            "with_real_torch_the_cpu_clock_times_a_real_model: SKIPPED (GPUMON_SKIP_TORCH_TESTS=1)"
        );
        return;
    }
    let python = std::env::var("GPUMON_TEST_PYTHON").expect(
        "GPUMON_TEST_PYTHON names a python with torch: run ./scripts/test, which installs one \
         (GPUMON_SKIP_TORCH_TESTS=1 skips this test)",
    );
    let log = unit_tests(&python);
    let line = log
        .lines()
        .find(|l| l.starts_with("test_steps_are_on_the_cpu_clock_with_plausible_sections"))
        .unwrap_or_else(|| panic!("the real-torch CPU clock test is missing:\n{log}"));
    assert!(line.ends_with("... ok"), "it did not run: {line}");
}
