"""Peer groups: which ranks of the job do the same work as this one.

A straggler is found by comparing ranks that do the same work. In DDP and
FSDP that is every rank; in a pipeline, only the data-parallel replicas of
one stage: comparing stages would name the heavier stage's ranks
stragglers. The hook learns the split from the calls the training thread
makes through ``torch.distributed`` (see ``_collectives``): the process
groups of its collectives (a stage's replicas share the gradient
all-reduce) and the peers of its point-to-point sends and receives
(adjacent stages exchange activations and gradients). Its *group* is the
lowest global rank among its own and those of every collective group that
holds none of its point-to-point peers; the engine joins the ranks'
answers into peer groups.

Only the first :data:`OBSERVE_STEPS` steps are observed (a training loop
makes the same calls every step); at most :data:`MAX_GROUPS` groups and
:data:`MAX_PEERS` peers are kept. Nothing here raises into the caller.
"""

import inspect
import logging
import sys
from typing import Any, Callable, Dict, Optional, Set, Tuple

logger = logging.getLogger("gpumon")

#: Steps during which calls are observed.
OBSERVE_STEPS = 8
#: Process groups and point-to-point peers kept at most.
MAX_GROUPS = 64
MAX_PEERS = 64

#: Point-to-point calls and the parameters that name their peer (a global
#: rank, or a rank within ``group`` for the ``group_`` ones).
P2P = {
    "send": ("dst", "group_dst"),
    "isend": ("dst", "group_dst"),
    "recv": ("src", "group_src"),
    "irecv": ("src", "group_src"),
}
BATCH = "batch_isend_irecv"
#: Calls that say nothing about who does the same work.
IGNORED = ("barrier", "monitored_barrier")


class Where:
    """Where a function takes its group and peer: positional index or keyword."""

    def __init__(self, original: Callable[..., Any], name: str):
        self.name = name
        params = []
        try:
            params = list(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            pass
        self.group = params.index("group") if "group" in params else None
        peer, group_peer = P2P.get(name, (None, None))
        self.peer = (peer, params.index(peer) if peer in params else None)
        self.group_peer = group_peer

    def arg(self, args: tuple, kwargs: Dict[str, Any], name: Optional[str], index: Optional[int]) -> Any:
        if name is not None and name in kwargs:
            return kwargs[name]
        if index is not None and index < len(args):
            return args[index]
        return None


class PeerGroups:
    """What the first steps' collectives say about this rank's peers."""

    def __init__(self) -> None:
        self.open = True
        self._groups: Dict[Any, Tuple[int, Any]] = {}
        self._peers: Set[int] = set()
        self._steps = 0
        self._key: Optional[int] = None
        self._changed = False

    @property
    def key(self) -> Optional[int]:
        """The group to report; ``None`` while no collective was seen."""
        return self._key

    def call(self, where: Where, args: tuple, kwargs: Dict[str, Any]) -> None:
        """One call of a collective or point-to-point function."""
        name = where.name
        if name in IGNORED:
            return
        if name == BATCH:
            ops = args[0] if args else kwargs.get("p2p_op_list", ())
            for op in list(ops)[:MAX_PEERS]:
                group = getattr(op, "group", None)
                peer = getattr(op, "peer", None)
                if peer is None:
                    peer = _global(group, getattr(op, "group_peer", None))
                self._peer(peer)
            return
        group = where.arg(args, kwargs, "group", where.group)
        if name in P2P:
            peer = where.arg(args, kwargs, *where.peer)
            if peer is None and where.group_peer is not None:
                peer = _global(group, kwargs.get(where.group_peer))
            self._peer(peer)
            return
        self.add_group(group)

    def add_group(self, group: Any) -> None:
        """A process group this rank runs collectives in (``None``: the world)."""
        key = None if group is None else id(group)
        if key in self._groups or len(self._groups) >= MAX_GROUPS:
            return
        ranks = _ranks_of(group)
        if ranks is None or len(ranks) == 0:
            return
        self._groups[key] = (min(ranks), ranks)
        self._changed = True

    def _peer(self, peer: Any) -> None:
        if isinstance(peer, int) and peer >= 0 and len(self._peers) < MAX_PEERS and peer not in self._peers:
            self._peers.add(peer)
            self._changed = True

    def boundary(self) -> None:
        """A step ended: settles the key; stops observing after the first steps."""
        self._steps += 1
        if self._steps >= OBSERVE_STEPS:
            self.open = False
        if not self._changed:
            return
        self._changed = False
        own = _own_rank()
        if own is None or not self._groups:
            return
        lowest = own
        for low, ranks in self._groups.values():
            if not any(p in ranks for p in self._peers):
                lowest = min(lowest, low)
        self._key = lowest


def _dist() -> Any:
    return sys.modules.get("torch.distributed")


def _own_rank() -> Optional[int]:
    dist = _dist()
    try:
        return int(dist.get_rank()) if dist is not None and dist.is_initialized() else None
    except Exception:
        return None


def _ranks_of(group: Any) -> Any:
    """The global ranks of ``group`` (a range for the world), or ``None``."""
    dist = _dist()
    if dist is None:
        return None
    try:
        world = getattr(getattr(dist, "group", None), "WORLD", None)
        if group is None or group is world:
            return range(int(dist.get_world_size()))
        return frozenset(int(r) for r in dist.get_process_group_ranks(group))
    except Exception as e:
        logger.debug("gpumon: the ranks of a process group are unknown: %s", e)
        return None


def _global(group: Any, group_rank: Any) -> Optional[int]:
    dist = _dist()
    if dist is None or not isinstance(group_rank, int):
        return None
    try:
        return int(dist.get_global_rank(group, group_rank)) if group is not None else group_rank
    except Exception:
        return None
