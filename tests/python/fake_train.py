#!/usr/bin/env python3
"""A torchrun-style training loop on a fake GPU, for gpumon's end-to-end tests.

No torch and no GPU needed: memory comes from ``gpumon.testing.FakeAllocator``,
which behaves like PyTorch's caching allocator. Run it with torchrun's
variables set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``TORCHELASTIC_RUN_ID``,
``MASTER_ADDR``, ``MASTER_PORT``), ``GPUMON_AGENT`` pointing at the agent and
``PYTHONPATH`` holding ``agent/python`` (and, as ``gpumon run`` does,
``agent/python/gpumon/_inject``: the explicit ``gpumon.init`` below then only
swaps in the fake memory source).

Each step: a ``data`` section (a 16 MiB batch), ``forward`` (3 x 16 MiB
activations), ``backward`` (2 x 16 MiB of gradients, then everything of the
step is freed, so it stays cached), then ``gpumon.step()``. The step's
buffers all have one size and get their segments before the cache is made,
so every step reuses exactly those and never splits the cache's segment: the
cache stays whole and reclaimable, as a freed large tensor does in a real
run.

Environment knobs (bytes, milliseconds, seconds):

- ``FAKE_TOTAL_BYTES``: device size, default 8 GiB (512 MiB of it is the CUDA context).
- ``FAKE_CAP_FRACTION``: the per-process memory fraction set on the
  allocator before training, in (0, 1]; default 1, no cap. Under 1, the
  allocator may reserve only that share of ``FAKE_TOTAL_BYTES`` (an
  allocation past it runs out of memory) and the hook reports the cap.
- ``FAKE_BASE_BYTES``: live model and optimizer state, default 4 GiB.
- ``FAKE_CACHE_BYTES``: memory allocated then freed at start, so it is
  cached but unused (what ``release_cache`` gives back), default 16 MiB.
- ``FAKE_LEAK_BYTES_PER_S``: allocated memory kept alive per second, default 0.
  It leaks in 512 KiB pieces, from the allocator's small pool, so it never
  pins the cached segments above.
- ``FAKE_STEP_MS``: step time, default 50.
- ``FAKE_DATA_SHARE``: the share of the step spent in ``data``, default 0.1;
  ``forward`` and ``backward`` share 0.9 less it, the last tenth is untimed.
- ``FAKE_DURATION_S``: run time, default 60; then the script exits 0.
- ``FAKE_EVENTS_FILE``: where to append one JSON line per action the hook
  hands over: ``{"event": "action", "id", "kind", "reason", "step"}``. The
  ``on_action`` callback answers ``"seen at step N"``.
- ``FAKE_ALERTS_FILE``: where to append one JSON line per alert the hook
  hands to ``gpumon.on_alert``: ``{"event": "alert", "step", "kind",
  "severity", "message", "job", "rank", "t"}``.

It snapshots ``start`` and marks ``training start`` at the beginning, snapshots
``warm`` after 5 s, and marks ``training end`` at the end. Exit codes: 0 done,
3 the fake device ran out of memory, 2 bad configuration, 4 the
parent process (``gpumon run``) went away.
"""

import json
import logging
import os
import sys
import time

GiB = 1 << 30
MiB = 1 << 20
LEAK_PIECE_BYTES = 512 * 1024
PIECE_BYTES = 16 * MiB  # every buffer of a step

log = logging.getLogger("fake_train")


def _env_number(name, default, kind=int):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = kind(raw)
    if value < 0:
        raise ValueError("%s must be >= 0, got %r" % (name, raw))
    return value


def main():
    rank = os.environ.get("RANK", "?")
    logging.basicConfig(level=logging.INFO, format="fake_train rank %s: %%(levelname)s %%(message)s" % rank)
    try:
        total = _env_number("FAKE_TOTAL_BYTES", 8 * GiB)
        cap_fraction = _env_number("FAKE_CAP_FRACTION", 1.0, float)
        if not 0.0 < cap_fraction <= 1.0:
            raise ValueError("FAKE_CAP_FRACTION must be in (0, 1], got %r" % cap_fraction)
        base = _env_number("FAKE_BASE_BYTES", 4 * GiB)
        cache = _env_number("FAKE_CACHE_BYTES", 16 * MiB)
        leak_rate = _env_number("FAKE_LEAK_BYTES_PER_S", 0.0, float)
        step_s = _env_number("FAKE_STEP_MS", 50.0, float) / 1000.0
        data_share = min(max(_env_number("FAKE_DATA_SHARE", 0.1, float), 0.0), 0.9)
        duration = _env_number("FAKE_DURATION_S", 60.0, float)
        local_rank = _env_number("LOCAL_RANK", 0)
    except ValueError as e:
        log.error("bad configuration: %s", e)
        return 2
    events_file = os.environ.get("FAKE_EVENTS_FILE") or None
    alerts_file = os.environ.get("FAKE_ALERTS_FILE") or None

    import gpumon
    from gpumon.testing import FakeAllocator

    fake = FakeAllocator(
        total_bytes=total,
        index=local_rank,
        uuid="GPU-fa4e0000-0000-4000-8000-%012x" % local_rank,
        name="Fake GPU %d" % local_rank,
    )
    if cap_fraction < 1.0:
        fake.set_per_process_memory_fraction(cap_fraction)
    state = {"step": 0}

    def on_action(action):
        log.info(
            "action %s (%s) at step %d: %s", action["id"], action["kind"], state["step"], action["reason"]
        )
        if events_file:
            line = dict(event="action", step=state["step"], **action)
            with open(events_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        return "seen at step %d" % state["step"]

    def on_alert(alert):
        log.info("alert at step %d: %s %s", state["step"], alert["severity"], alert["message"])
        if alerts_file:
            line = dict(event="alert", step=state["step"], **alert)
            with open(alerts_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")

    gpumon.on_action(on_action)
    gpumon.on_alert(on_alert)
    if not gpumon.init(memory_source=fake):
        log.warning("gpumon is off (no torchrun environment?); training anyway")

    try:
        if base:
            model = fake.alloc(base)  # noqa: F841 (kept alive for the whole run)
        # The step's buffers get their segments first (see the docstring).
        working = [fake.alloc(PIECE_BYTES) for _ in range(6)]
        cached = fake.alloc(cache) if cache else None
        for handle in working:
            fake.free(handle)
        if cached is not None:
            fake.free(cached)
        gpumon.snapshot("start")
        gpumon.mark("training start", "base %d bytes, leak %g bytes/s" % (base, leak_rate))
        leaked = []
        leak_debt = 0.0
        parent = os.getppid()
        start = last = time.monotonic()
        warm = False
        while True:
            now = time.monotonic()
            if now - start >= duration:
                break
            if os.getppid() != parent:
                # `gpumon run` (or the test) is gone: do not linger as an orphan.
                log.warning("the parent process went away; stopping")
                return 4
            with gpumon.section("data"):
                batch = fake.alloc(PIECE_BYTES)
                time.sleep(step_s * data_share)
            with gpumon.section("forward"):
                activations = [fake.alloc(PIECE_BYTES) for _ in range(3)]
                time.sleep(step_s * (0.9 - data_share) / 2)
            with gpumon.section("backward"):
                gradients = [fake.alloc(PIECE_BYTES) for _ in range(2)]
                time.sleep(step_s * (0.9 - data_share) / 2)
                for handle in activations + gradients + [batch]:
                    fake.free(handle)
            now = time.monotonic()
            leak_debt += leak_rate * (now - last)
            last = now
            while leak_debt >= LEAK_PIECE_BYTES:
                leaked.append(fake.alloc(LEAK_PIECE_BYTES))
                leak_debt -= LEAK_PIECE_BYTES
            state["step"] += 1
            gpumon.step()
            if not warm and now - start >= 5.0:
                warm = True
                gpumon.snapshot("warm")
    except MemoryError as e:
        log.error("out of memory at step %d: %s", state["step"], e)
        gpumon.mark("oom", str(e))
        return 3
    gpumon.mark("training end", "%d steps" % state["step"])
    log.info("done: %d steps, %d bytes leaked", state["step"], len(leaked) * LEAK_PIECE_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
