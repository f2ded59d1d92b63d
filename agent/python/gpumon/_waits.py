"""Collective waits per process group, and each collective of a step.

``comm_wait`` says how long a rank waited for its peers, not in which
process group. A slow rank makes the others wait in the groups they share
with it; a slow link makes every member of one group wait longer in it
while their own work is unchanged. To tell these apart the engine needs,
for each step, the calls and milliseconds of wait per group, which the
training thread sums here for the calls ``_runtime`` times (one dict update
per call). Groups are named as the flight recorder names them
(``_stall.group_names``), looked up once per group; point-to-point calls,
whatever their group, count together as :data:`P2P_NAME`.

:class:`StepCollectives` lists the step's first collectives one by one:
group, number, operation, when the training thread entered it, when it
stopped waiting for it and how long it blocked. Per collective, the engine
aligns the ranks' clocks on its end (it ends at nearly the same instant on
every member) and then sees which rank arrived last: the one the others
wait for. Point-to-point calls are not listed (a receive waits for the
other stage's compute, not for a late peer).
"""

from typing import Any, Dict, List, Optional, Tuple

from ._settings import MAX_STEP_COLLECTIVES, MAX_TRACKED_GROUPS
from ._stall import WAIT, group_names

#: The name under which sends and receives are summed.
P2P_NAME = "p2p"


class GroupWaits:
    """The training thread's collective waits of the current step, by group name."""

    __slots__ = ("_names", "_step")

    def __init__(self) -> None:
        #: ``id(group)`` (``None``: the default group) -> ``(group, name)``;
        #: the group is kept so that a reused id is not taken for it.
        self._names: Dict[Optional[int], Tuple[Any, str]] = {}
        #: Group name -> ``[calls, ms]`` in this step.
        self._step: Dict[str, List[Any]] = {}

    def name(self, group: Any, p2p: bool) -> str:
        """The name a call in ``group`` counts under."""
        if p2p:
            return P2P_NAME
        key = None if group is None else id(group)
        known = self._names.get(key)
        if known is not None and known[0] is group:
            return known[1]
        name = group_names(group)[0]
        if known is not None or len(self._names) < MAX_TRACKED_GROUPS:
            self._names[key] = (group, name)
        return name

    def add(self, name: str, ms: float) -> None:
        """One call in group ``name`` that blocked ``ms``; past
        :data:`MAX_TRACKED_GROUPS` names in a step, new ones are not counted."""
        counts = self._step.get(name)
        if counts is None:
            if len(self._step) >= MAX_TRACKED_GROUPS:
                return
            counts = self._step[name] = [0, 0.0]
        counts[0] += 1
        counts[1] += ms

    def take(self) -> Dict[str, List[Any]]:
        """This step's ``{name: [calls, ms]}``, and a fresh count for the next."""
        step, self._step = self._step, {}
        return step


class StepCollectives:
    """The training thread's collectives of the current step, one by one.

    Each is ``[group name, number, op, entered, left, wait_ms]``, times on
    ``perf_counter``; a ``Work.wait`` adds to the call it waits for. Past
    :data:`MAX_STEP_COLLECTIVES` in a step, new ones are counted in
    :attr:`dropped` and not listed.
    """

    __slots__ = ("_list", "_by_key", "dropped")

    def __init__(self) -> None:
        self._list: List[list] = []
        self._by_key: Dict[Tuple[str, int], list] = {}
        self.dropped = 0

    def enter(self, name: str, seq: Optional[int], op: str, t0: float) -> Optional[list]:
        """The entry a call begun at ``t0`` counts toward, or ``None``."""
        if not seq or name == P2P_NAME:
            return None
        if op == WAIT:
            return self._by_key.get((name, seq))
        if len(self._list) >= MAX_STEP_COLLECTIVES:
            self.dropped += 1
            return None
        entry = [name, seq, op, t0, t0, 0.0]
        self._list.append(entry)
        self._by_key[(name, seq)] = entry
        return entry

    @staticmethod
    def leave(entry: list, t1: float, ms: float) -> None:
        """The call counted toward ``entry`` returned at ``t1`` after ``ms``."""
        entry[4] = t1
        entry[5] += ms

    def take(self, step_start: float) -> List[list]:
        """This step's list, times as ms after ``step_start``, and a fresh
        one for the next step."""
        listed, self._list, self._by_key = self._list, [], {}
        out = []
        for name, seq, op, entered, left, ms in listed:
            at = max(0.0, (entered - step_start) * 1000.0)
            out.append([name, seq, op, at, max(at, (left - step_start) * 1000.0), ms])
        return out
