//! Reading a file inside a container's root as the container would.

use std::os::unix::fs::symlink;
use std::sync::mpsc;
use std::time::Duration;

use super::*;

fn container() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/name"), "inside\n").unwrap();
    root
}

fn read(root: &Path, path: &str) -> Option<String> {
    read_in_root(root, path, 64).map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn absolute_and_relative_links_and_dot_dot_stay_in_the_root() {
    let root = container();
    let r = root.path();
    symlink("/etc/name", r.join("absolute")).unwrap();
    symlink("etc/name", r.join("relative")).unwrap();
    symlink("../../../../../../etc/name", r.join("etc/climb")).unwrap();
    symlink("/", r.join("etc/top")).unwrap();
    for path in [
        "etc/name",
        "/etc/name",
        "./etc//name",
        "absolute",
        "relative",
        "etc/climb",
        "etc/top/etc/top/etc/name",
        "../../etc/name",
    ] {
        assert_eq!(read(r, path).as_deref(), Some("inside\n"), "{path}");
    }
    // The host's file of the same name is never read.
    symlink("/proc/self/environ", r.join("escape")).unwrap();
    assert_eq!(read(r, "escape"), None);
}

#[test]
fn loops_directories_missing_and_oversized_files_are_nothing() {
    let root = container();
    let r = root.path();
    symlink("loop-b", r.join("loop-a")).unwrap();
    symlink("loop-a", r.join("loop-b")).unwrap();
    symlink("self/x", r.join("self")).unwrap();
    std::fs::write(r.join("big"), "x".repeat(65)).unwrap();
    std::fs::write(r.join("fits"), "x".repeat(64)).unwrap();
    for path in ["loop-a", "self", "etc", "missing", "etc/name/below", "big"] {
        assert_eq!(read(r, path), None, "{path}");
    }
    assert_eq!(read(r, "fits").map(|s| s.len()), Some(64));
}

#[test]
fn a_fifo_in_place_of_the_file_does_not_block() {
    let root = container();
    let fifo = root.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let path = root.path().to_path_buf();
    std::thread::spawn(move || tx.send(read_in_root(&path, "fifo", 64)).unwrap());
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reading a FIFO must not block");
    assert_eq!(got, None);
}
