"""Hung jobs: the ``stall`` record, its thresholds and where it learns what the rank waits in.

The reporter's cycle is driven by hand (``runtime._stall.check()``) on a fake
clock; torch's flight recorder is :class:`tests.support.FakeFlightRecorder`
and torch.distributed stand-in modules, so no test needs torch.
"""

import json
import logging
import sys
import threading
import time
import types
import unittest
from unittest import mock

from gpumon import _collectives, _flight, _runtime, _stall
from gpumon._flight import FlightRecorder, view
from gpumon._runtime import Runtime
from gpumon._settings import FLIGHT_RECORDER_ENTRIES, Settings

from tests.support import (
    TORCHRUN_ENV,
    FakeAgent,
    FakeClock,
    FakeFlightRecorder,
    capture_logs,
    enter,
    fr_dump,
    fr_entry,
    quiet_runtime,
    wait_until,
)

STALL_KEYS = ("type", "t", "step", "quiet_s", "waiting", "entered", "marker", "source")
NOW_NS = 2_000_000_000_000_000_000
SECOND_NS = 1_000_000_000


class FlightRecorderViewTest(unittest.TestCase):
    """``_flight.view``: ``waiting`` and ``entered`` from parsed dumps."""

    def test_a_rank_blocked_in_an_all_reduce(self):
        entries = [fr_entry(seq, created_ns=NOW_NS - (20 - seq) * SECOND_NS) for seq in range(1, 10)]
        entries.append(fr_entry(10, retired=False, sizes=[(8, 9), (2,)], created_ns=NOW_NS - 68_100_000_000))
        waiting, entered = view([json.loads(fr_dump(entries))], NOW_NS)
        self.assertEqual(
            waiting,
            {
                "group": "0",
                "desc": "default_pg",
                "seq": 10,
                "op": "all_reduce",
                "numel": 74,
                "waited_s": 68.1,
                "timeout_s": 1800.0,
            },
        )
        self.assertEqual(entered, [["0", 10]])

    def test_the_earliest_collective_not_finished_is_the_one_waited_in(self):
        entries = [
            fr_entry(4, retired=True, created_ns=NOW_NS - 9 * SECOND_NS),
            fr_entry(5, op="nccl:_allgather_base", retired=False, created_ns=NOW_NS - 8 * SECOND_NS),
            fr_entry(6, retired=False, created_ns=NOW_NS - 7 * SECOND_NS),  # queued behind 5
            fr_entry(7, retired=False, state="completed", created_ns=NOW_NS - 10 * SECOND_NS),
        ]
        waiting, _ = view([json.loads(fr_dump(entries))], NOW_NS)
        self.assertEqual((waiting["seq"], waiting["op"], waiting["waited_s"]), (5, "_allgather_base", 8.0))

    def test_point_to_point_entries_wait_by_their_own_numbers_and_enter_nothing(self):
        stage = ("3", "pp_stage")
        entries = [
            fr_entry(2, group=stage, created_ns=NOW_NS - 5 * SECOND_NS),
            fr_entry(0, group=stage, op="nccl:send 1->2", p2p_seq=41, created_ns=NOW_NS - 4 * SECOND_NS),
            fr_entry(0, group=stage, op="nccl:recv 1<-2", p2p_seq=42, retired=False, created_ns=NOW_NS - 1),
        ]
        waiting, entered = view([json.loads(fr_dump(entries))], NOW_NS)
        self.assertEqual((waiting["group"], waiting["desc"]), ("3", "pp_stage"))
        self.assertEqual((waiting["op"], waiting["seq"]), ("recv", 42))
        self.assertEqual(entered, [["3", 2]])

    def test_entered_lists_groups_most_recent_first_at_most_16(self):
        entries = []
        for group in range(20):
            for seq in (1, 2, 3):
                created = NOW_NS - (100 - group) * SECOND_NS + seq
                entries.append(fr_entry(seq + group, group=(str(group), "g%d" % group), created_ns=created))
        waiting, entered = view([json.loads(fr_dump(entries))], NOW_NS)
        self.assertIsNone(waiting, "every collective retired: it waits in none")
        self.assertEqual(entered, [[str(g), g + 3] for g in range(19, 3, -1)])

    def test_a_group_two_backends_record_is_counted_from_the_first(self):
        nccl = json.loads(fr_dump([fr_entry(30, op="nccl:all_reduce")]))
        gloo = json.loads(fr_dump([fr_entry(2, op="gloo:barrier"), fr_entry(5, group=("1", "cpu_side"))]))
        _, entered = view([nccl, gloo], NOW_NS)
        self.assertEqual(sorted(entered), [["0", 30], ["1", 5]])

    def test_no_entries_is_no_view_and_odd_entries_are_skipped(self):
        self.assertIsNone(view([json.loads(fr_dump([]))], NOW_NS))
        self.assertIsNone(view([], NOW_NS))
        odd = [
            None,
            "entry",
            {"process_group": "0"},
            {"process_group": []},
            fr_entry(True),
            dict(fr_entry(3, retired=False), input_sizes=[["x"]], time_created_ns=None, timeout_ms="long"),
        ]
        waiting, entered = view([{"entries": odd}], NOW_NS)
        self.assertEqual(
            waiting,
            {
                "group": "0",
                "desc": "default_pg",
                "seq": 3,
                "op": "all_reduce",
                "numel": None,
                "waited_s": 0.0,
                "timeout_s": None,
            },
        )
        self.assertEqual(entered, [["0", 3]])

    def test_what_the_agent_would_refuse_is_never_sent(self):
        entry = fr_entry(
            1,
            group=("x" * 200, "tp\x00\nrank"),
            op=None,
            retired=False,
            created_ns=NOW_NS - 40 * 24 * 3600 * SECOND_NS,
            timeout_ms=365 * 24 * 3600 * 1000,
        )
        entry["collective_seq_id"] = None
        waiting, entered = view([{"entries": [entry]}], NOW_NS)
        self.assertEqual(
            waiting,
            {
                "group": "x" * 128,
                "desc": "tp  rank",
                "seq": 0,
                "op": "unknown",
                "numel": 72,
                "waited_s": 2_592_000.0,
                "timeout_s": None,
            },
        )
        self.assertEqual(entered, [])


class FlightRecorderReadTest(unittest.TestCase):
    """``_flight.FlightRecorder``: which dumps it asks for, and its bounds."""

    def setUp(self):
        self.logs = enter(self, capture_logs())

    def test_one_dump_per_backend_parsed_only_when_it_has_entries(self):
        fake = FakeFlightRecorder(self, gloo=fr_dump([fr_entry(1)]))
        (dump,) = FlightRecorder().parsed()
        self.assertEqual(dump["entries"][0]["collective_seq_id"], 1)
        self.assertEqual(fake.calls, [("nccl", False), ("gloo", False)])

    def test_nccl_has_its_own_dump_function_where_torch_has_it(self):
        fake = FakeFlightRecorder(self, gloo=fr_dump([fr_entry(1)]))
        fake.module._dump_nccl_trace_json = lambda collectives, only_active: fr_dump([fr_entry(9)])
        dumps = FlightRecorder().dumps()
        self.assertEqual([backend for backend, _ in dumps], ["nccl", "gloo"])
        self.assertEqual(fake.calls, [("gloo", False)])

    def test_an_older_torch_without_the_backend_argument(self):
        module = types.ModuleType("torch._C._distributed_c10d")
        module._dump_fr_trace_json = lambda collectives=True, only_active=False: fr_dump([fr_entry(2)])
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": module}))
        (dump,) = FlightRecorder().parsed()
        self.assertEqual(dump["entries"][0]["collective_seq_id"], 2)

    def test_without_torch_distributed_nothing_is_read(self):
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": None}))
        self.assertEqual(FlightRecorder().dumps(), [])

    def test_a_dump_over_the_limit_is_not_parsed(self):
        FakeFlightRecorder(self, gloo=fr_dump([fr_entry(seq) for seq in range(1, 200)]))
        self.assertEqual(FlightRecorder(max_bytes=4096).parsed(), [])
        self.assertEqual(len(self.logs.at(logging.WARNING)), 1)
        self.assertIn("over 4096", self.logs.messages(logging.WARNING)[0])

    def test_a_dump_that_does_not_return_is_given_up_and_never_asked_again(self):
        fake = FakeFlightRecorder(self)
        release = threading.Event()
        self.addCleanup(release.set)
        fake.module._dump_fr_trace_json = lambda *args, **kwargs: (fake.calls.append(args), release.wait())
        recorder = FlightRecorder(timeout_s=0.05)
        self.assertEqual(recorder.dumps(), [])
        self.assertIn("did not return", recorder.stuck)
        self.assertEqual(recorder.dumps(), [])
        wait_until(lambda: fake.calls, message="the stuck call")
        self.assertEqual(len(fake.calls), 1, "asked once")
        self.assertEqual(len(self.logs.at(logging.WARNING)), 1)

    def test_a_raising_dump_is_skipped_and_asked_again(self):
        fake = FakeFlightRecorder(self)

        def broken(*args, **kwargs):
            raise RuntimeError("recorder gone")

        fake.module._dump_fr_trace_json = broken
        recorder = FlightRecorder()
        self.assertEqual(recorder.parsed(), [])
        self.assertEqual(recorder.parsed(), [])
        self.assertIsNone(recorder.stuck)
        self.assertEqual(self.logs.at(logging.WARNING), [])


class EnableTest(unittest.TestCase):
    """``_flight.enable``: ``TORCH_FR_BUFFER_SIZE`` unless told otherwise."""

    def test_set_by_default_and_at_init(self):
        environ = {}
        self.assertTrue(_flight.enable(environ))
        self.assertEqual(environ, {"TORCH_FR_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES)})
        self.assertEqual(FLIGHT_RECORDER_ENTRIES, 2000)

    def test_init_sets_it_in_the_environment_it_reads(self):
        enter(self, capture_logs())
        runtime = Runtime()
        env = dict(TORCHRUN_ENV)
        self.addCleanup(runtime.shutdown)
        settings = Settings(report_interval_s=3600.0)
        self.assertTrue(runtime.init(agent="unix:/nonexistent/x.sock", environ=env, settings=settings))
        self.assertEqual(env["TORCH_FR_BUFFER_SIZE"], "2000")

    def test_switched_off_or_sized_by_the_script(self):
        for environ in (
            {"GPUMON_FLIGHT_RECORDER": "0"},
            {"GPUMON_FLIGHT_RECORDER": " off "},
            {"TORCH_FR_BUFFER_SIZE": "50"},
            {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
        ):
            with self.subTest(environ=environ):
                before = dict(environ)
                self.assertFalse(_flight.enable(environ))
                self.assertEqual(environ, before)


SHORT = Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0)


class ThresholdTest(unittest.TestCase):
    """When a ``stall`` record goes out: after a step, past max(15 s, 3 x the median step), every 10 s."""

    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))
        enter(self, mock.patch.object(_stall, "perf_counter", self.clock))
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": None}))
        self.rt, self.logs = quiet_runtime(self, settings=SHORT)

    def steps(self, count, seconds):
        for _ in range(count):
            self.clock.advance(seconds)
            self.rt.step()

    def check_at(self, quiet_s):
        """The record of a check ``quiet_s`` after the last step ended (the
        clock is put back: the next step's duration stays as the test says)."""
        before = self.clock.now
        self.clock.now = self.rt._ended[1] + quiet_s
        try:
            return self.rt._stall.check()
        finally:
            self.clock.now = before

    def test_nothing_before_the_first_step_however_long(self):
        self.clock.advance(3600.0)
        self.assertIsNone(self.rt._stall.check())
        self.assertEqual(self.rt.stats()["stalls_reported"], 0)

    def test_short_steps_stall_after_15_s_and_again_every_10_s(self):
        self.steps(5, 1.0)
        self.assertIsNone(self.check_at(14.9))
        first = self.check_at(15.0)
        self.assertEqual(set(first), set(STALL_KEYS))
        self.assertEqual(
            {k: first[k] for k in STALL_KEYS if k != "t"},
            {
                "type": "stall",
                "step": 5,
                "quiet_s": 15.0,
                "waiting": None,
                "entered": [],
                "marker": None,
                "source": "none",
            },
        )
        self.assertAlmostEqual(first["t"], time.time(), delta=60.0)
        self.assertTrue(self.rt.stats()["stalled"])
        self.assertIsNone(self.check_at(24.9))
        self.assertEqual(self.check_at(25.0)["quiet_s"], 25.0)
        self.assertIsNone(self.check_at(34.0))
        self.assertEqual(self.check_at(35.5)["quiet_s"], 35.5)
        stats = self.rt.stats()
        self.assertEqual((stats["stalls_reported"], stats["stalled"]), (3, True))
        self.assertEqual(len(self.logs.at(logging.WARNING)), 0, "the reporter logs, not the watch")

    def test_a_step_ends_the_stall_and_a_new_one_starts_afresh(self):
        self.steps(3, 1.0)
        self.assertIsNotNone(self.check_at(20.0))
        self.clock.advance(0.5)
        self.rt.step()
        self.assertIsNone(self.check_at(1.0))
        self.assertFalse(self.rt.stats()["stalled"])
        record = self.check_at(15.0)
        self.assertEqual((record["step"], record["quiet_s"]), (4, 15.0))

    def test_long_steps_stall_after_3_times_their_median(self):
        self.steps(3, 10.0)
        self.steps(1, 200.0)  # one slow step moves the median little
        self.assertIsNone(self.check_at(29.9))
        self.assertEqual(self.check_at(30.0)["step"], 4)

    def test_the_median_is_of_the_last_16_steps(self):
        self.steps(16, 60.0)
        self.assertIsNone(self.check_at(179.0))
        self.assertIsNotNone(self.check_at(180.0))
        self.steps(8, 1.0)
        self.assertIsNone(self.check_at(91.4), "8 steps of 60 s and 8 of 1 s: a median of 30.5 s")
        self.assertIsNotNone(self.check_at(91.5))
        self.steps(1, 1.0)
        self.assertIsNotNone(self.check_at(15.0), "now mostly 1 s steps")

    def test_thresholds_come_from_the_settings(self):
        settings = Settings(
            report_interval_s=3600.0, stall_min_s=0.5, stall_step_factor=2.0, stall_repeat_s=1.0
        )
        self.rt, _ = quiet_runtime(self, settings=settings)
        self.steps(2, 1.0)
        self.assertIsNone(self.check_at(1.9))
        self.assertIsNotNone(self.check_at(2.0))
        self.assertIsNone(self.check_at(2.9))
        self.assertIsNotNone(self.check_at(3.0))

    def test_the_marker_is_the_last_mark_since_the_step(self):
        self.steps(1, 1.0)
        self.rt.mark("eval", "epoch 3")
        self.rt.mark("eval\nshard\t2")
        self.rt._snapshot_saved("/tmp/allocator-1.pickle")  # the hook's own event: not a marker
        self.assertEqual(self.check_at(15.0)["marker"], "eval shard 2")
        self.steps(1, 1.0)
        self.assertIsNone(self.check_at(15.0)["marker"], "cleared at the step's end")
        self.rt.mark("é" * 100)
        self.assertEqual(self.check_at(25.0)["marker"], "é" * 64, "clipped to 128 bytes")


class StandInDistributed:
    """torch.distributed's modules as stand-ins: a default group (``None``),
    named groups, collectives that run ``while_blocked`` inside them, and
    ``Work.wait``."""

    def __init__(self, test):
        self.while_blocked = None
        package = types.ModuleType("torch.distributed")
        c10d = types.ModuleType("torch.distributed.distributed_c10d")
        native = types.ModuleType("torch._C._distributed_c10d")
        names = {}

        class Group:
            def __init__(self, name, desc):
                self.group_desc = desc
                names[id(self)] = name

        def _get_process_group_name(group):
            return names[id(group)]

        stand_in = self

        class Work:
            def wait(self, timeout=None):
                stand_in.block()
                return True

        def all_reduce(tensor, op=None, group=None, async_op=False):
            if async_op:
                return Work()
            stand_in.block()

        def send(tensor, dst=None, group=None, tag=0, group_dst=None):
            stand_in.block()

        for f in (all_reduce, send):
            setattr(package, f.__name__, f)
            setattr(c10d, f.__name__, f)
        c10d._get_process_group_name = _get_process_group_name
        native.Work = Work
        self.Group = Group
        self.package = package
        modules = {
            "torch.distributed": package,
            "torch.distributed.distributed_c10d": c10d,
            "torch._C._distributed_c10d": native,
        }
        enter(test, mock.patch.dict(sys.modules, modules))

    def block(self):
        if self.while_blocked is not None:
            self.while_blocked()


class WrappersSourceTest(unittest.TestCase):
    """Without flight recorder entries, the collective wrappers say what the rank waits in."""

    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))
        enter(self, mock.patch.object(_stall, "perf_counter", self.clock))
        self.dist = StandInDistributed(self)
        settings = Settings(report_interval_s=3600.0, stall_min_s=0.0, stall_repeat_s=0.0)
        self.rt, _ = quiet_runtime(self, settings=settings)
        wrapped = _collectives.install(self.rt._comm_enter, self.rt._comm_exit, self.rt._peers)
        self.assertEqual(wrapped, ["all_reduce", "send", "Work.wait"])
        self.rt.step()
        self.seen = []

    def record_while_blocked(self, waited_s):
        """Every blocking call from now on checks after ``waited_s`` (its
        steps took no time: it is stalled at once)."""

        def inside():
            self.clock.advance(waited_s)
            self.seen.append(self.rt._stall.check())

        self.dist.while_blocked = inside

    def test_a_blocked_all_reduce_its_group_and_the_calls_entered_per_group(self):
        tp = self.dist.Group("7", "tensor_parallel")
        self.dist.package.all_reduce("t")
        self.dist.package.all_reduce("t", group=tp)
        self.dist.package.all_reduce("t")
        self.record_while_blocked(20.0)
        self.dist.package.all_reduce("t", None, tp)
        (record,) = self.seen
        self.assertEqual(record["source"], "wrappers")
        self.assertEqual(
            record["waiting"],
            {
                "group": "7",
                "desc": "tensor_parallel",
                "seq": 2,
                "op": "all_reduce",
                "numel": None,
                "waited_s": 20.0,
                "timeout_s": None,
            },
        )
        self.assertEqual(record["entered"], [["7", 2], ["0", 2]])
        self.assertIsNone(self.rt._collective_log.current, "left once the call returned")

    def test_sends_count_apart_and_an_asynchronous_wait_names_the_last_call(self):
        stage = self.dist.Group("3", "pp")
        self.dist.package.all_reduce("t", group=stage)
        self.record_while_blocked(1.0)
        self.dist.package.send("h", 2, stage)
        work = self.dist.package.all_reduce("t", group=stage, async_op=True)
        work.wait()
        sent, waited = self.seen
        keys = ("op", "group", "seq", "waited_s")
        self.assertEqual([sent["waiting"][k] for k in keys], ["send", "3", 1, 1.0])
        self.assertEqual([waited["waiting"][k] for k in keys], ["wait", "3", 2, 1.0])
        self.assertEqual(waited["entered"], [["3", 2]])

    def test_a_flight_recorder_without_entries_leaves_it_to_the_wrappers(self):
        FakeFlightRecorder(self)
        self.record_while_blocked(3.0)
        self.dist.package.all_reduce("t")
        (record,) = self.seen
        self.assertEqual((record["source"], record["waiting"]["op"]), ("wrappers", "all_reduce"))

    def test_the_flight_recorder_wins_when_it_has_entries(self):
        FakeFlightRecorder(self, gloo=fr_dump([fr_entry(12, retired=False, created_ns=time.time_ns())]))
        self.record_while_blocked(3.0)
        self.dist.package.all_reduce("t")
        (record,) = self.seen
        self.assertEqual(record["source"], "flight_recorder")
        self.assertEqual((record["waiting"]["seq"], record["entered"]), (12, [["0", 12]]))
        self.assertAlmostEqual(record["waiting"]["waited_s"], 0.0, delta=30.0)

    def test_a_wait_before_any_call_and_odd_group_names(self):
        work = self.dist.package.all_reduce("t", async_op=True)
        self.rt._collective_log = _stall.CollectiveLog()  # as if the call were before the hook
        self.record_while_blocked(2.0)
        work.wait()
        odd = self.dist.Group("", "tp\tshard")
        self.dist.package.all_reduce("t", group=odd)
        waited, odd_call = self.seen
        self.assertEqual(
            [waited["waiting"][k] for k in ("op", "group", "desc", "seq")], ["wait", "0", "default_pg", 0]
        )
        self.assertEqual([odd_call["waiting"][k] for k in ("group", "desc", "seq")], ["?", "tp shard", 1])

    def test_other_threads_collectives_are_not_noted(self):
        other = threading.Thread(target=self.dist.package.all_reduce, args=("t",))
        other.start()
        other.join()
        self.clock.advance(15.0)
        record = self.rt._stall.check()
        self.assertEqual((record["source"], record["waiting"], record["entered"]), ("none", None, []))


class ReporterTest(unittest.TestCase):
    """The reporter thread sends the ``stall`` record by itself, while the training thread does nothing."""

    def test_a_stall_reaches_the_agent_and_is_logged_once(self):
        logs = enter(self, capture_logs())
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": None}))
        agent = FakeAgent()
        self.addCleanup(agent.close)
        runtime = Runtime()
        self.addCleanup(runtime.shutdown)
        settings = Settings(
            report_interval_s=0.02,
            shutdown_timeout_s=2.0,
            stall_min_s=0.05,
            stall_step_factor=0.0,
            stall_repeat_s=0.05,
        )
        self.assertTrue(
            runtime.init(agent=agent.address, environ=dict(TORCHRUN_ENV), settings=settings)
        )
        runtime.step()
        runtime.mark("eval")

        def marked():
            return [r for r in agent.records("stall") if r["marker"] == "eval"]

        wait_until(lambda: len(marked()) >= 2, timeout=20.0, message="two stall records")
        first = marked()[0]
        self.assertEqual(set(first), set(STALL_KEYS))
        self.assertEqual([first[k] for k in ("step", "waiting", "entered", "source")], [1, None, [], "none"])
        self.assertGreaterEqual(first["quiet_s"], 0.05)
        self.assertEqual(runtime.stats()["step"], 1, "the training thread did nothing")
        self.assertGreaterEqual(runtime.stats()["stalls_reported"], 2)
        warnings = [m for m in logs.messages(logging.WARNING) if "no step has ended" in m]
        self.assertEqual(len(warnings), 1)
        self.assertIn("(the last was step 1); waiting in nothing seen", warnings[0])

    def test_a_failing_check_keeps_the_connection(self):
        logs = enter(self, capture_logs())
        agent = FakeAgent()
        self.addCleanup(agent.close)
        runtime = Runtime()
        self.addCleanup(runtime.shutdown)
        settings = Settings(report_interval_s=0.02, shutdown_timeout_s=2.0)
        self.assertTrue(runtime.init(agent=agent.address, environ=dict(TORCHRUN_ENV), settings=settings))

        def broken():
            raise RuntimeError("bug in the watch")

        runtime._stall.check = broken
        runtime.mark("after")
        wait_until(lambda: agent.records("event") and len(agent.ops("poll")) >= 3, message="cycles")
        self.assertEqual(len(agent.ops("register")), 1, "no reconnection")
        self.assertEqual(len([m for m in logs.messages(logging.WARNING) if "stall check failed" in m]), 1)


if __name__ == "__main__":
    unittest.main()
