"""Alerts from the agent: their shape, the bounded inbox, and the callbacks
run in the training thread at the next step boundary."""

import logging
import threading
import unittest

from gpumon._alerts import MAX_PENDING_ALERTS, clean_alert
from gpumon._runtime import Runtime
from gpumon._settings import MAX_DETAIL_BYTES, Settings

from tests.support import TORCHRUN_ENV, FakeAgent, capture_logs, enter, quiet_runtime, wait_until


def alert(kind="oom_risk", rank=3, **fields):
    out = {
        "kind": kind,
        "severity": "critical",
        "job": "run-7",
        "rank": rank,
        "message": "rank 3 runs out of memory in about 4 min",
        "t": 1763700000.25,
    }
    out.update(fields)
    return out


class CleanAlertTest(unittest.TestCase):
    def test_a_well_formed_alert_keeps_its_fields(self):
        self.assertEqual(clean_alert(alert()), alert())
        self.assertIsNone(clean_alert(alert(rank=None))["rank"])
        self.assertEqual(clean_alert(alert(t=1763700000))["t"], 1763700000.0)

    def test_malformed_alerts_are_refused(self):
        for bad in [
            "junk",
            alert(kind=""),
            alert(severity=7),
            alert(rank=True),
            alert(rank=-1),
            alert(t=float("nan")),
            alert(t="now"),
            alert(message=None),
            {k: v for k, v in alert().items() if k != "job"},
        ]:
            with self.subTest(bad=bad):
                self.assertIsNone(clean_alert(bad))

    def test_long_texts_are_cut_to_the_protocol_limits(self):
        cleaned = clean_alert(alert(kind="k" * 500, message="é" * 2000))
        self.assertEqual(len(cleaned["kind"]), 128)
        self.assertLessEqual(len(cleaned["message"].encode()), MAX_DETAIL_BYTES)


class InboxTest(unittest.TestCase):
    def setUp(self):
        self.runtime, self.logs = quiet_runtime(self)
        self.seen = []
        self.runtime.on_alert(lambda a: self.seen.append((a, threading.current_thread().name)))

    def deliver(self, *alerts):
        """What the reporter thread does with a poll answer's alerts."""
        self.runtime._reporter._deliver_alerts(list(alerts))

    def test_callbacks_run_at_the_next_boundary_only(self):
        self.deliver(alert())
        self.runtime.mark("not a boundary")
        with self.runtime.section("data"):
            pass
        self.assertEqual(self.seen, [])
        self.runtime.step()
        self.assertEqual(self.seen, [(alert(), threading.current_thread().name)])
        self.runtime.step()
        self.assertEqual(len(self.seen), 1, "each alert is delivered once")

    def test_the_inbox_keeps_the_newest_and_counts_the_rest(self):
        extra = 6
        self.deliver(*[alert(message=str(i)) for i in range(MAX_PENDING_ALERTS + extra)])
        self.runtime.step()
        messages = [a["message"] for a, _ in self.seen]
        self.assertEqual(messages, [str(i) for i in range(extra, MAX_PENDING_ALERTS + extra)])
        stats = self.runtime.stats()
        self.assertEqual(
            (stats["alerts_received"], stats["alerts_dropped"]), (MAX_PENDING_ALERTS + extra, extra)
        )

    def test_a_raising_callback_breaks_nothing(self):
        def broken(a):
            raise ValueError("user bug")

        later = []
        self.runtime.on_alert(broken)
        self.runtime.on_alert(later.append)
        self.deliver(alert(), alert(kind="leak"))
        self.runtime.step()  # does not raise
        self.assertEqual([a["kind"] for a in later], ["oom_risk", "leak"])
        self.assertEqual(len(self.seen), 2)
        warnings = self.logs.messages(logging.WARNING)
        self.assertEqual(sum("on_alert callback" in m for m in warnings), 2)

    def test_malformed_alerts_are_skipped_and_logged_once(self):
        self.deliver({"kind": 1}, "junk", alert(kind="leak"))
        self.runtime.step()
        self.assertEqual([a["kind"] for a, _ in self.seen], ["leak"])
        warnings = [m for m in self.logs.messages(logging.WARNING) if "malformed alert" in m]
        self.assertEqual(len(warnings), 1)

    def test_on_alert_needs_a_callable(self):
        with self.assertRaises(TypeError):
            self.runtime.on_alert("not callable")


class AlertFromAgentTest(unittest.TestCase):
    """Through a socket: an alert in a poll answer reaches the callback at the
    next step boundary after it arrived, in the training thread."""

    def test_a_posted_alert_reaches_the_callback_at_a_step_boundary(self):
        enter(self, capture_logs())
        agent = FakeAgent()
        self.addCleanup(agent.close)
        runtime = Runtime()
        self.addCleanup(runtime.shutdown)
        seen = []
        runtime.on_alert(lambda a: seen.append((a, threading.current_thread(), runtime.stats()["step"])))
        settings = Settings(report_interval_s=0.02, shutdown_timeout_s=2.0)
        self.assertTrue(runtime.init(agent=agent.address, environ=dict(TORCHRUN_ENV), settings=settings))
        runtime.step()
        wait_until(lambda: agent.ops("poll"), message="a first poll")
        agent.post_alert(alert(rank=None, severity="warning", kind="memory_level"))
        wait_until(lambda: runtime.stats()["alerts_received"] == 1, message="the alert handed over")
        self.assertEqual(seen, [], "nothing runs before a boundary")
        runtime.step()
        ((got, thread, step),) = seen
        self.assertIs(thread, threading.current_thread())
        self.assertEqual(step, 2)
        self.assertEqual(got, alert(rank=None, severity="warning", kind="memory_level"))
        self.assertEqual(agent.alerts_sent, 1)


if __name__ == "__main__":
    unittest.main()
