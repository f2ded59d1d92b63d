"""Collective waits per process group: where a step's ``comm_wait`` fell.

``comm_wait`` says how long a rank waited for its peers, not in which
process group. A slow rank makes the others wait in the groups they share
with it; a slow link makes every member of one group wait longer in it
while their own work is unchanged. To tell these apart the engine needs,
for each step, the calls and milliseconds of wait per group, which the
training thread sums here for the calls ``_runtime`` times (one dict update
per call). Groups are named as the flight recorder names them
(``_stall.group_names``), looked up once per group; point-to-point calls,
whatever their group, count together as :data:`P2P_NAME`.
"""

from typing import Any, Dict, List, Optional, Tuple

from ._settings import MAX_TRACKED_GROUPS
from ._stall import group_names

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
