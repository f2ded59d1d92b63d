"""Actions: handed over by the reporter, carried out at the next step boundary."""

import unittest
from unittest import mock

from gpumon.testing import FakeAllocator, GiB, MiB

from tests.support import quiet_runtime


def deliver(runtime, *actions):
    """What the reporter thread does with a poll answer."""
    runtime._reporter.accept_actions(list(actions))


def release(action_id, reason="oom in 5 min"):
    return {"id": action_id, "kind": "release_cache", "reason": reason}


class ActionTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeAllocator(total_bytes=8 * GiB)
        self.runtime, self.logs = quiet_runtime(self, source=self.fake)
        self.live = self.fake.alloc(100 * MiB)
        self.fake.free(self.fake.alloc(300 * MiB))  # cached, releasable
        self.fake.free(self.fake.alloc(1000))  # a cached small segment

    def acks(self):
        return list(self.runtime._acks)

    def test_runs_only_at_the_next_step_boundary(self):
        deliver(self.runtime, release(12))
        self.assertEqual(self.fake.empty_cache_calls, 0)
        self.runtime.mark("not a boundary")
        with self.runtime.section("data"):
            pass
        self.assertEqual(self.fake.empty_cache_calls, 0)
        self.assertEqual(self.acks(), [])
        with mock.patch("gpumon._actions.gc.collect") as collect:
            self.runtime.step()
        collect.assert_called_once_with()
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.assertEqual(self.fake.reserved, 100 * MiB)
        self.assertEqual(
            self.acks(),
            [
                {
                    "v": 1,
                    "op": "ack",
                    "id": 12,
                    "state": "done",
                    "freed_bytes": 300 * MiB + 2 * MiB,
                    "at_step": 1,
                    "response": None,
                    "detail": None,
                }
            ],
        )

    def test_callbacks_see_it_first_and_answer_in_the_ack(self):
        seen = []

        def first(action):
            seen.append((dict(action), self.fake.empty_cache_calls))
            return "batch size 32 -> 24"

        self.runtime.on_action(first)
        self.runtime.on_action(lambda action: None)
        self.runtime.on_action(lambda action: 7)
        self.runtime.step()
        deliver(self.runtime, release(3, "forecast"))
        self.runtime.step()
        self.assertEqual(seen, [({"id": 3, "kind": "release_cache", "reason": "forecast"}, 0)])
        (ack,) = self.acks()
        self.assertEqual(
            (ack["response"], ack["at_step"], ack["state"]), ("batch size 32 -> 24; 7", 2, "done")
        )

    def test_a_raising_callback_breaks_nothing(self):
        def broken(action):
            raise ValueError("user bug")

        self.runtime.on_action(broken)
        self.runtime.on_action(lambda action: "still here")
        deliver(self.runtime, release(1))
        self.runtime.step()  # does not raise
        (ack,) = self.acks()
        self.assertEqual((ack["state"], ack["response"]), ("done", "still here"))
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.assertTrue(any("on_action callback" in m for m in self.logs.messages()))

    def test_an_action_listed_twice_runs_once(self):
        deliver(self.runtime, release(5))
        deliver(self.runtime, release(5))
        self.runtime.step()
        deliver(self.runtime, release(5))
        self.runtime.step()
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.assertEqual(len(self.acks()), 1)

    def test_several_actions_at_one_boundary(self):
        deliver(self.runtime, release(1), release(2))
        self.runtime.step()
        self.assertEqual([a["id"] for a in self.acks()], [1, 2])
        self.assertEqual([a["freed_bytes"] for a in self.acks()], [302 * MiB, 0])

    def test_unknown_kind_fails_with_a_reason(self):
        answers = []
        self.runtime.on_action(lambda action: answers.append(action["kind"]) or "noted")
        deliver(self.runtime, {"id": 9, "kind": "shrink_batch", "reason": "r"})
        self.runtime.step()
        (ack,) = self.acks()
        self.assertEqual((ack["state"], ack["freed_bytes"], ack["response"]), ("failed", None, "noted"))
        self.assertIn("shrink_batch", ack["detail"])
        self.assertEqual(answers, ["shrink_batch"])
        self.assertEqual(self.fake.empty_cache_calls, 0)

    def test_a_failing_release_is_acked_as_failed(self):
        with mock.patch.object(self.fake, "empty_cache", side_effect=RuntimeError("CUDA error: busy")):
            deliver(self.runtime, release(4))
            self.runtime.step()
        (ack,) = self.acks()
        self.assertEqual(ack["state"], "failed")
        self.assertEqual(ack["detail"], "RuntimeError: CUDA error: busy")

    def test_without_a_memory_source_it_fails(self):
        self.runtime._set_source(None)
        deliver(self.runtime, release(4))
        self.runtime.step()
        self.assertEqual(self.acks()[0]["state"], "failed")
        self.assertIn("no GPU memory source", self.acks()[0]["detail"])

    def test_malformed_actions_are_ignored(self):
        deliver(
            self.runtime, {"id": "x", "kind": "release_cache"}, {"id": True, "kind": "release_cache"}, "junk"
        )
        self.runtime.step()
        self.assertEqual(self.acks(), [])
        self.assertEqual(self.fake.empty_cache_calls, 0)

    def test_an_ack_lost_by_the_agent_is_sent_again(self):
        reporter = self.runtime._reporter
        deliver(self.runtime, release(8))
        self.runtime.step()
        ack = self.runtime._acks.popleft()
        reporter._sent_acks[8] = ack  # as if sent and confirmed
        deliver(self.runtime, release(8))  # ...but listed again
        self.assertEqual(list(reporter._ack_outbox), [ack])
        self.assertEqual(self.fake.empty_cache_calls, 1)


if __name__ == "__main__":
    unittest.main()

    def test_a_training_thread_that_reaches_no_boundary_gets_a_bounded_queue(self):
        from gpumon._settings import ACTION_QUEUE_MAXLEN

        over = 5
        deliver(self.runtime, *[release(100 + i) for i in range(ACTION_QUEUE_MAXLEN + over)])
        self.assertEqual(len(self.runtime._actions), ACTION_QUEUE_MAXLEN)
        refused = list(self.runtime._reporter._ack_outbox)
        self.assertEqual([a["id"] for a in refused], [100 + ACTION_QUEUE_MAXLEN + i for i in range(over)])
        self.assertTrue(all(a["state"] == "failed" for a in refused), refused)
        self.assertIn("already wait for the training thread", refused[0]["detail"])
        self.runtime.step()
        self.assertEqual(len(self.acks()), ACTION_QUEUE_MAXLEN, "the queued ones run at the boundary")

    def test_the_ack_outbox_drops_its_oldest_past_its_bound(self):
        from gpumon._settings import ACK_QUEUE_MAXLEN

        reporter = self.runtime._reporter
        for i in range(ACK_QUEUE_MAXLEN + 3):
            reporter._queue_ack({"id": i})
        self.assertEqual(len(reporter._ack_outbox), ACK_QUEUE_MAXLEN)
        self.assertEqual(reporter._ack_outbox[0]["id"], 3)
        self.assertEqual(reporter.counters["acks_dropped"], 3)

