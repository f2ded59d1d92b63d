"""Identity from torchrun's variables, agent addresses, settings."""

import os
import unittest

from gpumon._address import AgentAddress, default_address, parse_address, resolve_address
from gpumon._env import Identity, job_id, read_identity
from gpumon._settings import Settings

from tests.support import TORCHRUN_ENV, capture_logs


class IdentityTest(unittest.TestCase):
    def test_torchrun_worker(self):
        self.assertEqual(read_identity(TORCHRUN_ENV), Identity("run-7", 3, 1, 8))

    def test_not_torchrun(self):
        self.assertIsNone(read_identity({}))
        self.assertIsNone(read_identity({"RANK": "0"}))
        self.assertIsNone(read_identity({"RANK": "8", "WORLD_SIZE": "8"}))
        self.assertIsNone(read_identity({"RANK": "-1", "WORLD_SIZE": "8"}))
        self.assertIsNone(read_identity({"RANK": "0", "WORLD_SIZE": "0"}))
        self.assertIsNone(read_identity({"RANK": "x", "WORLD_SIZE": "2"}))
        self.assertIsNone(read_identity({"RANK": "1_0", "WORLD_SIZE": "20"}))
        self.assertIsNone(read_identity({"RANK": "0", "WORLD_SIZE": str((1 << 20) + 1)}))

    def test_numbers_parse_like_the_agent(self):
        identity = read_identity({"RANK": " +2 ", "WORLD_SIZE": "4\n", "LOCAL_RANK": "9"})
        self.assertEqual((identity.rank, identity.world_size, identity.local_rank), (2, 4, 0))
        self.assertEqual(read_identity({"RANK": "1", "WORLD_SIZE": "2"}).local_rank, 0)

    def test_job_is_the_run_id(self):
        self.assertEqual(
            job_id({"TORCHELASTIC_RUN_ID": " abc ", "MASTER_ADDR": "h", "MASTER_PORT": "1"}), "abc"
        )

    def test_run_id_none_falls_back_to_the_master(self):
        env = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.3.17", "MASTER_PORT": "29500"}
        self.assertEqual(job_id(env), "10.0.3.17:29500")
        self.assertEqual(job_id(dict(env, TORCHELASTIC_RUN_ID="NONE")), "10.0.3.17:29500")
        self.assertEqual(job_id({"MASTER_ADDR": "h", "MASTER_PORT": "23456"}), "h:23456")

    def test_without_run_id_or_master_the_job_is_unknown(self):
        # As the agent reads /proc/PID/environ; "none" is never used as an id.
        self.assertEqual(job_id({"TORCHELASTIC_RUN_ID": "none"}), "unknown-job")
        self.assertEqual(job_id({"MASTER_ADDR": "h", "MASTER_PORT": "0"}), "unknown-job")
        self.assertEqual(job_id({"MASTER_ADDR": "h", "MASTER_PORT": "70000"}), "unknown-job")
        self.assertEqual(job_id({}), "unknown-job")

    def test_ipv6_master_is_bracketed(self):
        self.assertEqual(job_id({"MASTER_ADDR": "fd00::1", "MASTER_PORT": "29500"}), "[fd00::1]:29500")
        self.assertEqual(job_id({"MASTER_ADDR": "[fd00::1]", "MASTER_PORT": "29500"}), "[fd00::1]:29500")

    def test_job_is_cut_to_256_bytes_on_a_character(self):
        job = job_id({"TORCHELASTIC_RUN_ID": "é" * 200})
        self.assertEqual(job, "é" * 128)
        self.assertEqual(len(job_id({"TORCHELASTIC_RUN_ID": "x" * 300})), 256)

    def test_undecodable_values_count_as_absent(self):
        env = {"TORCHELASTIC_RUN_ID": "r\udcff", "MASTER_ADDR": "h", "MASTER_PORT": "5"}
        self.assertEqual(job_id(env), "h:5")


class AddressTest(unittest.TestCase):
    def test_unix(self):
        self.assertEqual(parse_address("unix:/run/g.sock"), AgentAddress(path="/run/g.sock"))
        self.assertEqual(str(parse_address("unix:/run/g.sock")), "unix:/run/g.sock")

    def test_loopback_tcp(self):
        self.assertEqual(parse_address("127.0.0.1:7000"), AgentAddress(host="127.0.0.1", port=7000))
        self.assertEqual(parse_address("[::1]:7000"), AgentAddress(host="::1", port=7000))
        self.assertEqual(parse_address("localhost:1"), AgentAddress(host="localhost", port=1))
        self.assertEqual(str(parse_address("[::1]:7000")), "[::1]:7000")

    def test_refused(self):
        for bad in (
            "unix:",
            "10.0.0.1:7000",
            "example.com:7000",
            "127.0.0.1:0",
            "127.0.0.1:x",
            "nothing",
            ":80",
        ):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                parse_address(bad)
        with self.assertRaises(TypeError):
            parse_address(7000)

    def test_default(self):
        self.assertEqual(
            default_address({"XDG_RUNTIME_DIR": "/run/user/5"}).path, "/run/user/5/gpumon/hook.sock"
        )
        self.assertEqual(default_address({}).path, "/tmp/gpumon-%d/hook.sock" % os.getuid())

    def test_precedence(self):
        env = {"GPUMON_AGENT": "unix:/env.sock", "XDG_RUNTIME_DIR": "/x"}
        self.assertEqual(resolve_address("unix:/arg.sock", env).path, "/arg.sock")
        self.assertEqual(resolve_address(None, env).path, "/env.sock")
        self.assertEqual(resolve_address(None, {"XDG_RUNTIME_DIR": "/x"}).path, "/x/gpumon/hook.sock")


class SettingsTest(unittest.TestCase):
    def test_report_interval(self):
        self.assertEqual(Settings.from_env({}).report_interval_s, 1.0)
        self.assertEqual(Settings.from_env({"GPUMON_REPORT_INTERVAL": "0.25"}).report_interval_s, 0.25)
        self.assertEqual(Settings.from_env({"GPUMON_REPORT_INTERVAL": "0.0001"}).report_interval_s, 0.01)
        # The agent closes a session silent for 300 s: at most 60 s between reports.
        with self.assertLogs("gpumon", "WARNING"):
            self.assertEqual(Settings.from_env({"GPUMON_REPORT_INTERVAL": "600"}).report_interval_s, 60.0)
        with capture_logs() as logs:
            for bad in ("x", "-1", "nan", "inf"):
                self.assertEqual(Settings.from_env({"GPUMON_REPORT_INTERVAL": bad}).report_interval_s, 1.0)
        self.assertEqual(len(logs.at(30)), 4)


if __name__ == "__main__":
    unittest.main()
