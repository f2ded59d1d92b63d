#!/usr/bin/env python3
"""What ``gpumon.check_finite`` costs on a real model, against a training step.

Builds a Transformer encoder (6 layers, d_model 512, about 19M parameters,
76 MB of fp32 parameters and as much in gradients), runs one forward and
backward so every parameter has a gradient, then times, best of several
rounds:

- ``check_finite``: gpumon's check (one fused norm per device and dtype,
  one read per device);
- ``naive``: per tensor, ``isnan().any()`` and ``isinf().any()`` read at
  once with ``.item()``: two reductions, two temporaries and two waits for
  the device per tensor, the usual hand-written check;
- ``train step``: forward, backward and an SGD step of a batch of 32
  sequences of 64 tokens, for scale.

Runs on the GPU when there is one (``--device cuda``), else on the CPU.

    python agent/python/bench_check_finite.py [--rounds 5] [--device cpu|cuda]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gpumon  # noqa: E402


def best_of(fn, rounds, sync):
    best = float("inf")
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best * 1000.0


def naive(model):
    bad = 0
    for p in model.parameters():
        for t in (p, p.grad):
            if t is not None and (torch.isnan(t).any().item() or torch.isinf(t).any().item()):
                bad += 1
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(32, 64, 512, device=device)

    def train_step():
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    train_step()
    params = list(model.parameters())
    elements = sum(p.numel() for p in params)
    result = gpumon.check_finite(model)
    assert result["tensors"] == 0 and result["unchecked"] == 0, result
    timings = {
        "check_finite": best_of(lambda: gpumon.check_finite(model), args.rounds, sync),
        "naive": best_of(lambda: naive(model), args.rounds, sync),
        "train step": best_of(train_step, args.rounds, sync),
    }
    print(
        "%s, torch %s, %d threads; %d parameter tensors, %.1fM elements (and as many in gradients)"
        % (device, torch.__version__, torch.get_num_threads(), len(params), elements / 1e6)
    )
    for name, ms in timings.items():
        print("%-14s %9.2f ms" % (name, ms))


if __name__ == "__main__":
    main()
