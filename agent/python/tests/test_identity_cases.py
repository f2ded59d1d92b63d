"""The launcher table shared with the agent: the hook reads every case as
``agent/src/discovery.rs`` does (its test reads the same file)."""

import json
import os
import unittest

from gpumon._env import Identity, read_identity

CASES = os.path.join(os.path.dirname(__file__), "identity_cases.json")


class IdentityCasesTest(unittest.TestCase):
    def test_every_launcher_case_reads_as_the_agent_reads_it(self):
        with open(CASES, encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        self.assertGreaterEqual(len(cases), 10)
        for case in cases:
            with self.subTest(case["name"]):
                expect = case["expect"]
                want = None if expect is None else Identity(**expect)
                self.assertEqual(read_identity(case["env"]), want)


if __name__ == "__main__":
    unittest.main()
