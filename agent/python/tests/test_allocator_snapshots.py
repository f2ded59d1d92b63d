"""Allocator snapshots on gpumon.testing.FakeTorch: recording switched on once
the script has initialised CUDA, files named and numbered, the event, and the
snapshot saved by torch's out-of-memory observer."""

import logging
import os
import pickle
import sys
import tempfile
import unittest
from unittest import mock

from gpumon._env import Identity
from gpumon._snapshots import MAX_OOM_SNAPSHOTS, SnapshotSettings, file_name
from gpumon.testing import FakeAllocator, FakeTorch, GiB, MiB

from tests.support import TORCHRUN_ENV, capture_logs, queued, quiet_runtime


class SnapshotTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "snapshots")  # made by the first save
        self.allocator = FakeAllocator(total_bytes=4 * GiB, context_bytes=512 * MiB)
        self.torch = FakeTorch(allocator=self.allocator)
        patch = mock.patch.dict(sys.modules, {"torch": self.torch})
        patch.start()
        self.addCleanup(patch.stop)

    def start(self, **env):
        environ = dict(TORCHRUN_ENV, GPUMON_SNAPSHOT_DIR=self.dir, **env)
        self.runtime, self.logs = quiet_runtime(self, source=self.allocator, environ=environ)
        return self.runtime

    def events(self):
        return [(r["name"], r["detail"]) for r in queued(self.runtime, "event")]

    def test_init_records_history_without_stacks_and_saves_numbered_files(self):
        runtime = self.start()
        self.assertEqual(
            self.torch.cuda.memory.history,
            [{"enabled": "all", "context": None, "stacks": "python", "max_entries": 100_000}],
        )
        live = self.allocator.alloc(300 * MiB)
        self.allocator.free(self.allocator.alloc(5 * MiB))
        first = runtime.save_allocator_snapshot()
        second = runtime.save_allocator_snapshot()
        self.assertEqual(
            [os.path.basename(p) for p in (first, second)],
            ["allocator-run-7-rank3-1.pickle", "allocator-run-7-rank3-2.pickle"],
        )
        with open(first, "rb") as f:
            saved = pickle.load(f)
        self.assertEqual(saved, self.allocator.snapshot())
        states = [b["state"] for s in saved["segments"] for b in s["blocks"]]
        self.assertIn("active_allocated", states)
        self.assertIn("inactive", states)
        self.assertEqual(self.events(), [("allocator_snapshot", first), ("allocator_snapshot", second)])
        self.allocator.free(live)
        self.assertEqual(self.torch.gpu.violations, [])

    def test_stacks_and_the_ring_size_follow_the_environment(self):
        self.start(GPUMON_SNAPSHOT_STACKS="1", GPUMON_SNAPSHOT_MAX_ENTRIES="5000")
        (call,) = self.torch.cuda.memory.history
        self.assertEqual((call["context"], call["max_entries"]), ("all", 5000))

    def test_recording_waits_until_the_script_initialises_cuda(self):
        self.torch.cuda.initialized = False
        runtime = self.start()
        runtime.step()
        self.assertEqual(self.torch.cuda.memory.history, [])
        self.assertIsNone(runtime.save_allocator_snapshot())
        self.assertIn("has not initialised CUDA", self.logs.messages(logging.WARNING)[-1])
        self.torch.cuda.initialized = True  # the script's first CUDA tensor
        runtime.step()
        runtime.step()
        self.assertEqual(len(self.torch.cuda.memory.history), 1)
        self.assertEqual(self.torch.gpu.violations, [], "the hook initialised CUDA")

    def test_an_out_of_memory_error_saves_snapshots_up_to_the_bound(self):
        self.start()
        self.allocator.alloc(3 * GiB)
        for _ in range(MAX_OOM_SNAPSHOTS + 2):
            with self.assertRaises(MemoryError):
                self.allocator.alloc(2 * GiB)
        files = sorted(os.listdir(self.dir))
        self.assertEqual(len(files), MAX_OOM_SNAPSHOTS)
        with open(os.path.join(self.dir, files[0]), "rb") as f:
            saved = pickle.load(f)
        self.assertEqual(sum(s["total_size"] for s in saved["segments"]), 3 * GiB)
        names = [name for name, _ in self.events()]
        self.assertEqual(names.count("allocator_snapshot"), MAX_OOM_SNAPSHOTS)
        # Every error is told (what gpumon profile reads as an OOM).
        self.assertEqual(names.count("out_of_memory"), MAX_OOM_SNAPSHOTS + 2)
        detail = dict(self.events())["out_of_memory"]
        self.assertIn(str(2 * GiB), detail)
        warnings = [m for m in self.logs.messages(logging.WARNING) if "out of memory" in m]
        self.assertEqual(len(warnings), MAX_OOM_SNAPSHOTS)
        self.assertIn("the last one", warnings[-1])

    def test_a_taken_name_is_skipped_and_an_explicit_path_is_used_as_is(self):
        runtime = self.start()
        os.makedirs(self.dir)
        taken = os.path.join(self.dir, "allocator-run-7-rank3-1.pickle")
        with open(taken, "w") as f:
            f.write("someone else's")
        self.assertTrue(runtime.save_allocator_snapshot().endswith("-rank3-2.pickle"))
        with open(taken) as f:
            self.assertEqual(f.read(), "someone else's")
        mine = os.path.join(self.dir, "mine.pickle")
        self.assertEqual(runtime.save_allocator_snapshot(mine), mine)
        with self.assertRaises(TypeError):
            runtime.save_allocator_snapshot(42)

    def test_an_unwritable_directory_returns_none_and_says_why(self):
        with tempfile.NamedTemporaryFile() as not_a_dir:
            self.dir = os.path.join(not_a_dir.name, "sub")
            runtime = self.start()
            self.assertIsNone(runtime.save_allocator_snapshot())
            self.assertIsNone(runtime.save_allocator_snapshot())
        writes = [m for m in self.logs.messages(logging.WARNING) if "writing the allocator snapshot" in m]
        self.assertEqual(len(writes), 1, "said once")
        self.assertEqual(self.events(), [])


class FileNameTest(unittest.TestCase):
    def test_job_ids_are_made_safe_for_a_file_name(self):
        name = file_name(Identity("[fe80::1]:29500", 2, 0, 4), 7)
        self.assertEqual(name, "allocator-_fe80__1__29500-rank2-7.pickle")
        long = file_name(Identity("j/" * 300, 0, 0, 1), 1)
        self.assertLess(len(long), 128)
        self.assertNotIn("/", long)

    def test_settings_read_the_environment(self):
        self.assertEqual(SnapshotSettings.from_env({}), SnapshotSettings(None, False, 100_000))
        with capture_logs() as logs:
            environ = {
                "GPUMON_SNAPSHOT_DIR": " /x ",
                "GPUMON_SNAPSHOT_STACKS": "1",
                "GPUMON_SNAPSHOT_MAX_ENTRIES": "x",
            }
            settings = SnapshotSettings.from_env(environ)
        self.assertEqual(settings, SnapshotSettings("/x", True, 100_000))
        self.assertIn("GPUMON_SNAPSHOT_MAX_ENTRIES='x'", logs.messages(logging.WARNING)[0])


if __name__ == "__main__":
    unittest.main()
