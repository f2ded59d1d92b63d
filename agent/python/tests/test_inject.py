"""gpumon run's sitecustomize, and a training script, in real subprocesses."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from gpumon import _flight

from tests.support import INJECT_DIR, PYTHON_ROOT, REPO_ROOT, TORCHRUN_ENV, FakeAgent

# Whether the hook was started (True/False) or not even imported, at start-up.
PROBE = "import sys; m = sys.modules.get('gpumon'); print(m.stats()['active'] if m else 'absent')"


class InjectTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        with open(os.path.join(self.tmp.name, "sitecustomize.py"), "w") as f:
            f.write("import sys\nsys.stderr.write('user sitecustomize ran\\n')\n")
        self.agent = FakeAgent()
        self.addCleanup(self.agent.close)

    def run_python(self, extra_env, *args):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in TORCHRUN_ENV and not k.startswith("GPUMON") and k not in _flight.BUFFER_VARS
        }
        env["PYTHONPATH"] = os.pathsep.join([INJECT_DIR, self.tmp.name, PYTHON_ROOT])
        env["GPUMON_AGENT"] = self.agent.address
        env.update(extra_env)
        return subprocess.run(
            [sys.executable] + list(args), env=env, capture_output=True, text=True, timeout=15
        )

    def test_outside_torchrun_only_the_user_sitecustomize_runs(self):
        result = self.run_python({}, "-c", PROBE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "absent")
        self.assertIn("user sitecustomize ran", result.stderr)

    def test_in_a_torchrun_worker_the_hook_starts_and_reports(self):
        result = self.run_python(dict(TORCHRUN_ENV), "-c", PROBE + "; import gpumon; gpumon.mark('hello')")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "True")
        self.assertIn("user sitecustomize ran", result.stderr)
        (register,) = self.agent.ops("register")
        self.assertNotEqual(register["pid"], os.getpid())
        self.assertEqual((register["job"], register["rank"]), ("run-7", 3))
        self.assertIn("hello", [e["name"] for e in self.agent.records("event")])  # flushed at exit

    def test_disabled_and_launcher_processes_are_skipped(self):
        result = self.run_python(dict(TORCHRUN_ENV, GPUMON_DISABLE="1"), "-c", PROBE)
        self.assertEqual(result.stdout.strip(), "absent")
        launcher = os.path.join(self.tmp.name, "torchrun")
        with open(launcher, "w") as f:
            f.write(PROBE + "\n")
        result = self.run_python(dict(TORCHRUN_ENV), launcher)
        self.assertEqual(result.stdout.strip(), "absent", result.stderr)

    def test_standalone_hooks_the_first_python_process_only(self):
        child = "import subprocess, sys; subprocess.run([sys.executable, '-c', %r], check=True)" % PROBE
        result = self.run_python({"GPUMON_STANDALONE": "1"}, "-c", PROBE + "; " + child)
        self.assertEqual(result.returncode, 0, result.stderr)
        # The child no longer sees GPUMON_STANDALONE: gpumon is not even imported there.
        self.assertEqual(result.stdout.split(), ["True", "absent"])
        (register,) = self.agent.ops("register")
        self.assertEqual(
            (register["job"], register["rank"], register["local_rank"], register["world_size"]),
            ("pid-%d" % register["pid"], 0, 0, 1),
        )

    def test_standalone_with_gpumon_job_reports_to_that_job(self):
        probe = PROBE + "; import os; print(os.environ.get('GPUMON_STANDALONE'))"
        result = self.run_python({"GPUMON_STANDALONE": "1", "GPUMON_JOB": "profile-42"}, "-c", probe)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["True", "None"])
        (register,) = self.agent.ops("register")
        self.assertEqual((register["job"], register["rank"], register["world_size"]), ("profile-42", 0, 1))

    def test_standalone_never_hooks_a_launcher_nor_a_disabled_process(self):
        launcher = os.path.join(self.tmp.name, "torchrun")
        with open(launcher, "w") as f:
            f.write(PROBE + "\n")
        result = self.run_python({"GPUMON_STANDALONE": "1"}, launcher)
        self.assertEqual(result.stdout.strip(), "absent", result.stderr)
        # Without torch installed this fails after the start-up; no matter.
        self.run_python({"GPUMON_STANDALONE": "1"}, "-m", "torch.distributed.run", "--help")
        result = self.run_python({"GPUMON_STANDALONE": "1", "GPUMON_DISABLE": "1"}, "-c", PROBE)
        self.assertEqual(result.stdout.strip(), "absent", result.stderr)
        self.assertEqual(self.agent.ops("register"), [])

    def test_a_hooked_worker_has_the_flight_recorder_on_before_the_script_runs(self):
        probe = "import os; print(os.environ.get('TORCH_FR_BUFFER_SIZE'))"
        cases = [
            (dict(TORCHRUN_ENV), "2000"),
            (dict(TORCHRUN_ENV, GPUMON_FLIGHT_RECORDER="0"), "None"),
            (dict(TORCHRUN_ENV, TORCH_NCCL_TRACE_BUFFER_SIZE="0"), "None"),
            (dict(TORCHRUN_ENV, TORCH_FR_BUFFER_SIZE="10"), "10"),
            ({}, "None"),
        ]
        for env, expected in cases:
            with self.subTest(env=env):
                result = self.run_python(env, "-c", probe)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout.strip(), expected)

    def test_a_broken_user_sitecustomize_does_not_stop_python(self):
        with open(os.path.join(self.tmp.name, "sitecustomize.py"), "w") as f:
            f.write("raise RuntimeError('broken site')\n")
        result = self.run_python(dict(TORCHRUN_ENV), "-c", PROBE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "True")
        self.assertIn("broken site", result.stderr)

    def test_a_hooked_process_children_stay_quiet(self):
        child = "import subprocess, sys; subprocess.run([sys.executable, '-c', %r], check=True)" % PROBE
        result = self.run_python(dict(TORCHRUN_ENV), "-c", PROBE + "; " + child)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["True", "False"])
        self.assertEqual(len(self.agent.ops("register")), 1)

    def test_fake_train_runs_an_action_and_exits_cleanly(self):
        events = os.path.join(self.tmp.name, "events.jsonl")
        self.agent.add_action(41, reason="smoke test")
        env = dict(
            TORCHRUN_ENV,
            GPUMON_REPORT_INTERVAL="0.1",
            FAKE_DURATION_S="1.2",
            FAKE_STEP_MS="10",
            FAKE_LEAK_BYTES_PER_S=str(64 << 20),
            FAKE_EVENTS_FILE=events,
        )
        script = os.path.join(REPO_ROOT, "tests", "python", "fake_train.py")
        result = self.run_python(env, script)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(events) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), 1)
        self.assertEqual(
            {k: lines[0][k] for k in ("event", "id", "kind", "reason")},
            {"event": "action", "id": 41, "kind": "release_cache", "reason": "smoke test"},
        )
        (ack,) = self.agent.ops("ack")
        self.assertEqual(ack["state"], "done")
        self.assertGreaterEqual(ack["freed_bytes"], 16 << 20)
        self.assertEqual(ack["response"], "seen at step %d" % lines[0]["step"])
        self.assertEqual(ack["at_step"], lines[0]["step"])
        steps = self.agent.records("step")
        self.assertGreater(len(steps), 10)
        self.assertEqual(set(steps[0]["sections"]), {"data", "forward", "backward"})
        names = [r["name"] for r in self.agent.records() if r["type"] in ("event", "snapshot")]
        self.assertEqual(names[:2], ["start", "training start"])
        self.assertEqual(names[-1], "training end")
        allocs = self.agent.records("alloc")
        self.assertGreaterEqual(allocs[-1]["allocated"], 4 << 30)
        start = self.agent.records("snapshot")[0]["stats"]
        self.assertEqual(start["allocated"], 4 << 30)
        self.assertGreater(allocs[-1]["allocated"], start["allocated"] + (32 << 20))  # the leak, at exit
        self.assertEqual(allocs[-1]["device_total"], 8 << 30)
        self.assertEqual(self.agent.ops("register")[0]["device"]["index"], 1)

    def test_fake_train_exits_3_when_the_fake_gpu_is_full(self):
        env = dict(
            TORCHRUN_ENV, FAKE_TOTAL_BYTES=str(1 << 30), FAKE_BASE_BYTES=str(1 << 30), FAKE_DURATION_S="5"
        )
        result = self.run_python(env, os.path.join(REPO_ROOT, "tests", "python", "fake_train.py"))
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("out of memory", result.stderr)


class SitecustomizeSourceTest(unittest.TestCase):
    def test_it_only_uses_the_standard_library_and_gpumon(self):
        with open(os.path.join(INJECT_DIR, "sitecustomize.py")) as f:
            source = f.read()
        compile(source, "sitecustomize.py", "exec")
        self.assertNotIn(
            "torch", textwrap.dedent(source).replace("torchrun", "").replace("torch.distributed", "")
        )


if __name__ == "__main__":
    unittest.main()
