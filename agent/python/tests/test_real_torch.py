"""With torch installed (skipped otherwise): the optimizer hook, watch() and, on a GPU, the memory source."""

import importlib.util
import json
import os
import subprocess
import sys
import unittest

from .support import INJECT_DIR, PYTHON_ROOT, TORCHRUN_ENV, FakeAgent

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
        agent = FakeAgent()
        self.addCleanup(agent.close)
        env = dict(os.environ, **TORCHRUN_ENV)
        env.update(
            GPUMON_AGENT=agent.address,
            GPUMON_REPORT_INTERVAL="0.1",
            PYTHONPATH=os.pathsep.join([PYTHON_ROOT, INJECT_DIR]),
        )
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        out = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual(out["steps"], 5)
        steps = agent.records("step")
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4, 5])
        self.assertEqual(set(steps[-1]["sections"]), {"data", "forward", "backward"})
        if out["cuda"]:
            self.assertGreaterEqual(out["snapshot"]["reserved"], 256 << 20)
            self.assertTrue(agent.records("alloc"))
        else:
            self.assertIsNone(out["snapshot"])
            self.assertEqual(agent.records("alloc"), [])


if __name__ == "__main__":
    unittest.main()
