#!/usr/bin/env python3
"""The automatic step anatomy's cost per step, on a real torch loop (CPU).

Runs a tiny training loop (a DataLoader, a 2-layer MLP, SGD: about 0.25 ms a
step, so the hook's own time is a visible share of it) under
``gpumon profile``, alternately with ``GPUMON_ANATOMY=0`` and without, pinned
to one CPU, and prints the fastest block of each run (µs per step) and the
difference::

    python agent/python/bench_anatomy.py --gpumon target/release/gpumon   # a Python with torch

``--collectives N`` adds N real collectives to each step (``all_reduce`` of
one element in a one-process gloo group): with the anatomy on, each is
timed as a collective wait. The child mode (``--child``) is the loop itself.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

STEPS_PER_BLOCK = 2000
BLOCKS = 7
WARM_STEPS = 200


def child(collectives: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    if collectives:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    flag = torch.ones(1)

    class Batches(Dataset):
        def __len__(self):
            return 1 << 30

        def __getitem__(self, _i):
            return torch.ones(32, 64)

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = iter(DataLoader(Batches(), batch_size=None))

    def step():
        loss = model(next(batches)).sum()
        for _ in range(collectives):
            dist.all_reduce(flag)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(WARM_STEPS):
        step()
    blocks = []
    for _ in range(BLOCKS):
        t0 = time.perf_counter()
        for _ in range(STEPS_PER_BLOCK):
            step()
        blocks.append((time.perf_counter() - t0) / STEPS_PER_BLOCK * 1e6)
    print(json.dumps({"us_per_step": min(blocks)}))


def run(gpumon: str, anatomy: bool, cpu: str, collectives: int) -> float:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["GPUMON_ANATOMY"] = "1" if anatomy else "0"
    with tempfile.TemporaryDirectory() as tmp:
        argv = [gpumon, "profile", "--quiet", "--json", os.path.join(tmp, "r.json"), "--", sys.executable, __file__, "--child"]
        argv += ["--collectives", str(collectives)]
        if cpu:
            argv = ["taskset", "-c", cpu] + argv
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["us_per_step"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gpumon", default="target/release/gpumon")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--cpu", default="1", help="the CPU to pin to (taskset -c); empty for none")
    p.add_argument("--collectives", type=int, default=0, help="all_reduce calls per step")
    args = p.parse_args()
    if args.child:
        child(args.collectives)
        return
    off, on = [], []
    for _ in range(args.rounds):
        off.append(run(args.gpumon, False, args.cpu, args.collectives))
        on.append(run(args.gpumon, True, args.cpu, args.collectives))
    print("anatomy off: %s µs/step" % ", ".join("%.1f" % x for x in off))
    print("anatomy on:  %s µs/step" % ", ".join("%.1f" % x for x in on))
    print(
        "cost: %.1f µs/step (minima), %.1f µs/step (medians)"
        % (min(on) - min(off), statistics.median(on) - statistics.median(off))
    )


if __name__ == "__main__":
    main()
