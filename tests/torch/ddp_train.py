#!/usr/bin/env python3
"""A real data-parallel job on CPU (gloo), DDP, FSDP2 or a pipeline, for gpumon's torch end-to-end test.

Run it under torchrun through ``gpumon run`` (which injects the hook)::

    gpumon run -- python -m torch.distributed.run --nproc-per-node 4 \\
        tests/torch/ddp_train.py --duration-s 60 --slow-rank 2 --slow-in forward --slow-after-s 20

Every rank trains the same small MLP on synthetic batches, one thread each,
pinned to one CPU (local rank modulo the CPUs it may use): with more ranks
than CPUs, ranks left to the scheduler drift between CPUs, and one of them is
often slower than its peers for seconds, as no GPU rank would be.

The hook sees what it would see in a real job. With ``--instrument
script`` (the default) ``gpumon.watch(model)`` times ``forward``, ``data``
and ``backward`` are timed by hand, and ``optimizer.step()`` marks the step
boundary. With ``--instrument none`` the script makes no timing call at all:
batches come from a ``DataLoader`` and the hook's automatic step anatomy
times data, forward, backward and optimizer by itself. DDP's gradient all-reduce runs
inside ``backward``, so a rank that is slow elsewhere makes its peers wait
there.

With ``--parallel fsdp`` the model is sharded with FSDP2 (``fully_shard``
on each layer, then on the model): every layer's forward all-gathers its
parameters and its backward reduce-scatters its gradients, so the peers of
a slow rank wait inside their own forward and backward.

With ``--parallel pipeline`` the ranks form two pipeline stages of
``world / 2`` data-parallel replicas each (ranks below ``world / 2`` are
stage 0), with explicit point-to-point sends, one microbatch a step: stage
0 runs its half of the model and sends the activations to its replica in
stage 1, which runs the rest and the loss and sends the activations'
gradient back; each stage then all-reduces its gradients within its own
process group. Both stages do the same work until the slowdown:
``--slow-in forward`` slows the slow rank's stage forward alone, ``--slow-in
stage`` every rank of the slow rank's stage (``--slow-repeats`` extra passes
of its products every step: an uneven split of the model), ``--slow-in
link`` the slow rank's stage's gradient all-reduce: every call of it takes
``--link-delay-ms`` longer on each of the stage's ranks, inside the
collective (``ProcessGroup.allreduce``), which is how a slower link looks to
the ranks: their own work is unchanged and every member waits longer. Without CUDA the hook has no device to report, and an agent sampling
no GPU would show no rank, so the script hands ``gpumon.init`` a memory
source for a stand-in CPU device per rank.

One rank can be made slow from a given step or after a given time:

- ``--slow-in forward``: the model's forward repeats its own matrix products
  (without autograd) ``--slow-repeats`` more times: real extra compute that
  about doubles that rank's forward (under FSDP the first layer alone
  repeats its product four times per hidden layer of the model,
  inside its own forward where its parameters are gathered);
- ``--slow-in data``: the batch fetch sleeps ``--slow-data-ms`` more, like a
  stalled input pipeline;
- ``--slow-in optimizer``: ``optimizer.step()`` repeats the forward's
  products ``--slow-repeats`` more times before stepping: real extra compute
  after the gradient all-reduce, so its peers wait for it in the next step's
  backward.

The wall-clock time (Unix seconds) at which the slowdown starts is written to
``--slow-start-file``. With ``--stats-dir``, every rank writes ``rank-N.json``
there every ``STATS_EVERY_S`` and at the end: the median time of each section
(timed by the script itself, ms) before and after the slowdown, split at the
time in the start file.

The job runs ``--duration-s`` and exits 0; the ranks agree on the last step
through a one-element all-reduce every ``STOP_CHECK_EVERY`` steps, so none is
left waiting in a collective. A rank whose launcher went away (the test
killed it) exits by itself.
"""

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gpumon

#: Steps between two checks that every rank is still within the duration.
STOP_CHECK_EVERY = 10
#: Seconds between two checks that the launcher is still there.
ORPHAN_CHECK_S = 0.5
#: Seconds between two writes of the stats file.
STATS_EVERY_S = 5.0
#: First steps left out of the stats (warm-up).
STATS_SKIP_STEPS = 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration-s", type=float, default=60.0, help="run time, then exit 0")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=384, help="hidden layer width")
    p.add_argument("--depth", type=int, default=2, help="hidden layers")
    p.add_argument("--no-pin", action="store_true", help="leave the rank's CPU to the scheduler")
    p.add_argument(
        "--parallel",
        choices=("ddp", "fsdp", "pipeline"),
        default="ddp",
        help="DDP, FSDP2 per layer, or two pipeline stages",
    )
    p.add_argument("--slow-rank", type=int, default=None, help="the rank made slow (none by default)")
    p.add_argument(
        "--slow-in",
        choices=("forward", "data", "optimizer", "stage", "link"),
        default="forward",
        help="stage: every rank of the slow rank's pipeline stage, in forward; "
        "link: that stage's gradient all-reduce (see --link-delay-ms)",
    )
    p.add_argument(
        "--link-delay-ms",
        type=float,
        default=5.0,
        help="with --slow-in link, the delay added to each call of the stage's all-reduce",
    )
    p.add_argument(
        "--instrument",
        choices=("script", "none"),
        default="script",
        help="script: gpumon.watch and gpumon.section; none: no timing call (the hook's automatic anatomy)",
    )
    p.add_argument(
        "--hang",
        choices=("sleep", "skip", "stop"),
        default=None,
        help="sleep: once slow, the slow rank sleeps for good before its backward (its peers wait in theirs); "
        "skip: every rank all-reduces its loss in a group of its own each step, and once slow the slow rank "
        "skips it (a real deadlock: it waits in the next step's gradient all-reduce, its peers in the loss's); "
        "stop: once slow, the slow rank stops its whole process with SIGSTOP before its backward (its hook "
        "stops with it; gloo turns a SIGKILLed peer into an error at once, so this is how a dead rank hangs "
        "a job on CPU)",
    )
    p.add_argument(
        "--pause-at-step",
        type=int,
        default=None,
        help="every rank sleeps --pause-s before this step (an unmarked job-wide checkpoint)",
    )
    p.add_argument("--pause-s", type=float, default=90.0, help="length of the pause")
    p.add_argument("--pause-rank", type=int, default=None, help="only this rank pauses (default: every rank)")
    p.add_argument("--pause-marker", default=None, help="gpumon.mark(MARKER) before the pause (e.g. eval)")
    p.add_argument("--slow-from-step", type=int, default=None, help="slow from this step on")
    p.add_argument("--slow-after-s", type=float, default=None, help="slow after this many seconds of training")
    p.add_argument("--slow-repeats", type=int, default=1, help="extra passes of the forward's products")
    p.add_argument("--slow-data-ms", type=float, default=25.0, help="extra time of each batch fetch")
    p.add_argument("--slow-start-file", default=None, help="where to write the slowdown's start, Unix seconds")
    p.add_argument("--stats-dir", default=None, help="where each rank writes its section medians")
    return p.parse_args(argv)


class Linear(nn.Linear):
    """A linear layer whose forward can repeat its product as extra work,
    inside its own forward (where FSDP has gathered its parameters)."""

    extra_passes = 0

    def forward(self, x):
        if self.extra_passes:
            with torch.no_grad():
                for _ in range(self.extra_passes):
                    F.linear(x, self.weight, self.bias)
        return super().forward(x)


class Mlp(nn.Module):
    """A plain MLP whose forward can repeat its products as extra work."""

    def __init__(self, inputs, width, depth, outputs):
        super().__init__()
        sizes = [inputs] + [width] * depth
        self.hidden = nn.ModuleList(Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.out = nn.Linear(width, outputs)
        self.extra_passes = 0

    def forward(self, x):
        h = x
        for layer in self.hidden:
            h = torch.relu(layer(h))
        if self.extra_passes:
            with torch.no_grad():
                for _ in range(self.extra_passes):
                    g = x
                    for layer in self.hidden:
                        g = torch.relu(layer(g))
        return self.out(h)


class Batches(torch.utils.data.Dataset):
    """Synthetic batches, one an item (``batch_size=None``), each fetch
    ``delay_s`` long on the slow rank once it is slow."""

    def __init__(self, batch, inputs, target_map, generator):
        self.batch, self.inputs = batch, inputs
        self.target_map = target_map
        self.generator = generator
        self.delay_s = 0.0

    def __len__(self):
        return 1 << 30

    def __getitem__(self, _index):
        x = torch.randn(self.batch, self.inputs, generator=self.generator)
        if self.delay_s:
            time.sleep(self.delay_s)
        return x, x @ self.target_map


class SlowableSGD(torch.optim.SGD):
    """SGD whose ``step`` first runs the model's products ``extra_passes``
    times (the slow rank's extra work in ``optimizer.step()``)."""

    def __init__(self, params, model, x_shape, lr):
        super().__init__(params, lr=lr)
        self.model = model
        self.x = torch.randn(*x_shape)
        self.extra_passes = 0

    def step(self, closure=None):
        if self.extra_passes:
            with torch.no_grad():
                for _ in range(self.extra_passes):
                    g = self.x
                    for layer in self.model.hidden:
                        g = torch.relu(layer(g))
        return super().step(closure)


class CpuMemory:
    """A gpumon memory source for a CPU rank: the process's resident memory
    on a stand-in device per local rank (see ``agent/src/hook_endpoint/source.rs``)."""

    def __init__(self, index):
        self.index = index
        self.total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def _rss(self):
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def memory_stats(self):
        rss = self._rss()
        return {"allocated_bytes.all.current": rss, "reserved_bytes.all.current": rss}

    def mem_get_info(self):
        return max(0, self.total - self._rss()), self.total

    def empty_cache(self):
        pass

    def device_info(self):
        return {"index": self.index, "uuid": None, "name": "cpu", "total_bytes": self.total}


class Slowdown:
    """Decides, on the slowed rank, when the slowdown starts, and records it."""

    def __init__(self, args, rank):
        self.active_rank = args.slow_rank == rank
        if args.slow_in in ("stage", "link") and args.slow_rank is not None:
            half = int(os.environ["WORLD_SIZE"]) // 2
            self.active_rank = rank // half == args.slow_rank // half
        self.from_step = args.slow_from_step
        self.after_s = args.slow_after_s
        self.start_file = args.slow_start_file
        self.on = False

    def check(self, step, elapsed_s):
        """True from the step at which this rank is slow on."""
        if self.on or not self.active_rank:
            return self.on
        due_step = self.from_step is not None and step >= self.from_step
        due_time = self.after_s is not None and elapsed_s >= self.after_s
        if due_step or due_time:
            self.on = True
            self.record(time.time())
        return self.on

    def record(self, t):
        if self.start_file:
            # Every rank of a slowed stage records the start: each writes its
            # own temporary file, or one rank's rename takes another's away.
            tmp = "%s.%d.tmp" % (self.start_file, os.getpid())
            with open(tmp, "w", encoding="ascii") as f:
                f.write("%.6f\n" % t)
            os.replace(tmp, self.start_file)
        print("ddp_train: slowdown started at %.3f" % t, file=sys.stderr, flush=True)


class Stats:
    """Section times per step (ms), and their medians before and after the
    slowdown (read from the start file, so every rank splits at the same
    time) written to ``rank-N.json``."""

    def __init__(self, stats_dir, rank, start_file):
        self.path = os.path.join(stats_dir, "rank-%d.json" % rank) if stats_dir else None
        self.rank = rank
        self.start_file = start_file
        self.rows = []
        self.written = time.monotonic()

    def add(self, t, times):
        """A step that began at ``t`` (Unix seconds) and took ``times``."""
        self.rows.append((t, times))
        if self.path and time.monotonic() - self.written >= STATS_EVERY_S:
            self.write()

    def write(self):
        if not self.path:
            return
        self.written = time.monotonic()
        start = self._slow_start()
        rows = self.rows[STATS_SKIP_STEPS:]
        phases = {
            "before": [times for t, times in rows if start is None or t < start],
            "after": [times for t, times in rows if start is not None and t >= start],
        }
        summary = {"rank": self.rank, "steps": len(self.rows), "slow_start": start}
        for phase, steps in phases.items():
            summary[phase] = {"n": len(steps)}
            for name in steps[0] if steps else ():
                summary[phase][name] = round(statistics.median(s[name] for s in steps), 2)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(summary, f)
        os.replace(tmp, self.path)

    def _slow_start(self):
        try:
            with open(self.start_file, encoding="ascii") as f:
                return float(f.read())
        except (OSError, TypeError, ValueError):
            return None


def exit_when_orphaned():
    """Exits the process once its parent (torchrun) is gone."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(3)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def pin_to_one_cpu(local_rank):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[local_rank % len(cpus)]})


def agreed_to_stop(out_of_time):
    """Whether any rank is out of time (all ranks must call it together)."""
    flag = torch.tensor([1.0 if out_of_time else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


class Stage:
    """This rank's pipeline stage: its half of the model, its replica in
    the other stage and the process group of its own stage's replicas."""

    def __init__(self, args, rank, world):
        if world % 2 or args.instrument != "none":
            raise SystemExit("ddp_train: --parallel pipeline takes an even world and --instrument none")
        half = world // 2
        self.index = rank // half
        self.partner = rank + half if self.index == 0 else rank - half
        groups = [dist.new_group(list(range(s * half, (s + 1) * half))) for s in (0, 1)]
        self.group = groups[self.index]
        self.replicas = half
        # Both halves take and give `width` features, so they do the same work.
        self.model = Mlp(args.width, args.width, args.depth, args.width)

    def step(self, x, y, extra_passes):
        """One pipeline step of one microbatch; returns the loss on stage 1."""
        self.model.extra_passes = extra_passes
        if self.index == 0:
            # The input asks for its gradient as stage 1's does, so both
            # stages' backward passes do the same products.
            h = self.model(x.requires_grad_())
            dist.send(h.detach().contiguous(), dst=self.partner)
            grad = torch.empty_like(h)
            dist.recv(grad, src=self.partner)
            h.backward(grad)
            loss = None
        else:
            h = torch.empty(x.shape[0], x.shape[1])
            dist.recv(h, src=self.partner)
            h.requires_grad_()
            loss = F.mse_loss(self.model(h), y)
            loss.backward()
            dist.send(h.grad.contiguous(), dst=self.partner)
        for p in self.model.parameters():
            dist.all_reduce(p.grad, group=self.group)
            p.grad /= self.replicas
        return loss


class SlowLink:
    """``--slow-in link``: while ``on``, each ``allreduce`` of ``group``
    sleeps ``delay_s`` inside the collective before it runs, on this rank."""

    def __init__(self, group, delay_s):
        self.group = group
        self.delay_s = delay_s
        self.on = False
        original = dist.ProcessGroup.allreduce
        link = self

        def allreduce(pg, *args, **kwargs):
            if link.on and pg is link.group:
                time.sleep(link.delay_s)
            return original(pg, *args, **kwargs)

        dist.ProcessGroup.allreduce = allreduce


def pipeline_main(args, rank, world, slowdown, stats):
    """The pipeline job's loop (see the module docs)."""
    stage = Stage(args, rank, world)
    link = SlowLink(stage.group, args.link_delay_ms / 1000.0) if args.slow_in == "link" else None
    optimizer = torch.optim.SGD(stage.model.parameters(), lr=1e-3)
    target_map = torch.randn(args.width, args.width)
    # A replica's two stages draw the same batches.
    data_gen = torch.Generator().manual_seed(1000 + rank % stage.replicas)
    batches = Batches(args.batch, args.width, target_map, data_gen)
    loader = iter(torch.utils.data.DataLoader(batches, batch_size=None))
    start = time.monotonic()
    step = 0
    while True:
        step += 1
        slow = slowdown.check(step, time.monotonic() - start)
        extra = args.slow_repeats if slow and args.slow_in in ("forward", "stage") else 0
        batches.delay_s = args.slow_data_ms / 1000.0 if slow and args.slow_in == "data" else 0.0
        if link is not None:
            link.on = slow
        began = time.time()
        t0 = time.perf_counter()
        x, y = next(loader)
        stage.step(x, y, extra)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        stats.add(began, {"step": (time.perf_counter() - t0) * 1000.0})
        if step % STOP_CHECK_EVERY == 0 and agreed_to_stop(time.monotonic() - start >= args.duration_s):
            return step


def main(argv):
    args = parse_args(argv)
    exit_when_orphaned()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not args.no_pin:
        if args.parallel == "pipeline":
            # A stage's replicas share a CPU and the stages do not: the two
            # stages of a replica take turns, and one stage's ranks working
            # beside the other's would slow whichever runs then.
            pin_to_one_cpu(rank * 2 // int(os.environ["WORLD_SIZE"]))
        else:
            pin_to_one_cpu(local_rank)
    dist.init_process_group("gloo")
    gpumon.init(memory_source=CpuMemory(local_rank))

    torch.manual_seed(0)
    if args.slow_in in ("stage", "link") and args.parallel != "pipeline":
        raise SystemExit("ddp_train: --slow-in %s is for --parallel pipeline" % args.slow_in)
    if args.parallel == "pipeline":
        if args.slow_in == "optimizer" and args.slow_rank is not None:
            raise SystemExit("ddp_train: --slow-in optimizer is for DDP only")
        step = pipeline_main(
            args, rank, dist.get_world_size(), Slowdown(args, rank), Stats(args.stats_dir, rank, args.slow_start_file)
        )
        dist.destroy_process_group()
        print("ddp_train: rank %d done after %d steps" % (rank, step), file=sys.stderr, flush=True)
        return 0
    inputs, outputs = 256, 16
    model = Mlp(inputs, args.width, args.depth, outputs)
    if args.parallel == "fsdp":
        if args.slow_in == "optimizer" and args.slow_rank is not None:
            raise SystemExit("ddp_train: --slow-in optimizer calls the layers outside their forward: DDP only")
        from torch.distributed.fsdp import fully_shard

        for layer in model.hidden:
            fully_shard(layer)
        fully_shard(model)
        ddp = model
    else:
        ddp = DistributedDataParallel(model)
    by_hand = args.instrument == "script"
    if by_hand:
        gpumon.watch(ddp)
    optimizer = SlowableSGD(ddp.parameters(), model, (args.batch, inputs), lr=1e-3)
    target_map = torch.randn(inputs, outputs)
    data_gen = torch.Generator().manual_seed(1000 + rank)
    batches = Batches(args.batch, inputs, target_map, data_gen)
    loader = iter(torch.utils.data.DataLoader(batches, batch_size=None))
    slowdown = Slowdown(args, rank)
    stats = Stats(args.stats_dir, rank, args.slow_start_file)

    loss_group = dist.new_group() if args.hang == "skip" else None
    start = time.monotonic()
    step = 0
    while True:
        step += 1
        slow = slowdown.check(step, time.monotonic() - start)
        slow_forward = args.slow_repeats if slow and args.slow_in == "forward" else 0
        if args.parallel == "fsdp":
            model.hidden[0].extra_passes = 4 * slow_forward * len(model.hidden)
        else:
            model.extra_passes = slow_forward
        optimizer.extra_passes = args.slow_repeats if slow and args.slow_in == "optimizer" else 0
        batches.delay_s = args.slow_data_ms / 1000.0 if slow and args.slow_in == "data" else 0.0
        if step == args.pause_at_step and args.pause_rank in (None, rank):
            if rank == (args.pause_rank or 0):
                slowdown.record(time.time())
            if args.pause_marker:
                gpumon.mark(args.pause_marker)
            time.sleep(args.pause_s)
        began = time.time()
        t0 = time.perf_counter()
        if by_hand:
            with gpumon.section("data"):
                x, y = batches[step]
        else:
            x, y = next(loader)
        t1 = time.perf_counter()
        loss = F.mse_loss(ddp(x), y)
        t2 = time.perf_counter()
        if slow and args.hang == "sleep":
            time.sleep(24 * 3600)
        if slow and args.hang == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if by_hand:
            with gpumon.section("backward"):
                loss.backward()
        else:
            loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        if loss_group is not None and not slow:
            dist.all_reduce(loss.detach().clone(), group=loss_group)
        ms = {"data": t1 - t0, "forward": t2 - t1, "backward": t3 - t2, "optimizer": t4 - t3, "step": t4 - t0}
        stats.add(began, {k: v * 1000.0 for k, v in ms.items()})
        if step % STOP_CHECK_EVERY == 0 and agreed_to_stop(time.monotonic() - start >= args.duration_s):
            break
    stats.write()
    dist.destroy_process_group()
    print("ddp_train: rank %d done after %d steps" % (rank, step), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
