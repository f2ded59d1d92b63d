"""The hook against a small JSON-lines agent: framing and message shapes of PROTOCOL.md."""

import json
import logging
import os
import unittest

from gpumon._runtime import Runtime
from gpumon._settings import Settings
from gpumon.testing import FakeAllocator, GiB, MiB

from tests.support import TORCHRUN_ENV, FakeAgent, capture_logs, enter, wait_until

FAST = Settings(report_interval_s=0.02, retry_initial_s=0.02, retry_max_s=0.05, shutdown_timeout_s=2.0)
ALLOC_KEYS = {
    "type",
    "t",
    "allocated",
    "reserved",
    "active",
    "inactive_split",
    "peak_allocated",
    "peak_reserved",
    "alloc_retries",
    "ooms",
    "device_used",
    "device_total",
}


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.logs = enter(self, capture_logs())
        self.agent = FakeAgent()
        self.addCleanup(self.agent.close)
        self.fake = FakeAllocator(total_bytes=16 * GiB, index=1, uuid="GPU-abc", name="Fake")
        self.runtime = Runtime()
        self.addCleanup(self.runtime.shutdown)

    def start(self):
        self.assertTrue(
            self.runtime.init(
                memory_source=self.fake, agent=self.agent.address, environ=dict(TORCHRUN_ENV), settings=FAST
            )
        )

    def test_register_report_poll_shapes(self):
        self.fake.alloc(1 * GiB)
        self.start()
        with self.runtime.section("data"):
            pass
        self.runtime.step()
        self.runtime.mark("eval start", "epoch 1")
        self.runtime.snapshot("before_training")
        wait_until(lambda: self.agent.records("snapshot") and self.agent.records("alloc"), message="records")
        wait_until(lambda: self.agent.ops("poll"), message="a poll")

        register = self.agent.ops("register")[0]
        self.assertEqual(
            register,
            {
                "v": 1,
                "op": "register",
                "pid": os.getpid(),
                "job": "run-7",
                "rank": 3,
                "local_rank": 1,
                "world_size": 8,
                "hook_version": "0.1.0",
                "device": {"index": 1, "uuid": "GPU-abc", "name": "Fake", "total_bytes": 16 * GiB},
            },
        )
        self.assertEqual(self.agent.requests[0][1]["op"], "register")  # first on the connection
        for line in self.agent.raw_lines:
            self.assertNotIn(b"\n", line)
            message = json.loads(line)
            self.assertEqual(message["v"], 1)
            self.assertIn(message["op"], ("register", "report", "poll", "ack"))
        self.assertEqual(self.agent.ops("poll")[0], {"v": 1, "op": "poll"})

        alloc = self.agent.records("alloc")[0]
        self.assertEqual(set(alloc), ALLOC_KEYS)
        self.assertEqual((alloc["allocated"], alloc["reserved"]), (1 * GiB, 1 * GiB))
        self.assertEqual((alloc["device_used"], alloc["device_total"]), (1 * GiB + 512 * MiB, 16 * GiB))
        (step,) = self.agent.records("step")
        self.assertEqual(set(step), {"type", "t", "step", "duration_ms", "sections", "clock"})
        self.assertEqual((step["step"], list(step["sections"]), step["clock"]), (1, ["data"], "cpu"))
        (event,) = self.agent.records("event")
        self.assertEqual(event["name"], "eval start")
        self.assertEqual(event["detail"], "epoch 1")
        (snapshot,) = self.agent.records("snapshot")
        self.assertEqual(set(snapshot), {"type", "t", "name", "stats"})
        self.assertEqual(snapshot["stats"]["allocated"], 1 * GiB)
        for report in self.agent.ops("report"):
            self.assertEqual(set(report), {"v", "op", "records"})
            self.assertLessEqual(len(report["records"]), 1024)
        self.assertEqual(self.logs.at(logging.WARNING), [])

    def test_an_action_round_trip(self):
        self.fake.free(self.fake.alloc(200 * MiB))
        self.runtime.on_action(lambda action: "seen %s" % action["reason"])
        self.agent.add_action(12, reason="oom soon")
        self.start()
        wait_until(lambda: self.runtime._actions_pending, message="the action handed over")
        self.assertEqual(self.agent.ops("ack"), [])  # nothing happens before a boundary
        self.runtime.step()
        wait_until(lambda: self.agent.ops("ack"), message="the ack")
        self.assertEqual(
            self.agent.ops("ack")[0],
            {
                "v": 1,
                "op": "ack",
                "id": 12,
                "state": "done",
                "freed_bytes": 200 * MiB,
                "at_step": 1,
                "response": "seen oom soon",
                "detail": None,
            },
        )
        polls = len(self.agent.ops("poll"))
        wait_until(lambda: len(self.agent.ops("poll")) >= polls + 3, message="more polls")
        self.runtime.step()
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.assertEqual(len(self.agent.ops("ack")), 1)

    def test_a_refused_ack_is_sent_again_while_the_action_is_listed(self):
        self.agent.refuse_acks = True
        self.agent.add_action(5)
        self.start()
        wait_until(lambda: self.runtime._actions_pending, message="the action handed over")
        self.runtime.step()
        wait_until(lambda: len(self.agent.ops("ack")) >= 3, message="the ack sent three times")
        self.agent.refuse_acks = False
        wait_until(lambda: 5 in self.agent.acked, message="the ack accepted")
        self.runtime.step()
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.assertEqual({a["id"] for a in self.agent.ops("ack")}, {5})

    def test_shutdown_sends_what_is_queued(self):
        self.start()
        wait_until(lambda: self.agent.ops("poll"), message="a first cycle")
        self.runtime.mark("last words")
        thread = self.runtime._reporter._thread
        self.runtime.shutdown()
        names = [e["name"] for e in self.agent.records("event")]
        self.assertIn("last words", names)
        self.assertFalse(thread.is_alive())

    def test_a_short_script_is_flushed_at_exit_before_the_first_cycle(self):
        settings = Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0)
        self.assertTrue(
            self.runtime.init(
                memory_source=self.fake,
                agent=self.agent.address,
                environ=dict(TORCHRUN_ENV),
                settings=settings,
            )
        )
        self.runtime.step()
        self.runtime.shutdown()
        self.assertEqual(len(self.agent.ops("register")), 1)
        self.assertEqual([s["step"] for s in self.agent.records("step")], [1])
        self.assertEqual(len(self.agent.records("alloc")), 1)

    def test_reconnects_and_registers_again(self):
        self.start()
        wait_until(lambda: self.agent.ops("poll"), message="a first cycle")
        self.agent.drop_connections()
        wait_until(lambda: len(self.agent.ops("register")) >= 2, message="a second register")
        self.runtime.mark("after")
        wait_until(
            lambda: any(e["name"] == "after" for e in self.agent.records("event")), message="the event"
        )
        self.assertLessEqual(len(self.logs.at(logging.WARNING)), 1)
        self.assertTrue(self.runtime.stats()["connected"])

    def test_a_refused_register_is_logged_once_and_retried(self):
        self.agent.refuse_register = "rank 3 of job run-7 is held by another session"
        self.start()
        wait_until(lambda: len(self.agent.ops("register")) >= 3, message="three attempts")
        self.agent.refuse_register = None
        wait_until(lambda: self.agent.ops("poll"), message="a poll after registering")
        warnings = [m for m in self.logs.messages(logging.WARNING)]
        self.assertEqual(len(warnings), 1)
        self.assertIn("held by another session", warnings[0])
        self.assertTrue(any("again" in m for m in self.logs.messages(logging.INFO)))

    def test_many_records_are_split_into_reports_of_at_most_1024(self):
        settings = Settings(report_interval_s=3600.0, shutdown_timeout_s=5.0)
        self.assertTrue(
            self.runtime.init(
                memory_source=self.fake,
                agent=self.agent.address,
                environ=dict(TORCHRUN_ENV),
                settings=settings,
            )
        )
        for i in range(3000):
            with self.runtime.section("s%d" % (i % 40)):
                pass
            self.runtime.step()
        self.runtime.shutdown()
        sizes = [len(r["records"]) for r in self.agent.ops("report")]
        self.assertEqual(sum(sizes), 3001)  # with the final alloc sample
        self.assertTrue(all(size <= 1024 for size in sizes), sizes)
        self.assertEqual([s["step"] for s in self.agent.records("step")], list(range(1, 3001)))


if __name__ == "__main__":
    unittest.main()


class SocketDirTest(unittest.TestCase):
    """The hook connects to no socket in a directory another user controls."""

    def test_a_private_directory_is_trusted_and_others_are_not(self):
        import os
        import tempfile

        from gpumon._client import AgentConnection, unsafe_socket_dir
        from gpumon._address import AgentAddress

        with tempfile.TemporaryDirectory() as tmp:
            mine = os.path.join(tmp, "gpumon-1000")
            os.mkdir(mine, 0o700)
            self.assertIsNone(unsafe_socket_dir(os.path.join(mine, "hook.sock")))

            link = os.path.join(tmp, "link")
            os.symlink(mine, link)
            self.assertIn("symbolic link", unsafe_socket_dir(os.path.join(link, "hook.sock")))

            open_dir = os.path.join(tmp, "open")
            os.mkdir(open_dir)
            os.chmod(open_dir, 0o777)
            self.assertIn("every user", unsafe_socket_dir(os.path.join(open_dir, "hook.sock")))
            os.chmod(open_dir, 0o1777)
            self.assertIsNone(unsafe_socket_dir(os.path.join(open_dir, "hook.sock")), "sticky, as /tmp")

            if os.geteuid() == 0:
                os.chown(mine, 4242, 4242)
                why = unsafe_socket_dir(os.path.join(mine, "hook.sock"))
                self.assertIn("belongs to uid 4242", why)
                with self.assertRaises(PermissionError):
                    AgentConnection(AgentAddress(path=os.path.join(mine, "hook.sock")), 1.0)


class ForkTest(unittest.TestCase):
    """A forked child (a DataLoader worker) closes its copy of the parent's
    connection and never reports; the parent carries on."""

    def setUp(self):
        self.agent = FakeAgent()
        self.addCleanup(self.agent.close)
        self.runtime = Runtime()
        self.addCleanup(self.runtime.shutdown)

    def test_a_forked_child_closes_the_inherited_connection(self):
        fake = FakeAllocator(total_bytes=16 * GiB)
        self.assertTrue(
            self.runtime.init(memory_source=fake, agent=self.agent.address, environ=dict(TORCHRUN_ENV), settings=FAST)
        )
        wait_until(lambda: self.runtime._reporter._conn is not None, message="connected")
        fd = self.runtime._reporter._conn._sock.fileno()
        pid = os.fork()
        if pid == 0:
            closed = False
            try:
                os.fstat(fd)
            except OSError:
                closed = True
            os._exit(0 if closed and not self.runtime.active else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, "the child closed its copy and is inactive")
        before = len(self.agent.ops("report"))
        self.runtime.step()
        wait_until(lambda: len(self.agent.ops("report")) > before, message="the parent still reports")
        self.assertEqual(len(self.agent.ops("register")), 1, "the child never registered")
