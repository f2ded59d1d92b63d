"""With torch installed (skipped otherwise): the optimizer hook, watch(), the CPU clock,
the automatic step anatomy, on a GPU the memory source, and a rank hung in a collective."""

import importlib.util
import json
import os
import sys
import tempfile
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
        # The script's own data, forward (watch) and backward, and the automatic optimizer.
        self.assertEqual(set(steps[-1]["sections"]), {"data", "forward", "backward", "optimizer"})
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
                self.assertEqual(set(sections), {"data", "forward", "backward", "optimizer"})
                self.assertGreaterEqual(sections["data"], 5.0)
                self.assertGreater(sections["forward"], 0.0)
                self.assertGreater(sections["backward"], 0.0)
                self.assertLessEqual(sum(sections.values()), step["duration_ms"] + 0.01)
                self.assertLess(step["duration_ms"], 10_000.0)


ANATOMY_SCRIPT = r"""
import json, time
import torch
from torch.utils.data import DataLoader, Dataset
import gpumon  # read below, never called to time anything

class Samples(Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        time.sleep(0.002)  # 4 samples a batch: at least 8 ms
        return torch.randn(256)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 1)
    def forward(self, x):
        time.sleep(0.004)
        return self.head(torch.relu(self.hidden(x)))

class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(0.006)
        return super().step(closure)

torch.manual_seed(0)
model = Model()
loss_fn = torch.nn.MSELoss()
optimizer = SlowSGD(model.parameters(), lr=0.01)
for i, x in enumerate(DataLoader(Samples(), batch_size=4)):
    loss = loss_fn(model(x), torch.zeros(4, 1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if i == 7:
        break
print(json.dumps(gpumon.stats()))
"""


class AutomaticAnatomyTest(unittest.TestCase):
    """A script with no gpumon call: the hook times data, forward, backward and optimizer."""

    @classmethod
    def setUpClass(cls):
        error = torch_import_error()
        if error is not None:
            raise unittest.SkipTest("torch cannot be imported by %s (%s)" % (sys.executable, error))

    def test_every_step_has_its_anatomy(self):
        agent, out = run_hooked(self, ANATOMY_SCRIPT, CUDA_VISIBLE_DEVICES="")
        self.assertEqual(out["step"], 8)
        steps = agent.records("step")
        self.assertEqual([s["step"] for s in steps], list(range(1, 9)))
        # Steps 4 on: the global module hooks are gone, the outermost modules hooked alone.
        for step in steps:
            with self.subTest(step=step["step"]):
                sections = step["sections"]
                self.assertEqual(set(sections), {"data", "forward", "backward", "optimizer"})
                self.assertGreaterEqual(sections["data"], 8.0)
                self.assertGreaterEqual(sections["forward"], 4.0)
                self.assertGreater(sections["backward"], 0.0)
                self.assertGreaterEqual(sections["optimizer"], 6.0)
                self.assertLessEqual(sum(sections.values()), step["duration_ms"] + 0.01)

    def test_gpumon_anatomy_0_turns_it_off(self):
        agent, out = run_hooked(self, ANATOMY_SCRIPT, CUDA_VISIBLE_DEVICES="", GPUMON_ANATOMY="0")
        self.assertEqual(out["step"], 8)
        self.assertEqual([s["sections"] for s in agent.records("step")], [{}] * 8)


COLLECTIVE_SCRIPT = r"""
import json, os
import torch
import torch.distributed as dist
import gpumon  # read below, never called to time anything

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)
    def forward(self, x):
        t = torch.ones(1)
        dist.all_reduce(t)                      # synchronous
        dist.all_reduce(t, async_op=True).wait()  # asynchronous, waited on
        return self.layer(x)

model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(6):
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
stats = gpumon.stats()
dist.destroy_process_group()
print(json.dumps(stats))
"""


class CollectiveWaitTest(unittest.TestCase):
    """Real torch.distributed (gloo, one process): its collectives are timed apart."""

    @classmethod
    def setUpClass(cls):
        error = torch_import_error()
        if error is not None:
            raise unittest.SkipTest("torch cannot be imported by %s (%s)" % (sys.executable, error))

    def test_collectives_in_forward_are_reported_as_comm_wait(self):
        agent, out = run_hooked(self, COLLECTIVE_SCRIPT, CUDA_VISIBLE_DEVICES="")
        self.assertEqual(out["step"], 6)
        self.assertGreater(out["collectives_timed"], 5)
        self.assertFalse(out["ddp"])
        for step in agent.records("step")[1:]:
            with self.subTest(step=step["step"]):
                sections = step["sections"]
                self.assertGreater(sections.get("comm_wait", 0.0), 0.0)
                self.assertGreaterEqual(sections["forward"], 0.0)
                self.assertLessEqual(sum(sections.values()), step["duration_ms"] + 0.01)


HANG_SCRIPT = r"""
import json, os, shutil, subprocess, sys, tempfile, threading, time
fr_env = os.environ.get("TORCH_FR_BUFFER_SIZE")  # set by the injected hook
import torch
import torch.distributed as dist
import gpumon
from gpumon import _runtime, _stall

PEER = '''
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=1, world_size=2)
t = torch.ones(72)
for _ in range(3):
    dist.all_reduce(t)
sys.stdin.readline()  # hung until rank 0 has looked
dist.all_reduce(t)
dist.destroy_process_group()
'''
work = tempfile.mkdtemp()
store = os.path.join(work, "store")
peer_env = dict(os.environ, GPUMON_DISABLE="1")
peer = subprocess.Popen([sys.executable, "-c", PEER, store], stdin=subprocess.PIPE, text=True, env=peer_env)
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=2)
t = torch.ones(72)
for _ in range(3):
    dist.all_reduce(t)
gpumon.step()
gpumon.mark("eval")
runtime = _runtime.RUNTIME
out = {"fr_env": fr_env}

def look():
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = runtime._stall.record(runtime._progress(), 1.0, time.perf_counter())
            if record["waiting"] is not None:
                out["record"] = record
                out["wrappers"] = _stall.wrappers_view(runtime._collective_log, time.perf_counter())
                out["ack"] = runtime._dump_evidence({"id": 5, "kind": "dump_evidence", "reason": "test"})
                break
            time.sleep(0.01)
    finally:
        peer.stdin.write("go\n")
        peer.stdin.flush()

watcher = threading.Thread(target=look, name="watcher")
watcher.start()
dist.all_reduce(t)  # rank 1 is not there yet
watcher.join()
out["peer"] = peer.wait(60)
dist.destroy_process_group()
shutil.rmtree(work, ignore_errors=True)
print(json.dumps(out))
"""


class HungCollectiveTest(unittest.TestCase):
    """Two gloo ranks, rank 1 held back: rank 0's hook says, from another
    thread, that it waits in its 4th all_reduce, from a real flight recorder."""

    @classmethod
    def setUpClass(cls):
        error = torch_import_error()
        if error is not None:
            raise unittest.SkipTest("torch cannot be imported by %s (%s)" % (sys.executable, error))

    def test_the_stall_record_and_the_evidence_of_a_rank_blocked_in_an_all_reduce(self):
        dumps = tempfile.TemporaryDirectory()
        self.addCleanup(dumps.cleanup)
        _, out = run_hooked(self, HANG_SCRIPT, CUDA_VISIBLE_DEVICES="", GPUMON_DUMP_DIR=dumps.name)
        self.assertEqual((out["fr_env"], out["peer"]), ("2000", 0))
        record = out["record"]
        self.assertEqual(
            {k: record[k] for k in ("type", "step", "entered", "marker", "source")},
            {"type": "stall", "step": 1, "entered": [["0", 4]], "marker": "eval", "source": "flight_recorder"},
        )
        waiting = record["waiting"]
        self.assertEqual(
            {k: waiting[k] for k in ("group", "desc", "seq", "op", "numel", "timeout_s")},
            {"group": "0", "desc": "default_pg", "seq": 4, "op": "all_reduce", "numel": 72, "timeout_s": 1800.0},
        )
        self.assertGreaterEqual(waiting["waited_s"], 0.0)
        self.assertLess(waiting["waited_s"], 60.0)
        wrapped, entered = out["wrappers"]
        self.assertEqual([wrapped[k] for k in ("group", "seq", "op")], ["0", 4, "all_reduce"])
        self.assertEqual(entered, [["0", 4]])
        ack = out["ack"]
        self.assertEqual((ack["state"], ack["at_step"]), ("done", 1))
        stacks, fr = ack["detail"].split(", ")
        self.assertEqual(os.path.basename(fr), "hang-run-7-rank3-action5.fr.json")
        with open(fr) as f:
            entries = json.load(f)["entries"]
        self.assertEqual([(e["collective_seq_id"], e["retired"]) for e in entries][-1], (4, False))
        with open(stacks) as f:
            text = f.read()
        main = text.split("Thread 'MainThread'", 1)[1].split("\nThread '", 1)[0]
        self.assertIn("the training thread", main)
        self.assertIn("distributed_c10d.py", main)
        self.assertIn(", in all_reduce", main)
        self.assertIn("Thread 'watcher'", text)


if __name__ == "__main__":
    unittest.main()
