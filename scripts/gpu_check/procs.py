"""Processes, ports, HTTP and waiting for gpu-check: all bounded, nothing left running.

Every process is started in a session of its own and logged to a file in
the output folder; :func:`stop_all` ends every one still running (SIGTERM,
then SIGKILL), so a failed phase or Ctrl-C never leaves an agent behind.
"""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar

T = TypeVar("T")

_RUNNING: List[subprocess.Popen] = []


class CheckError(Exception):
    """A step of a phase that could not be carried out (the phase fails, saying why)."""


def start(argv: Sequence[str], log_path: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> subprocess.Popen:
    """Starts ``argv`` with stdout and stderr in ``log_path``."""
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        log.close()
    proc.log_path = log_path  # type: ignore[attr-defined]
    _RUNNING.append(proc)
    return proc


def stop(proc: subprocess.Popen, grace_s: float = 10.0, sig: int = signal.SIGTERM) -> Optional[int]:
    """Ends ``proc`` and its process group: ``sig``, then SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    if proc in _RUNNING:
        _RUNNING.remove(proc)
    return proc.returncode


def stop_all() -> None:
    for proc in list(_RUNNING):
        stop(proc, grace_s=3.0)


def wait_exit(proc: subprocess.Popen, timeout_s: float, what: str) -> int:
    """The exit code of ``proc`` within ``timeout_s``; past it, the process is ended and CheckError raised."""
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise CheckError("%s did not end within %.0f s (log: %s)" % (what, timeout_s, proc.log_path)) from None
    if proc in _RUNNING:
        _RUNNING.remove(proc)
    return code


def tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, timeout_s: float, probe: Callable[[], Optional[T]], every_s: float = 0.25) -> T:
    """``probe()``'s first answer that is not ``None``, asked until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while True:
        try:
            value = probe()
            if value is not None:
                return value
        except (OSError, ValueError, KeyError) as e:
            last_error = e
        if time.monotonic() > deadline:
            detail = " (last error: %s)" % last_error if last_error else ""
            raise CheckError("timed out after %.0f s waiting for %s%s" % (timeout_s, what, detail))
        time.sleep(every_s)


def http(method: str, url: str, body: Any = None, token: Optional[str] = None, timeout_s: float = 5.0) -> Any:
    """The JSON answer of ``method url``; raises CheckError on a status other than 2xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        raise CheckError("%s %s: HTTP %d %s" % (method, url, e.code, e.read()[:300].decode("utf-8", "replace"))) from None
    ctype = resp.headers.get("Content-Type", "")
    return json.loads(raw) if "json" in ctype else raw.decode("utf-8", "replace")


def get(url: str, token: Optional[str] = None) -> Any:
    return http("GET", url, token=token)


def read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_lines(path: str) -> List[Dict[str, Any]]:
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def parse_metrics(text: str) -> List[tuple]:
    """``(name, {label: value}, value)`` for every sample of a Prometheus text page."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = {}
        if rest:
            for part in _split_labels(rest.rstrip("}")):
                key, _, raw = part.partition("=")
                labels[key] = raw.strip('"')
        try:
            samples.append((name, labels, float(value)))
        except ValueError:
            continue
    return samples


def _split_labels(text: str) -> List[str]:
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


class ProcStat:
    """CPU time and resident memory of one process, from ``/proc``."""

    TICKS = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int):
        self.pid = pid

    def cpu_s(self) -> float:
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rpartition(")")[2].split()
        # utime and stime are fields 14 and 15; the split starts at field 3.
        return (int(fields[11]) + int(fields[12])) / self.TICKS

    def memory(self) -> Dict[str, int]:
        out = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
        return out
