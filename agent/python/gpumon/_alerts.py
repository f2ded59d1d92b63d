"""Alerts from the agent, handed to the script's ``gpumon.on_alert`` callbacks.

The reporter thread takes the ``"alerts"`` list of a ``poll`` answer
(``PROTOCOL.md``; an older agent sends none) and keeps the well-formed ones
in a bounded inbox, the oldest dropped and counted. The training thread
calls the callbacks at its next step boundary, as it runs actions: never in
the middle of a step and never in the reporter thread, so a callback may
change training state (lower the batch size, save a checkpoint). A
callback's exception is logged and ignored.
"""

import collections
import logging
import math
from typing import Any, Callable, Dict, List, Optional

from ._once import LogOnce
from ._records import clip_detail, clip_name

logger = logging.getLogger("gpumon")

#: Alerts waiting for the next step boundary; past it the oldest are dropped.
MAX_PENDING_ALERTS = 64

Alert = Dict[str, Any]


def clean_alert(raw: Any) -> Optional[Alert]:
    """The alert dict given to callbacks, from one entry of a poll answer;
    ``None`` when it lacks a field or a field has the wrong type."""
    if not isinstance(raw, dict):
        return None
    texts = [raw.get(key) for key in ("kind", "severity", "job")]
    if not all(isinstance(text, str) and text for text in texts):
        return None
    message = raw.get("message")
    rank = raw.get("rank")
    t = raw.get("t")
    if not isinstance(message, str):
        return None
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        return None
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        return None
    kind, severity, job = texts
    return {
        "kind": clip_name(kind),
        "severity": clip_name(severity),
        "message": clip_detail(message),
        "job": job,
        "rank": rank,
        "t": float(t),
    }


class AlertInbox:
    """Alerts between the reporter thread (:meth:`deliver`) and the training
    thread (:meth:`run`, at a step boundary), and the callbacks to run."""

    def __init__(self) -> None:
        self._alerts: "collections.deque[Alert]" = collections.deque(maxlen=MAX_PENDING_ALERTS)
        self._callbacks: List[Callable[[Alert], Any]] = []
        self._log = LogOnce()
        #: Checked at every step boundary: true when alerts are waiting.
        self.pending = False
        self.received = 0
        self.dropped = 0

    def add_callback(self, fn: Callable[[Alert], Any]) -> None:
        self._callbacks.append(fn)

    def deliver(self, raw_alerts: List[Any]) -> None:
        """Reporter thread: keeps the well-formed alerts of a poll answer."""
        for raw in raw_alerts:
            alert = clean_alert(raw)
            if alert is None:
                self._log.log("shape", logging.WARNING, "gpumon: ignoring a malformed alert: %r", raw)
                continue
            if len(self._alerts) == MAX_PENDING_ALERTS:
                self.dropped += 1
            self._alerts.append(alert)
            self.received += 1
            self.pending = True

    def clear(self) -> None:
        self._alerts.clear()
        self.pending = False

    def run(self) -> None:
        """Training thread: calls every callback with every waiting alert."""
        self.pending = False
        while True:
            try:
                alert = self._alerts.popleft()
            except IndexError:
                return
            for callback in list(self._callbacks):
                try:
                    callback(dict(alert))
                except Exception:
                    logger.warning(
                        "gpumon: on_alert callback %s raised; ignored",
                        getattr(callback, "__qualname__", repr(callback)),
                        exc_info=True,
                    )
