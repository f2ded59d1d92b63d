"""The reporter: the hook's one daemon thread, and the only one doing I/O.

Every report interval it samples the memory source into an ``alloc``
record, sends everything queued (``report``), sends the acks of the actions
the training thread carried out (``ack``), then asks for new actions
(``poll``) and hands them, and the alerts that came with them, to the
training thread; the kinds meant for a hung training thread
(``dump_evidence``) it carries out itself, at once. Every cycle it also asks
the stall watch (``_stall``) whether the training thread has finished no
step for too long, and sends its ``stall`` record. When the agent is
unreachable it says so once, keeps sampling into a bounded outbox (oldest
dropped and counted) and reconnects with a backoff of 1 s doubling to 30 s;
after a reconnect it registers again.
"""

import collections
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Deque, Dict, Optional

from ._address import AgentAddress
from ._client import AgentConnection
from ._env import Identity
from ._memory import read_alloc_fields, read_device
from ._records import (
    REPORT_HEAD,
    ack_message,
    alloc_record,
    encode_record,
    poll_message,
    register_message,
    report_line,
    to_record,
)
from ._settings import (
    ACK_QUEUE_MAXLEN,
    MAX_RECORD_AGE_S,
    MAX_RECORDS_PER_REPORT,
    MAX_REPORT_BYTES,
    QUEUE_MAXLEN,
    Settings,
)
from ._stall import StallWatch

logger = logging.getLogger("gpumon")

#: Action ids remembered, so that an action listed again is not run twice.
SEEN_ACTIONS_MAX = 4096
#: Acks remembered after a send, to send again if the agent lists the action again.
SENT_ACKS_MAX = 256
#: Distinct messages logged once; past it they go to debug.
LOG_ONCE_MAX = 64
#: Name of the event that reports records dropped by the hook.
DROPPED_EVENT = "gpumon.dropped"


class Reporter:
    """Owns the connection; runs :meth:`_cycle` in a daemon thread."""

    def __init__(
        self,
        *,
        address: AgentAddress,
        identity: Identity,
        settings: Settings,
        get_source: Callable[[], Any],
        records: Deque[tuple],
        acks: Deque[Dict[str, Any]],
        deliver: Callable[[Dict[str, Any]], Optional[Dict[str, Any]]],
        dropped: Callable[[], int],
        deliver_alerts: Callable[[list], None] = lambda alerts: None,
        stall: Optional[StallWatch] = None,
        run_here: Optional[Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]]] = None,
    ):
        self._address = address
        self._identity = identity
        self._settings = settings
        self._get_source = get_source
        self._records = records
        self._acks = acks
        self._deliver = deliver
        self._deliver_alerts = deliver_alerts
        self._dropped = dropped
        self._stall = stall
        #: Action kinds carried out on this thread -> what does it, returning the ack.
        self._run_here = dict(run_here or {})
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._conn: Optional[AgentConnection] = None
        self._registered_device: Optional[Dict[str, Any]] = None
        self._outbox: Deque[Dict[str, Any]] = collections.deque()
        self._ack_outbox: Deque[Dict[str, Any]] = collections.deque()
        self._seen: "collections.OrderedDict[int, None]" = collections.OrderedDict()
        self._sent_acks: "collections.OrderedDict[int, Dict[str, Any]]" = collections.OrderedDict()
        self._failures = 0
        self._warned = False
        self._backoff = settings.retry_initial_s
        self._next_retry = 0.0
        self._last_sample = -math.inf
        self._outbox_drops = 0
        self._reported_drops = 0
        self._logged = set()
        self.session: Optional[Any] = None
        self.counters = collections.Counter()

    # -- control (any thread) -------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumon-reporter", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Asks for a cycle now (an ack is waiting)."""
        self._wake.set()

    def close_inherited(self) -> None:
        """In a forked child: closes its copy of the parent's connection,
        sending nothing on it (the parent keeps using it; the child never
        reports as its parent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def stop(self, timeout_s: float) -> bool:
        """Sends what is queued, closes, and waits up to ``timeout_s``; true if it ended."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    # -- the thread -----------------------------------------------------------

    def _run(self) -> None:
        interval = self._settings.report_interval_s
        try:
            while not self._stop.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                if self._stop.is_set():
                    break
                self._safe_cycle(final=False)
            self._safe_cycle(final=True)
        finally:
            self._close()

    def _safe_cycle(self, final: bool) -> None:
        try:
            self._cycle(final)
        except Exception as e:  # a bug here must not end the reporting
            self._close()
            self._log_once(
                "cycle", logging.WARNING, "gpumon: reporter error (%s); carrying on", e, exc_info=True
            )

    def _cycle(self, final: bool) -> None:
        self._collect(final)
        if not self._ensure_connected(final):
            return
        try:
            self._refresh_device()
            self._send_reports()
            self._send_acks()
            if not final:
                self._poll()
        except OSError as e:
            self._close()
            self._trouble("lost the connection to the gpumon agent at %s (%s)" % (self._address, e))

    # -- gathering --------------------------------------------------------------

    def _collect(self, final: bool) -> None:
        now = time.monotonic()
        if final or now - self._last_sample >= 0.9 * self._settings.report_interval_s:
            self._last_sample = now
            try:
                fields = read_alloc_fields(self._get_source())
            except Exception as e:
                fields = None
                self._log_once("stats", logging.WARNING, "gpumon: reading memory stats failed: %s", e)
            if fields is not None:
                self._push(alloc_record(time.time(), fields))
        records = self._records
        while True:
            try:
                item = records.popleft()
            except IndexError:
                break
            record = to_record(item)
            if record is not None:
                self._push(record)
        cutoff = time.time() - MAX_RECORD_AGE_S
        if self._outbox and self._outbox[0]["t"] < cutoff:
            fresh = [r for r in self._outbox if r["t"] >= cutoff]
            self._outbox_drops += len(self._outbox) - len(fresh)
            self._outbox = collections.deque(fresh)
        dropped = self._dropped() + self._outbox_drops
        if dropped > self._reported_drops:
            detail = "%d records dropped since the last report (queue full or agent unreachable)" % (
                dropped - self._reported_drops
            )
            self._reported_drops = dropped
            self._push({"type": "event", "t": time.time(), "name": DROPPED_EVENT, "detail": detail})
        if not final and self._stall is not None:
            self._check_stall()
        while True:
            try:
                self._queue_ack(self._acks.popleft())
            except IndexError:
                break

    def _check_stall(self) -> None:
        try:
            record = self._stall.check()
        except Exception as e:  # never lose the connection over it
            self._log_once("stall", logging.WARNING, "gpumon: the stall check failed: %r", e, exc_info=True)
            return
        if record is None:
            return
        self._push(record)
        waiting = record["waiting"]
        where = "nothing seen"
        if waiting is not None:
            where = "%s #%s of group %s" % (waiting["op"], waiting["seq"], waiting["group"])
        self._log_once(
            "stalled",
            logging.WARNING,
            "gpumon: no step has ended for %.1f s (the last was step %d); waiting in %s",
            record["quiet_s"],
            record["step"],
            where,
        )

    def _push(self, record: Dict[str, Any]) -> None:
        if len(self._outbox) >= QUEUE_MAXLEN:
            self._outbox.popleft()
            self._outbox_drops += 1
        self._outbox.append(record)

    # -- the session ------------------------------------------------------------

    def _refresh_device(self) -> None:
        """Registers again on the same connection once the device is known.

        Under ``gpumon run`` the hook registers before the script initialises
        CUDA, so the first registration carries no device; the agent needs it
        to attribute the process to its GPU when it samples no GPU itself.
        """
        if self._registered_device is not None:
            return
        device = read_device(self._get_source())
        if device is None:
            return
        answer = self._conn.request(register_message(os.getpid(), self._identity, device))
        if answer["ok"]:
            self._registered_device = device
        else:
            self._log_once(
                "reregister",
                logging.WARNING,
                "gpumon: the agent refused the device update: %s",
                answer.get("error"),
            )
            self._registered_device = device

    def _ensure_connected(self, final: bool) -> bool:
        if self._conn is not None:
            return True
        # On the way out, try once even before the first cycle (a short script).
        if time.monotonic() < self._next_retry and not (final and self._failures == 0):
            return False
        self.counters["connect_attempts"] += 1
        source = self._get_source()
        try:
            conn = AgentConnection(self._address, self._settings.io_timeout_s)
        except OSError as e:
            self._trouble("cannot reach the gpumon agent at %s (%s)" % (self._address, e))
            return False
        try:
            device = read_device(source)
            answer = conn.request(register_message(os.getpid(), self._identity, device))
        except OSError as e:
            conn.close()
            self._trouble("registering with the gpumon agent at %s failed (%s)" % (self._address, e))
            return False
        if not answer["ok"]:
            conn.close()
            error = str(answer.get("error") or "no reason given")
            self._log_once(
                "register:" + error,
                logging.WARNING,
                "gpumon: the agent at %s refused to register rank %d of job %r: %s; retrying later",
                self._address,
                self._identity.rank,
                self._identity.job,
                error,
            )
            self._schedule_retry()
            return False
        self._conn = conn
        self._registered_device = device
        self.session = answer.get("session")
        self.counters["sessions"] += 1
        if self._failures:
            logger.info(
                "gpumon: connected to the agent at %s again (session %s)", self._address, self.session
            )
        else:
            logger.debug("gpumon: registered with the agent at %s (session %s)", self._address, self.session)
        self._failures = 0
        self._warned = False
        self._backoff = self._settings.retry_initial_s
        return True

    def _trouble(self, message: str) -> None:
        """Connection trouble: a warning the first time of an outage, then quiet."""
        if self._warned:
            logger.debug("gpumon: %s", message)
        else:
            self._warned = True
            logger.warning("gpumon: %s; retrying quietly in the background", message)
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        self._failures += 1
        self._next_retry = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self._settings.retry_max_s)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- the requests -----------------------------------------------------------

    def _send_reports(self) -> None:
        while self._outbox:
            parts = []
            taken = 0
            size = len(REPORT_HEAD) + 3
            for record in self._outbox:
                if len(parts) >= MAX_RECORDS_PER_REPORT:
                    break
                raw = encode_record(record)
                if raw is not None:
                    if parts and size + len(raw) + 1 > MAX_REPORT_BYTES:
                        break
                    parts.append(raw)
                    size += len(raw) + 1
                taken += 1
            if parts:
                answer = self._conn.request_line(report_line(parts))
                self._on_report_answer(answer, len(parts))
            for _ in range(taken):
                self._outbox.popleft()

    def _on_report_answer(self, answer: Dict[str, Any], sent: int) -> None:
        if not answer["ok"]:
            self.counters["records_refused"] += sent
            error = str(answer.get("error") or "no reason given")
            self._log_once(
                "report:" + error, logging.WARNING, "gpumon: the agent refused a report: %s", error
            )
            return
        self.counters["reports"] += 1
        self.counters["records_sent"] += sent
        skipped = answer.get("skipped")
        if isinstance(skipped, int) and skipped > 0:
            self.counters["records_skipped"] += skipped
            self._log_once(
                "skipped",
                logging.WARNING,
                "gpumon: the agent skipped %d of %d records: %s (later skips are logged at debug level)",
                skipped,
                sent,
                answer.get("reasons"),
            )

    def _send_acks(self) -> None:
        while self._ack_outbox:
            ack = self._ack_outbox[0]
            answer = self._conn.request(ack)
            self._ack_outbox.popleft()
            # Kept either way: if the agent lists the action again (it lost the
            # ack, or refused it on a session it had not given the action to
            # yet), the ack goes again instead of the action running twice.
            self._sent_acks[ack["id"]] = ack
            while len(self._sent_acks) > SENT_ACKS_MAX:
                self._sent_acks.popitem(last=False)
            if answer["ok"]:
                self.counters["acks_sent"] += 1
            else:
                error = str(answer.get("error") or "no reason given")
                self._log_once(
                    "ack:" + error,
                    logging.DEBUG,
                    "gpumon: the agent refused the ack of action %s: %s",
                    ack["id"],
                    error,
                )

    def _poll(self) -> None:
        answer = self._conn.request(poll_message())
        if not answer["ok"]:
            error = str(answer.get("error") or "no reason given")
            self._log_once("poll:" + error, logging.WARNING, "gpumon: the agent refused a poll: %s", error)
            return
        alerts = answer.get("alerts")  # absent from older agents
        if isinstance(alerts, list) and alerts:
            self.counters["alerts"] += len(alerts)
            self._deliver_alerts(alerts)
        actions = answer.get("actions")
        if not isinstance(actions, list):
            self._log_once("poll-shape", logging.WARNING, 'gpumon: a poll answer without an "actions" list')
            return
        self.accept_actions(actions)
        if self._ack_outbox:
            self._send_acks()

    def accept_actions(self, actions: list) -> None:
        """Hands the actions not seen before to the training thread, or
        carries them out here when their kind is one of ``run_here``'s
        (their acks then wait in the outbox).

        An action seen before is not run again; if its ack was already sent
        (and so got lost on the agent's side), the ack is sent again.
        """
        for action in actions:
            action_id = action.get("id") if isinstance(action, dict) else None
            kind = action.get("kind") if isinstance(action, dict) else None
            if not isinstance(action_id, int) or isinstance(action_id, bool) or not isinstance(kind, str):
                self._log_once(
                    "action-shape", logging.WARNING, "gpumon: ignoring a malformed action: %r", action
                )
                continue
            if action_id in self._seen:
                ack = self._sent_acks.pop(action_id, None)
                if ack is not None:
                    self._queue_ack(ack)
                continue
            self._seen[action_id] = None
            while len(self._seen) > SEEN_ACTIONS_MAX:
                self._seen.popitem(last=False)
            reason = action.get("reason")
            self.counters["actions"] += 1
            clean = {"id": action_id, "kind": kind, "reason": reason if isinstance(reason, str) else ""}
            run = self._run_here.get(kind)
            if run is None:
                refused = self._deliver(clean)
                if refused is not None:
                    self._queue_ack(refused)
                continue
            try:
                ack = run(clean)
            except Exception as e:  # the action failed; reporting goes on
                logger.warning("gpumon: action %d (%s) failed", action_id, kind, exc_info=True)
                ack = ack_message(action_id, False, detail="%s: %s" % (type(e).__name__, e))
            self._queue_ack(ack)

    def _queue_ack(self, ack: Dict[str, Any]) -> None:
        """Queues an ack for the agent, dropping the oldest (counted) past
        :data:`ACK_QUEUE_MAXLEN`: an agent that never takes acks cannot make
        the queue grow."""
        if len(self._ack_outbox) >= ACK_QUEUE_MAXLEN:
            self._ack_outbox.popleft()
            self.counters["acks_dropped"] += 1
        self._ack_outbox.append(ack)

    # -- logging ------------------------------------------------------------------

    def _log_once(self, key: str, level: int, message: str, *args: Any, exc_info: bool = False) -> None:
        if key in self._logged or len(self._logged) >= LOG_ONCE_MAX:
            logger.debug(message, *args)
            return
        self._logged.add(key)
        logger.log(level, message, *args, exc_info=exc_info)
