//! Embeds the Python hook package (`agent/python/gpumon`) into the binary,
//! so `gpumon run` can put it on the training processes' PYTHONPATH without
//! any installation step.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                collect(root, &path, out);
            }
        } else if path.extension().is_some_and(|e| e == "py") {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_owned());
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../agent/python");
    let package = root.join("gpumon");
    println!("cargo:rerun-if-changed={}", package.display());
    let mut files = Vec::new();
    collect(&root, &package, &mut files);
    let mut code = String::from("/// The hook package's files: path under the package root, contents.\npub const FILES: &[(&str, &str)] = &[\n");
    for rel in &files {
        let abs = root.join(rel).canonicalize().expect("listed file exists");
        println!("cargo:rerun-if-changed={}", abs.display());
        let _ = writeln!(
            code,
            "    ({:?}, include_str!({:?})),",
            rel.to_string_lossy(),
            abs.to_string_lossy()
        );
    }
    code.push_str("];\n");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("python_files.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
