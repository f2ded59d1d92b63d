"""A one-node gpumon cluster for gpu-check: a coordinator, its agent(s), their ranks.

On a GPU one agent samples through NVML and serves the hook. In a dry run
two agents stand in for it: the NVML simulator's (the fields NVML gives)
and one whose GPU readings come from the hooks (`--source none`), to which
the ranks connect, so their attribution is still the agent's own work.
"""

import os
import secrets
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

import procs
from procs import CheckError

#: The agent's sampling: every 500 ms, in 2 s windows.
SAMPLE_MS = 500
WINDOW_MS = 2000

#: The engine's defaults, but for the straggler detector's smallest job:
#: a step is scored from three ranks by default (a median of peers), and
#: the straggler job here has two.
ENGINE_CONFIG = "[engine.straggler]\nmin_ranks = 2\n"


class Agent:
    def __init__(self, proc: Any, node: str, metrics_url: str, socket: str):
        self.proc = proc
        self.node = node
        self.metrics_url = metrics_url
        self.socket = socket

    def metrics(self) -> List[tuple]:
        return procs.parse_metrics(procs.get(self.metrics_url))


class Cluster:
    """Started by :meth:`start`, ended by :meth:`stop`; logs in ``run.out_dir``."""

    def __init__(self, run: Any):
        self.run = run
        self.token = secrets.token_hex(16)
        self.url = ""
        self.coordinator: Any = None
        self.sampler: Optional[Agent] = None
        self.hooks: Optional[Agent] = None

    def start(self) -> None:
        run = self.run
        token_file = os.path.join(run.tmp, "admin-token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        config = os.path.join(run.tmp, "gpumon.toml")
        with open(config, "w") as f:
            f.write(ENGINE_CONFIG)
        log = run.log("coordinator")
        self.coordinator = procs.start(
            [run.gpumon, "--config", config, "coordinator", "--id", "1", "--listen", "127.0.0.1:0"]
            + ["--admin-token-file", token_file, "--data-dir", os.path.join(run.tmp, "raft")],
            log,
        )

        def url() -> Optional[str]:
            if self.coordinator.poll() is not None:
                raise CheckError("the coordinator exited: %s" % procs.tail(log))
            for word in procs.tail(log, 50).split():
                if word.startswith("http://"):
                    return word
            return None

        self.url = procs.wait_for("the coordinator's URL", 30, url)
        procs.wait_for("the coordinator to elect itself", 30, lambda: self._ready())
        if run.dry_run:
            self.sampler = self._agent("sim", "gpucheck-sim", ["--sim-gpus", "1"])
            self.hooks = self._agent("none", "gpucheck-node", [])
        else:
            self.sampler = self.hooks = self._agent("nvml", "gpucheck-node", [])

    def _ready(self) -> Optional[bool]:
        try:
            procs.get(self.url + "/readyz")
        except (CheckError, OSError):
            return None
        return True

    def _agent(self, source: str, node: str, extra: List[str]) -> Agent:
        run = self.run
        port = procs.free_port()
        socket = os.path.join(run.tmp, "%s.sock" % node)
        log = run.log("agent-%s" % node)
        proc = procs.start(
            [run.gpumon, "agent", "--source", source, "--node-name", node, "--coordinators", self.url]
            + ["--hook-listen", "unix:" + socket, "--metrics-listen", "127.0.0.1:%d" % port]
            + ["--sample-interval-ms", str(SAMPLE_MS), "--window-ms", str(WINDOW_MS)]
            + extra,
            log,
        )
        agent = Agent(proc, node, "http://127.0.0.1:%d/metrics" % port, socket)

        def up() -> Optional[bool]:
            if proc.poll() is not None:
                raise CheckError("the agent (%s) exited: %s" % (source, procs.tail(log)))
            if not os.path.exists(socket):
                return None
            # Without NVML (`none`) windows come only once a hook reports.
            done = [v for n, _, v in agent.metrics() if n == "gpumon_agent_windows_built_total"]
            return True if done and (done[0] > 0 or source == "none") else None

        procs.wait_for("the %s agent's first window" % source, 30, up)
        return agent

    def api(self, path: str) -> Any:
        return procs.get(self.url + path)

    def admin(self, method: str, path: str, body: Any) -> Any:
        return procs.http(method, self.url + path, body, token=self.token)

    def launch(self, job: str, ranks: int, mode: str, args: List[str], tag: str) -> List[Any]:
        """Ranks of ``job`` running ``workload.py mode``, each with the hook injected by ``gpumon run``.

        On a GPU: one ``gpumon run -- python -m torch.distributed.run`` line,
        as a user would start it. Dry: each rank its own ``gpumon run`` with
        torchrun's variables, so no torch is needed.
        """
        run = self.run
        assert self.hooks is not None
        base = [run.gpumon, "run", "--agent", "unix:" + self.hooks.socket, "--"]
        port = str(procs.free_port())
        env = run.env()
        if not run.dry_run:
            argv = base + [run.python, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
            argv += ["--rdzv-id", job, "--master-addr", "127.0.0.1", "--master-port", port]
            argv += [run.workload, mode] + args
            return [procs.start(argv, run.log(tag), env=env)]
        started = []
        for rank in range(ranks):
            rank_env = dict(env)
            rank_env.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(ranks),
                LOCAL_WORLD_SIZE=str(ranks),
                TORCHELASTIC_RUN_ID=job,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            argv = base + [run.python, run.workload, mode, "--dry-run"] + args
            started.append(procs.start(argv, run.log("%s-rank%d" % (tag, rank)), env=rank_env))
        return started

    def stop(self) -> None:
        for agent in {id(a): a for a in (self.sampler, self.hooks) if a is not None}.values():
            procs.stop(agent.proc)
        if self.coordinator is not None:
            procs.stop(self.coordinator)


class Sampler(threading.Thread):
    """Once a second: the sampling agent's /metrics, its CPU time and memory,
    and (on a GPU) what ``nvidia-smi`` says at the same moment."""

    def __init__(self, cluster: Cluster, nvidia_smi: Optional[str]):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.nvidia_smi = nvidia_smi
        self.rows: List[Dict[str, Any]] = []
        self.errors: List[str] = []
        self.done = threading.Event()
        assert cluster.sampler is not None
        self.agent = cluster.sampler
        self.stat = procs.ProcStat(self.agent.proc.pid)
        self.started_t = time.time()
        self.started_cpu = self.stat.cpu_s()

    def run(self) -> None:
        while not self.done.wait(1.0):
            try:
                self.rows.append(self._row())
            except Exception as e:  # keep sampling; say what failed
                if len(self.errors) < 20:
                    self.errors.append("%s: %s" % (type(e).__name__, e))

    def _row(self) -> Dict[str, Any]:
        t = time.time()
        metrics = self.agent.metrics()
        gpu: Dict[str, float] = {}
        samples = 0.0
        for name, labels, value in metrics:
            if name == "gpumon_agent_gpu_samples_total":
                samples = value
            if labels.get("gpu") == "0" and name.startswith("gpumon_agent_gpu_"):
                gpu[name[len("gpumon_agent_gpu_") :]] = value
        hooks = self.cluster.hooks
        ranked = metrics if hooks is None or hooks is self.agent else hooks.metrics()
        processes = [
            {
                "pid": int(labels["pid"]),
                "job": labels.get("job"),
                "rank": int(labels["rank"]) if "rank" in labels else None,
                "used": value,
            }
            for name, labels, value in ranked
            if name == "gpumon_agent_process_memory_used_bytes" and labels.get("gpu") == "0"
        ]
        row = {
            "t": t,
            "samples_total": samples,
            "gpus": len({l.get("gpu") for n, l, _ in metrics if n == "gpumon_agent_gpu_memory_total_bytes"}),
            "gpu": gpu,
            "procs": processes,
            "cpu_s": self.stat.cpu_s(),
        }
        row.update(self.stat.memory())
        if self.nvidia_smi:
            row["smi"] = nvidia_smi_sample(self.nvidia_smi)
        return row

    def finish(self) -> Dict[str, Any]:
        self.done.set()
        self.join(5)
        return {"rows": self.rows, "errors": self.errors, "started_t": self.started_t, "started_cpu": self.started_cpu}


def nvidia_smi_sample(binary: str) -> Dict[str, Any]:
    """GPU 0 as nvidia-smi reads it now: memory in bytes, utilization %, SM clock MHz, power W, processes."""
    out = subprocess.run(
        [binary, "-i", "0", "--query-gpu=memory.used,memory.total,utilization.gpu,clocks.sm,power.draw", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.strip()
    fields = [f.strip() for f in out.split(",")]
    mib = 1 << 20

    def number(s: str) -> Optional[float]:
        try:
            return float(s)
        except ValueError:
            return None

    sample: Dict[str, Any] = {}
    if len(fields) == 5:
        used, total, util, clock, power = (number(f) for f in fields)
        sample = {
            "used_bytes": None if used is None else used * mib,
            "total_bytes": None if total is None else total * mib,
            "util_pct": util,
            "sm_clock_mhz": clock,
            "power_w": power,
        }
    apps = subprocess.run(
        [binary, "-i", "0", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    sample["procs"] = {}
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and number(parts[1]) is not None:
            sample["procs"][int(parts[0])] = number(parts[1]) * mib
    return sample


def python_has_torch(python: str) -> Optional[str]:
    """torch's version as ``python`` imports it, or ``None``."""
    try:
        out = subprocess.run(
            [python, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None

