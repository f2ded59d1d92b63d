"""torch's flight recorder: turning it on, and reading what a hung rank waits in.

The flight recorder (``torch._C._distributed_c10d``) keeps the last
collectives of every process group, with their sequence numbers and whether
they finished. It sees what the hook's wrappers (``_collectives``) cannot,
such as DDP's gradient all-reduce, which runs in C++. The hook turns it on
by setting ``TORCH_FR_BUFFER_SIZE`` before the script creates its first
process group (:func:`enable`), unless ``GPUMON_FLIGHT_RECORDER=0`` or the
script's environment sizes it already.

:class:`FlightRecorder` reads it from the reporter thread, never the training
thread: one dump per backend (NCCL keeps its own recorder; gloo's is the
generic one), each in a helper thread waited on for at most
:data:`FR_DUMP_TIMEOUT_S`, so that a dump stuck in the communication library
costs the reporter that long once, after which it stops asking. A dump over
:data:`MAX_FR_DUMP_BYTES` is not parsed. Torch is never imported here.
"""

import json
import logging
import sys
import threading
from typing import Any, Callable, Dict, List, MutableMapping, Optional, Sequence, Tuple

from ._once import LogOnce
from ._records import clean_label
from ._settings import (
    FLIGHT_RECORDER_ENTRIES,
    FR_DUMP_TIMEOUT_S,
    MAX_FR_DUMP_BYTES,
    MAX_STALL_GROUPS,
    MAX_STALL_S,
)

logger = logging.getLogger("gpumon")

#: ``0`` (or off, false, no): the hook leaves the flight recorder as it is.
SWITCH_VAR = "GPUMON_FLIGHT_RECORDER"
#: What sizes the flight recorder: torch's name, and its older NCCL-only one.
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Where torch keeps the dump functions, once ``torch.distributed`` is imported.
C10D = "torch._C._distributed_c10d"
#: Prefixes of ``profiling_name`` taken off an op's name (``gloo:all_reduce``).
BACKEND_SEPARATOR = ":"
#: The op of an entry without a name.
UNKNOWN_OP = "unknown"

Dump = Tuple[str, bytes]


def enable(environ: MutableMapping[str, str]) -> bool:
    """Sets ``TORCH_FR_BUFFER_SIZE`` unless switched off or already sized;
    true when it set it."""
    if environ.get(SWITCH_VAR, "").strip().lower() in ("0", "off", "false", "no"):
        return False
    if any(name in environ for name in BUFFER_VARS):
        return False
    environ[BUFFER_VARS[0]] = str(FLIGHT_RECORDER_ENTRIES)
    return True


class FlightRecorder:
    """Dumps of torch's flight recorder, read with bounds (reporter thread)."""

    def __init__(self, timeout_s: float = FR_DUMP_TIMEOUT_S, max_bytes: int = MAX_FR_DUMP_BYTES):
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._log = LogOnce()
        #: Why the hook stopped asking for dumps, once it has.
        self.stuck: Optional[str] = None

    def dumps(self, only_active: bool = False) -> List[Dump]:
        """``(backend, JSON bytes)`` for each backend whose recorder answers,
        as torch wrote them; empty without torch.distributed or dump functions."""
        c10d = sys.modules.get(C10D)
        if c10d is None or self.stuck is not None:
            return []
        calls = _dump_calls(c10d, only_active)
        if not calls:
            return []
        answer = self._bounded(lambda: _run(calls))
        return answer or []

    def parsed(self) -> List[Dict[str, Any]]:
        """The dumps that have entries, parsed; a dump over the limit or not
        JSON is skipped (and logged once)."""
        out = []
        for backend, raw in self.dumps():
            if len(raw) > self._max_bytes:
                self._log.log(
                    "big:" + backend,
                    logging.WARNING,
                    "gpumon: the %s flight recorder dump is %d bytes, over %d; not read",
                    backend,
                    len(raw),
                    self._max_bytes,
                )
                continue
            try:
                dump = json.loads(raw)
            except ValueError as e:
                self._log.log(
                    "json:" + backend, logging.WARNING, "gpumon: a flight recorder dump is not JSON: %s", e
                )
                continue
            if isinstance(dump, dict) and isinstance(dump.get("entries"), list) and dump["entries"]:
                out.append(dump)
        return out

    def _bounded(self, read: Callable[[], List[Dump]]) -> Optional[List[Dump]]:
        box: List[Any] = []

        def run() -> None:
            try:
                box.append(read())
            except BaseException as e:  # handed to the reporter thread below
                box.append(e)

        helper = threading.Thread(target=run, name="gpumon-flight-recorder", daemon=True)
        helper.start()
        helper.join(self._timeout_s)
        if not box:
            self.stuck = "a flight recorder dump did not return within %g s" % self._timeout_s
            logger.warning("gpumon: %s; the hook reads it no more in this process", self.stuck)
            return None
        if isinstance(box[0], BaseException):
            self._log.log("dump", logging.WARNING, "gpumon: dumping the flight recorder failed: %r", box[0])
            return None
        return box[0]


def _dump_calls(c10d: Any, only_active: bool) -> List[Tuple[str, Callable[[], Any]]]:
    """The dump of NCCL's recorder (``_dump_nccl_trace_json``, else the
    generic function's ``backend="nccl"``, which older torch refuses), then
    the generic one's (gloo's)."""
    generic = getattr(c10d, "_dump_fr_trace_json", None)
    nccl = getattr(c10d, "_dump_nccl_trace_json", None)
    calls: List[Tuple[str, Callable[[], Any]]] = []
    if callable(nccl):
        calls.append(("nccl", lambda: nccl(True, only_active)))
    elif callable(generic):
        calls.append(("nccl", lambda: generic(True, only_active, backend="nccl")))
    if callable(generic):
        calls.append(("gloo", lambda: generic(True, only_active)))
    return calls


def _run(calls: Sequence[Tuple[str, Callable[[], Any]]]) -> List[Dump]:
    out: List[Dump] = []
    for backend, call in calls:
        try:
            raw = call()
        except Exception as e:
            logger.debug("gpumon: the %s flight recorder dump failed: %r", backend, e)
            continue
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "replace")
        if isinstance(raw, bytes) and all(raw != seen for _, seen in out):
            out.append((backend, raw))
    return out


def view(dumps: Sequence[Dict[str, Any]], now_ns: int) -> Optional[Tuple[Optional[Dict[str, Any]], list]]:
    """``(waiting, entered)`` of a ``stall`` record from parsed dumps, or
    ``None`` when they hold no entry.

    ``waiting``: the earliest entered of the entries not retired nor
    completed (collectives of a group finish in order, so the later ones
    wait behind it); ``entered``: per process group, the highest collective
    sequence number entered (point-to-point entries excluded), the most
    recently entered group first. A group two backends record (a
    ``cuda:nccl,cpu:gloo`` group) is counted from the first dump only: the
    backends number their collectives apart.
    """
    pending: Optional[Tuple[int, int, Dict[str, Any]]] = None
    entered: Dict[str, List[int]] = {}
    owner: Dict[str, int] = {}
    position = 0
    for index, dump in enumerate(dumps):
        entries = dump.get("entries") if isinstance(dump, dict) else None
        if not isinstance(entries, list):
            continue
        for entry in entries:
            position += 1
            group = _group(entry)
            if group is None:
                continue
            created = _count(entry.get("time_created_ns"))
            order = created if created is not None else 0
            if entry.get("is_p2p") is not True:
                seq = _count(entry.get("collective_seq_id"))
                if seq is not None and owner.setdefault(group[0], index) == index:
                    seen = entered.setdefault(group[0], [seq, order])
                    seen[0] = max(seen[0], seq)
                    seen[1] = max(seen[1], order)
            if entry.get("retired") is False and entry.get("state") != "completed":
                key = (order, position)
                if pending is None or key < pending[:2]:
                    pending = (order, position, entry)
    if position == 0:
        return None
    newest = sorted(entered.items(), key=lambda item: item[1][1], reverse=True)[:MAX_STALL_GROUPS]
    waiting = _waiting(pending[2], now_ns) if pending is not None else None
    return waiting, [[name, seen[0]] for name, seen in newest]


def _waiting(entry: Dict[str, Any], now_ns: int) -> Dict[str, Any]:
    """The ``waiting`` of an entry; what it lacks is ``0``, ``"unknown"`` or ``null``."""
    name, desc = _group(entry) or ("?", None)
    p2p = entry.get("is_p2p") is True
    created = _count(entry.get("time_created_ns"))
    timeout_ms = entry.get("timeout_ms")
    timeout_s = timeout_ms / 1000.0 if _number(timeout_ms) else None
    return {
        "group": name,
        "desc": desc,
        "seq": _count(entry.get("p2p_seq_id" if p2p else "collective_seq_id")) or 0,
        "op": op_name(entry.get("profiling_name")),
        "numel": _numel(entry.get("input_sizes")),
        "waited_s": min(MAX_STALL_S, round(max(0, now_ns - created) / 1e9, 3)) if created else 0.0,
        "timeout_s": timeout_s if timeout_s is not None and timeout_s <= MAX_STALL_S else None,
    }


def op_name(profiling_name: Any) -> str:
    """``all_reduce`` of ``gloo:all_reduce``, ``send`` of ``nccl:send 0->1``;
    ``unknown`` without a name."""
    words = profiling_name.split() if isinstance(profiling_name, str) else []
    name = clean_label(words[0].rpartition(BACKEND_SEPARATOR)[2]) if words else None
    return name or UNKNOWN_OP


def _group(entry: Any) -> Optional[Tuple[str, Optional[str]]]:
    """``(name, description)`` of an entry's process group, as labels."""
    if not isinstance(entry, dict):
        return None
    group = entry.get("process_group")
    if not isinstance(group, (list, tuple)) or not group:
        return None
    name = clean_label(group[0])
    if name is None:
        return None
    return name, clean_label(group[1]) if len(group) > 1 else None


def _numel(sizes: Any) -> Optional[int]:
    """Elements of all inputs, from ``input_sizes`` (a list of shapes)."""
    if not isinstance(sizes, list):
        return None
    total = 0
    for shape in sizes:
        if not isinstance(shape, list):
            return None
        count = 1
        for dim in shape:
            if _count(dim) is None:
                return None
            count *= dim
        total += count
    return total


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
