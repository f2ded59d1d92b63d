"""``scripts/gpu-check``: proves gpumon's GPU path on one GPU in one command.

It runs the release ``gpumon`` binary and the hook from this checkout (it
builds nothing) against the GPU and torch of the machine it runs on, and
writes ``OUT/summary.json`` and ``OUT/summary.txt`` (a table, also printed),
with every process's log beside them. Exit status: 0 every check passed,
1 a check failed (the table and ``failed`` say which), 2 it could not run
here (no torch with CUDA, no gpumon binary, a bad option).

``--dry-run`` runs the same phases with the stand-ins: the NVML simulator,
the hook's fake allocator and fake CUDA events, no torch needed. The test
suite runs it (``tests/gpu_check.rs``), so the script cannot rot between
the times a GPU is lent.
"""

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import phases as phase_defs
import procs
import report
from cluster import python_has_torch
from procs import CheckError

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


class Run:
    """Where things are and how to start them, for every phase."""

    def __init__(self, args: argparse.Namespace, gpumon: str, tmp: str):
        self.dry_run = args.dry_run
        self.gpumon = gpumon
        self.python = args.python
        self.out_dir = os.path.abspath(args.out)
        self.tmp = tmp
        self.workload = os.path.join(HERE, "workload.py")
        base = phase_defs.DRY if args.dry_run else phase_defs.GPU
        self.params = base if args.sample_seconds is None else dataclasses.replace(base, sample_s=args.sample_seconds)
        self.nvidia_smi = None if args.dry_run else shutil.which("nvidia-smi")

    def path(self, name: str) -> str:
        return os.path.join(self.out_dir, name)

    def log(self, name: str) -> str:
        return self.path(name + ".log")

    def dry_flag(self) -> List[str]:
        return ["--dry-run"] if self.dry_run else []

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["XDG_RUNTIME_DIR"] = self.tmp
        # The hook comes from gpumon itself (run and profile inject it).
        for name in ("PYTHONPATH", "GPUMON_AGENT", "GPUMON_DISABLE", "GPUMON_SNAPSHOT_DIR"):
            env.pop(name, None)
        return env

    def bare_env(self) -> Dict[str, str]:
        env = self.env()
        env["GPUMON_DISABLE"] = "1"
        return env

    def profile(self, tag: str, report_path: str, workload_args: List[str], timeout_s: float, extra: Optional[List[str]] = None) -> int:
        """``gpumon profile`` over ``workload.py ARGS``; its exit status (the workload's)."""
        argv = [self.gpumon, "profile", "--quiet", "--json", report_path, "--html", report_path[:-5] + ".html"]
        argv += ["--job", "gpucheck-%s" % tag.split("-")[0]]
        if self.dry_run:
            argv += ["--source", "none"]
        argv += extra or []
        argv += ["--", self.python, self.workload] + workload_args + self.dry_flag()
        proc = procs.start(argv, self.log(tag), env=self.env())
        return procs.wait_exit(proc, timeout_s, "gpumon profile (%s)" % tag)


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpumon", help="the gpumon binary [default: target/release/gpumon of this checkout, else gpumon on PATH]")
    p.add_argument("--python", default=sys.executable, help="the Python with torch that runs the training processes [default: this one]")
    p.add_argument("--out", default="gpu-check-out", help="folder for summary.json, summary.txt and the logs [default: gpu-check-out]")
    p.add_argument("--dry-run", action="store_true", help="the same phases on the stand-ins: NVML simulator, fake allocator, fake CUDA events")
    p.add_argument("--only", help="comma-separated phases to run: %s [default: all]" % ",".join(phase_defs.PHASES))
    p.add_argument("--sample-seconds", type=float, help="how long the agent samples [default: 60; 20 in a dry run]")
    args = p.parse_args(argv)
    if args.only:
        unknown = set(args.only.split(",")) - set(phase_defs.PHASES)
        if unknown:
            p.error("unknown phase(s) %s; the phases are %s" % (", ".join(sorted(unknown)), ", ".join(phase_defs.PHASES)))
    return args


def find_gpumon(given: Optional[str]) -> Optional[str]:
    for candidate in [given, os.path.join(REPO, "target", "release", "gpumon"), shutil.which("gpumon")]:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def environment(run: Run) -> Dict[str, Any]:
    env: Dict[str, Any] = {"python": run.python, "gpumon": run.gpumon, "cpus": os.cpu_count()}
    try:
        env["gpumon_version"] = subprocess.run([run.gpumon, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        env["gpumon_version"] = "cannot run: %s" % e
    if run.nvidia_smi:
        out = subprocess.run(
            [run.nvidia_smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        env["nvidia_smi"] = out
        env["device"] = {"name": out.split(",")[0].strip() if out else None}
    else:
        env["device"] = {"name": "fake GPU (dry run)" if run.dry_run else None}
    return env


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


def main(argv: List[str]) -> int:
    args = parse(argv)
    gpumon = find_gpumon(args.gpumon)
    if gpumon is None:
        print("gpu-check: no gpumon binary: build it with `cargo build --release -p gpumon` or give --gpumon PATH", file=sys.stderr)
        return 2
    if not args.dry_run:
        torch = python_has_torch(args.python)
        if torch is None:
            print(
                "gpu-check: %s cannot import torch; this check needs PyTorch with CUDA on the GPU machine "
                "(or run --dry-run, which needs neither). Nothing was run." % args.python,
                file=sys.stderr,
            )
            return 2
        if not torch.endswith("True"):
            print("gpu-check: torch %s sees no CUDA device; nothing was run." % torch.split()[0], file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="gpumon-gc-")
    run = Run(args, gpumon, tmp)
    wanted = args.only.split(",") if args.only else list(phase_defs.PHASES)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.time()
    env = environment(run)
    done: List[report.Phase] = []
    interrupted = False
    try:
        for name in wanted:
            print("gpu-check: %s ..." % name, file=sys.stderr, flush=True)
            t0 = time.time()
            try:
                found = phase_defs.PHASES[name](run)
            except CheckError as e:
                found = [report.Phase(name, name)]
                found[0].failed(str(e))
            for phase in found:
                phase.seconds = time.time() - t0
                status = "ok" if phase.ok else "FAILED"
                print("gpu-check: %s %s (%.0f s)" % (phase.name, status, phase.seconds), file=sys.stderr, flush=True)
            done += found
            doc = report.summary(done, "dry-run" if run.dry_run else "gpu", started, env)
            report.write(doc, run.out_dir)
    except KeyboardInterrupt:
        interrupted = True
        print("gpu-check: interrupted; the summary holds the phases that ended", file=sys.stderr)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    doc = report.summary(done, "dry-run" if run.dry_run else "gpu", started, env)
    if interrupted:
        doc["passed"] = False
        doc["failed"].append("interrupted before every phase ran")
    path = report.write(doc, run.out_dir)
    sys.stdout.write(report.table(doc))
    print("gpu-check: summary in %s" % path, file=sys.stderr)
    return 0 if doc["passed"] else 1
