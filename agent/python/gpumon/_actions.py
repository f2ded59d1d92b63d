"""Carrying out an action from the agent, in the training thread.

Runs at a step boundary, never elsewhere: the user's ``on_action`` callbacks
first (they may, say, shrink the batch), then the action itself. The result
is an ``ack`` message for the reporter thread to send; nothing here raises,
blocks on I/O or talks to other ranks. The kinds of :data:`REPORTER_KINDS`
never come here: the reporter thread carries them out itself, since they are
meant for a training thread that may be hung (``_evidence``).
"""

import gc
import logging
from typing import Any, Callable, Dict, List, Optional

from ._records import ack_message, reserved_bytes
from ._settings import HOOK_VERSION

logger = logging.getLogger("gpumon")

#: Action kinds the reporter thread carries out as soon as it receives them.
REPORTER_KINDS = ("dump_evidence",)
#: Action kinds this hook knows.
KINDS = ("release_cache",) + REPORTER_KINDS


def run_action(
    action: Dict[str, Any],
    at_step: int,
    callbacks: List[Callable[[Dict[str, Any]], Any]],
    source: Any,
) -> Dict[str, Any]:
    """Runs the callbacks, then ``action``; returns its ``ack`` message.

    Several callbacks' answers are joined with ``"; "``.
    """
    answers = []
    for callback in list(callbacks):
        answer = _call(callback, action)
        if answer is not None:
            answers.append(answer)
    response = "; ".join(answers) if answers else None
    kind = action.get("kind")
    try:
        if kind == "release_cache":
            freed = release_cache(source)
            return ack_message(action["id"], True, freed_bytes=freed, at_step=at_step, response=response)
        detail = "unknown action kind %r; this hook (gpumon %s) knows %s" % (
            kind,
            HOOK_VERSION,
            ", ".join(KINDS),
        )
    except Exception as e:  # the action failed; the training goes on
        detail = "%s: %s" % (type(e).__name__, e)
        logger.warning("gpumon: action %s (%s) failed: %s", action.get("id"), kind, detail)
    return ack_message(action["id"], False, at_step=at_step, response=response, detail=detail)


def release_cache(source: Any) -> int:
    """``gc.collect()`` then ``empty_cache()``; returns the reserved bytes freed."""
    if source is None:
        raise RuntimeError("no GPU memory source in this process (torch not imported, or no CUDA)")
    before = reserved_bytes(source.memory_stats())
    gc.collect()
    source.empty_cache()
    after = reserved_bytes(source.memory_stats())
    return max(0, before - after)


def _call(callback: Callable[[Dict[str, Any]], Any], action: Dict[str, Any]) -> Optional[str]:
    try:
        answer = callback(
            {"id": action["id"], "kind": action.get("kind"), "reason": action.get("reason", "")}
        )
        return None if answer is None else str(answer)
    except Exception:
        logger.warning(
            "gpumon: on_action callback %s raised; the action goes on",
            getattr(callback, "__qualname__", repr(callback)),
            exc_info=True,
        )
        return None
