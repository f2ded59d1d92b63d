"""Step boundaries, sections, watch(), mark() and snapshot() in the training thread."""

import sys
import threading
import types
import unittest
from unittest import mock

from gpumon import _collectives, _peers, _runtime
from gpumon._runtime import Runtime
from gpumon._settings import QUEUE_MAXLEN
from gpumon.testing import FakeAllocator, GiB, MiB

from tests.support import FakeClock, FakeModule, enter, queued, quiet_runtime


class StepTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))

    def test_steps_count_from_one_and_sum_sections_by_name(self):
        rt, _ = quiet_runtime(self)
        self.clock.advance(5.0)  # setup time before the first section: not part of step 1
        with rt.section("data"):
            self.clock.advance(0.010)
        with rt.section("forward"):
            self.clock.advance(0.030)
        with rt.section("data"):
            self.clock.advance(0.002)
        self.clock.advance(0.008)
        rt.step()
        self.clock.advance(0.100)
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], [1, 2])
        self.assertAlmostEqual(steps[0]["duration_ms"], 50.0, places=3)
        self.assertEqual(set(steps[0]["sections"]), {"data", "forward"})
        self.assertAlmostEqual(steps[0]["sections"]["data"], 12.0, places=3)
        self.assertAlmostEqual(steps[0]["sections"]["forward"], 30.0, places=3)
        self.assertAlmostEqual(steps[1]["duration_ms"], 100.0, places=3)
        self.assertEqual(steps[1]["sections"], {})

    def test_without_sections_the_first_step_starts_at_init(self):
        rt, _ = quiet_runtime(self)
        self.clock.advance(0.25)
        rt.step()
        self.assertAlmostEqual(queued(rt, "step")[0]["duration_ms"], 250.0, places=3)

    def test_a_section_belongs_to_the_step_it_ends_in(self):
        rt, _ = quiet_runtime(self)
        section = rt.section("eval")
        section.__enter__()
        rt.step()
        self.clock.advance(0.004)
        section.__exit__(None, None, None)
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual(steps[0]["sections"], {})
        self.assertAlmostEqual(steps[1]["sections"]["eval"], 4.0, places=3)

    def test_section_timing_survives_exceptions(self):
        rt, _ = quiet_runtime(self)
        with self.assertRaises(KeyError):
            with rt.section("data"):
                self.clock.advance(0.001)
                raise KeyError("x")
        rt.step()
        self.assertAlmostEqual(queued(rt, "step")[0]["sections"]["data"], 1.0, places=3)

    def test_inactive_hook_does_nothing(self):
        rt = Runtime()
        with rt.section("data"):
            pass
        rt.step()
        rt.mark("m")
        self.assertIsNone(rt.snapshot("s"))
        self.assertEqual(len(rt._records), 0)
        with self.assertRaises(TypeError):
            rt.section(3)
        with self.assertRaises(TypeError):
            rt.mark(None)

    def test_watch_times_the_forward_section(self):
        rt, _ = quiet_runtime(self)
        model = FakeModule(self.clock, 0.020)
        handle = rt.watch(model)
        model(1)
        model(2)
        rt.step()
        handle.remove()
        self.assertEqual((model.pre, model.post), ([], []))
        model(3)
        rt.step()
        steps = queued(rt, "step")
        self.assertAlmostEqual(steps[0]["sections"]["forward"], 40.0, places=3)
        self.assertAlmostEqual(steps[0]["duration_ms"], 40.0, places=3)  # step 1 starts at the first forward
        self.assertEqual(steps[1]["sections"], {})

    def test_watch_counts_nested_forwards_once(self):
        rt, _ = quiet_runtime(self)
        outer = FakeModule(self.clock, 0.010)
        outer.inner = FakeModule(self.clock, 0.005)
        rt.watch(outer)
        rt.watch(outer.inner)
        outer(1)
        rt.step()
        self.assertAlmostEqual(queued(rt, "step")[0]["sections"]["forward"], 15.0, places=3)

    def test_watch_needs_a_module(self):
        rt, _ = quiet_runtime(self)
        with self.assertRaises(TypeError):
            rt.watch(object())

    def test_optimizer_boundaries(self):
        rt, _ = quiet_runtime(self)

        class Optimizer:
            pass

        first, second = Optimizer(), Optimizer()
        rt._optimizer_step(first)
        rt._optimizer_step(second)  # not the primary optimizer: no boundary
        rt._optimizer_step(first)
        self.assertEqual([s["step"] for s in queued(rt, "step")], [1, 2])
        del first
        rt._optimizer_step(second)  # the primary is gone: the next one takes over
        self.assertEqual(len(queued(rt, "step")), 3)
        rt.step()  # by hand from now on: the optimizer hook stops counting
        rt._optimizer_step(second)
        self.assertEqual([s["step"] for s in queued(rt, "step")], [1, 2, 3, 4])

    def test_full_queue_drops_the_oldest_and_counts(self):
        rt, _ = quiet_runtime(self)
        for _ in range(QUEUE_MAXLEN + 10):
            rt.step()
        steps = queued(rt, "step")
        self.assertEqual(len(steps), QUEUE_MAXLEN)
        self.assertEqual(steps[0]["step"], 11)
        self.assertEqual(rt.stats()["dropped"], 10)


class MarkerTest(unittest.TestCase):
    def test_mark(self):
        rt, _ = quiet_runtime(self)
        rt.mark("eval start")
        rt.mark("ckpt", {"epoch": 3})
        events = queued(rt, "event")
        self.assertEqual(
            [(e["name"], e["detail"]) for e in events], [("eval start", None), ("ckpt", "{'epoch': 3}")]
        )
        self.assertIsInstance(events[0]["t"], float)

    def test_snapshot_reads_the_source_now(self):
        fake = FakeAllocator(total_bytes=8 * GiB)
        rt, _ = quiet_runtime(self, source=fake)
        handle = fake.alloc(64 * MiB)
        stats = rt.snapshot("before")
        fake.free(handle)
        rt.snapshot("after")
        snaps = queued(rt, "snapshot")
        self.assertEqual([s["name"] for s in snaps], ["before", "after"])
        self.assertEqual(snaps[0]["stats"]["allocated"], 64 * MiB)
        self.assertEqual(snaps[0]["stats"], stats)
        self.assertEqual(snaps[1]["stats"]["allocated"], 0)
        self.assertEqual(snaps[1]["stats"]["reserved"], 64 * MiB)
        self.assertEqual(snaps[1]["stats"]["device_total"], 8 * GiB)

    def test_snapshot_without_a_source(self):
        rt, _ = quiet_runtime(self)
        rt._set_source(None)
        self.assertIsNone(rt.snapshot("s"))
        self.assertIsNone(queued(rt, "snapshot")[0]["stats"])

    def test_snapshot_survives_a_broken_source(self):
        class Broken:
            def memory_stats(self):
                raise RuntimeError("driver gone")

            def empty_cache(self):
                pass

        rt, logs = quiet_runtime(self, source=Broken())
        self.assertIsNone(rt.snapshot("s"))
        self.assertIn("driver gone", logs.messages()[-1])


class AutomaticSectionTest(unittest.TestCase):
    """The runtime's side of the automatic anatomy (``_anatomy`` calls these)."""

    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))

    def timed(self, rt, name, seconds):
        on = rt._auto_enter(name)
        self.clock.advance(seconds)
        rt._auto_exit(name)
        return on

    def test_automatic_sections_sum_by_name_and_do_not_nest(self):
        rt, _ = quiet_runtime(self)
        self.assertTrue(self.timed(rt, "forward", 0.010))
        self.assertTrue(rt._auto_enter("backward"))
        self.assertFalse(rt._auto_enter("forward"))  # a recomputed forward inside backward
        self.clock.advance(0.020)
        rt._auto_exit("forward")  # not the open one: ignored
        rt._auto_exit("backward")
        self.assertTrue(self.timed(rt, "forward", 0.005))
        rt.step()
        sections = queued(rt, "step")[0]["sections"]
        self.assertAlmostEqual(sections["forward"], 15.0, places=3)
        self.assertAlmostEqual(sections["backward"], 20.0, places=3)

    def test_the_scripts_own_sections_win(self):
        rt, _ = quiet_runtime(self)
        with rt.section("step body"):
            self.assertFalse(self.timed(rt, "data", 0.003))  # inside an explicit section
        with rt.section("data"):
            self.clock.advance(0.004)
        self.assertFalse(self.timed(rt, "data", 0.003))  # a name the script times itself
        rt.watch(FakeModule(self.clock, 0.0))
        self.assertFalse(self.timed(rt, "forward", 0.003))
        self.assertTrue(self.timed(rt, "optimizer", 0.002))
        rt.step()
        sections = queued(rt, "step")[0]["sections"]
        self.assertAlmostEqual(sections["data"], 4.0, places=3)
        self.assertAlmostEqual(sections["optimizer"], 2.0, places=3)
        self.assertNotIn("forward", sections)

    def test_only_the_thread_that_ends_steps_is_timed_once_it_has(self):
        import threading

        rt, _ = quiet_runtime(self)
        rt.step()
        answers = []
        other = threading.Thread(target=lambda: answers.append(rt._auto_enter("data")))
        other.start()
        other.join()
        self.assertEqual(answers, [False])
        self.assertTrue(self.timed(rt, "data", 0.001))


class CollectiveWaitTest(unittest.TestCase):
    """Time blocked in collectives leaves the sections it fell in for ``comm_wait``."""

    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))

    def collective(self, rt, seconds, nested=False):
        on = rt._comm_enter()
        if nested:  # a synchronous collective waits on its own work
            rt._comm_enter()
        self.clock.advance(seconds)
        if nested:
            rt._comm_exit()
        if on:
            rt._comm_exit()
        return on

    def test_a_wait_inside_a_section_moves_to_comm_wait(self):
        rt, _ = quiet_runtime(self)
        rt._auto_enter("forward")
        self.clock.advance(0.010)
        self.assertTrue(self.collective(rt, 0.030, nested=True))
        rt._auto_exit("forward")
        with rt.section("loss"):
            self.clock.advance(0.002)
            self.collective(rt, 0.004)
        self.collective(rt, 0.001)  # outside every section: only comm_wait
        rt.step()
        sections = queued(rt, "step")[0]["sections"]
        self.assertAlmostEqual(sections["forward"], 10.0, places=3)
        self.assertAlmostEqual(sections["loss"], 2.0, places=3)
        self.assertAlmostEqual(sections["comm_wait"], 35.0, places=3)
        rt.step()
        self.assertNotIn("comm_wait", queued(rt, "step")[1]["sections"], "counted once")

    def test_under_ddp_the_wait_stays_where_it_fell(self):
        rt, _ = quiet_runtime(self)
        ddp_module = types.ModuleType("torch.nn.parallel.distributed")

        class DistributedDataParallel:
            pass

        ddp_module.DistributedDataParallel = DistributedDataParallel
        enter(self, mock.patch.dict(sys.modules, {"torch.nn.parallel.distributed": ddp_module}))
        rt._note_model(DistributedDataParallel())
        rt._auto_enter("backward")
        self.collective(rt, 0.020)
        rt._auto_exit("backward")
        rt.step()
        sections = queued(rt, "step")[0]["sections"]
        self.assertAlmostEqual(sections["backward"], 20.0, places=3)
        self.assertNotIn("comm_wait", sections)

    def test_other_threads_collectives_are_not_counted(self):
        rt, _ = quiet_runtime(self)
        rt.step()
        answers = []
        other = threading.Thread(target=lambda: answers.append(rt._comm_enter()))
        other.start()
        other.join()
        self.assertEqual(answers, [False])


class CollectiveWrappersTest(unittest.TestCase):
    """``_collectives.install`` on stand-ins of torch.distributed's modules."""

    def setUp(self):
        self.calls = []
        package = types.ModuleType("torch.distributed")
        c10d = types.ModuleType("torch.distributed.distributed_c10d")
        native = types.ModuleType("torch._C._distributed_c10d")

        class Work:
            def wait(work_self, timeout=None):
                self.calls.append("wait")
                return True

        def all_reduce(tensor, async_op=False):
            self.calls.append("all_reduce")
            return Work() if async_op else None

        c10d.all_reduce = package.all_reduce = all_reduce
        native.Work = Work
        self.work = Work
        self.package, self.c10d = package, c10d
        modules = {
            "torch.distributed": package,
            "torch.distributed.distributed_c10d": c10d,
            "torch._C._distributed_c10d": native,
        }
        enter(self, mock.patch.dict(sys.modules, modules))
        self.events = []

    def install(self):
        def enter_(where, args, kwargs):
            self.events.append("enter")
            return True

        return _collectives.install(enter_, lambda: self.events.append("leave"))

    def test_functions_and_waits_are_timed_once_each_and_only_once_installed(self):
        self.assertEqual(self.install(), ["all_reduce", "Work.wait"])
        self.assertIs(self.package.all_reduce, self.c10d.all_reduce, "one wrapper for both names")
        self.assertEqual(self.install(), [], "installing again wraps nothing")
        work = self.package.all_reduce("t", async_op=True)
        self.assertTrue(work.wait())
        self.assertEqual(self.calls, ["all_reduce", "wait"])
        self.assertEqual(self.events, ["enter", "leave", "enter", "leave"])

    def test_a_failing_collective_raises_as_before_and_is_still_left(self):
        def broken(*_args, **_kwargs):
            raise RuntimeError("connection reset by peer")

        self.package.barrier = broken
        self.install()
        with self.assertRaisesRegex(RuntimeError, "connection reset"):
            self.package.barrier()
        self.assertEqual(self.events, ["enter", "leave"])


class PeerGroupsTest(unittest.TestCase):
    """``_peers``: a rank's group from the calls of a pipeline stage's replica
    (rank 1 of two stages of two: stage 0 is ranks 0-1, stage 1 ranks 2-3)."""

    def setUp(self):
        package = types.ModuleType("torch.distributed")
        c10d = types.ModuleType("torch.distributed.distributed_c10d")
        groups = {}

        class Group:
            def __init__(self, ranks):
                self.ranks = ranks

        def new_group(ranks):
            groups[tuple(ranks)] = Group(ranks)
            return groups[tuple(ranks)]

        package.group = types.SimpleNamespace(WORLD=object())
        package.is_initialized = lambda: True
        package.get_rank = lambda: 1
        package.get_world_size = lambda: 4
        package.get_process_group_ranks = lambda g: g.ranks
        package.get_global_rank = lambda g, r: g.ranks[r]

        def all_reduce(tensor, op=None, group=None, async_op=False):
            return None

        def send(tensor, dst=None, group=None, tag=0, group_dst=None):
            return None

        def recv(tensor, src=None, group=None, tag=0, group_src=None):
            return None

        for f in (all_reduce, send, recv):
            setattr(package, f.__name__, f)
            setattr(c10d, f.__name__, f)
        self.dist, self.new_group = package, new_group
        modules = {"torch.distributed": package, "torch.distributed.distributed_c10d": c10d}
        enter(self, mock.patch.dict(sys.modules, modules))
        self.peers = _peers.PeerGroups()
        _collectives.install(lambda *_call: True, lambda: None, self.peers)

    def test_a_stage_replica_is_grouped_with_its_stage_not_with_the_world(self):
        stage0 = self.new_group([0, 1])
        self.dist.send("h", 3)
        self.dist.recv("g", src=3)
        self.dist.all_reduce("grad", group=stage0)
        self.dist.all_reduce("loss")  # the world, which holds its peer 3
        self.peers.boundary()
        self.assertEqual(self.peers.key, 0)

    def test_no_collective_means_no_group_and_ddp_like_jobs_are_the_world(self):
        self.peers.boundary()
        self.assertIsNone(self.peers.key, "nothing seen: the engine takes the whole job")
        self.dist.all_reduce("grad")
        self.peers.boundary()
        self.assertEqual(self.peers.key, 0)

    def test_a_rank_whose_every_group_holds_a_peer_is_alone(self):
        self.dist.send("h", dst=None, group=self.new_group([1, 3]), group_dst=1)
        self.dist.all_reduce("loss")
        self.peers.boundary()
        self.assertEqual(self.peers.key, 1)

    def test_observation_stops_after_the_first_steps(self):
        for _ in range(_peers.OBSERVE_STEPS):
            self.peers.boundary()
        self.assertFalse(self.peers.open)
        self.dist.all_reduce("grad")
        self.peers.boundary()
        self.assertIsNone(self.peers.key)


if __name__ == "__main__":
    unittest.main()
