#!/usr/bin/env python3
"""A small real training loop on CUDA, for the GPU variant of gpumon's end-to-end test.

Run it under torchrun (or with torchrun's variables set), with ``GPUMON_AGENT``
and ``PYTHONPATH`` as for ``fake_train.py``. The step boundary comes from the
global optimizer hook (``optimizer.step()``), the ``forward`` section from
``gpumon.watch(model)``; ``data`` and ``backward`` are timed by hand.

Environment knobs:

- ``REAL_CACHE_BYTES``: a tensor of this size is allocated then freed at
  start, so it stays in the caching allocator (what ``release_cache`` gives
  back), default 2 GiB.
- ``REAL_LEAK_BYTES_PER_S``: tensors kept alive per second, default 0, in
  512 KiB pieces (the allocator's small pool, so they never pin the cache).
- ``REAL_STEP_MS``: step time, default 50 (the loop sleeps to hold it).
- ``REAL_DURATION_S``: run time, default 60; then the script exits 0.
- ``EVENTS_FILE``: where to append one JSON line per action, as
  ``FAKE_EVENTS_FILE`` in ``fake_train.py``.

Exit codes: 0 done, 3 CUDA out of memory, 2 no CUDA.
"""

import json
import logging
import os
import sys
import time

# Blocks of 256 MiB and more are never split for smaller requests: the
# training's own tensors cannot settle in the freed cache tensor's segment,
# so it stays whole and release_cache gives all of it back. Read by torch at
# its first CUDA allocation.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:256")

import torch  # noqa: E402

LEAK_PIECE_BYTES = 512 * 1024
log = logging.getLogger("real_train")


def _env(name, default, kind=float):
    raw = os.environ.get(name, "").strip()
    return kind(raw) if raw else default


def main():
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    logging.basicConfig(level=logging.INFO, format="real_train rank %d: %%(levelname)s %%(message)s" % rank)
    if not torch.cuda.is_available():
        log.error("CUDA is not available")
        return 2
    cache_bytes = _env("REAL_CACHE_BYTES", 2 << 30, int)
    leak_rate = _env("REAL_LEAK_BYTES_PER_S", 0.0)
    step_s = _env("REAL_STEP_MS", 50.0) / 1000.0
    duration = _env("REAL_DURATION_S", 60.0)
    events_file = os.environ.get("EVENTS_FILE") or None

    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    import gpumon

    state = {"step": 0}

    def on_action(action):
        log.info(
            "action %s (%s) at step %d: %s; reserved now %d bytes",
            action["id"],
            action["kind"],
            state["step"],
            action["reason"],
            torch.cuda.memory_reserved(device),
        )
        if events_file:
            with open(events_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(dict(event="action", step=state["step"], **action)) + "\n")
        return "seen at step %d" % state["step"]

    gpumon.on_action(on_action)
    if not gpumon.init():
        log.warning("gpumon is off (no torchrun environment?); training anyway")

    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gpumon.watch(model)

    try:
        if cache_bytes:
            cached = torch.empty(cache_bytes, dtype=torch.uint8, device=device)
            del cached  # freed, but the caching allocator keeps it reserved
        gpumon.snapshot("start")
        gpumon.mark("training start", "cache %d bytes, leak %g bytes/s" % (cache_bytes, leak_rate))
        leaked = []
        leak_debt = 0.0
        start = last = time.monotonic()
        while time.monotonic() - start < duration:
            step_start = time.monotonic()
            with gpumon.section("data"):
                x = torch.randn(256, 1024, device=device)
                y = torch.randn(256, 1024, device=device)
            out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            with gpumon.section("backward"):
                loss.backward()
                torch.cuda.synchronize(device)
            state["step"] += 1  # the number gpumon gives the step ending now
            optimizer.step()  # the step boundary (gpumon's optimizer hook)
            optimizer.zero_grad(set_to_none=True)
            now = time.monotonic()
            leak_debt += leak_rate * (now - last)
            last = now
            while leak_debt >= LEAK_PIECE_BYTES:
                leaked.append(torch.empty(LEAK_PIECE_BYTES, dtype=torch.uint8, device=device))
                leak_debt -= LEAK_PIECE_BYTES
            time.sleep(max(0.0, step_s - (time.monotonic() - step_start)))
    except torch.cuda.OutOfMemoryError as e:
        log.error("out of memory at step %d: %s", state["step"], e)
        gpumon.mark("oom", str(e)[:500])
        return 3
    gpumon.mark("training end", "%d steps" % state["step"])
    log.info("done: %d steps, %d bytes leaked", state["step"], len(leaked) * LEAK_PIECE_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
