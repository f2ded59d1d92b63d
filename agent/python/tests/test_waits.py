"""A step's collective waits per process group (``_waits``): the record's ``waits``."""

import sys
import threading
import types
import unittest
from unittest import mock

from gpumon import _collectives, _runtime, _stall, _waits
from gpumon._settings import MAX_TRACKED_GROUPS, Settings
from gpumon._waits import GroupWaits
from gpumon.testing import FakeTorch

from tests.support import FakeClock, enter, queued, quiet_runtime


class Blocking:
    """torch.distributed's modules as stand-ins whose calls block for
    :attr:`cost_s` on the fake clock: named groups (``None`` is the default
    group), synchronous and asynchronous collectives, sends and receives."""

    def __init__(self, test, clock):
        self.clock = clock
        self.cost_s = 0.0
        #: How often torch was asked a group's name.
        self.lookups = 0
        package = types.ModuleType("torch.distributed")
        c10d = types.ModuleType("torch.distributed.distributed_c10d")
        native = types.ModuleType("torch._C._distributed_c10d")
        names = {}
        stand_in = self

        class Group:
            def __init__(self, name):
                names[id(self)] = name

        def _get_process_group_name(group):
            stand_in.lookups += 1
            return names[id(group)]

        class Work:
            def wait(self, timeout=None):
                stand_in.block()
                return True

        def collective(tensor, op=None, group=None, async_op=False):
            if async_op:
                return Work()
            stand_in.block()

        def all_gather(tensors, tensor, group=None, async_op=False):
            return collective(tensor, group=group, async_op=async_op)

        def p2p(tensor, peer=None, group=None, tag=0):
            stand_in.block()

        def isend(tensor, dst=None, group=None, tag=0):
            return Work()

        def barrier(group=None, async_op=False, device_ids=None):
            package.all_reduce("flag", group=group)  # as gloo's does: counted once

        functions = {
            "all_reduce": collective,
            "all_gather": all_gather,
            "send": p2p,
            "recv": p2p,
            "isend": isend,
            "barrier": barrier,
        }
        for name, f in functions.items():
            setattr(package, name, f)
            setattr(c10d, name, f)
        c10d._get_process_group_name = _get_process_group_name
        native.Work = Work
        self.Group = Group
        self.dist = package
        modules = {
            "torch.distributed": package,
            "torch.distributed.distributed_c10d": c10d,
            "torch._C._distributed_c10d": native,
        }
        enter(test, mock.patch.dict(sys.modules, modules))

    def block(self):
        self.clock.advance(self.cost_s)

    def call(self, seconds, name, *args, **kwargs):
        """``dist.name(*args, **kwargs)``, blocking ``seconds``."""
        self.cost_s = seconds
        try:
            return getattr(self.dist, name)(*args, **kwargs)
        finally:
            self.cost_s = 0.0

    def wait(self, seconds, work):
        """``work.wait()``, blocking ``seconds``."""
        self.cost_s = seconds
        try:
            return work.wait()
        finally:
            self.cost_s = 0.0


def waits(runtime):
    """``waits`` of each queued step record (``None``: the key is absent)."""
    return [record.get("waits") for record in queued(runtime, "step")]


class StepWaitsTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))
        self.torch = Blocking(self, self.clock)

    def runtime(self):
        settings = Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0)
        rt, _ = quiet_runtime(self, settings=settings)
        self.assertIn("Work.wait", _collectives.install(rt._comm_enter, rt._comm_exit, rt._peers))
        rt.step()
        return rt

    def test_collectives_in_two_groups_and_point_to_point_calls(self):
        rt = self.runtime()
        tp = self.torch.Group("1")
        self.torch.call(0.010, "all_reduce", "t", group=tp)
        self.torch.call(0.020, "all_reduce", "t")
        self.torch.call(0.005, "all_reduce", "t", None, tp)
        self.torch.call(0.003, "send", "h", 2, tp)
        self.torch.call(0.004, "recv", "g", 0)
        self.torch.call(0.001, "barrier")
        rt.step()
        (_, record) = queued(rt, "step")
        self.assertEqual(record["waits"], [["0", 2, 21.0], ["1", 2, 15.0], ["p2p", 2, 7.0]])
        self.assertAlmostEqual(record["sections"]["comm_wait"], 43.0, places=3)

    def test_a_step_without_collectives_sends_no_waits(self):
        rt = self.runtime()
        self.torch.call(0.002, "all_reduce", "t")
        rt.step()
        self.clock.advance(0.050)
        rt.step()
        self.assertEqual(waits(rt), [None, [["0", 1, 2.0]], None], "counted in its own step only")
        self.assertNotIn("waits", queued(rt, "step")[2])

    def test_a_wait_counts_in_the_group_of_the_call_it_waits_for(self):
        rt = self.runtime()
        stage = self.torch.Group("3")
        work = self.torch.call(0.0, "all_gather", ["out"], "t", group=stage, async_op=True)
        self.clock.advance(0.100)  # the rank's own work meanwhile
        self.torch.wait(0.008, work)
        sent = self.torch.call(0.0, "isend", "h", 1, stage)
        self.torch.wait(0.002, sent)
        rt.step()
        self.assertEqual(waits(rt)[-1], [["3", 2, 8.0], ["p2p", 2, 2.0]])

    def test_a_wait_before_any_call_counts_in_the_default_group(self):
        rt = self.runtime()
        work = self.torch.call(0.0, "all_reduce", "t", group=self.torch.Group("5"), async_op=True)
        rt._collective_log = _stall.CollectiveLog()  # as if the call were before the hook
        self.torch.wait(0.004, work)
        rt.step()
        self.assertEqual(waits(rt)[-1], [["0", 1, 4.0], ["5", 1, 0.0]], "as the stall record names it")

    def test_at_most_eight_groups_those_waited_in_longest(self):
        rt = self.runtime()
        for i in range(10):
            self.torch.call(0.001 * (i + 1), "all_reduce", "t", group=self.torch.Group(str(10 + i)))
        rt.step()
        self.assertEqual(waits(rt)[-1], [[str(10 + i), 1, float(i + 1)] for i in range(2, 10)])

    def test_each_group_is_named_once(self):
        rt = self.runtime()
        groups = [self.torch.Group(str(i)) for i in range(1, MAX_TRACKED_GROUPS + 3)]
        for _ in range(3):
            for group in groups[:2]:
                self.torch.call(0.001, "all_reduce", "t", group=group)
            rt.step()
        self.assertEqual(self.torch.lookups, 2)
        for group in groups:
            self.torch.call(0.001, "all_reduce", "t", group=group)
        self.torch.call(0.001, "all_reduce", "t", group=groups[-1])
        rt.step()
        self.assertEqual(self.torch.lookups, len(groups) + 1, "past 64 groups, named at each call")
        self.assertEqual(len(waits(rt)[-1]), 8)

    def test_under_ddp_too_but_not_from_other_threads(self):
        rt = self.runtime()
        rt._ddp = True
        other = threading.Thread(target=self.torch.dist.all_reduce, args=("t",))
        other.start()
        other.join()
        self.torch.call(0.006, "all_reduce", "t")
        rt.step()
        (_, record) = queued(rt, "step")
        self.assertEqual(record["waits"], [["0", 1, 6.0]])
        self.assertNotIn("comm_wait", record["sections"])

    def test_a_broken_group_lookup_leaves_the_call_uncounted_and_the_training_running(self):
        rt = self.runtime()
        with mock.patch.object(GroupWaits, "name", side_effect=RuntimeError("bug")):
            self.torch.call(0.003, "all_reduce", "t")
        rt.step()
        (_, record) = queued(rt, "step")
        self.assertNotIn("waits", record)
        self.assertAlmostEqual(record["sections"]["comm_wait"], 3.0, places=3)

    def test_not_on_the_cuda_clock(self):
        fake = FakeTorch()
        rt = self.runtime()
        enter(self, mock.patch.dict(sys.modules, {"torch": fake}))
        self.torch.call(0.002, "all_reduce", "t")
        rt.step()  # still on the CPU clock; the CUDA clock starts at its end
        self.torch.call(0.002, "all_reduce", "t")
        rt.step()
        fake.gpu.finish()
        rt.step()
        records = queued(rt, "step")
        self.assertEqual([r["clock"] for r in records], ["cpu", "cpu", "cuda", "cuda"])
        self.assertEqual([r.get("waits") for r in records], [None, [["0", 1, 2.0]], None, None])


def listed(runtime):
    """``collectives`` of each queued step record (``None``: absent)."""
    return [record.get("collectives") for record in queued(runtime, "step")]


class StepCollectivesTest(unittest.TestCase):
    setUp = StepWaitsTest.setUp
    runtime = StepWaitsTest.runtime

    def test_each_collective_with_its_number_entry_and_exit_after_the_step_began(self):
        rt = self.runtime()
        tp = self.torch.Group("1")
        self.clock.advance(0.004)  # the rank's own work first
        self.torch.call(0.010, "all_reduce", "t", group=tp)
        self.clock.advance(0.002)
        self.torch.call(0.020, "all_reduce", "t")
        self.torch.call(0.003, "send", "h", 2, tp)  # point-to-point: not listed
        self.torch.call(0.005, "all_reduce", "t", None, tp)
        rt.step()
        (_, record) = queued(rt, "step")
        self.assertEqual(
            record["collectives"],
            [
                ["1", 1, "all_reduce", 4.0, 14.0, 10.0],
                ["0", 1, "all_reduce", 16.0, 36.0, 20.0],
                ["1", 2, "all_reduce", 39.0, 44.0, 5.0],
            ],
        )
        self.torch.call(0.001, "all_reduce", "t", group=tp)
        rt.step()
        self.assertEqual(listed(rt)[-1], [["1", 3, "all_reduce", 0.0, 1.0, 1.0]], "numbers go on; times restart")

    def test_an_asynchronous_call_is_entered_at_its_call_and_left_at_its_wait(self):
        rt = self.runtime()
        stage = self.torch.Group("3")
        work = self.torch.call(0.0, "all_gather", ["out"], "t", group=stage, async_op=True)
        self.clock.advance(0.100)
        self.torch.wait(0.008, work)
        rt.step()
        self.assertEqual(listed(rt)[-1], [["3", 1, "all_gather", 0.0, 108.0, 8.0]])

    def test_a_step_lists_its_first_32(self):
        rt = self.runtime()
        for _ in range(40):
            self.torch.call(0.001, "all_reduce", "t")
        rt.step()
        self.assertEqual([c[1] for c in listed(rt)[-1]], list(range(1, 33)))
        self.assertEqual(rt._step_collectives.dropped, 8)

    def test_none_without_collectives_nor_on_the_cuda_clock(self):
        fake = FakeTorch()
        rt = self.runtime()
        enter(self, mock.patch.dict(sys.modules, {"torch": fake}))
        rt.step()
        self.torch.call(0.002, "all_reduce", "t")
        rt.step()
        fake.gpu.finish()
        rt.step()
        self.assertEqual(listed(rt), [None, None, None, None])


class GroupWaitsTest(unittest.TestCase):
    def test_a_step_counts_at_most_64_groups(self):
        waits = GroupWaits()
        for i in range(MAX_TRACKED_GROUPS + 5):
            waits.add(str(i), 1.0)
        waits.add("0", 2.0)
        step = waits.take()
        self.assertEqual((len(step), step["0"]), (MAX_TRACKED_GROUPS, [2, 3.0]))
        self.assertEqual(waits.take(), {})

    def test_a_reused_id_is_named_afresh(self):
        waits = GroupWaits()
        with mock.patch.object(_waits, "group_names", side_effect=[("1", None), ("2", None)]):
            first = object()
            self.assertEqual(waits.name(first, False), "1")
            waits._names[id(first)] = (object(), "1")  # another group once had this id
            self.assertEqual(waits.name(first, False), "2")
            self.assertEqual(waits.name(first, True), "p2p")


if __name__ == "__main__":
    unittest.main()
