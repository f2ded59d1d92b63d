"""The phases of gpu-check: what each runs, the figures it keeps, the bounds it checks.

- ``cluster``: a coordinator and an agent sampling at 500 ms for
  ``sample_s``; meanwhile a one-rank torchrun job grows its cache and gets a
  ``release_cache`` action, then a two-rank job sharing the GPU gets a
  straggler. It yields three phases: ``nvml`` (every field the agent reads,
  its own cost, PID-to-rank attribution), ``release_cache`` and
  ``straggler``.
- ``hook``: under ``gpumon profile``, the hook's allocator reading and CUDA
  event timing against torch read directly, and no device synchronization.
- ``overhead``: the same fixed model bare and under ``gpumon profile``.
- ``leak``: a real leak into ``OutOfMemoryError`` under ``gpumon profile``.
- ``cap``: the same leak under a per-process memory fraction
  (``torch.cuda.set_per_process_memory_fraction``) a few GiB above what the
  allocator holds, so it dies at the cap with the device far from full: the
  rank's memory limit is the cap, and the forecast reads it.

Bounds that measure the GPU itself hold on a GPU only; a dry run checks
that every step runs and every figure is read, with the bounds of
:data:`DRY` (see ``docs/operations.md``).
"""

import os
import pickle
import statistics
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import procs
from cluster import Cluster, Sampler
from procs import CheckError
from report import Phase

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Params:
    sample_s: float
    cache_bytes: int
    cache_piece_mib: int
    straggler_s: float
    slow_after_s: float
    extra_units: int
    straggler_delay_s: float
    hook_steps: int
    section_units: int
    section_tolerance: float
    overhead_rounds: int
    overhead_blocks: int
    overhead_steps: int
    overhead_max_pct: float
    leak_room_bytes: int
    leak_bytes_per_s: int
    leak_piece_mib: int
    leak_steady_s: float
    leak_timeout_s: float
    oom_lead_s: float
    cap_ramp_bytes: int
    cap_room_bytes: int
    cap_bytes_per_s: int
    cap_timeout_s: float
    cap_forecast_error_s: float
    cap_max_used_pct: float
    agent_cpu_pct: float
    agent_rss_bytes: int


#: On a GPU (the defaults the issue asks for: 60 s of sampling at 500 ms).
GPU = Params(
    sample_s=60.0,
    cache_bytes=4 * GiB,
    cache_piece_mib=256,
    straggler_s=40.0,
    slow_after_s=10.0,
    extra_units=24,
    straggler_delay_s=30.0,
    hook_steps=100,
    section_units=8,
    section_tolerance=0.10,
    overhead_rounds=2,
    overhead_blocks=5,
    overhead_steps=20,
    overhead_max_pct=2.0,
    leak_room_bytes=6 * GiB,
    leak_bytes_per_s=128 * MiB,
    leak_piece_mib=16,
    leak_steady_s=6.0,
    leak_timeout_s=150.0,
    oom_lead_s=10.0,
    cap_ramp_bytes=4 * GiB,
    cap_room_bytes=6 * GiB,
    cap_bytes_per_s=128 * MiB,
    cap_timeout_s=120.0,
    cap_forecast_error_s=20.0,
    cap_max_used_pct=60.0,
    agent_cpu_pct=5.0,
    agent_rss_bytes=256 * MiB,
)

#: With the stand-ins: a 4 GiB fake device, shorter runs, bounds loose
#: enough for a busy 2-core machine; what they prove is that each step runs.
DRY = Params(
    sample_s=20.0,
    cache_bytes=1 * GiB,
    cache_piece_mib=64,
    straggler_s=30.0,
    slow_after_s=6.0,
    extra_units=25,
    straggler_delay_s=30.0,
    hook_steps=60,
    section_units=8,
    section_tolerance=0.5,
    overhead_rounds=1,
    overhead_blocks=3,
    overhead_steps=20,
    overhead_max_pct=50.0,
    leak_room_bytes=2200 * MiB,
    leak_bytes_per_s=48 * MiB,
    leak_piece_mib=4,
    leak_steady_s=5.0,
    leak_timeout_s=120.0,
    oom_lead_s=1.0,
    cap_ramp_bytes=512 * MiB,
    cap_room_bytes=1 * GiB,
    cap_bytes_per_s=24 * MiB,
    cap_timeout_s=120.0,
    cap_forecast_error_s=20.0,
    cap_max_used_pct=60.0,
    agent_cpu_pct=25.0,
    agent_rss_bytes=512 * MiB,
)


# -- cluster: nvml, release_cache, straggler -------------------------------------


def cluster_phases(run: Any) -> List[Phase]:
    p: Params = run.params
    nvml = Phase("nvml", "the agent's NVML source at 500 ms, its cost, and PID-to-rank attribution")
    cache = Phase("release_cache", "cache-only growth, then a release_cache action delivered at a step boundary")
    straggler = Phase("straggler", "two ranks sharing the GPU, one with extra matrix products in its forward")
    phases = [nvml, cache, straggler]
    cluster = Cluster(run)
    sampler = None
    jobs: Dict[str, Dict[str, Any]] = {}
    try:
        cluster.start()
        sampler = Sampler(cluster, run.nvidia_smi)
        sampler.start()
        began = time.monotonic()
        _run_cache_job(run, cluster, cache, jobs)
        _run_straggler_job(run, cluster, straggler, jobs)
        left = p.sample_s - (time.monotonic() - began)
        if left > 0:
            time.sleep(left)
    except CheckError as e:
        for phase in phases:
            if not phase.checks:
                phase.failed(str(e))
    finally:
        sampled = sampler.finish() if sampler is not None else None
        cluster.stop()
    if sampled is not None:
        _nvml_checks(run, nvml, sampled, jobs)
    elif not nvml.checks:
        nvml.failed("the cluster did not start")
    return phases


def _attribution(cluster: Cluster, job: str) -> Optional[List[Dict[str, Any]]]:
    try:
        view = cluster.api("/api/v1/jobs/%s" % job)
    except CheckError:
        return None
    return [{"rank": r["rank"], "pid": r["pid"], "gpu": r["gpu"], "node": r["node"]} for r in view.get("ranks", [])]


def _wait_ranks(run: Any, cluster: Cluster, started: List[Any], job: str, world: int, timeout_s: float) -> List[Dict[str, Any]]:
    """The job's ranks as the coordinator attributes them, once all ``world`` are there."""

    def seen() -> Optional[List[Dict[str, Any]]]:
        for proc in started:
            if proc.poll() is not None:
                raise CheckError("the %s job ended early (exit %s): %s" % (job, proc.returncode, procs.tail(proc.log_path)))
        ranks = _attribution(cluster, job)
        return ranks if ranks and len(ranks) >= world else None

    return procs.wait_for("%d ranks of %s in the coordinator's view" % (world, job), timeout_s, seen)


def _finish(started: List[Any], timeout_s: float, what: str) -> None:
    for proc in started:
        code = procs.wait_exit(proc, timeout_s, what)
        if code != 0:
            raise CheckError("%s exited with %d: %s" % (what, code, procs.tail(proc.log_path)))


def _run_cache_job(run: Any, cluster: Cluster, phase: Phase, jobs: Dict[str, Any]) -> None:
    p: Params = run.params
    job = "gpucheck-cache-%d" % os.getpid()
    out = run.path("cache-result.json")
    events = run.path("cache-events.jsonl")
    args = ["--out", out, "--events", events, "--cache-bytes", str(p.cache_bytes)]
    args += ["--cache-piece-mib", str(p.cache_piece_mib), "--action-timeout-s", "60"]
    started = cluster.launch(job, 1, "cache", args, "cache")
    try:
        ranks = _wait_ranks(run, cluster, started, job, 1, 90)

        def cached() -> Optional[Dict[str, Any]]:
            for proc in started:
                if proc.poll() is not None:
                    raise CheckError("the cache job ended before its cache grew: %s" % procs.tail(proc.log_path))
            lines = [e for e in procs.read_lines(events) if e.get("event") == "cached"]
            return lines[0] if lines else None

        grown = procs.wait_for("the cache job's cache to grow", 90, cached)
        posted_t = time.time()
        issued = cluster.admin("POST", "/api/v1/actions", {"kind": "release_cache", "job": job, "ranks": [0], "reason": "gpu-check"})
        _finish(started, 120, "the cache job")
    finally:
        for proc in started:
            procs.stop(proc)
    result = procs.read_json(out) or {}
    jobs[job] = {"world": 1, "ranks": ranks, "results": [result]}

    def finished() -> Optional[Dict[str, Any]]:
        # The ack rides the agent's next push after the step that ran it.
        actions = cluster.api("/api/v1/actions?job=%s" % job).get("actions", [])
        return actions[-1] if actions and actions[-1].get("state") in ("done", "failed", "expired") else None

    try:
        action = procs.wait_for("the release_cache action to finish", 20, finished)
    except CheckError:
        actions = cluster.api("/api/v1/actions?job=%s" % job).get("actions", [])
        action = actions[-1] if actions else {}
    before, after = result.get("before", {}), result.get("after", {})
    freed_reserved = before.get("reserved", 0) - after.get("reserved", 0)
    freed_device = before.get("device_used", 0) - after.get("device_used", 0)
    finished = action.get("finished_t")
    phase.figures = {
        "job": job,
        "cache_bytes": p.cache_bytes,
        "before": before,
        "after": after,
        "grown_t": grown.get("t"),
        "issued": issued,
        "action": action,
        "post_to_done_s": None if finished is None else round(finished - posted_t, 3),
        "callback_saw": result.get("actions"),
    }
    want = 0.9 * p.cache_bytes
    phase.check("action done", action.get("state") == "done", action.get("state"), "done", str(action))
    phase.at_least("reserved freed (workload)", freed_reserved, want, " B", "reserved %s -> %s" % (before.get("reserved"), after.get("reserved")))
    phase.at_least("freed_bytes (ack)", action.get("freed_bytes"), want, " B")
    phase.at_least("device memory returned", freed_device, want, " B", "mem_get_info used %s -> %s" % (before.get("device_used"), after.get("device_used")))
    phase.check("on_action callback ran", bool(result.get("actions")), len(result.get("actions") or []), ">= 1 call")


def _run_straggler_job(run: Any, cluster: Cluster, phase: Phase, jobs: Dict[str, Any]) -> None:
    p: Params = run.params
    job = "gpucheck-straggler-%d" % os.getpid()
    out = run.path("straggler-result.json")
    args = ["--out", out, "--duration-s", str(p.straggler_s), "--slow-after-s", str(p.slow_after_s)]
    args += ["--extra-units", str(p.extra_units), "--barrier-dir", run.path("barrier")]
    started = cluster.launch(job, 2, "straggler", args, "straggler")
    first_seen: Dict[int, float] = {}
    try:
        ranks = _wait_ranks(run, cluster, started, job, 2, 90)
        deadline = time.monotonic() + p.straggler_s + 90
        while any(proc.poll() is None for proc in started):
            if time.monotonic() > deadline:
                raise CheckError("the straggler job ran past %.0f s" % (p.straggler_s + 90))
            try:
                for a in cluster.api("/api/v1/alerts?job=%s" % job).get("alerts", []):
                    if a.get("kind") == "straggler":
                        first_seen.setdefault(a["id"], time.time())
            except CheckError:
                pass
            time.sleep(1.0)
        _finish(started, 30, "the straggler job")
    finally:
        for proc in started:
            procs.stop(proc)
    results = [procs.read_json("%s.rank%d" % (out, r)) or {} for r in range(2)]
    jobs[job] = {"world": 2, "ranks": ranks, "results": results}
    alerts = [a for a in cluster.api("/api/v1/alerts?job=%s" % job).get("alerts", []) if a.get("kind") == "straggler"]
    slow = next((r for r in results if r.get("slow")), {})
    slow_from = slow.get("slow_from_t")
    on_slow = [a for a in alerts if a.get("rank") == slow.get("rank")]
    false = [a for a in alerts if a.get("rank") != slow.get("rank") or (slow_from is not None and a["t"] < slow_from)]
    first = min(on_slow, key=lambda a: a["t"]) if on_slow else None
    delay = None if first is None or slow_from is None else first["t"] - slow_from
    phase.figures = {
        "job": job,
        "slow_rank": slow.get("rank"),
        "slow_from_t": slow_from,
        "alerts": alerts,
        "first_alert": first,
        "delay_s": None if delay is None else round(delay, 2),
        "seen_by_poll_delay_s": None if first is None or slow_from is None else round(first_seen.get(first["id"], 0) - slow_from, 2),
        "clocks": {str(r.get("rank")): r.get("clock") for r in results},
        "steps": {str(r.get("rank")): r.get("steps") for r in results},
        "step_ms_p50": {str(r.get("rank")): r.get("step_ms_p50") for r in results},
    }
    phase.check("names the slow rank", first is not None, None if first is None else first.get("rank"), "rank %s" % slow.get("rank"), str(alerts)[:300])
    if first is not None:
        phase.check("in the slow section", first.get("section") == "forward", first.get("section"), "forward", first.get("message", ""))
        phase.within("delay after the slowdown", delay, 0.0, p.straggler_delay_s, " s", first.get("message", ""))
    phase.check("no false straggler", not false, len(false), "0 alerts on other ranks or before the slowdown", str(false)[:300])
    for r in results:
        cuda_share(phase, "rank %s" % r.get("rank"), r.get("hook"))


def _nvml_checks(run: Any, phase: Phase, sampled: Dict[str, Any], jobs: Dict[str, Any]) -> None:
    p: Params = run.params
    rows = sampled["rows"]
    if len(rows) < 3:
        phase.failed("only %d reads of the agent's /metrics: %s" % (len(rows), sampled["errors"][:3]))
        return
    first, last = rows[0], rows[-1]
    seconds = last["t"] - first["t"]
    gpus = max(1, last["gpus"])
    rate = (last["samples_total"] - first["samples_total"]) / gpus / seconds if seconds > 0 else None
    cpu_pct = 100.0 * (last["cpu_s"] - sampled["started_cpu"]) / max(1e-9, last["t"] - sampled["started_t"])
    fields = {
        "used_bytes": "memory_used_bytes",
        "total_bytes": "memory_total_bytes",
        "util_pct": "utilization_ratio",
        "sm_clock_mhz": "sm_clock_hertz",
        "power_w": "power_watts",
    }
    scale = {"util_pct": 100.0, "sm_clock_mhz": 1e-6}
    series: Dict[str, List[float]] = {}
    for key, metric in fields.items():
        series[key] = [r["gpu"][metric] * scale.get(key, 1.0) for r in rows if metric in r["gpu"]]
    phase.figures = {
        "seconds": round(seconds, 1),
        "reads": len(rows),
        "samples_per_s_per_gpu": None if rate is None else round(rate, 3),
        "fields": {k: _stats(v) for k, v in series.items()},
        "agent_cpu_pct_of_core": round(cpu_pct, 3),
        "agent_rss_bytes": last.get("VmRSS"),
        "agent_peak_rss_bytes": last.get("VmHWM"),
        "read_errors": sampled["errors"],
    }
    phase.at_least("seconds sampled", seconds, p.sample_s - 2, " s")
    phase.within("samples per second per GPU", rate, 1.6, 2.2, "", "one sample every 500 ms")
    for key, (low, high) in {
        "used_bytes": (0, float("inf")),
        "total_bytes": (1 * GiB, 1 << 50),
        "util_pct": (0, 100),
        "sm_clock_mhz": (100, 4000),
        "power_w": (5, 2000),
    }.items():
        values = series[key]
        present = len(values) >= len(rows) - 2 and all(low <= v <= high for v in values)
        phase.check("%s read" % key, present, "%d of %d reads" % (len(values), len(rows)), "every read, within %s..%s" % (low, high))
    if not run.dry_run:
        phase.at_least("utilization while training", max(series["util_pct"] or [0]), 30.0, " %")
    phase.at_most("agent CPU", cpu_pct, p.agent_cpu_pct, " % of a core")
    phase.at_most("agent peak RSS", last.get("VmHWM"), p.agent_rss_bytes, " B")
    _compare_smi(phase, rows, series)
    # Attribution: the coordinator's view and the agent's process list name each worker's PID.
    per_job = {}
    for job, info in jobs.items():
        pids = {r.get("rank"): r.get("pid") for r in info["results"] if r}
        seen = {r["rank"]: r for r in info["ranks"] or []}
        agent_seen = {}
        for row in rows:
            for proc in row["procs"]:
                if proc.get("job") == job:
                    agent_seen[proc["rank"]] = {"pid": proc["pid"], "used": proc["used"]}
        per_job[job] = {"workers": pids, "coordinator": seen, "agent": agent_seen}
        ok = len(pids) == info["world"] and all(seen.get(r, {}).get("pid") == pid for r, pid in pids.items())
        phase.check(
            "ranks of %d-rank job" % info["world"],
            ok,
            {str(r): v.get("pid") for r, v in seen.items()},
            "pids %s" % {str(r): pid for r, pid in pids.items()},
        )
        gpus_used = sorted({v.get("gpu") for v in seen.values()})
        phase.check("GPU of %d-rank job" % info["world"], gpus_used == [0], gpus_used, "[0]")
        phase.check(
            "process memory of %d-rank job" % info["world"],
            all(agent_seen.get(r, {}).get("pid") == pid and agent_seen[r]["used"] > 0 for r, pid in pids.items()),
            {str(r): v.get("used") for r, v in agent_seen.items()},
            "each worker, with its job and rank",
        )
    phase.figures["attribution"] = per_job


def _compare_smi(phase: Phase, rows: List[Dict[str, Any]], series: Dict[str, List[float]]) -> None:
    pairs = [r for r in rows if r.get("smi")]
    if not pairs:
        phase.figures["nvidia_smi"] = None
        return
    smi = {k: [r["smi"][k] for r in pairs if r["smi"].get(k) is not None] for k in ("used_bytes", "total_bytes", "util_pct", "sm_clock_mhz", "power_w")}
    phase.figures["nvidia_smi"] = {k: _stats(v) for k, v in smi.items()}
    total = series["total_bytes"][-1] if series["total_bytes"] else None
    smi_total = smi["total_bytes"][-1] if smi["total_bytes"] else None
    phase.check(
        "total = nvidia-smi's",
        total is not None and smi_total is not None and abs(total - smi_total) <= MiB,
        total,
        "%s ± 1 MiB" % smi_total,
    )
    diffs = [abs(r["gpu"]["memory_used_bytes"] - r["smi"]["used_bytes"]) for r in pairs if "memory_used_bytes" in r["gpu"] and r["smi"].get("used_bytes") is not None]
    phase.at_most("used vs nvidia-smi (median gap)", statistics.median(diffs) if diffs else None, 1 * GiB, " B", "the agent's newest 2 s window against nvidia-smi at the same second")
    for key, tolerance in (("sm_clock_mhz", 0.2), ("power_w", 0.3)):
        mine, theirs = series[key], smi[key]
        if mine and theirs:
            a, b = statistics.median(mine), statistics.median(theirs)
            phase.within("%s vs nvidia-smi (medians)" % key, a / b if b else None, 1 - tolerance, 1 + tolerance, "x", "agent %.1f, nvidia-smi %.1f" % (a, b))


def cuda_share(phase: Phase, who: str, hook_stats: Optional[Dict[str, Any]]) -> None:
    """Checks that the hook sent its steps timed on the CUDA clock (after the
    first, before the script initialised CUDA): ``steps_cuda`` against
    ``steps_cpu`` from ``gpumon.stats()``."""
    stats = hook_stats or {}
    cuda, cpu = stats.get("steps_cuda", 0), stats.get("steps_cpu", 0)
    share = cuda / (cuda + cpu) if cuda + cpu else None
    phase.at_least("steps on the CUDA clock (%s)" % who, share, 0.9, "", "%s steps on CUDA events, %s on the CPU clock" % (cuda, cpu))


def _stats(values: List[float]) -> Optional[Dict[str, float]]:
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


# -- hook ----------------------------------------------------------------------


def hook_phase(run: Any) -> List[Phase]:
    p: Params = run.params
    phase = Phase("hook", "the hook on the device: allocator statistics, CUDA-event sections, no synchronization")
    out = run.path("hook-result.json")
    report_path = run.path("hook-profile.json")
    args = ["--out", out, "--timed-steps", str(p.hook_steps), "--section-units", str(p.section_units)]
    try:
        code = run.profile("hook", report_path, ["hook"] + args, timeout_s=180)
        if code != 0:
            raise CheckError("the hook workload exited with %d: %s" % (code, procs.tail(run.path("hook.log"))))
    except CheckError as e:
        phase.failed(str(e))
        return [phase]
    result = procs.read_json(out) or {}
    report = procs.read_json(report_path) or {}
    rank = (report.get("ranks") or [{}])[0]
    # 1. The hook's reading equals memory_stats() read at the same instant.
    mismatched = []
    for pair in result.get("allocator", []):
        for key, value in pair["direct"].items():
            if pair["hook"].get(key) != value:
                mismatched.append("%s at %d MiB held: hook %s, torch %s" % (key, pair["held_mib"], pair["hook"].get(key), value))
    phase.check("allocator fields = memory_stats()", not mismatched and bool(result.get("allocator")), len(mismatched), "0 differences", "; ".join(mismatched[:4]))
    last = (result.get("allocator") or [{}])[-1].get("direct", {})
    peak = rank.get("peak_allocated_bytes")
    phase.check(
        "peak allocated reached gpumon",
        peak is not None and peak == last.get("peak_allocated"),
        peak,
        "= torch's %s" % last.get("peak_allocated"),
        "the profile report's peak against allocated_bytes.all.peak",
    )
    # 2. The section on the CUDA clock against the same work synchronized.
    section = ((rank.get("sections") or {}).get("work") or {}).get("p50")
    sync = (result.get("sync_ms") or {}).get("p50")
    ratio = section / sync if section and sync else None
    phase.within(
        "section time / synchronized time",
        ratio,
        1 - p.section_tolerance,
        1 + p.section_tolerance,
        "x",
        "hook's p50 %s ms, synchronized p50 %s ms" % (section, sync),
    )
    cuda_share(phase, "hook", result.get("hook"))
    if not run.dry_run:
        # The fake torch has no optimizer or autograd: the anatomy needs the real one.
        auto = sorted(set(rank.get("sections") or {}) & {"forward", "backward", "optimizer"})
        phase.check("automatic sections", auto == ["backward", "forward", "optimizer"], ",".join(auto), "backward,forward,optimizer with no gpumon call")
    syncs = result.get("syncs_from_hook")
    phase.check("device synchronizations by the hook", syncs == [], None if syncs is None else len(syncs), "0", "; ".join((syncs or [])[:4]))
    phase.figures = {
        "allocator": result.get("allocator"),
        "section_p50_ms": section,
        "synchronized_p50_ms": sync,
        "synchronized_ms": result.get("sync_ms"),
        "section_units": result.get("section_units"),
        "syncs_by_script_and_hook": result.get("syncs_total"),
        "hook_stats": result.get("hook"),
        "report_rank": {k: rank.get(k) for k in ("peak_allocated_bytes", "peak_reserved_bytes", "steps", "step_ms", "sections")},
    }
    return [phase]


# -- overhead ------------------------------------------------------------------


def overhead_phase(run: Any) -> List[Phase]:
    p: Params = run.params
    phase = Phase("overhead", "a fixed model's step with and without the hook")
    args = ["--blocks", str(p.overhead_blocks), "--timed-steps", str(p.overhead_steps)]
    bare: List[float] = []
    hooked: List[float] = []
    runs = []
    try:
        for n in range(p.overhead_rounds):
            out = run.path("overhead-bare-%d.json" % n)
            proc = procs.start([run.python, run.workload, "overhead", "--out", out] + run.dry_flag() + args, run.log("overhead-bare-%d" % n), env=run.bare_env())
            if procs.wait_exit(proc, 120, "the bare overhead run") != 0:
                raise CheckError("the bare run failed: %s" % procs.tail(proc.log_path))
            doc = procs.read_json(out) or {}
            if doc.get("hooked"):
                raise CheckError("the bare run had the hook on")
            bare += doc.get("step_ms_blocks", [])
            out = run.path("overhead-hooked-%d.json" % n)
            if run.profile("overhead-hooked-%d" % n, run.path("overhead-profile-%d.json" % n), ["overhead", "--out", out] + args, timeout_s=120) != 0:
                raise CheckError("the hooked run failed: %s" % procs.tail(run.path("overhead-hooked-%d.log" % n)))
            doc2 = procs.read_json(out) or {}
            if not doc2.get("hooked"):
                raise CheckError("the hooked run had no hook")
            hooked += doc2.get("step_ms_blocks", [])
            runs.append({"bare": doc, "hooked": doc2})
    except CheckError as e:
        phase.failed(str(e))
        return [phase]
    b, h = statistics.median(bare), statistics.median(hooked)
    pct = 100.0 * (h - b) / b
    phase.figures = {
        "bare_step_ms_median": round(b, 4),
        "hooked_step_ms_median": round(h, 4),
        "bare_step_ms_min": round(min(bare), 4),
        "hooked_step_ms_min": round(min(hooked), 4),
        "overhead_us_per_step": round((h - b) * 1000.0, 1),
        "overhead_pct": round(pct, 3),
        "overhead_pct_of_minima": round(100.0 * (min(hooked) - min(bare)) / min(bare), 3),
        "runs": runs,
    }
    phase.at_most("overhead per step", pct, p.overhead_max_pct, " %", "median of %d blocks each; %.1f µs per step" % (len(bare), (h - b) * 1000.0))
    for n, r in enumerate(runs):
        cuda_share(phase, "hooked run %d" % n, r["hooked"].get("hook"))
    return [phase]


# -- leak ----------------------------------------------------------------------


def leak_phase(run: Any) -> List[Phase]:
    p: Params = run.params
    phase = Phase("leak", "a real leak run into OutOfMemoryError under gpumon profile")
    out = run.path("leak-result.json")
    report_path = run.path("leak-profile.json")
    snapshots = run.path("snapshots")
    os.makedirs(snapshots, exist_ok=True)
    args = ["leak", "--out", out, "--leak-room-bytes", str(p.leak_room_bytes), "--leak-bytes-per-s", str(p.leak_bytes_per_s)]
    args += ["--leak-piece-mib", str(p.leak_piece_mib), "--steady-s", str(p.leak_steady_s), "--duration-s", str(p.leak_timeout_s - 30)]
    try:
        code = run.profile("leak", report_path, args, timeout_s=p.leak_timeout_s, extra=["--snapshot-dir", snapshots])
    except CheckError as e:
        phase.failed(str(e))
        return [phase]
    result = procs.read_json(out) or {}
    report = procs.read_json(report_path) or {}
    oom_t = result.get("oom_t")
    phase.check("ran out of memory", code == 3 and oom_t is not None, code, "exit 3 (OutOfMemoryError caught)", result.get("oom_message") or procs.tail(run.path("leak.log")))
    exit_doc = report.get("exit") or {}
    phase.check("report says oom", exit_doc.get("oom") is True, exit_doc.get("oom"), "true", exit_doc.get("oom_reason") or "")
    alerts = report.get("alerts") or []
    leads = {}
    for kind in ("oom_predicted", "leak"):
        times = [a["t"] for a in alerts if a.get("kind") == kind and a.get("rank") == 0]
        leads[kind] = None if not times or oom_t is None else round(oom_t - min(times), 2)
    phase.at_least("oom_predicted lead", leads["oom_predicted"], p.oom_lead_s, " s", "first oom_predicted alert before the OutOfMemoryError")
    phase.at_least("leak lead", leads["leak"], 0.001, " s", "first leak alert before the OutOfMemoryError")
    files = [f for f in report.get("allocator_snapshots") or [] if os.path.exists(f)]
    phase.check("allocator snapshot saved", bool(files), len(files), ">= 1 file", str(report.get("allocator_snapshots")))
    readable = _read_snapshot(files[0], run.dry_run) if files else {"error": "no file"}
    phase.check("snapshot readable", readable.get("error") is None, readable.get("segments"), "segments, and memory_viz on a GPU", readable.get("error") or "")
    leaked_seen = max([r.get("peak_allocated_bytes") or 0 for r in report.get("ranks") or []] or [0])
    phase.figures = {
        "leak_bytes_per_s": p.leak_bytes_per_s,
        "leaked_bytes": result.get("leaked_bytes"),
        "leak_seconds": None if oom_t is None else round(oom_t - result.get("leak_start_t", oom_t), 2),
        "oom_t": oom_t,
        "lead_s": leads,
        "alerts": [{k: a.get(k) for k in ("kind", "severity", "t", "rank", "message")} for a in alerts],
        "peak_allocated_bytes": leaked_seen,
        "snapshot": readable,
        "snapshot_files": files,
    }
    return [phase]


# -- cap -----------------------------------------------------------------------


def cap_phase(run: Any) -> List[Phase]:
    p: Params = run.params
    phase = Phase("cap", "a leak into a per-process memory fraction's cap, forecast against the cap")
    out = run.path("cap-result.json")
    report_path = run.path("cap-profile.json")
    args = ["cap", "--out", out, "--cap-ramp-bytes", str(p.cap_ramp_bytes), "--cap-room-bytes", str(p.cap_room_bytes)]
    args += ["--leak-bytes-per-s", str(p.cap_bytes_per_s)]
    args += ["--leak-piece-mib", str(p.leak_piece_mib), "--steady-s", str(p.leak_steady_s), "--duration-s", str(p.cap_timeout_s - 30)]
    try:
        code = run.profile("cap", report_path, args, timeout_s=p.cap_timeout_s)
    except CheckError as e:
        phase.failed(str(e))
        return [phase]
    result = procs.read_json(out) or {}
    report = procs.read_json(report_path) or {}
    oom_t = result.get("oom_t")
    phase.check("ran out of memory", code == 3 and oom_t is not None, code, "exit 3 (OutOfMemoryError caught)", result.get("oom_message") or procs.tail(run.path("cap.log")))
    exit_doc = report.get("exit") or {}
    phase.check("report says oom", exit_doc.get("oom") is True, exit_doc.get("oom"), "true", exit_doc.get("oom_reason") or "")
    limit = _rank0(report).get("memory_limit") or {}
    _cap_limit_checks(phase, result, limit)
    alert = _first_alert(report, "oom_predicted")
    _cap_forecast_checks(phase, p, alert, limit, oom_t)
    used = _used_at_oom(report, result)
    phase.at_most("device used at the error", used["pct"], p.cap_max_used_pct, " %", used["detail"])
    level = _first_alert(report, "memory_level")
    phase.figures = {
        "fraction": result.get("fraction"),
        "total_bytes": result.get("total_bytes"),
        "cap_bytes": result.get("cap_bytes"),
        "reserved_at_cap_set": result.get("reserved_at_cap_set"),
        "cap_readable_by_hook": result.get("cap_readable"),
        "cap_bytes_per_s": p.cap_bytes_per_s,
        "leaked_bytes": result.get("leaked_bytes"),
        "leak_seconds": None if oom_t is None else round(oom_t - result.get("leak_start_t", oom_t), 2),
        "oom_t": oom_t,
        "oom_message": result.get("oom_message"),
        "at_oom": result.get("at_oom"),
        "memory_limit": limit,
        "oom_predicted": _alert_figures(alert, oom_t),
        "memory_level": _alert_figures(level, oom_t),
        "device_used": used,
        "alerts": [{k: a.get(k) for k in ("kind", "severity", "t", "rank", "message")} for a in report.get("alerts") or []],
    }
    return [phase]


def _rank0(report: Dict[str, Any]) -> Dict[str, Any]:
    """Rank 0 of a profile report (its only rank here), or ``{}``."""
    ranks = [r for r in report.get("ranks") or [] if r.get("rank") == 0]
    return ranks[0] if ranks else {}


def _first_alert(report: Dict[str, Any], kind: str) -> Optional[Dict[str, Any]]:
    """The first ``kind`` alert about rank 0 (an episode: ``t`` when it was
    raised, the rest as last updated), or ``None``."""
    alerts = [a for a in report.get("alerts") or [] if a.get("kind") == kind and a.get("rank") == 0]
    return min(alerts, key=lambda a: a["t"]) if alerts else None


def _cap_limit_checks(phase: Phase, result: Dict[str, Any], limit: Dict[str, Any]) -> None:
    """The rank's memory limit is the workload's cap: kind, source, bytes."""
    phase.check(
        "memory limit is the cap",
        limit.get("kind") == "cap" and limit.get("cap_source") == "memory_fraction",
        "%s/%s" % (limit.get("kind"), limit.get("cap_source")),
        "cap/memory_fraction",
        "%s; torch has get_per_process_memory_fraction: %s" % (limit.get("description"), result.get("cap_readable")),
    )
    cap, got = result.get("cap_bytes"), limit.get("limit_bytes")
    phase.within(
        "cap bytes / fraction x total",
        got / cap if cap and got is not None else None,
        0.99,
        1.01,
        "x",
        "report %s B, set %s B (fraction %s of %s B)" % (got, cap, result.get("fraction"), result.get("total_bytes")),
    )


def _cap_forecast_checks(phase: Phase, p: Params, alert: Optional[Dict[str, Any]], limit: Dict[str, Any], oom_t: Optional[float]) -> None:
    """The first ``oom_predicted`` alert: ahead of the error, naming the cap,
    its forecast near the error's time."""
    alert = alert or {}
    lead = None if oom_t is None or alert.get("t") is None else round(oom_t - alert["t"], 2)
    phase.at_least("oom_predicted lead", lead, p.oom_lead_s, " s", "first oom_predicted alert before the OutOfMemoryError at the cap")
    message, advice = alert.get("message") or "", alert.get("recommendation") or ""
    size = "%s cap" % fmt_bytes(limit["limit_bytes"]) if limit.get("limit_bytes") else "the cap"
    phase.check(
        "oom_predicted names the cap",
        size in message and "set_per_process_memory_fraction" in message and "raise it" in advice,
        size in message,
        "%r, set_per_process_memory_fraction, 'raise it'" % size,
        "%s | %s" % (message, advice),
    )
    predicted = alert.get("predicted_oom_t")
    error = None if predicted is None or oom_t is None else abs(predicted - oom_t)
    phase.at_most("forecast error", error, p.cap_forecast_error_s, " s", "the alert's predicted_oom_t against the error's time")


def _used_at_oom(report: Dict[str, Any], result: Dict[str, Any]) -> Dict[str, Any]:
    """The device's used share when the rank died: the GPU's peak in the
    report (NVML; the hook's device in a dry run), else the workload's own
    ``mem_get_info`` right after the error."""
    gpus = report.get("gpus") or []
    at_oom = result.get("at_oom") or {}
    total = result.get("total_bytes")
    mine = 100.0 * at_oom["device_used"] / total if at_oom.get("device_used") is not None and total else None
    if gpus and gpus[0].get("peak_used_bytes") is not None and gpus[0].get("total_bytes"):
        pct = 100.0 * gpus[0]["peak_used_bytes"] / gpus[0]["total_bytes"]
        source = "the report's GPU peak"
    else:
        pct, source = mine, "the workload's mem_get_info at the error"
    detail = "%s; mem_get_info at the error: %s %%" % (source, None if mine is None else round(mine, 1))
    return {"pct": None if pct is None else round(pct, 2), "workload_pct": None if mine is None else round(mine, 2), "detail": detail}


def _alert_figures(alert: Optional[Dict[str, Any]], oom_t: Optional[float]) -> Optional[Dict[str, Any]]:
    if alert is None:
        return None
    doc = {k: alert.get(k) for k in ("t", "predicted_oom_t", "severity", "message", "recommendation")}
    doc["lead_s"] = None if oom_t is None else round(oom_t - alert["t"], 2)
    return doc


def fmt_bytes(n: int) -> str:
    """Bytes as gpumon writes them in messages: ``4.0 GiB``, ``512 B``."""
    for name, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / size, name)
    return "%d B" % n


def _read_snapshot(path: str, dry_run: bool) -> Dict[str, Any]:
    """What a saved allocator snapshot holds, read as PyTorch's tooling reads it."""
    try:
        with open(path, "rb") as f:
            snap = pickle.load(f)
    except Exception as e:
        return {"error": "cannot unpickle %s: %s" % (path, e)}
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list) or not snap["segments"]:
        return {"error": "no segments in %s" % path}
    traces = snap.get("device_traces") or []
    out: Dict[str, Any] = {
        "bytes": os.path.getsize(path),
        "segments": len(snap["segments"]),
        "reserved_bytes": sum(s.get("total_size", 0) for s in snap["segments"]),
        "history_entries": sum(len(t) for t in traces),
    }
    if dry_run:
        out["memory_viz"] = "not run (dry run)"
        return out
    try:
        from torch.cuda import _memory_viz

        text = _memory_viz.segsum(snap)
        out["segsum_lines"] = len(text.splitlines())
        if out["history_entries"]:
            out["trace_plot_bytes"] = len(_memory_viz.trace_plot(snap))
        out["memory_viz"] = "ok"
    except Exception as e:
        out["error"] = "torch.cuda._memory_viz cannot read it: %s: %s" % (type(e).__name__, e)
    return out


PHASES = {
    "cluster": cluster_phases,
    "hook": hook_phase,
    "overhead": overhead_phase,
    "leak": leak_phase,
    "cap": cap_phase,
}
