"""Helpers for the hook's tests: a tiny JSON-lines agent, waiting, log capture,
a fake clock, a duck-typed module and a fake flight recorder.

``FakeAgent`` only checks message shapes against PROTOCOL.md (framing,
``register``/``report``/``poll``/``ack``, alerts in poll answers); the real
agent is tested from Rust (``agent/tests/hook.rs`` runs this package against
it too).
"""

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from unittest import mock

from gpumon._env import Identity

PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INJECT_DIR = os.path.join(PYTHON_ROOT, "gpumon", "_inject")
REPO_ROOT = os.path.dirname(os.path.dirname(PYTHON_ROOT))

TORCHRUN_ENV = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "TORCHELASTIC_RUN_ID": "run-7",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}
IDENTITY = Identity(job="run-7", rank=3, local_rank=1, world_size=8)


def wait_until(predicate, timeout=5.0, interval=0.005, message="condition"):
    """Polls ``predicate`` until true; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % message)
        time.sleep(interval)


class LogCapture(logging.Handler):
    """Collects the ``gpumon`` logger's records (all levels) while active."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self._lock2 = threading.Lock()

    def emit(self, record):
        with self._lock2:
            self.records.append(record)

    def at(self, level):
        with self._lock2:
            return [r for r in self.records if r.levelno == level]

    def messages(self, level=None):
        with self._lock2:
            return [r.getMessage() for r in self.records if level is None or r.levelno == level]


@contextlib.contextmanager
def capture_logs():
    logger = logging.getLogger("gpumon")
    handler = LogCapture()
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


class FakeAgent:
    """A JSON-lines server on a Unix socket that records every request.

    Answers as PROTOCOL.md says; ``actions`` are listed on ``poll`` until
    acknowledged; alerts posted with :meth:`post_alert` go out once, with
    the next ``poll``; ``refuse_register`` (a string) makes ``register`` fail.
    """

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gpumon-test-")
        self.path = os.path.join(self.dir, "hook.sock")
        self.address = "unix:" + self.path
        self.lock = threading.Lock()
        self.requests = []  # (connection number, dict)
        self.raw_lines = []
        self.actions = []
        self.alerts = []
        self.alerts_sent = 0
        self.acked = set()
        self.polls_with_actions = 0
        self.refuse_register = None
        self.refuse_acks = False
        self._connections = []
        self._sessions = 0
        self._closed = False
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        os.chmod(self.path, 0o600)
        self._server.listen(16)
        self._thread = threading.Thread(target=self._accept, name="fake-agent", daemon=True)
        self._thread.start()

    # -- inspection --------------------------------------------------------

    def ops(self, op):
        with self.lock:
            return [r for _, r in self.requests if r.get("op") == op]

    def records(self, kind=None):
        out = []
        for report in self.ops("report"):
            out.extend(r for r in report["records"] if kind is None or r.get("type") == kind)
        return out

    def add_action(self, action_id, kind="release_cache", reason="test"):
        with self.lock:
            self.actions.append({"id": action_id, "kind": kind, "reason": reason})

    def post_alert(self, alert):
        """Queues ``alert`` (a dict as PROTOCOL.md shows it) for the next poll."""
        with self.lock:
            self.alerts.append(alert)

    def drop_connections(self):
        with self.lock:
            conns, self._connections = self._connections, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self):
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self.drop_connections()
        self._thread.join(2)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- serving -------------------------------------------------------------

    def _accept(self):
        number = 0
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            number += 1
            with self.lock:
                self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn, number):
        registered = False
        buffer = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line.decode("utf-8"))
                    with self.lock:
                        self.raw_lines.append(line)
                        self.requests.append((number, request))
                    answer, registered = self._answer(request, registered)
                    conn.sendall(json.dumps(answer).encode() + b"\n")
        except OSError:
            return
        finally:
            conn.close()

    def _answer(self, request, registered):
        if request.get("v") != 1:
            return {"ok": False, "error": "this agent speaks version 1"}, registered
        op = request.get("op")
        if op == "register":
            if self.refuse_register:
                return {"ok": False, "error": self.refuse_register}, False
            with self.lock:
                self._sessions += 1
                session = self._sessions
            return {"ok": True, "session": session, "agent": "test", "node": "test"}, True
        if not registered:
            return {"ok": False, "error": "register first"}, registered
        if op == "report":
            records = request.get("records")
            if not isinstance(records, list) or len(records) > 1024:
                return {"ok": False, "error": "bad records"}, registered
            return {"ok": True, "accepted": len(records), "skipped": 0, "reasons": []}, registered
        if op == "poll":
            with self.lock:
                pending = [a for a in self.actions if a["id"] not in self.acked]
                if pending:
                    self.polls_with_actions += 1
                alerts, self.alerts = self.alerts, []
                self.alerts_sent += len(alerts)
            return {"ok": True, "actions": pending, "alerts": alerts}, registered
        if op == "ack":
            if self.refuse_acks:
                return {
                    "ok": False,
                    "error": "action %s was not given to this session" % request.get("id"),
                }, registered
            with self.lock:
                known = any(a["id"] == request.get("id") for a in self.actions)
                if known:
                    self.acked.add(request["id"])
            if not known:
                return {"ok": False, "error": "no such action"}, registered
            return {"ok": True}, registered
        return {"ok": False, "error": "unknown op %r" % op}, registered


class FakeClock:
    """Stands in for ``time.perf_counter``; ``advance`` moves it, in seconds."""

    def __init__(self, start=1000.0):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeModule:
    """Duck-typed torch.nn.Module: forward hooks and a call that runs them."""

    def __init__(self, clock, cost_s):
        self.clock = clock
        self.cost_s = cost_s
        self.pre = []
        self.post = []
        self.inner = None

    def register_forward_pre_hook(self, hook):
        return self._handle(self.pre, hook)

    def register_forward_hook(self, hook):
        return self._handle(self.post, hook)

    @staticmethod
    def _handle(hooks, hook):
        hooks.append(hook)

        class Handle:
            def remove(self):
                hooks.remove(hook)

        return Handle()

    def __call__(self, x):
        for hook in list(self.pre):
            hook(self, (x,))
        self.clock.advance(self.cost_s)
        if self.inner is not None:
            self.inner(x)
        for hook in list(self.post):
            hook(self, (x,), x)
        return x


def enter(test, context):
    """``TestCase.enterContext`` for Python < 3.11."""
    value = context.__enter__()
    test.addCleanup(context.__exit__, None, None, None)
    return value


def quiet_runtime(test, source=None, environ=None, settings=None):
    """An active Runtime whose reporter never runs during the test.

    The agent address leads nowhere and the report interval is an hour, so
    queued records stay in ``runtime._records`` for the test to read.
    """
    from gpumon._runtime import Runtime
    from gpumon._settings import Settings

    logs = enter(test, capture_logs())
    runtime = Runtime()
    env = dict(TORCHRUN_ENV if environ is None else environ)
    active = runtime.init(
        memory_source=source,
        agent="unix:/nonexistent/gpumon-test.sock",
        environ=env,
        settings=settings or Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0),
    )
    test.assertTrue(active)
    test.addCleanup(runtime.shutdown)
    return runtime, logs


def queued(runtime, kind=None):
    """The training thread's queued records, as the reporter would send them."""
    from gpumon._records import to_record

    records = [to_record(item) for item in list(runtime._records)]
    return [r for r in records if kind is None or r["type"] == kind]


def torch_import_error():
    """Why ``import torch`` fails in this Python, or ``None`` when it works."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else "exit status %d" % result.returncode


def run_hooked(test, script, **env_extra):
    """Runs ``script`` with the hook injected as under torchrun, reporting to a
    fake agent; returns the agent and the script's last line of JSON. The
    agent closes at the end of ``test`` (a test case, or a test class from
    ``setUpClass``)."""
    agent = FakeAgent()
    cleanup = test.addClassCleanup if isinstance(test, type) else test.addCleanup
    cleanup(agent.close)
    env = dict(os.environ, **TORCHRUN_ENV)
    env.pop("GPUMON_SECTION_CLOCK", None)
    env.update(
        GPUMON_AGENT=agent.address,
        GPUMON_REPORT_INTERVAL="0.1",
        PYTHONPATH=os.pathsep.join([PYTHON_ROOT, INJECT_DIR]),
        **env_extra,
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise AssertionError("the script failed (exit status %d):\n%s" % (result.returncode, result.stderr))
    return agent, json.loads(result.stdout.strip().splitlines()[-1])


def fr_entry(
    seq,
    group=("0", "default_pg"),
    op="gloo:all_reduce",
    retired=True,
    sizes=((72,),),
    created_ns=1_000_000_000_000,
    p2p_seq=None,
    state="scheduled",
    timeout_ms=1_800_000,
):
    """One flight recorder entry, shaped as torch 2.15 dumps it (point to
    point when ``p2p_seq`` is given)."""
    p2p = p2p_seq is not None
    return {
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": p2p_seq if p2p else 0,
        "is_p2p": p2p,
        "op_id": seq,
        "pg_id": 0,
        "process_group": list(group),
        "profiling_name": op,
        "input_sizes": [list(s) for s in sizes],
        "retired": retired,
        "state": state,
        "time_created_ns": created_ns,
        "timeout_ms": timeout_ms,
        "thread_name": "python",
    }


def fr_dump(entries):
    """A flight recorder dump (JSON bytes) holding ``entries``; none: no key, as torch writes it."""
    dump = {"comm_lib_version": "", "nccl_comm_state": {}, "pg_config": {}, "pg_status": {}}
    if entries:
        dump["entries"] = list(entries)
    return json.dumps(dump).encode()


class FakeFlightRecorder:
    """``torch._C._distributed_c10d`` with torch 2.15's ``_dump_fr_trace_json``:
    one recorder per backend; ``dumps[backend]`` (bytes) is what it returns,
    ``active[backend]`` what it returns for ``onlyActive``. Installed in
    ``sys.modules`` for the test's duration."""

    def __init__(self, test, **dumps):
        self.dumps = dict(dumps)
        self.active = {}
        self.calls = []
        module = types.ModuleType("torch._C._distributed_c10d")
        module._dump_fr_trace_json = self._dump
        self.module = module
        enter(test, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": module}))

    def _dump(self, include_collectives=True, only_active=False, backend="gloo"):
        self.calls.append((backend, only_active))
        source = self.active if only_active else self.dumps
        return source.get(backend, fr_dump([]))
