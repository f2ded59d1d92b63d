"""Collective waits: how long the training thread blocks in torch.distributed.

Under FSDP, ZeRO and pipeline parallelism a rank waits for its peers inside
its own forward and backward (each layer's all-gather and reduce-scatter, a
stage's receive), so every section it reports carries the wait, and a slow
rank looks like its waiting peers. The hook therefore times the blocking
part of every collective the training thread calls through
``torch.distributed``: a synchronous call from entry to return, an
asynchronous one in ``Work.wait()``. The runtime takes that time out of the
sections open at that moment and reports it as the section
:data:`SECTION`, which the engine reads as the step's wait: what is left of
each section is the rank's own work, compared across ranks.

Calls nest (a synchronous collective waits on its own work): only the
outermost is timed. Calls from other threads are not timed. ``enter`` is
told which call it is (its :class:`~gpumon._peers.Where`, arguments), so
that a hung rank can say which collective it waits in (``_stall``). Functions
imported by name before the hook installed (``from torch.distributed import
all_reduce``) are not seen; torch's own FSDP and pipelining call them
through the module, and are.
"""

import functools
import logging
import sys
from typing import Any, Callable, Dict, List, Optional

from ._peers import PeerGroups, Where

logger = logging.getLogger("gpumon")

#: The section that holds the step's collective waits.
SECTION = "comm_wait"

#: The collectives timed, where torch.distributed has them.
FUNCTIONS = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)

#: Where the functions are looked up: the package (``dist.all_reduce``) and
#: the module that defines them (what torch's own code calls).
MODULES = ("torch.distributed", "torch.distributed.distributed_c10d")

#: The class whose ``wait`` an asynchronous collective blocks in.
WORK = ("torch._C._distributed_c10d", "Work")


def install(
    enter: Callable[[Where, tuple, Dict[str, Any]], bool],
    leave: Callable[[], None],
    peers: Optional[PeerGroups] = None,
) -> List[str]:
    """Wraps every collective and ``Work.wait``; ``enter(where, args,
    kwargs)`` answers whether to time the call (then ``leave()`` follows
    it); ``peers``, while open, sees each call's group and peer. Returns
    what was wrapped."""
    wrapped: List[str] = []
    done = {}
    for module_name in MODULES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in FUNCTIONS:
            original = getattr(module, name, None)
            if original is None or not callable(original):
                continue
            if getattr(original, "__gpumon_wrapped__", False):
                continue
            timed = done.get(id(original))
            if timed is None:
                timed = done[id(original)] = _timed(original, enter, leave, peers, Where(original, name))
                wrapped.append(name)
            try:
                setattr(module, name, timed)
            except (AttributeError, TypeError) as e:
                logger.debug("gpumon: %s.%s is not timed: %s", module_name, name, e)
    work = getattr(sys.modules.get(WORK[0]), WORK[1], None)
    wait = getattr(work, "wait", None)
    if wait is not None and not getattr(wait, "__gpumon_wrapped__", False):
        try:
            work.wait = _timed(wait, enter, leave, None, Where(wait, "wait"))
            wrapped.append("Work.wait")
        except (AttributeError, TypeError) as e:
            logger.debug("gpumon: Work.wait is not timed: %s", e)
    return wrapped


def _timed(
    original: Callable[..., Any],
    enter: Callable[[Where, tuple, Dict[str, Any]], bool],
    leave: Callable[[], None],
    peers: Optional[PeerGroups],
    where: Where,
) -> Callable[..., Any]:
    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        try:
            on = enter(where, args, kwargs)
            if on and peers is not None and peers.open:
                peers.call(where, args, kwargs)
        except Exception:
            on = False
        try:
            return original(*args, **kwargs)
        finally:
            if on:
                try:
                    leave()
                except Exception:
                    logger.debug("gpumon: a collective wait was not counted", exc_info=True)

    timed.__gpumon_wrapped__ = True  # type: ignore[attr-defined]
    return timed
