//! Runs the Python hook's own unit tests (`agent/python/tests`, stdlib
//! `unittest`), so `cargo test` covers the package that `gpumon run`
//! injects. They use `gpumon.testing.FakeAllocator` in place of torch.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_hook_passes_its_unit_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "."])
        .current_dir(&root)
        .env_remove("PYTHONPATH")
        .env_remove("GPUMON_AGENT")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .expect("python3 runs (the test command installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python unit tests failed:\n{stderr}");
    assert!(
        stderr.contains("\nOK") && stderr.contains("Ran "),
        "unexpected unittest output:\n{stderr}"
    );
}
