#!/usr/bin/env python3
"""The training processes of ``scripts/gpu-check``: one mode per check.

Run as ``python3 workload.py MODE --out FILE [--dry-run] [options]``, under
``gpumon run``/``gpumon profile`` (the hook injected) or bare. Each mode
writes its findings to ``FILE`` (JSON; ``FILE.rankN`` per rank under
torchrun) when it ends, and may append progress lines to ``--events``.

- ``cache``: steps, then tensors allocated and freed so the cache holds
  them; waits for a ``release_cache`` action and reads ``reserved`` before
  and after it ran.
- ``straggler``: data-parallel steps in lockstep (gradients all-reduced
  through gloo); from ``--slow-after`` s on, rank 1 does extra matrix
  products in its forward.
- ``hook``: the hook's allocator reading against ``memory_stats()`` read
  directly, a section of fixed work timed by the hook (CUDA events) against
  the same work measured with the device synchronized, and every device
  synchronization the hook makes counted.
- ``overhead``: a fixed model's step time, with or without the hook.
- ``leak``: tensors kept every step until the device runs out of memory.
- ``cap``: a per-process memory fraction (``set_per_process_memory_fraction``)
  a few GiB above what the allocator holds, then the same leak until an
  allocation meets that cap, the device far from full.

Steps end at ``optimizer.step()`` on a real GPU (the hook's global optimizer
hook, no gpumon call), at ``gpumon.step()`` on the fake one (no torch).
"""

import argparse
import json
import os
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The hook from this checkout, whether or not gpumon injected it.
sys.path.insert(1, os.path.join(HERE, "..", "..", "agent", "python"))

import device as devices  # noqa: E402
import gpumon  # noqa: E402
from device import GiB, MiB, elapsed_ms, percentile  # noqa: E402


class Trainer:
    """A small MLP and its optimizer on a real GPU; the step boundary on the fake one."""

    def __init__(self, dev: Any, hidden: int = 4096, layers: int = 4, batch: int = 4096):
        self.dev = dev
        self.model = None
        if dev.kind != "cuda":
            # The fake device's stand-in for parameters and optimizer state.
            self.state = dev.alloc(hidden * hidden * layers * 4)
        else:
            torch = dev.torch
            mods: List[Any] = []
            for _ in range(layers):
                mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
            self.model = torch.nn.Sequential(*mods).to(dev.device, dtype=torch.bfloat16)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-4)
            self.batch = torch.randn(batch, hidden, device=dev.device, dtype=torch.bfloat16)

    def forward(self, fake_units: int = 2) -> Any:
        if self.model is None:
            self.dev.work(fake_units)
            return None
        return self.model(self.batch).float().pow(2).mean()

    def backward(self, loss: Any, fake_units: int = 4) -> None:
        if self.model is None:
            self.dev.work(fake_units)
            return
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    def grads(self) -> List[Any]:
        return [] if self.model is None else [p.grad for p in self.model.parameters()]

    def optimizer_step(self) -> None:
        """The step boundary: ``optimizer.step()`` (the hook's optimizer hook) or ``gpumon.step()``."""
        if self.model is None:
            self.dev.work(1)
            gpumon.step()
        else:
            self.optimizer.step()

    def step(self) -> None:
        loss = self.forward()
        self.backward(loss)
        self.optimizer_step()


def write_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def event(path: Optional[str], **doc: Any) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(doc, t=time.time(), pid=os.getpid())) + "\n")


def rank_and_world() -> Tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


# -- cache ---------------------------------------------------------------------


def memory_now(dev: Any) -> Dict[str, int]:
    """The allocator's allocated and reserved bytes and the device's used bytes, now."""
    stats = dev.memory_stats()
    free, total = dev.mem_get_info()
    return {
        "allocated": int(stats["allocated_bytes.all.current"]),
        "reserved": int(stats["reserved_bytes.all.current"]),
        "device_used": int(total - free),
    }


def run_cache(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    trainer = Trainer(dev)
    seen: List[Dict[str, Any]] = []
    gpumon.on_action(lambda action: seen.append(dict(action)) or "gpu-check saw it")
    for _ in range(args.warm_steps):
        trainer.step()
    # Cache-only growth: tensors that live for a moment, then stay cached.
    piece = args.cache_piece_mib * MiB
    held = [dev.alloc(piece) for _ in range(max(1, args.cache_bytes // piece))]
    for handle in held:
        dev.free(handle)
    del held
    trainer.step()
    before = memory_now(dev)
    event(args.events, event="cached", **before)
    deadline = time.monotonic() + args.action_timeout_s
    ran_at = None
    while time.monotonic() < deadline:
        trainer.step()
        if seen and ran_at is None:
            ran_at = time.time()
            # The action ran right after the callback, at that same boundary.
            trainer.step()
            break
        time.sleep(args.step_pause_ms / 1000.0)
    after = memory_now(dev)
    # A few more steps so the ack reaches the agent before the process ends.
    for _ in range(5):
        trainer.step()
        time.sleep(args.step_pause_ms / 1000.0)
    return {"before": before, "after": after, "actions": seen, "action_ran_t": ran_at, "clock": gpumon.stats()["clock"]}


# -- straggler -----------------------------------------------------------------


class Lockstep:
    """What makes ranks wait for each other once a step: gloo's all-reduce of
    the gradients on a real GPU; on the fake one, a barrier through files."""

    def __init__(self, dev: Any, directory: str, rank: int, world: int):
        self.dev = dev
        self.rank, self.world = rank, world
        self.directory = directory
        self.step = 0
        if dev.kind == "cuda":
            import torch.distributed as dist

            self.dist = dist
            dist.init_process_group("gloo")
        else:
            self.dist = None
            os.makedirs(directory, exist_ok=True)

    def all_reduce(self, grads: List[Any], done: bool) -> bool:
        """Averages the gradients over the ranks; true when any rank is done,
        so that every rank ends after the same step."""
        self.step += 1
        if self.dist is not None:
            torch = self.dev.torch
            flat = torch.cat([g.reshape(-1).float() for g in grads] + [torch.ones(1, device=grads[0].device) * done])
            flat = flat.cpu()
            self.dist.all_reduce(flat)
            any_done = bool(flat[-1].item() > 0)
            flat /= self.world
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset : offset + n].view_as(g))
                offset += n
            return any_done
        mine = os.path.join(self.directory, "rank%d" % self.rank)
        with open(mine + ".tmp", "w") as f:
            f.write("%d %d" % (self.step, done))
        os.replace(mine + ".tmp", mine)
        deadline = time.monotonic() + 60
        any_done = done
        for peer in range(self.world):
            path = os.path.join(self.directory, "rank%d" % peer)
            while True:
                try:
                    with open(path) as f:
                        step, peer_done = (int(x) for x in f.read().split())
                    if step >= self.step:
                        # A peer already past this step was not done at it.
                        any_done = any_done or (step == self.step and bool(peer_done))
                        break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("rank %d waited 60 s for rank %d at step %d" % (self.rank, peer, self.step))
                time.sleep(0.0005)
        return any_done

    def close(self) -> None:
        if self.dist is not None:
            self.dist.destroy_process_group()


def run_straggler(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    rank, world = rank_and_world()
    trainer = Trainer(dev, hidden=2048, layers=4, batch=8192)
    lockstep = Lockstep(dev, args.barrier_dir, rank, world)
    started = time.time()
    slow_from = started + args.slow_after_s
    step_ms: List[float] = []
    steps = 0
    done = False
    while not done:
        t0 = time.perf_counter()
        with gpumon.section("data"):
            dev.work(1)
        with gpumon.section("forward"):
            loss = trainer.forward()
            if rank == args.slow_rank and time.time() >= slow_from:
                dev.work(args.extra_units)
        with gpumon.section("backward"):
            trainer.backward(loss)
            done = lockstep.all_reduce(trainer.grads(), time.time() - started >= args.duration_s)
        trainer.optimizer_step()
        steps += 1
        step_ms.append(elapsed_ms(t0))
    lockstep.close()
    return {
        "rank": rank,
        "world": world,
        "slow": rank == args.slow_rank,
        "slow_from_t": slow_from,
        "steps": steps,
        "step_ms_p50": percentile(step_ms, 0.5),
        "clock": gpumon.stats()["clock"],
        "hook": gpumon.stats(),
    }


# -- hook ----------------------------------------------------------------------


class SyncCounter:
    """Counts the calls that would block the CPU until the GPU catches up,
    made from the hook's own code (a ``gpumon`` frame on the stack).

    Wraps ``torch.cuda.synchronize``, ``torch.cuda.Stream.synchronize``,
    ``torch.cuda.Event.synchronize`` and ``Event.elapsed_time`` on an event
    that has not completed; torch's own sync debug mode warns of the implicit
    ones (a copy to the host, ``.item()``), and those warnings are counted
    the same way. The fake device counts its own (``FakeGpu.violations``).
    """

    def __init__(self, dev: Any):
        self.dev = dev
        self.calls: List[str] = []
        self.total = 0
        if dev.kind != "cuda":
            return
        torch = dev.torch
        counter = self

        def counted(name: str, fn: Any) -> Any:
            def wrapper(*a: Any, **k: Any) -> Any:
                counter._count(name)
                return fn(*a, **k)

            return wrapper

        torch.cuda.synchronize = counted("torch.cuda.synchronize", torch.cuda.synchronize)
        torch.cuda.Stream.synchronize = counted("Stream.synchronize", torch.cuda.Stream.synchronize)
        base_event = torch.cuda.Event

        class CountedEvent(base_event):  # type: ignore[misc, valid-type]
            def synchronize(self) -> None:
                counter._count("Event.synchronize")
                return super().synchronize()

            def elapsed_time(self, end: Any) -> float:
                if not (self.query() and end.query()):
                    counter._count("Event.elapsed_time on an event not yet complete")
                return super().elapsed_time(end)

        torch.cuda.Event = CountedEvent

        shown = warnings.showwarning

        def showwarning(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
            if "synchroniz" in str(message).lower():
                counter._count("implicit sync: %s" % str(message).splitlines()[0][:120])
            else:
                shown(message, category, filename, lineno, *rest)

        warnings.showwarning = showwarning
        warnings.simplefilter("always")

    HOOK_DIR = os.path.dirname(os.path.abspath(gpumon.__file__)) + os.sep

    def _count(self, what: str) -> None:
        self.total += 1
        frame = sys._getframe(2)
        while frame is not None:
            if os.path.abspath(frame.f_code.co_filename).startswith(self.HOOK_DIR):
                self.calls.append(what)
                return
            frame = frame.f_back

    def debug_mode(self, on: bool) -> None:
        if self.dev.kind == "cuda":
            self.dev.torch.cuda.set_sync_debug_mode("warn" if on else "default")

    def from_hook(self) -> List[str]:
        if self.dev.kind == "cuda":
            return list(self.calls)
        return list(self.dev.gpu.violations)


def run_hook(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    syncs = SyncCounter(dev)
    trainer = Trainer(dev)
    for _ in range(args.warm_steps):
        trainer.step()
    # 1. The hook's reading of the allocator against memory_stats() read directly.
    from gpumon._memory import read_alloc_fields
    from gpumon._runtime import RUNTIME

    keys = {
        "allocated": "allocated_bytes.all.current",
        "reserved": "reserved_bytes.all.current",
        "active": "active_bytes.all.current",
        "inactive_split": "inactive_split_bytes.all.current",
        "peak_allocated": "allocated_bytes.all.peak",
        "peak_reserved": "reserved_bytes.all.peak",
        "alloc_retries": "num_alloc_retries",
        "ooms": "num_ooms",
    }
    pairs = []
    held: List[Any] = []
    for size_mib in (0, 64, 256, 1024):
        if size_mib:
            held.append(dev.alloc(size_mib * MiB))
        dev.synchronize()
        direct = dev.memory_stats()
        hook = read_alloc_fields(RUNTIME._source) or {}
        pairs.append(
            {
                "held_mib": sum((64, 256, 1024)[: len(held)]) if held else 0,
                "direct": {k: int(direct.get(v, -1)) for k, v in keys.items()},
                "hook": {k: int(hook[k]) for k in keys if k in hook},
            }
        )
    for handle in held:
        dev.free(handle)
    del held
    # 2. A section of fixed work on the hook's clock, and the same work synchronized.
    sync_ms: List[float] = []
    for _ in range(args.timed_steps):
        dev.synchronize()
        t0 = dev.clock_ms()
        dev.work(args.section_units)
        dev.synchronize()
        sync_ms.append(dev.clock_ms() - t0)
    syncs.debug_mode(True)
    for _ in range(args.timed_steps):
        with gpumon.section("work"):
            dev.work(args.section_units)
        trainer.step()
    syncs.debug_mode(False)
    dev.synchronize()
    # Let the hook read the last steps' events and send them.
    for _ in range(8):
        trainer.step()
    dev.synchronize()
    trainer.step()
    time.sleep(1.0)
    return {
        "allocator": pairs,
        "sync_ms": {"p50": percentile(sync_ms, 0.5), "p10": percentile(sync_ms, 0.1), "p90": percentile(sync_ms, 0.9)},
        "section_units": args.section_units,
        "syncs_from_hook": syncs.from_hook(),
        "syncs_total": syncs.total,
        "clock": gpumon.stats()["clock"],
        "hook": gpumon.stats(),
    }


# -- overhead ------------------------------------------------------------------


def run_overhead(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    trainer = Trainer(dev, hidden=8192, layers=8, batch=8192)
    for _ in range(args.warm_steps):
        trainer.step()
    dev.synchronize()
    blocks: List[float] = []
    for _ in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.timed_steps):
            trainer.step()
        dev.synchronize()
        blocks.append(elapsed_ms(t0) / args.timed_steps)
    stats = gpumon.stats()
    return {
        "hooked": bool(stats.get("active")),
        "step_ms_blocks": blocks,
        "step_ms": percentile(blocks, 0.5),
        "step_ms_min": min(blocks),
        "steps": args.blocks * args.timed_steps,
        "clock": stats["clock"],
        "hook": stats,
    }


# -- leak ----------------------------------------------------------------------


def run_leak(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    """A start-up ramp, then a steady leak: the shape of a real job that leaks.

    A few seconds at the model's level, then the ballast that leaves
    ``--leak-room-bytes`` free comes in over about two seconds (a job's
    start-up: the model and the cache filling), then every step keeps
    ``--leak-bytes-per-s`` more until the device is full.
    """
    trainer = Trainer(dev)
    steady(trainer, args)
    free, total = dev.mem_get_info()
    ballast = ramp(dev, trainer, max(0, int(free) - args.leak_room_bytes))
    result = leak_until_oom(dev, trainer, args)
    del ballast
    return dict(result, total_bytes=int(total))


def steady(trainer: Trainer, args: argparse.Namespace) -> None:
    """Steps at the model's level for ``--steady-s``."""
    until = time.monotonic() + args.steady_s
    while time.monotonic() < until:
        trainer.step()
        time.sleep(args.step_pause_ms / 1000.0)


def ramp(dev: Any, trainer: Trainer, nbytes: int) -> List[Any]:
    """``nbytes`` held in 256 MiB pieces over about two seconds at most, with
    steps between: a job's start-up (the model and the cache filling). The
    engine's early warning needs this ramp before a leak to judge it."""
    held: List[Any] = []
    piece = 256 * MiB
    pieces = nbytes // piece
    for n in range(pieces):
        held.append(dev.alloc(piece))
        if n % max(1, pieces // 20) == 0:
            trainer.step()
            time.sleep(0.1)
    return held


def leak_until_oom(dev: Any, trainer: Trainer, args: argparse.Namespace) -> Dict[str, Any]:
    """Steps, each keeping ``--leak-bytes-per-s`` more in ``--leak-piece-mib``
    pieces, until an allocation fails or ``--duration-s`` ends; the memory
    read right after the failure is ``at_oom``."""
    leaked: List[Any] = []
    leak_piece = args.leak_piece_mib * MiB
    started = time.time()
    debt = 0.0
    last = time.monotonic()
    gpumon.mark("leak start", "%d bytes/s" % args.leak_bytes_per_s)
    oom_t = None
    oom_message = None
    at_oom = None
    while time.time() - started < args.duration_s:
        try:
            trainer.step()
            now = time.monotonic()
            debt += args.leak_bytes_per_s * (now - last)
            last = now
            while debt >= leak_piece:
                leaked.append(dev.alloc(leak_piece))
                debt -= leak_piece
        except dev.out_of_memory as e:
            oom_t = time.time()
            oom_message = str(e)
            at_oom = memory_now(dev)
            break
        time.sleep(args.step_pause_ms / 1000.0)
    if oom_t is not None:
        gpumon.mark("oom", oom_message)
    return {
        "leak_start_t": started,
        "oom_t": oom_t,
        "oom_message": oom_message,
        "at_oom": at_oom,
        "leaked_bytes": len(leaked) * leak_piece,
        "leak_bytes_per_s": args.leak_bytes_per_s,
    }


# -- cap -----------------------------------------------------------------------


def run_cap(dev: Any, args: argparse.Namespace) -> Dict[str, Any]:
    """The leak of :func:`run_leak` under a cap: after the steady steps, the
    per-process memory fraction that leaves ``--cap-ramp-bytes`` plus
    ``--cap-room-bytes`` above what the allocator reserves, then the ramp of
    ``--cap-ramp-bytes`` (the start-up), then the leak until an allocation
    meets the cap, ``--cap-room-bytes`` later.

    ``cap_bytes`` is ``int(fraction * total)``, ``total`` being the device's
    memory as ``mem_get_info`` reports it, as torch computes the cap.
    """
    trainer = Trainer(dev)
    steady(trainer, args)
    reserved = memory_now(dev)["reserved"]
    _, total = dev.mem_get_info()
    fraction = min(1.0, (reserved + args.cap_ramp_bytes + args.cap_room_bytes) / float(total))
    dev.set_memory_fraction(fraction)
    gpumon.mark("cap set", "fraction %.6f of %d bytes" % (fraction, total))
    ballast = ramp(dev, trainer, args.cap_ramp_bytes)
    result = leak_until_oom(dev, trainer, args)
    del ballast
    result.update(
        {
            "fraction": fraction,
            "total_bytes": int(total),
            "cap_bytes": int(fraction * int(total)),
            "reserved_at_cap_set": reserved,
            "cap_readable": dev.cap_readable(),
        }
    )
    return result


MODES = {
    "cache": run_cache,
    "straggler": run_straggler,
    "hook": run_hook,
    "overhead": run_overhead,
    "leak": run_leak,
    "cap": run_cap,
}


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("--out", required=True, help="where the findings go (JSON); FILE.rankN when WORLD_SIZE > 1")
    p.add_argument("--events", help="progress lines (JSON Lines) for the orchestrator")
    p.add_argument("--dry-run", action="store_true", help="the hook's stand-ins instead of torch and a GPU")
    p.add_argument("--warm-steps", type=int, default=5)
    p.add_argument("--step-pause-ms", type=float, default=20.0)
    # cache
    p.add_argument("--cache-bytes", type=int, default=4 * GiB)
    p.add_argument("--cache-piece-mib", type=int, default=256)
    p.add_argument("--action-timeout-s", type=float, default=45.0)
    # straggler
    p.add_argument("--duration-s", type=float, default=30.0)
    p.add_argument("--slow-after-s", type=float, default=10.0)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--extra-units", type=int, default=24)
    p.add_argument("--barrier-dir", default="")
    # hook, overhead
    p.add_argument("--timed-steps", type=int, default=100)
    p.add_argument("--section-units", type=int, default=8)
    p.add_argument("--blocks", type=int, default=5)
    # leak
    p.add_argument("--leak-room-bytes", type=int, default=8 * GiB)
    p.add_argument("--leak-bytes-per-s", type=float, default=128 * MiB)
    p.add_argument("--leak-piece-mib", type=int, default=16)
    p.add_argument("--steady-s", type=float, default=6.0)
    # cap (and the leak's options)
    p.add_argument("--cap-ramp-bytes", type=int, default=4 * GiB, help="held at once under the cap, before the leak")
    p.add_argument("--cap-room-bytes", type=int, default=6 * GiB, help="what the leak has left under the cap after the ramp")
    return p.parse_args(argv)


def main(argv: List[str]) -> int:
    args = parse(argv)
    dev = devices.open_device(args.dry_run)
    source = dev.memory_source()
    if source is not None and gpumon.stats().get("active"):
        # Injected, the hook started before this script; this swaps in the fake allocator.
        gpumon.init(memory_source=source)
    rank, world = rank_and_world()
    out = args.out if world == 1 else "%s.rank%d" % (args.out, rank)
    result = MODES[args.mode](dev, args)
    result.update({"mode": args.mode, "pid": os.getpid(), "device": dev.describe(), "rank": rank})
    gpumon.shutdown(2.0)
    write_json(out, result)
    return 3 if result.get("oom_t") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
