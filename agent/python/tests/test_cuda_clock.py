"""The CUDA clock on a fake GPU: times from events, read only once the GPU got there."""

import logging
import sys
import unittest
from unittest import mock

from gpumon import _runtime
from gpumon._settings import EVENT_POOL_MAX, MAX_EVENT_PAIRS_PER_STEP, MAX_PENDING_STEPS, Settings
from gpumon.testing import FakeAllocator, FakeEvent, FakeTorch

from tests.support import FakeClock, FakeModule, capture_logs, enter, queued, quiet_runtime

QUIET = dict(report_interval_s=3600.0, shutdown_timeout_s=2.0)


class Launcher:
    """A clock for :class:`FakeModule` that queues GPU work instead of taking CPU time."""

    def __init__(self, gpu):
        self.gpu = gpu

    def advance(self, seconds):
        self.gpu.launch(seconds * 1000.0)


class CudaClockTest(unittest.TestCase):
    """CPU time moves by microseconds (launches), GPU time by milliseconds (kernels)."""

    def setUp(self):
        self.clock = FakeClock()
        enter(self, mock.patch.object(_runtime, "perf_counter", self.clock))
        self.torch = FakeTorch()
        self.gpu = self.torch.gpu
        self.addCleanup(lambda: self.assertEqual(self.gpu.violations, []))

    def runtime(self, clock="auto"):
        settings = Settings(section_clock=clock, **QUIET)
        rt, logs = quiet_runtime(self, source=FakeAllocator(), settings=settings)
        # Only after init, which would take the fake for a torch whose optimizer it can hook.
        enter(self, mock.patch.dict(sys.modules, {"torch": self.torch}))
        return rt, logs

    def work(self, rt, name, gpu_ms, cpu_s=0.001):
        with rt.section(name):
            self.clock.advance(cpu_s)
            self.gpu.launch(gpu_ms)

    def test_times_come_from_the_gpu_and_records_wait_for_it(self):
        rt, _ = self.runtime()
        for _ in range(2):
            self.work(rt, "data", 5.0)
            self.work(rt, "forward", 30.0)
            rt.step()
        self.assertEqual(queued(rt, "step"), [], "the GPU has not run yet: nothing is sent")
        self.assertEqual(rt.stats()["pending_steps"], 2)
        self.gpu.advance(35.0)  # step 1's work is done, step 2's is not
        self.work(rt, "data", 5.0)
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], [1])
        self.assertEqual(steps[0]["clock"], "cuda")
        self.assertAlmostEqual(steps[0]["duration_ms"], 35.0)
        self.assertEqual(steps[0]["sections"], {"data": 5.0, "forward": 30.0})
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4], "in step order")
        self.assertEqual({s["clock"] for s in steps}, {"cuda"})
        self.assertEqual(steps[1]["sections"], {"data": 5.0, "forward": 30.0})
        self.assertAlmostEqual(steps[1]["duration_ms"], 35.0)
        self.assertEqual(steps[2]["sections"], {"data": 5.0})
        self.assertEqual((steps[3]["duration_ms"], steps[3]["sections"]), (0.0, {}))
        self.assertEqual(rt.stats()["clock"], "cuda")

    def test_repeated_and_nested_sections_add_up(self):
        rt, _ = self.runtime()
        launcher = Launcher(self.gpu)
        model = FakeModule(launcher, 0.008)
        model.inner = FakeModule(launcher, 0.004)
        rt.watch(model)
        rt.watch(model.inner)
        with rt.section("outer"):
            self.work(rt, "data", 2.0)
            self.gpu.launch(1.0)
            self.work(rt, "data", 3.0)
        self.gpu.launch(10.0)  # the forward's kernels queue behind these
        model(1)
        self.gpu.launch(4.0)
        rt.step()
        self.gpu.finish()
        rt.step()
        step = queued(rt, "step")[0]
        self.assertEqual(step["clock"], "cuda")
        self.assertEqual(step["sections"], {"data": 5.0, "outer": 6.0, "forward": 12.0})
        self.assertAlmostEqual(step["duration_ms"], 32.0)

    def test_a_section_belongs_to_the_step_it_ends_in(self):
        rt, _ = self.runtime()
        self.work(rt, "data", 1.0)
        section = rt.section("eval")
        section.__enter__()
        self.gpu.launch(2.0)
        rt.step()
        self.gpu.launch(3.0)
        section.__exit__(None, None, None)
        rt.step()
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["sections"] for s in steps[:2]], [{"data": 1.0}, {"eval": 5.0}])
        self.assertEqual([s["duration_ms"] for s in steps[:2]], [3.0, 3.0])

    def test_without_a_section_first_the_first_step_is_on_the_cpu_clock(self):
        rt, _ = self.runtime()
        self.clock.advance(0.25)
        rt.step()  # began at init, before the hook could record an event
        self.gpu.launch(7.0)
        rt.step()
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([(s["step"], s["clock"]) for s in steps], [(1, "cpu"), (2, "cuda"), (3, "cuda")])
        self.assertAlmostEqual(steps[0]["duration_ms"], 250.0)
        self.assertAlmostEqual(steps[1]["duration_ms"], 7.0)

    def test_past_the_pending_bound_the_oldest_goes_on_the_cpu_clock(self):
        rt, _ = self.runtime()
        for _ in range(MAX_PENDING_STEPS + 3):
            self.work(rt, "data", 100.0, cpu_s=0.002)
            self.clock.advance(0.001)
            rt.step()
            self.assertLessEqual(rt.stats()["pending_steps"], MAX_PENDING_STEPS)
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], [1, 2, 3])
        for s in steps:
            self.assertEqual(s["clock"], "cpu")
            self.assertAlmostEqual(s["duration_ms"], 3.0)
            self.assertAlmostEqual(s["sections"]["data"], 2.0)
        self.assertEqual((rt.stats()["steps_cpu"], rt.stats()["steps_cuda"]), (3, 0))
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], list(range(1, MAX_PENDING_STEPS + 5)))
        self.assertEqual({s["clock"] for s in steps[3:]}, {"cuda"})
        self.assertEqual((rt.stats()["steps_cpu"], rt.stats()["steps_cuda"]), (3, MAX_PENDING_STEPS + 1))
        self.assertEqual(steps[4]["sections"], {"data": 100.0})

    def test_events_are_reused(self):
        rt, _ = self.runtime()
        for _ in range(200):
            self.work(rt, "data", 1.0)
            self.work(rt, "forward", 1.0)
            rt.step()
            self.gpu.advance(2.0)  # the GPU lags a step behind
        steps = queued(rt, "step")
        self.assertEqual([s["step"] for s in steps], list(range(1, 200)))
        self.assertEqual({s["clock"] for s in steps}, {"cuda"})
        self.assertEqual(self.gpu.records, 200 * 5 + 1)
        self.assertLess(self.gpu.events_created, 30)

    def test_too_many_section_entries_put_the_step_on_the_cpu_clock(self):
        rt, _ = self.runtime()
        for _ in range(MAX_EVENT_PAIRS_PER_STEP + 1):
            self.work(rt, "micro", 1.0)
        rt.step()
        self.work(rt, "micro", 1.0)
        rt.step()
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["clock"] for s in steps], ["cpu", "cuda", "cuda"])
        self.assertAlmostEqual(steps[0]["sections"]["micro"], MAX_EVENT_PAIRS_PER_STEP + 1.0)
        self.assertEqual(steps[1]["sections"], {"micro": 1.0})
        self.assertLessEqual(self.gpu.events_created, EVENT_POOL_MAX + 3)

    def test_forced_cpu(self):
        rt, _ = self.runtime(clock="cpu")
        self.work(rt, "data", 5.0)
        rt.step()
        step = queued(rt, "step")[0]
        self.assertEqual(step["clock"], "cpu")
        self.assertAlmostEqual(step["sections"]["data"], 1.0)
        self.assertEqual(self.gpu.events_created, 0)

    def test_cuda_not_initialised_yet_is_timed_on_the_cpu_until_it_is(self):
        self.torch.cuda.initialized = False
        rt, logs = self.runtime(clock="cuda")
        self.work(rt, "data", 5.0)
        rt.step()
        self.work(rt, "data", 5.0)
        self.torch.cuda.initialized = True  # the script's first CUDA call, inside step 2
        rt.step()
        self.work(rt, "data", 5.0)
        rt.step()
        self.gpu.finish()
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([s["clock"] for s in steps], ["cpu", "cpu", "cuda", "cuda"])
        self.assertEqual(steps[2]["sections"], {"data": 5.0})
        warnings = logs.messages(logging.WARNING)
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("GPUMON_SECTION_CLOCK=cuda", warnings[0])

    def test_no_torch_or_no_cuda_is_the_cpu_clock(self):
        for torch in (None, FakeTorch(available=False)):
            with self.subTest(torch=torch):
                rt, logs = quiet_runtime(self, source=FakeAllocator(), settings=Settings(**QUIET))
                with mock.patch.dict(sys.modules, {"torch": torch}):
                    self.work(rt, "data", 5.0)
                    rt.step()
                self.assertEqual(queued(rt, "step")[0]["clock"], "cpu")
                self.assertAlmostEqual(queued(rt, "step")[0]["sections"]["data"], 1.0)
                self.assertEqual(logs.messages(logging.WARNING), [])

    def test_a_graph_capture_is_not_disturbed(self):
        rt, _ = self.runtime()
        self.work(rt, "data", 1.0)
        rt.step()
        self.gpu.capturing = True
        self.work(rt, "forward", 1.0)
        self.gpu.capturing = False
        rt.step()
        self.gpu.finish()
        rt.step()
        self.assertEqual([s["clock"] for s in queued(rt, "step")], ["cuda", "cpu", "cuda"])

    def test_shutdown_sends_what_is_pending_without_waiting(self):
        rt, _ = self.runtime()
        for _ in range(3):
            self.work(rt, "data", 10.0)
            rt.step()
        self.gpu.advance(15.0)  # step 1 done, step 2 half done
        reporter = rt._reporter
        rt.shutdown()
        steps = [r for r in reporter._outbox if r["type"] == "step"]
        self.assertEqual([(s["step"], s["clock"]) for s in steps], [(1, "cuda"), (2, "cpu"), (3, "cpu")])
        self.assertEqual(steps[0]["sections"], {"data": 10.0})

    def test_an_event_error_falls_back_to_the_cpu_clock(self):
        rt, logs = self.runtime()
        self.work(rt, "data", 1.0)
        rt.step()
        self.work(rt, "data", 1.0)
        with mock.patch.object(FakeEvent, "record", side_effect=RuntimeError("CUDA error: unspecified")):
            rt.step()  # never raises into the loop
        self.work(rt, "data", 1.0)
        rt.step()
        steps = queued(rt, "step")
        self.assertEqual([(s["step"], s["clock"]) for s in steps], [(1, "cpu"), (2, "cpu"), (3, "cpu")])
        self.assertEqual(rt.stats()["clock"], "cpu")
        self.assertTrue(any("CUDA error: unspecified" in m for m in logs.messages(logging.WARNING)))


class SectionClockSettingTest(unittest.TestCase):
    def test_from_env(self):
        self.assertEqual(Settings.from_env({}).section_clock, "auto")
        self.assertEqual(Settings.from_env({"GPUMON_SECTION_CLOCK": " CUDA "}).section_clock, "cuda")
        self.assertEqual(Settings.from_env({"GPUMON_SECTION_CLOCK": "cpu"}).section_clock, "cpu")
        with capture_logs() as logs:
            self.assertEqual(Settings.from_env({"GPUMON_SECTION_CLOCK": "gpu"}).section_clock, "auto")
        self.assertEqual(len(logs.at(logging.WARNING)), 1)
        self.assertIn("'gpu'", logs.messages()[0])


if __name__ == "__main__":
    unittest.main()
