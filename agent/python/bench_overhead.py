#!/usr/bin/env python3
"""What gpumon costs the training thread: microseconds per step, against a no-op loop.

Measures, best of several rounds of N iterations each (default 200,000):

- ``step+3 sections``: three ``with gpumon.section(...)`` and one
  ``gpumon.step()`` per iteration, no action pending; against the same loop
  with ``contextlib.nullcontext()`` and a no-op call;
- ``section``: one ``with gpumon.section(...)`` against one ``nullcontext``;
- ``step``: one ``gpumon.step()`` against a no-op call.

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
    conn, _ = server.accept()
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
        from gpumon.testing import FakeAllocator

        logging.getLogger("gpumon").setLevel(logging.ERROR)
        if not gpumon.init(memory_source=FakeAllocator()):
            print("gpumon did not start", file=sys.stderr)
            return 1
        n, rounds = args.n, args.rounds
        rows = [
            ("step+3 sections", best(rounds, loop_baseline, n), best(rounds, loop_gpumon, n, gpumon)),
            ("section", best(rounds, loop_null_section, n), best(rounds, loop_section, n, gpumon)),
            ("step", best(rounds, loop_noop, n), best(rounds, loop_step, n, gpumon)),
        ]
        stats = gpumon.stats()
        gpumon.shutdown()
        print("python %s, %d iterations, best of %d rounds" % (sys.version.split()[0], n, rounds))
        print("%-16s %12s %12s %12s" % ("", "baseline us", "gpumon us", "overhead us"))
        for name, base, hooked in rows:
            print(
                "%-16s %12.3f %12.3f %12.3f"
                % (name, base / n * 1e6, hooked / n * 1e6, (hooked - base) / n * 1e6)
            )
        print(
            "reporter: %d reports, %d records sent, %d dropped (queue full at this step rate)"
            % (stats.get("reports", 0), stats.get("records_sent", 0), stats.get("dropped", 0))
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
