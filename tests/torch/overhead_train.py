#!/usr/bin/env python3
"""One small training job, for measuring what a monitor costs a training step.

The same loop runs bare, under ``gpumon profile`` (no change to the script:
the hook is injected and times the step by itself) and under TraceML
(``traceml run``; TraceML needs its two calls in the script, which
``--tool traceml`` makes: ``traceml_ai.init()`` and its ``trace_step``
context around each step). Every way runs the same model on the same
batches: a DataLoader of synthetic batches, a 4-layer MLP, SGD, one thread,
about 50 ms a step on one CPU of the development machine.

The script times each step itself (``perf_counter`` around data, forward,
backward and optimizer) and writes, to ``--out``, the median and the
minimum of its steps after the first ``--warmup``: what the monitor adds to
a step, without the start-up and shutdown of the process around it. See
BENCHMARKS.md ("Against a bare run and TraceML").
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=50, help="first steps left out of the figures")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--tool", choices=("none", "traceml"), default="none", help="traceml: its two calls")
    p.add_argument("--out", default=None, help="where the step figures go (JSON)")
    p.add_argument("--cpu", type=int, default=None, help="pin the training process to this CPU")
    return p.parse_args(argv)


class Batches(torch.utils.data.Dataset):
    def __init__(self, batch, width):
        self.batch, self.width = batch, width
        self.generator = torch.Generator().manual_seed(7)

    def __len__(self):
        return 1 << 30

    def __getitem__(self, _index):
        x = torch.randn(self.batch, self.width, generator=self.generator)
        return x, x.roll(1, dims=1)


def main(argv):
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = iter(torch.utils.data.DataLoader(Batches(args.batch, w), batch_size=None))
    step_context = lambda: contextlib.nullcontext()  # noqa: E731
    if args.tool == "traceml":
        import traceml_ai as traceml

        traceml.init()
        step_context = lambda: traceml.trace_step(model)  # noqa: E731
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with step_context():
            x, y = next(loader)
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        times.append((time.perf_counter() - t0) * 1000.0)
    kept = times[args.warmup :]
    figures = {
        "tool": args.tool,
        "steps": len(kept),
        "median_ms": round(statistics.median(kept), 3),
        "min_ms": round(min(kept), 3),
        "mean_ms": round(statistics.fmean(kept), 3),
        "pid": os.getpid(),
    }
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(figures) + "\n")
    print(json.dumps(figures), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
