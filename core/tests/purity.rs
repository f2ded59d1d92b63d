//! The core stays pure: no file, network, process, environment, thread or
//! clock access in its library code. Its dependency list already keeps out
//! every crate that does I/O (no tokio, no flate2, no tracing subscriber);
//! this test covers what the standard library would let in. A replica that
//! read a clock or a file inside the transition would decide differently
//! from its peers and from replay.
//!
//! Test code (`tests.rs` files and `tests/` folders) may do as it likes.

use std::path::{Path, PathBuf};

/// What no library file of the core may name.
const FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::net",
    "std::env",
    "std::process",
    "std::thread",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "SystemTime",
    "Instant",
    "println!",
    "eprintln!",
];

fn library_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("core/src is readable") {
        let path = entry.expect("a readable entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                library_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The file's lines up to its inline `#[cfg(test)]` module, if any.
fn library_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| line.trim() != "#[cfg(test)]")
        .filter(|(_, line)| {
            let code = line.trim_start();
            !code.starts_with("//")
        })
}

#[test]
fn core_library_code_touches_no_clock_file_network_or_process() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    library_files(&src, &mut files);
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a UTF-8 source file");
        for (index, line) in library_lines(&text) {
            for word in FORBIDDEN.iter().filter(|w| line.contains(**w)) {
                found.push(format!("{}:{}: {word}", file.display(), index + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "impure code in the core:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_forbidden_name() {
    let text =
        "use std::fs::read;\n// std::env in a comment\n#[cfg(test)]\nuse std::net::TcpStream;\n";
    let hits: Vec<_> = library_lines(text)
        .filter(|(_, line)| FORBIDDEN.iter().any(|w| line.contains(w)))
        .map(|(index, _)| index + 1)
        .collect();
    assert_eq!(hits, [1]);
}
