"""FakeAllocator follows the caching allocator's rules."""

import threading
import unittest

from gpumon.testing import FakeAllocator, GiB, MiB


class FakeAllocatorTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeAllocator(total_bytes=8 * GiB, context_bytes=512 * MiB)

    def stats(self):
        return self.fake.memory_stats()

    def test_sizes_round_up_to_512_bytes_in_a_2_mib_small_segment(self):
        self.fake.alloc(1)
        s = self.stats()
        self.assertEqual(s["allocated_bytes.all.current"], 512)
        self.assertEqual(s["requested_bytes.all.current"], 1)
        self.assertEqual(s["reserved_bytes.all.current"], 2 * MiB)
        self.assertEqual(s["inactive_split_bytes.all.current"], 2 * MiB - 512)
        self.assertEqual(s["active_bytes.all.current"], 512)

    def test_segment_sizes_follow_the_pools(self):
        self.fake.alloc(1 * MiB)  # small pool: 2 MiB segment
        self.fake.alloc(10 * MiB)  # own segment
        self.fake.alloc(11 * MiB + 1)  # own segment, rounded up to 2 MiB
        self.fake.alloc(1 * MiB + 1)  # large, under 10 MiB: 20 MiB segment
        self.fake.alloc(18 * MiB)  # fits in the rest of that one
        self.assertEqual(self.fake.segment_sizes(), [2 * MiB, 10 * MiB, 12 * MiB, 20 * MiB])

    def test_freed_blocks_stay_cached(self):
        handle = self.fake.alloc(64 * MiB)
        self.fake.free(handle)
        s = self.stats()
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["reserved_bytes.all.current"], 64 * MiB)
        self.assertEqual(s["inactive_split_bytes.all.current"], 0)  # whole segment, not split
        self.assertEqual(s["allocated_bytes.all.peak"], 64 * MiB)

    def test_a_cached_block_is_reused_and_split(self):
        self.fake.free(self.fake.alloc(12 * MiB))
        self.fake.alloc(4 * MiB)
        self.assertEqual(self.fake.segment_sizes(), [12 * MiB])
        self.assertEqual(self.fake.allocated, 4 * MiB)
        self.assertEqual(self.fake.inactive_split, 8 * MiB)

    def test_a_large_block_with_a_small_rest_is_not_split(self):
        self.fake.free(self.fake.alloc(12 * MiB))
        self.fake.alloc(11 * MiB + 512 * 1024)  # rest 512 KiB <= 1 MiB: whole block
        self.assertEqual(self.fake.allocated, 12 * MiB)
        self.assertEqual(self.fake.inactive_split, 0)

    def test_best_fit_picks_the_smallest_free_block(self):
        big = self.fake.alloc(40 * MiB)
        small = self.fake.alloc(12 * MiB)
        self.fake.free(big)
        self.fake.free(small)
        self.fake.alloc(11 * MiB)
        self.assertEqual(self.fake.inactive_split, 0)  # took the 12 MiB block whole
        self.assertEqual(self.fake.allocated, 12 * MiB)

    def test_pools_do_not_share_segments(self):
        self.fake.free(self.fake.alloc(64 * MiB))
        self.fake.alloc(4096)
        self.assertEqual(self.fake.segment_sizes(), [64 * MiB, 2 * MiB])

    def test_freeing_merges_neighbours(self):
        a = self.fake.alloc(1024)
        b = self.fake.alloc(1024)
        self.fake.alloc(1024)
        self.fake.free(a)
        self.fake.free(b)
        # a+b merged into one 2 KiB free block, before the live third block.
        self.fake.alloc(2048)
        self.assertEqual(self.fake.segment_sizes(), [2 * MiB])
        self.assertEqual(self.fake.inactive_split, 2 * MiB - 3072)

    def test_empty_cache_frees_exactly_the_unused_segments(self):
        kept = self.fake.alloc(30 * MiB)
        self.fake.free(self.fake.alloc(50 * MiB))
        self.fake.alloc(4 * MiB)  # split off the cached 50 MiB block: that segment is in use
        self.fake.free(self.fake.alloc(100))  # a small segment, unused
        self.assertEqual(self.fake.reserved, 30 * MiB + 50 * MiB + 2 * MiB)
        self.fake.empty_cache()
        self.assertEqual(self.fake.segment_sizes(), [30 * MiB, 50 * MiB])
        self.assertEqual(self.fake.empty_cache_calls, 1)
        self.fake.free(kept)
        self.fake.empty_cache()
        self.assertEqual(self.fake.segment_sizes(), [50 * MiB])
        self.assertEqual(self.stats()["reserved_bytes.all.peak"], 82 * MiB)

    def test_mem_get_info_counts_reserved_plus_context(self):
        self.fake.alloc(1 * GiB)
        free, total = self.fake.mem_get_info()
        self.assertEqual(total, 8 * GiB)
        self.assertEqual(total - free, 1 * GiB + 512 * MiB)

    def test_full_device_releases_the_cache_then_raises(self):
        fake = FakeAllocator(total_bytes=1 * GiB, context_bytes=512 * MiB)
        fake.free(fake.alloc(300 * MiB))
        fake.alloc(400 * MiB)  # needs the cached 300 MiB back: one retry
        s = fake.memory_stats()
        self.assertEqual((s["num_alloc_retries"], s["num_ooms"]), (1, 0))
        self.assertEqual(fake.reserved, 400 * MiB)
        with self.assertRaisesRegex(MemoryError, "CUDA out of memory \\(fake\\)"):
            fake.alloc(200 * MiB)
        s = fake.memory_stats()
        self.assertEqual((s["num_alloc_retries"], s["num_ooms"]), (2, 1))
        self.assertEqual(fake.reserved, 400 * MiB)  # nothing changed

    def test_a_memory_fraction_caps_reserved(self):
        fake = FakeAllocator(total_bytes=1 * GiB, context_bytes=64 * MiB)
        self.assertIsNone(fake.memory_limit())
        fake.set_per_process_memory_fraction(0.5)
        self.assertEqual(fake.get_per_process_memory_fraction(), 0.5)
        self.assertEqual(fake.memory_limit(), (512 * MiB, "memory_fraction"))
        fake.alloc(300 * MiB)
        fake.free(fake.alloc(200 * MiB))
        fake.alloc(200 * MiB)  # reuses the cached block: no new segment
        self.assertEqual(fake.memory_stats()["num_alloc_retries"], 0)

    def test_a_segment_over_the_cap_releases_the_cache_then_raises(self):
        fake = FakeAllocator(total_bytes=1 * GiB, context_bytes=64 * MiB)
        fake.set_per_process_memory_fraction(0.5)
        seen = []
        fake.attach_out_of_memory_observer(lambda *args: seen.append(args))
        fake.alloc(300 * MiB)
        fake.free(fake.alloc(100 * MiB))
        fake.alloc(200 * MiB)  # 600 MiB > 512 MiB: the cached 100 MiB goes first
        s = fake.memory_stats()
        self.assertEqual((s["num_alloc_retries"], s["num_ooms"]), (1, 0))
        self.assertEqual(fake.reserved, 500 * MiB)
        fake.free(fake.alloc(1 * MiB))  # a 2 MiB small segment, cached
        with self.assertRaisesRegex(MemoryError, "out of memory \\(fake\\).*allowed by the memory fraction"):
            fake.alloc(20 * MiB)  # far below the device's free memory, over the cap
        s = fake.memory_stats()
        self.assertEqual((s["num_alloc_retries"], s["num_ooms"]), (2, 1))
        self.assertEqual(fake.reserved, 500 * MiB, "the cache was released, nothing taken")
        self.assertEqual(seen, [(0, 20 * MiB, 564 * MiB, 460 * MiB)])

    def test_lifting_the_cap(self):
        fake = FakeAllocator(total_bytes=1 * GiB, context_bytes=64 * MiB)
        fake.set_per_process_memory_fraction(0.25)
        with self.assertRaises(MemoryError):
            fake.alloc(300 * MiB)
        fake.set_per_process_memory_fraction(1.0)
        self.assertIsNone(fake.memory_limit())
        fake.alloc(300 * MiB)
        fake.set_per_process_memory_fraction(0.0)
        self.assertEqual(fake.memory_limit(), (0, "memory_fraction"))
        with self.assertRaises(MemoryError):
            fake.alloc(1)

    def test_memory_fraction_checks_like_torch(self):
        for bad in (1, True, "0.5", None):
            with self.assertRaises(TypeError):
                self.fake.set_per_process_memory_fraction(bad)
        for bad in (-0.1, 1.5, float("nan")):
            with self.assertRaises(ValueError):
                self.fake.set_per_process_memory_fraction(bad)
        self.assertEqual(self.fake.get_per_process_memory_fraction(), 1.0)

    def test_stats_have_torch_key_names(self):
        self.fake.alloc(5 * MiB)
        s = self.stats()
        for key in (
            "allocated_bytes.all.current",
            "allocated_bytes.all.peak",
            "reserved_bytes.all.current",
            "reserved_bytes.all.peak",
            "active_bytes.all.current",
            "inactive_split_bytes.all.current",
            "num_alloc_retries",
            "num_ooms",
        ):
            self.assertIsInstance(s[key], int, key)

    def test_reset_peaks(self):
        self.fake.free(self.fake.alloc(8 * MiB))
        self.fake.reset_peak_memory_stats()
        self.assertEqual(self.stats()["allocated_bytes.all.peak"], 0)

    def test_bad_handles_and_sizes(self):
        handle = self.fake.alloc(10)
        self.fake.free(handle)
        with self.assertRaises(ValueError):
            self.fake.free(handle)
        with self.assertRaises(ValueError):
            self.fake.alloc(-1)
        with self.assertRaises(TypeError):
            self.fake.alloc(1.5)
        empty = self.fake.alloc(0)
        self.assertEqual(self.fake.reserved, 2 * MiB)  # the earlier 10 bytes' segment only
        self.fake.free(empty)

    def test_device_info(self):
        fake = FakeAllocator(total_bytes=2 * GiB, index=3, uuid="GPU-1", name="x")
        self.assertEqual(
            fake.device_info(), {"index": 3, "uuid": "GPU-1", "name": "x", "total_bytes": 2 * GiB}
        )

    def test_is_thread_safe(self):
        def churn():
            for _ in range(300):
                self.fake.free(self.fake.alloc(3 * MiB))

        threads = [threading.Thread(target=churn) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(self.fake.allocated, 0)
        self.fake.empty_cache()
        self.assertEqual(self.fake.reserved, 0)


if __name__ == "__main__":
    unittest.main()
