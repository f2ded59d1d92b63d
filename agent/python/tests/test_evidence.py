"""``dump_evidence``: carried out by the reporter thread at once, its files, its bounds and refusals."""

import json
import logging
import os
import stat
import sys
import tempfile
import threading
import unittest
from unittest import mock

from gpumon import _actions, _evidence
from gpumon._env import Identity
from gpumon._runtime import Runtime
from gpumon._settings import MAX_STACKS_BYTES, Settings

from tests.support import (
    TORCHRUN_ENV,
    FakeAgent,
    FakeFlightRecorder,
    capture_logs,
    enter,
    fr_dump,
    fr_entry,
    quiet_runtime,
    wait_until,
)


def dump_action(action_id, reason="rank 3 quiet for 60 s"):
    return {"id": action_id, "kind": "dump_evidence", "reason": reason}


class EvidenceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "dumps")
        self.raw = fr_dump([fr_entry(1), fr_entry(2, retired=False)])
        self.fr = FakeFlightRecorder(self, gloo=self.raw)
        settings = Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0, dump_dir=self.dir)
        self.rt, self.logs = quiet_runtime(self, settings=settings)
        self.rt.step()
        release = threading.Event()
        self.addCleanup(release.set)
        blocked = threading.Thread(target=release.wait, name="data-prefetch", daemon=True)
        blocked.start()

    def run_action(self, action):
        """What the reporter thread does with a poll answer; the ack it queued."""
        outbox = self.rt._reporter._ack_outbox
        before = len(outbox)
        self.rt._reporter.accept_actions([action])
        return list(outbox)[before:]

    def files(self):
        return sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []

    def test_written_at_once_with_no_step_boundary(self):
        (ack,) = self.run_action(dump_action(12))
        stem = os.path.join(self.dir, "hang-run-7-rank3-action12")
        self.assertEqual(
            ack,
            {
                "v": 1,
                "op": "ack",
                "id": 12,
                "state": "done",
                "freed_bytes": 0,
                "at_step": 1,
                "response": "%s.stacks.txt, %s.fr.json" % (stem, stem),
                "detail": "%s.stacks.txt, %s.fr.json" % (stem, stem),
            },
        )
        self.assertEqual(list(self.rt._actions), [], "not handed to the training thread")
        self.assertFalse(self.rt._actions_pending)
        self.assertEqual(stat.S_IMODE(os.stat(self.dir).st_mode), 0o700)
        for path in (stem + ".stacks.txt", stem + ".fr.json"):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(stem + ".fr.json", "rb") as f:
            self.assertEqual(f.read(), self.raw)
        with open(stem + ".stacks.txt", encoding="utf-8") as f:
            stacks = f.read()
        self.assertLessEqual(len(stacks.encode()), MAX_STACKS_BYTES)
        self.assertIn("rank 3 of job 'run-7', action 12 (rank 3 quiet for 60 s)", stacks)
        self.assertIn("== faulthandler ==", stacks)
        self.assertIn("Thread 'MainThread' (ident %d" % threading.get_ident(), stacks)
        self.assertIn("the training thread):", stacks)
        self.assertIn("Thread 'data-prefetch'", stacks)
        self.assertIn("in test_written_at_once_with_no_step_boundary", stacks)
        self.assertEqual(self.rt.stats()["evidence_dumps"], 1)

    def stacks_of(self, action_id):
        (ack,) = self.run_action(dump_action(action_id))
        with open(ack["detail"].split(", ")[0], "rb") as f:
            return f.read()

    def test_the_stacks_file_is_cut_at_its_limit(self):
        whole = self.stacks_of(1)
        threads = whole.index(b"== threads ==")
        middle = threads + (len(whole) - threads) // 2
        for action_id, limit, kept in ((2, 600, b"== faulthandler =="), (3, middle, b"== threads ==")):
            with self.subTest(limit=limit), mock.patch.object(_evidence, "MAX_STACKS_BYTES", limit):
                stacks = self.stacks_of(action_id)
                self.assertEqual(len(stacks), limit)
                self.assertTrue(stacks.endswith(b"\n[cut at %d bytes]\n" % limit))
                self.assertIn(kept, stacks)

    def test_once_per_action_id(self):
        self.run_action(dump_action(5))
        files = self.files()
        self.assertEqual(len(files), 2)
        self.assertEqual(self.run_action(dump_action(5)), [], "seen: neither run nor acked again")
        self.assertEqual(self.files(), files)
        self.assertEqual(self.rt.stats()["evidence_dumps"], 1)

    def test_at_most_four_per_process(self):
        for action_id in range(1, 5):
            (ack,) = self.run_action(dump_action(action_id))
            self.assertEqual(ack["state"], "done")
        (ack,) = self.run_action(dump_action(5))
        self.assertEqual((ack["state"], ack["freed_bytes"]), ("failed", None))
        self.assertEqual(ack["detail"], "the limit of 4 evidence dumps per process was reached; nothing written")
        self.assertEqual(len(self.files()), 8)

    def test_without_a_flight_recorder_only_the_stacks(self):
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": None}))
        (ack,) = self.run_action(dump_action(3))
        self.assertEqual(ack["state"], "done")
        self.assertEqual(self.files(), ["hang-run-7-rank3-action3.stacks.txt"])
        self.assertEqual(ack["detail"], os.path.join(self.dir, "hang-run-7-rank3-action3.stacks.txt"))

    def test_a_recorder_with_no_entries_writes_no_dump(self):
        self.fr.dumps["gloo"] = fr_dump([])
        self.run_action(dump_action(3))
        self.assertEqual(self.files(), ["hang-run-7-rank3-action3.stacks.txt"])

    def test_each_backend_with_entries_has_its_file(self):
        nccl = fr_dump([fr_entry(40, op="nccl:all_reduce")])
        self.fr.dumps["nccl"] = nccl
        self.run_action(dump_action(3))
        self.assertEqual(
            self.files(),
            [
                "hang-run-7-rank3-action3.fr-gloo.json",
                "hang-run-7-rank3-action3.fr.json",
                "hang-run-7-rank3-action3.stacks.txt",
            ],
        )
        with open(os.path.join(self.dir, "hang-run-7-rank3-action3.fr.json"), "rb") as f:
            self.assertEqual(f.read(), nccl)

    def test_a_dump_over_the_limit_is_written_with_its_active_entries_only(self):
        active = fr_dump([fr_entry(2, retired=False)])
        self.fr.active["gloo"] = active
        enter(self, mock.patch.object(_evidence, "MAX_FR_DUMP_BYTES", len(self.raw) - 1))
        (ack,) = self.run_action(dump_action(4))
        path = os.path.join(self.dir, "hang-run-7-rank3-action4.fr-active.json")
        self.assertIn(path, ack["detail"].split(", "))
        with open(path, "rb") as f:
            self.assertEqual(json.load(f)["entries"][0]["retired"], False)
        self.assertIn(("gloo", True), self.fr.calls)

    def test_a_dump_over_the_limit_even_when_active_is_left_out(self):
        enter(self, mock.patch.object(_evidence, "MAX_FR_DUMP_BYTES", 10))
        (ack,) = self.run_action(dump_action(4))
        self.assertEqual(ack["state"], "done")
        self.assertEqual(self.files(), ["hang-run-7-rank3-action4.stacks.txt"])

    def test_a_name_taken_gets_a_number(self):
        os.makedirs(self.dir, mode=0o700)
        open(os.path.join(self.dir, "hang-run-7-rank3-action9.stacks.txt"), "w").close()
        (ack,) = self.run_action(dump_action(9))
        self.assertEqual(ack["state"], "done")
        self.assertIn("hang-run-7-rank3-action9-2.stacks.txt", ack["detail"])
        self.assertIn("hang-run-7-rank3-action9-2.fr.json", ack["detail"])

    def refused(self, action_id=1):
        (ack,) = self.run_action(dump_action(action_id))
        self.assertEqual(ack["state"], "failed")
        self.assertEqual(self.rt.stats()["evidence_dumps"], 0)
        return ack["detail"]

    def test_a_directory_others_may_write_is_refused(self):
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o775)
        detail = self.refused()
        self.assertEqual(
            detail,
            "the dump directory %s may be written by others (mode 775); gpumon writes no evidence there"
            % self.dir,
        )
        self.assertEqual(self.files(), [])
        self.assertIn(detail, self.logs.messages(logging.WARNING)[-1])

    def test_a_symbolic_link_is_refused(self):
        target = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(target, mode=0o700)
        os.symlink(target, self.dir)
        self.assertIn("is a symbolic link", self.refused())
        self.assertEqual(os.listdir(target), [])

    def test_a_file_is_refused(self):
        open(self.dir, "w").close()
        self.assertIn("is not a directory", self.refused())

    @unittest.skipUnless(os.geteuid() == 0, "only root can give a directory to another user")
    def test_another_users_directory_is_refused(self):
        os.makedirs(self.dir, mode=0o700)
        os.chown(self.dir, 4321, -1)
        self.assertIn("belongs to uid 4321, not to you (uid 0)", self.refused())

    def test_the_default_directory_is_per_user_in_the_temporary_directory(self):
        settings = Settings(report_interval_s=3600.0, shutdown_timeout_s=2.0)
        self.rt, _ = quiet_runtime(self, settings=settings)
        enter(self, mock.patch.object(tempfile, "gettempdir", lambda: self.tmp.name))
        (ack,) = self.run_action(dump_action(2))
        default = os.path.join(self.tmp.name, "gpumon-dumps-%d" % os.geteuid())
        self.assertEqual(ack["state"], "done")
        self.assertTrue(ack["detail"].startswith(default + os.sep))
        self.assertEqual(stat.S_IMODE(os.stat(default).st_mode), 0o700)

    def test_the_dump_dir_comes_from_the_environment(self):
        self.assertEqual(Settings.from_env({"GPUMON_DUMP_DIR": " /scratch/d "}).dump_dir, "/scratch/d")
        self.assertIsNone(Settings.from_env({"GPUMON_DUMP_DIR": " "}).dump_dir)

    def test_the_job_is_made_safe_for_a_file_name(self):
        identity = Identity(job="10.0.0.1:29500/run 7" + "x" * 100, rank=12, local_rank=0, world_size=16)
        stem = _evidence.file_stem(identity, 77)
        self.assertEqual(stem, "hang-" + ("10.0.0.1_29500_run_7" + "x" * 44) + "-rank12-action77")

    def test_the_kind_is_known_and_others_still_wait_for_a_boundary(self):
        self.assertIn("dump_evidence", _actions.KINDS)
        self.assertEqual(self.run_action({"id": 8, "kind": "release_cache", "reason": ""}), [])
        self.assertTrue(self.rt._actions_pending)


class EvidenceThroughTheAgentTest(unittest.TestCase):
    """A poll answer brings the action; its ack goes back while the training thread does nothing."""

    def test_acked_with_the_paths_without_any_step(self):
        enter(self, capture_logs())
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        enter(self, mock.patch.dict(sys.modules, {"torch._C._distributed_c10d": None}))
        agent = FakeAgent()
        self.addCleanup(agent.close)
        agent.add_action(31, kind="dump_evidence", reason="job hung")
        runtime = Runtime()
        self.addCleanup(runtime.shutdown)
        settings = Settings(report_interval_s=0.02, shutdown_timeout_s=2.0, dump_dir=tmp.name)
        self.assertTrue(runtime.init(agent=agent.address, environ=dict(TORCHRUN_ENV), settings=settings))
        wait_until(lambda: agent.ops("ack"), timeout=20.0, message="the ack")
        (ack,) = agent.ops("ack")
        path = os.path.join(tmp.name, "hang-run-7-rank3-action31.stacks.txt")
        self.assertEqual((ack["id"], ack["state"], ack["at_step"], ack["detail"]), (31, "done", 0, path))
        with open(path, encoding="utf-8") as f:
            self.assertIn("Thread 'gpumon-reporter'", f.read())
        self.assertEqual(runtime.stats()["step"], 0)


if __name__ == "__main__":
    unittest.main()
