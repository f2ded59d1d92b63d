"""init(): when it starts, what it starts, and how it behaves with no agent."""

import logging
import os
import tempfile
import threading
import unittest
from unittest import mock

import gpumon
from gpumon._env import Identity
from gpumon._runtime import OWNER_VAR, Runtime
from gpumon._settings import Settings
from gpumon.testing import FakeAllocator

from tests.support import TORCHRUN_ENV, FakeAgent, capture_logs, enter, wait_until


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

    def test_public_init_outside_a_launcher_is_rank_0_of_a_world_of_1(self):
        agent = FakeAgent()
        self.addCleanup(agent.close)
        self.addCleanup(gpumon.shutdown)
        with mock.patch.dict(os.environ, {"GPUMON_AGENT": agent.address}, clear=True):
            self.assertTrue(gpumon.init())
            self.assertEqual(os.environ[OWNER_VAR], "%d:0:pid-%d" % (os.getpid(), os.getpid()))
        self.assertEqual(len(reporter_threads()), self.threads_before + 1)
        self.assertIn("rank 0 of a world of 1 in job 'pid-%d'" % os.getpid(), self.logs.messages()[0])
        gpumon.mark("m")
        wait_until(lambda: agent.records("event"), message="the marker")
        register = agent.ops("register")[0]
        claim = [register[k] for k in ("pid", "job", "rank", "local_rank", "world_size")]
        self.assertEqual(claim, [os.getpid(), "pid-%d" % os.getpid(), 0, 0, 1])

    def test_gpumon_job_names_the_job_of_a_process_alone(self):
        runtime = Runtime()
        self.assertTrue(self.start(runtime, environ={"GPUMON_JOB": " profile-1 "}))
        self.assertEqual(runtime._identity, Identity("profile-1", 0, 0, 1))

    def test_an_invalid_launcher_rank_is_no_launcher(self):
        runtime = Runtime()
        self.assertTrue(self.start(runtime, environ={"RANK": "4", "WORLD_SIZE": "4"}))
        self.assertEqual(runtime._identity, Identity("pid-%d" % os.getpid(), 0, 0, 1))

    def test_init_never_raises_whatever_the_environment(self):
        odd = "\udcff\x00" + "x" * 5000
        with tempfile.NamedTemporaryFile() as not_a_dir:
            environments = [
                {},
                {"RANK": odd, "WORLD_SIZE": odd, "LOCAL_RANK": odd, "TORCHELASTIC_RUN_ID": odd},
                {"GPUMON_JOB": odd, "MASTER_ADDR": odd, "MASTER_PORT": "-1"},
                {"GPUMON_AGENT": odd},
                {"GPUMON_AGENT": "unix:" + "p" * 5000},
                {"GPUMON_REPORT_INTERVAL": "nan", "GPUMON_SECTION_CLOCK": odd},
                {"GPUMON_SNAPSHOT_DIR": not_a_dir.name + "/sub", "GPUMON_SNAPSHOT_MAX_ENTRIES": "-3"},
                {"GPUMON_SNAPSHOT_STACKS": odd, "GPUMON_SNAPSHOT_MAX_ENTRIES": odd},
                {OWNER_VAR: odd},
            ]
            for environ in environments:
                with self.subTest(environ=sorted(environ)):
                    runtime = Runtime()
                    self.addCleanup(runtime.shutdown)
                    active = runtime.init(environ=dict(environ), settings=Settings(report_interval_s=3600.0))
                    self.assertIsInstance(active, bool)
                    runtime.step()
                    self.assertIsNone(runtime.save_allocator_snapshot())
        self.assertEqual(self.logs.at(logging.ERROR), [])

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
