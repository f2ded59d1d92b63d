#!/usr/bin/env python3
"""What gpumon costs the training thread: microseconds per step, against a no-op loop.

Measures, best of several rounds of N iterations each (default 200,000):

- ``step+3 sections``: three ``with gpumon.section(...)`` and one
  ``gpumon.step()`` per iteration, no action pending; against the same loop
  with ``contextlib.nullcontext()`` and a no-op call;
- ``section``: one ``with gpumon.section(...)`` against one ``nullcontext``;
- ``step``: one ``gpumon.step()`` against a no-op call.

Each is measured twice: on the CPU clock (``GPUMON_SECTION_CLOCK=cpu``,
``perf_counter`` only), and on the CUDA clock with the stand-in events of
``gpumon.testing.FakeTorch`` (no GPU needed). The fake events cost about
what a Python call costs, so the second figures are the hook's own Python
overhead on that path: recording, querying and reading events, the pool,
the pending steps. On a GPU, each ``torch.cuda.Event`` call adds the CUDA
runtime's own cost; the output says how many calls a step makes.

The hook runs for real: its reporter thread reports to a sink agent (a
subprocess that answers ``ok`` to everything) every 0.2 s, so the time the
reporter takes from the training thread (the GIL) is counted too. At this
step rate the queue overflows between reports and drops records; a real
training loop makes tens of steps per second, not hundreds of thousands.

    python3 agent/python/bench_overhead.py [-n 200000] [--rounds 5]
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def sink(path):
    """A stand-in agent: answers every request line with ok, no actions."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    while True:
        conn, _ = server.accept()
        serve(conn)


def serve(conn):
    buffer = b""
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            op = json.loads(line).get("op")
            answer = (
                {"ok": True, "session": 1}
                if op == "register"
                else {"ok": True, "actions": [], "accepted": 0, "skipped": 0}
            )
            conn.sendall(json.dumps(answer).encode() + b"\n")


def noop():
    pass


def loop_baseline(n):
    ctx = contextlib.nullcontext()
    t0 = time.perf_counter()
    for _ in range(n):
        with ctx:
            pass
        with ctx:
            pass
        with ctx:
            pass
        noop()
    return time.perf_counter() - t0


def loop_gpumon(n, gpumon):
    section, step = gpumon.section, gpumon.step
    t0 = time.perf_counter()
    for _ in range(n):
        with section("data"):
            pass
        with section("forward"):
            pass
        with section("backward"):
            pass
        step()
    return time.perf_counter() - t0


def loop_null_section(n):
    ctx = contextlib.nullcontext()
    t0 = time.perf_counter()
    for _ in range(n):
        with ctx:
            pass
    return time.perf_counter() - t0


def loop_section(n, gpumon):
    section = gpumon.section
    t0 = time.perf_counter()
    for _ in range(n):
        with section("data"):
            pass
    return time.perf_counter() - t0


def loop_noop(n):
    t0 = time.perf_counter()
    for _ in range(n):
        noop()
    return time.perf_counter() - t0


def loop_step(n, gpumon):
    step = gpumon.step
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return time.perf_counter() - t0


def best(rounds, fn, *args):
    return min(fn(*args) for _ in range(rounds))


def measure(gpumon, n, rounds, baselines):
    """``(name, baseline s, gpumon s)`` of each loop, with the hook as it is now."""
    return [
        ("step+3 sections", baselines[0], best(rounds, loop_gpumon, n, gpumon)),
        ("section", baselines[1], best(rounds, loop_section, n, gpumon)),
        ("step", baselines[2], best(rounds, loop_step, n, gpumon)),
    ]


def start_hook(gpumon, clock):
    """(Re)starts the hook with ``GPUMON_SECTION_CLOCK=clock``."""
    from gpumon.testing import FakeAllocator

    gpumon.shutdown()
    os.environ["GPUMON_SECTION_CLOCK"] = clock
    if not gpumon.init(memory_source=FakeAllocator()):
        raise SystemExit("gpumon did not start")


def event_calls(gpumon, gpu):
    """CUDA calls per ``step+3 sections`` iteration: record, query, elapsed_time, capture checks."""

    def counts():
        return (gpu.records, gpu.queries, gpu.elapsed, gpu.capture_checks)

    before = counts()
    loop_gpumon(1000, gpumon)
    return [(now - then) / 1000 for now, then in zip(counts(), before)]


def print_rows(title, rows, n):
    print(title)
    for name, base, hooked in rows:
        print(
            "  %-16s %12.3f %12.3f %12.3f"
            % (name, base / n * 1e6, hooked / n * 1e6, (hooked - base) / n * 1e6)
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="iterations per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is kept")
    parser.add_argument("--sink", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sink:
        sink(args.sink)
        return 0

    tmp = tempfile.mkdtemp(prefix="gpumon-bench-")
    path = os.path.join(tmp, "hook.sock")
    agent = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--sink", path])
    try:
        deadline = time.monotonic() + 5
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.environ.update(
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            TORCHELASTIC_RUN_ID="bench",
            GPUMON_AGENT="unix:" + path,
            GPUMON_REPORT_INTERVAL="0.2",
        )
        sys.path.insert(0, HERE)
        import logging

        import gpumon
        from gpumon.testing import FakeTorch

        logging.getLogger("gpumon").setLevel(logging.ERROR)
        n, rounds = args.n, args.rounds
        baselines = (
            best(rounds, loop_baseline, n),
            best(rounds, loop_null_section, n),
            best(rounds, loop_noop, n),
        )
        start_hook(gpumon, "cpu")
        cpu_rows = measure(gpumon, n, rounds, baselines)
        cpu_stats = gpumon.stats()

        # The fake GPU runs nothing, so every event has completed by the next
        # query: each step is read and sent at its own boundary.
        fake = FakeTorch()
        sys.modules["torch"] = fake
        start_hook(gpumon, "cuda")
        cuda_rows = measure(gpumon, n, rounds, baselines)
        clock = gpumon.stats()["clock"]
        calls = event_calls(gpumon, fake.gpu)
        gpumon.shutdown()
        if clock != "cuda" or fake.gpu.violations:
            raise SystemExit("CUDA clock: %s, fake GPU violations: %s" % (clock, fake.gpu.violations))

        print("python %s, %d iterations, best of %d rounds" % (sys.version.split()[0], n, rounds))
        print("  %-16s %12s %12s %12s" % ("", "baseline us", "gpumon us", "overhead us"))
        print_rows("CPU clock (perf_counter):", cpu_rows, n)
        print_rows(
            "CUDA clock, fake events (gpumon.testing.FakeTorch): the hook's own Python overhead;",
            cuda_rows,
            n,
        )
        print(
            "  on a GPU add the CUDA runtime's cost of %.0f Event.record(), %.0f query(), "
            "%.0f elapsed_time() and %.0f is_current_stream_capturing() calls per step+3 sections"
            % tuple(calls)
        )
        print(
            "reporter (CPU clock run): %d reports, %d records sent, %d dropped (queue full at this step rate)"
            % (cpu_stats.get("reports", 0), cpu_stats.get("records_sent", 0), cpu_stats.get("dropped", 0))
        )
        return 0
    finally:
        agent.kill()
        agent.wait()
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.rmdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
