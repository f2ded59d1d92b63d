"""Hung jobs: a ``stall`` record while the training thread finishes no step.

When one rank of a synchronous job stops, the others block in a collective
and finish no step either. The reporter thread (the training thread may be
the one blocked) calls :meth:`StallWatch.check` every cycle. Once the rank
has finished a step, and none since for at least ``max(15 s, 3 x the median
of its last 16 steps)``, it builds a ``stall`` record, and another every
10 s while the stall lasts: the last finished step, how long ago it ended,
the collective the rank waits in, the last sequence number it entered in
each process group (so the rank that never entered the collective its peers
wait in stands out), and the last ``gpumon.mark`` since the step.

What it waits in comes from torch's flight recorder (``_flight``) when that
holds entries, else from the hook's wrappers of ``torch.distributed``
(``_collectives``), which :class:`CollectiveLog` follows on the training
thread: the outermost call in progress and a count of calls per process
group. Nothing here raises into the training thread or blocks it.
"""

import statistics
import sys
import time
from time import perf_counter
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ._flight import FlightRecorder, view
from ._records import clean_label
from ._settings import MAX_STALL_GROUPS, MAX_STALL_S, MAX_TRACKED_GROUPS, Settings

#: Calls whose group the wrappers count apart, as the flight recorder does.
P2P = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
#: ``Work.wait``: an asynchronous collective's wait, group unknown.
WAIT = "wait"
#: Name and description of the default process group (as torch names it).
DEFAULT_GROUP = ("0", "default_pg")


class Progress(NamedTuple):
    """What the training thread has done, as the reporter thread reads it."""

    #: ``(last finished step, perf_counter when it ended)``; step 0: none yet.
    ended: Tuple[int, float]
    #: Durations of the last steps, ms.
    recent_ms: Tuple[float, ...]
    #: The last ``gpumon.mark`` name since that step, or ``None``.
    marker: Optional[str]


class CollectiveLog:
    """The training thread's calls through the collective wrappers.

    :meth:`enter` and :meth:`leave` run on the training thread for the
    outermost call only; the reporter thread reads :attr:`current` and
    :meth:`groups`, each set or grown by a single assignment.
    """

    __slots__ = ("current", "_groups", "_tick", "_last")

    def __init__(self) -> None:
        #: ``(op, group, seq, perf_counter at entry)`` of the call in progress.
        self.current: Optional[Tuple[str, Any, Optional[int], float]] = None
        #: ``id(group)`` (``None``: the default group) -> ``[group, collectives, p2p calls, tick]``.
        self._groups: Dict[Optional[int], List[Any]] = {}
        self._tick = 0
        #: ``(group, seq, point-to-point)`` of the last call noted, which a
        #: ``Work.wait`` is taken to wait for.
        self._last: Tuple[Any, Optional[int], bool] = (None, None, False)

    def enter(self, op: str, group: Any, t0: float) -> None:
        if op == WAIT:
            group, seq, _ = self._last
            self.current = (op, group, seq, t0)
            return
        key = None if group is None else id(group)
        counts = self._groups.get(key)
        if counts is None:
            if len(self._groups) >= MAX_TRACKED_GROUPS:
                self.current = (op, group, None, t0)
                return
            counts = self._groups[key] = [group, 0, 0, 0]
        p2p = op in P2P
        column = 2 if p2p else 1
        counts[column] += 1
        self._tick += 1
        counts[3] = self._tick
        self._last = (group, counts[column], p2p)
        self.current = (op, group, counts[column], t0)

    def leave(self) -> None:
        self.current = None

    def attributed(self, op: str, group: Any) -> Tuple[Any, bool]:
        """``(group, point-to-point)`` of a call: for ``Work.wait`` those of
        the call it is taken to wait for (:meth:`enter` first)."""
        if op == WAIT:
            return self._last[0], self._last[2]
        return group, op in P2P

    def groups(self) -> List[Tuple[Any, int, int]]:
        """``(group, collectives entered, tick of the last call)``, any order."""
        return [(g, colls, tick) for g, colls, _, tick in list(self._groups.values())]


def group_of(op: str, where: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
    """The process group a wrapped call names (``None``: the default one)."""
    if op == "batch_isend_irecv":
        ops = args[0] if args else kwargs.get("p2p_op_list", ())
        return getattr(ops[0], "group", None) if ops else None
    return where.arg(args, kwargs, "group", where.group)


def wrappers_view(log: CollectiveLog, now: float) -> Tuple[Optional[Dict[str, Any]], list]:
    """``(waiting, entered)`` of a ``stall`` record from the wrappers' log."""
    waiting = None
    current = log.current
    if current is not None:
        op, group, seq, t0 = current
        name, desc = group_names(group)
        waiting = {
            "group": name,
            "desc": desc,
            "seq": seq or 0,
            "op": op,
            "numel": None,
            "waited_s": min(MAX_STALL_S, round(max(0.0, now - t0), 3)),
            "timeout_s": None,
        }
    merged: Dict[str, List[int]] = {}
    for group, count, tick in log.groups():
        if count:
            seen = merged.setdefault(group_names(group)[0], [0, 0])
            seen[0] += count
            seen[1] = max(seen[1], tick)
    newest = sorted(merged.items(), key=lambda item: item[1][1], reverse=True)[:MAX_STALL_GROUPS]
    return waiting, [[name, seen[0]] for name, seen in newest]


def group_names(group: Any) -> Tuple[str, Optional[str]]:
    """``(name, description)`` of a process group as the flight recorder
    names it; ``("0", "default_pg")`` for the default group."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if group is None:
        world = None
        try:
            world = getattr(getattr(c10d, "GroupMember", None), "WORLD", None)
        except Exception:
            pass
        if world is None:
            return DEFAULT_GROUP
        group = world
    name = None
    try:
        name = c10d._get_process_group_name(group)
    except Exception:
        try:
            name = group.group_name
        except Exception:
            pass
    desc = None
    try:
        desc = group.group_desc
    except Exception:
        pass
    return clean_label(name) or "?", clean_label(desc)


class StallWatch:
    """Decides, on the reporter thread, when to send a ``stall`` record."""

    def __init__(
        self,
        progress: Callable[[], Progress],
        log: Callable[[], CollectiveLog],
        settings: Settings,
        recorder: Optional[FlightRecorder] = None,
    ):
        self._progress = progress
        self._log = log
        self._settings = settings
        self._recorder = recorder if recorder is not None else FlightRecorder()
        self._episode: Optional[Tuple[int, float]] = None
        self._last_sent = 0.0
        #: ``stall`` records built.
        self.reported = 0

    @property
    def stalled(self) -> bool:
        return self._episode is not None

    def threshold(self, recent_ms: Tuple[float, ...]) -> float:
        """Seconds without a step after which the rank is stalled."""
        settings = self._settings
        if not recent_ms:
            return settings.stall_min_s
        return max(settings.stall_min_s, settings.stall_step_factor * statistics.median(recent_ms) / 1000.0)

    def check(self) -> Optional[Dict[str, Any]]:
        """The ``stall`` record to send now, if any."""
        progress = self._progress()
        step, ended = progress.ended
        now = perf_counter()
        quiet = now - ended
        if step < 1 or quiet < self.threshold(progress.recent_ms):
            self._episode = None
            return None
        if self._episode == progress.ended and now - self._last_sent < self._settings.stall_repeat_s:
            return None
        self._episode = progress.ended
        self._last_sent = now
        record = self.record(progress, quiet, now)
        self.reported += 1
        return record

    def record(self, progress: Progress, quiet: float, now: float) -> Dict[str, Any]:
        """The ``stall`` record of ``progress``, ``quiet`` seconds after its last step."""
        found = view(self._recorder.parsed(), time.time_ns())
        if found is not None:
            waiting, entered = found
            source = "flight_recorder"
        else:
            waiting, entered = wrappers_view(self._log(), now)
            source = "wrappers" if waiting is not None or entered else "none"
        marker = progress.marker
        return {
            "type": "stall",
            "t": time.time(),
            "step": progress.ended[0],
            "quiet_s": min(MAX_STALL_S, round(quiet, 3)),
            "waiting": waiting,
            "entered": entered,
            "marker": clean_label(marker),
            "source": source,
        }

