"""With torch installed (skipped otherwise): the optimizer hook, watch(), the CPU clock
and, on a GPU, the memory source."""

import importlib.util
import sys
import unittest

from tests.support import run_hooked, torch_import_error

HAS_TORCH = importlib.util.find_spec("torch") is not None

SCRIPT = r"""
import json, sys
import torch, gpumon

cuda = torch.cuda.is_available()
device = torch.device("cuda", 0) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
first = torch.optim.SGD(model.parameters(), lr=0.01)
second = torch.optim.SGD(model.parameters(), lr=0.01)  # not the first: does not count
gpumon.watch(model)
if cuda:
    cached = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    del cached
for _ in range(5):
    with gpumon.section("data"):
        x = torch.randn(32, 64, device=device)
    loss = model(x).sum()
    with gpumon.section("backward"):
        loss.backward()
    first.step()
    second.step()
    first.zero_grad()
snap = gpumon.snapshot("end")
print(json.dumps({"steps": gpumon.stats()["step"], "cuda": cuda, "snapshot": snap}))
"""


@unittest.skipUnless(HAS_TORCH, "torch is not installed")
class RealTorchTest(unittest.TestCase):
    def test_injected_hook_counts_optimizer_steps(self):
        agent, out = run_hooked(self, SCRIPT)
        self.assertEqual(out["steps"], 5)
        steps = agent.records("step")
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4, 5])
        self.assertEqual(set(steps[-1]["sections"]), {"data", "forward", "backward"})
        clocks = {s["clock"] for s in steps}
        if out["cuda"]:
            self.assertGreaterEqual(out["snapshot"]["reserved"], 256 << 20)
            self.assertTrue(agent.records("alloc"))
            self.assertIn("cuda", clocks)  # the events of so small a model complete at once
        else:
            self.assertEqual(clocks, {"cpu"})
            self.assertIsNone(out["snapshot"])
            self.assertEqual(agent.records("alloc"), [])


CPU_SCRIPT = r"""
import json, time
import torch, gpumon

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
gpumon.watch(model)
for _ in range(5):
    with gpumon.section("data"):
        x = torch.randn(64, 256)
        time.sleep(0.005)
    loss = model(x).sum()
    with gpumon.section("backward"):
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
stats = gpumon.stats()
print(json.dumps({"steps": stats["step"], "clock": stats["clock"], "cuda": torch.cuda.is_initialized()}))
"""


class RealTorchCpuClockTest(unittest.TestCase):
    """A tiny model trained on the CPU: steps and sections on the CPU clock, as ever."""

    @classmethod
    def setUpClass(cls):
        error = torch_import_error()
        if error is not None:
            raise unittest.SkipTest("torch cannot be imported by %s (%s)" % (sys.executable, error))

    def test_steps_are_on_the_cpu_clock_with_plausible_sections(self):
        agent, out = run_hooked(self, CPU_SCRIPT, CUDA_VISIBLE_DEVICES="")
        self.assertEqual(out, {"steps": 5, "clock": "cpu", "cuda": False})
        steps = agent.records("step")
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4, 5])
        for step in steps:
            with self.subTest(step=step["step"]):
                self.assertEqual(step["clock"], "cpu")
                sections = step["sections"]
                self.assertEqual(set(sections), {"data", "forward", "backward"})
                self.assertGreaterEqual(sections["data"], 5.0)
                self.assertGreater(sections["forward"], 0.0)
                self.assertGreater(sections["backward"], 0.0)
                self.assertLessEqual(sum(sections.values()), step["duration_ms"] + 0.01)
                self.assertLess(step["duration_ms"], 10_000.0)


if __name__ == "__main__":
    unittest.main()
