"""init(): when it starts, what it starts, and how it behaves with no agent."""

import logging
import os
import threading
import unittest
from unittest import mock

import gpumon
from gpumon._runtime import OWNER_VAR, Runtime
from gpumon._settings import Settings
from gpumon.testing import FakeAllocator

from tests.support import TORCHRUN_ENV, capture_logs, enter, wait_until


def reporter_threads():
    return [t for t in threading.enumerate() if t.name == "gpumon-reporter"]


class InitTest(unittest.TestCase):
    def setUp(self):
        self.logs = enter(self, capture_logs())
        self.threads_before = len(reporter_threads())

    def start(self, runtime, environ=None, **kwargs):
        kwargs.setdefault("agent", "unix:/nonexistent/x.sock")
        kwargs.setdefault("settings", Settings(report_interval_s=3600.0))
        self.addCleanup(runtime.shutdown)
        return runtime.init(environ=dict(TORCHRUN_ENV) if environ is None else environ, **kwargs)

    def test_public_init_outside_torchrun_returns_false_and_starts_nothing(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertFalse(gpumon.init())
            self.assertNotIn(OWNER_VAR, os.environ)
        self.assertEqual(len(reporter_threads()), self.threads_before)
        self.assertEqual(len(self.logs.records), 1)
        self.assertIn("no torchrun environment", self.logs.messages()[0])
        self.assertFalse(gpumon.stats()["active"])
        gpumon.step()  # all harmless
        with gpumon.section("data"):
            gpumon.mark("m")
        self.assertIsNone(gpumon.snapshot("s"))

    def test_invalid_rank_is_not_torchrun(self):
        self.assertFalse(self.start(Runtime(), environ={"RANK": "4", "WORLD_SIZE": "4"}))
        self.assertEqual(len(reporter_threads()), self.threads_before)

    def test_second_init_starts_no_second_thread_and_swaps_the_source(self):
        runtime = Runtime()
        self.assertTrue(self.start(runtime))
        self.assertEqual(len(reporter_threads()), self.threads_before + 1)
        fake = FakeAllocator()
        self.assertTrue(runtime.init(memory_source=fake))
        self.assertTrue(runtime.init())
        self.assertEqual(len(reporter_threads()), self.threads_before + 1)
        self.assertIs(runtime._source, fake)

    def test_shutdown_stops_the_thread(self):
        runtime = Runtime()
        self.assertTrue(self.start(runtime))
        runtime.shutdown()
        wait_until(lambda: len(reporter_threads()) == self.threads_before, message="thread end")
        self.assertFalse(runtime.active)

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            Runtime().init(agent=7000)
        with self.assertRaises(TypeError):
            Runtime().init(memory_source=object())
        with self.assertRaises(TypeError):
            gpumon.on_action("not callable")

    def test_a_non_loopback_agent_is_refused(self):
        self.assertFalse(self.start(Runtime(), agent="10.1.2.3:7000"))
        self.assertIn("not on loopback", self.logs.messages(logging.WARNING)[0])
        self.assertEqual(len(reporter_threads()), self.threads_before)

    def test_marks_the_environment_and_children_stay_quiet(self):
        environ = dict(TORCHRUN_ENV)
        self.assertTrue(self.start(Runtime(), environ=environ))
        self.assertEqual(environ[OWNER_VAR], "%d:3:run-7" % os.getpid())
        child_env = dict(environ, **{OWNER_VAR: "1:3:run-7"})  # inherited from process 1
        self.assertFalse(self.start(Runtime(), environ=child_env))
        other_rank = dict(environ, **{OWNER_VAR: "1:0:run-7"})  # e.g. a launcher with another rank
        self.assertTrue(self.start(Runtime(), environ=other_rank))

    def test_unreachable_agent_warns_once_and_retries_quietly(self):
        runtime = Runtime()
        settings = Settings(report_interval_s=0.01, retry_initial_s=0.005, retry_max_s=0.01)
        self.assertTrue(self.start(runtime, agent="unix:/nonexistent/x.sock", settings=settings))
        for _ in range(20):
            runtime.step()
            runtime.mark("m")
        wait_until(lambda: runtime.stats().get("connect_attempts", 0) >= 6, message="six connection attempts")
        warnings = self.logs.at(logging.WARNING)
        self.assertEqual(len(warnings), 1, [w.getMessage() for w in warnings])
        self.assertIn("unix:/nonexistent/x.sock", warnings[0].getMessage())
        self.assertTrue(runtime.active)
        self.assertEqual(self.logs.at(logging.ERROR), [])

    def test_retry_backoff_doubles_up_to_the_limit(self):
        runtime = Runtime()
        settings = Settings(report_interval_s=3600.0, retry_initial_s=1.0, retry_max_s=30.0)
        self.assertTrue(self.start(runtime, settings=settings))
        reporter = runtime._reporter
        waits = []
        with mock.patch("gpumon._reporter.time.monotonic", return_value=100.0):
            for _ in range(7):
                reporter._trouble("x")
                waits.append(reporter._next_retry - 100.0)
        self.assertEqual(waits, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0])


if __name__ == "__main__":
    unittest.main()
