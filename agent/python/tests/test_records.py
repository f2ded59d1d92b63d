"""Record shapes, clipping and report packing."""

import json
import logging
import os
import sys
import types
import unittest
from unittest import mock

from gpumon._memory import (
    TorchMemorySource,
    alloc_conf_fraction,
    default_memory_source,
    format_uuid,
    read_alloc_fields,
)
from gpumon._records import (
    REPORT_HEAD,
    ack_message,
    alloc_fields,
    alloc_record,
    clean_device,
    encode_record,
    register_message,
    report_line,
    to_record,
)
from gpumon._settings import MAX_REPORT_BYTES
from gpumon.testing import FakeAllocator, GiB, MiB

from tests.support import IDENTITY, capture_logs, enter


class AllocFieldsTest(unittest.TestCase):
    def test_from_a_fake(self):
        fake = FakeAllocator(total_bytes=4 * GiB, context_bytes=256 * MiB)
        fake.alloc(5 * MiB)
        fields = alloc_fields(fake.memory_stats(), fake.mem_get_info())
        self.assertEqual(
            fields,
            {
                "allocated": 5 * MiB,
                "reserved": 20 * MiB,
                "active": 5 * MiB,
                "inactive_split": 15 * MiB,
                "peak_allocated": 5 * MiB,
                "peak_reserved": 20 * MiB,
                "alloc_retries": 0,
                "ooms": 0,
                "device_used": 276 * MiB,
                "device_total": 4 * GiB,
            },
        )

    def test_needs_allocated_and_reserved(self):
        self.assertIsNone(alloc_fields({}))
        self.assertIsNone(alloc_fields({"allocated_bytes.all.current": 1}))
        self.assertEqual(
            alloc_fields({"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2, "num_ooms": -1}),
            {"allocated": 1, "reserved": 2},
        )


class CapFieldsTest(unittest.TestCase):
    def stats(self):
        return {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2}

    def test_cap_and_its_source(self):
        fields = alloc_fields(self.stats(), (6 * GiB, 8 * GiB), (2 * GiB, "memory_fraction"))
        self.assertEqual((fields["cap"], fields["cap_source"]), (2 * GiB, "memory_fraction"))
        for source in ("alloc_conf", "allocator"):
            self.assertEqual(alloc_fields(self.stats(), None, (5, source))["cap_source"], source)

    def test_cut_to_the_device(self):
        fields = alloc_fields(self.stats(), (6 * GiB, 8 * GiB), (9 * GiB, "allocator"))
        self.assertEqual(fields["cap"], 8 * GiB)
        fields = alloc_fields(self.stats(), None, (1 << 50, "allocator"))
        self.assertEqual(fields["cap"], 1 << 50)
        self.assertNotIn("cap", alloc_fields(self.stats(), None, ((1 << 50) + 1, "allocator")))

    def test_an_impossible_device_is_not_sent(self):
        for total in (0, (1 << 50) + 1):
            fields = alloc_fields(self.stats(), (0, total), (9 * GiB, "allocator"))
            want = {"allocated": 1, "reserved": 2, "cap": 9 * GiB, "cap_source": "allocator"}
            self.assertEqual(fields, want)

    def test_a_bad_limit_sends_neither_field(self):
        for limit in (
            None,
            (0, "memory_fraction"),
            (-1, "memory_fraction"),
            (1.5, "memory_fraction"),
            (True, "memory_fraction"),
            (10, "mig"),
            (10, None),
            (10,),
            "10",
            10,
        ):
            fields = alloc_fields(self.stats(), (6 * GiB, 8 * GiB), limit)
            want = {"allocated": 1, "reserved": 2, "device_used": 2 * GiB, "device_total": 8 * GiB}
            self.assertEqual(fields, want, limit)

    def test_read_from_a_fake(self):
        fake = FakeAllocator(total_bytes=4 * GiB, context_bytes=256 * MiB)
        fake.alloc(5 * MiB)
        self.assertNotIn("cap", read_alloc_fields(fake))
        fake.set_per_process_memory_fraction(0.25)
        fields = read_alloc_fields(fake)
        self.assertEqual((fields["cap"], fields["cap_source"]), (1 * GiB, "memory_fraction"))
        self.assertEqual(fields["reserved"], 20 * MiB)
        record = json.loads(encode_record(alloc_record(1.0, fields)))
        self.assertEqual((record["cap"], record["cap_source"]), (1 * GiB, "memory_fraction"))

    def test_a_failing_memory_limit_keeps_the_record(self):
        fake = FakeAllocator(total_bytes=4 * GiB, context_bytes=256 * MiB)
        fake.alloc(5 * MiB)

        def broken():
            raise RuntimeError("no limit today")

        fake.memory_limit = broken
        with capture_logs() as logs:
            fields = read_alloc_fields(fake)
        self.assertEqual(fields, alloc_fields(fake.memory_stats(), fake.mem_get_info()))
        self.assertNotIn("cap", fields)
        self.assertEqual(
            logs.messages(logging.DEBUG), ["gpumon: reading the memory limit failed: no limit today"]
        )


class AllocConfTest(unittest.TestCase):
    def test_the_fraction(self):
        self.assertEqual(alloc_conf_fraction("per_process_memory_fraction:0.5"), 0.5)
        self.assertEqual(
            alloc_conf_fraction(" expandable_segments:True , per_process_memory_fraction : 0.25 "), 0.25
        )
        self.assertEqual(alloc_conf_fraction("per_process_memory_fraction:1"), 1.0)
        self.assertEqual(
            alloc_conf_fraction("per_process_memory_fraction:0.5,per_process_memory_fraction:0.3"), 0.3
        )

    def test_nothing_usable(self):
        for conf in (
            None,
            "",
            "max_split_size_mb:128",
            "per_process_memory_fraction",
            "per_process_memory_fraction:",
            "per_process_memory_fraction:half",
            "per_process_memory_fraction:0",
            "per_process_memory_fraction:-0.5",
            "per_process_memory_fraction:1.5",
            "per_process_memory_fraction:nan",
            "per_process_memory_fraction:inf",
            "per_process_memory_fraction_x:0.5",
            "per_process_memory_fraction:0.5:0.6",
        ):
            self.assertIsNone(alloc_conf_fraction(conf), conf)

    def test_a_malformed_pair_does_not_hide_a_good_one(self):
        key = "per_process_memory_fraction"
        self.assertEqual(alloc_conf_fraction("%s:x,,%s:0.75" % (key, key)), 0.75)
        self.assertEqual(alloc_conf_fraction("%s:0.75,%s:2" % (key, key)), 0.75)


class RecordsTest(unittest.TestCase):
    def test_step(self):
        record = to_record(("step", 1.5, 7, 12.345678, {"data": 1.0, "forward": 2.5}, "cuda"))
        self.assertEqual(
            record,
            {
                "type": "step",
                "t": 1.5,
                "step": 7,
                "duration_ms": 12.3457,
                "sections": {"data": 1.0, "forward": 2.5},
                "clock": "cuda",
            },
        )

    def test_step_with_its_peer_group(self):
        record = to_record(("step", 1.5, 7, 12.0, {}, "cpu", 2))
        self.assertEqual(record["group"], 2)
        self.assertNotIn("group", to_record(("step", 1.5, 7, 12.0, {}, "cpu")))

    def test_step_with_its_waits_per_process_group(self):
        waits = {"p2p": [2, 7.00049], "1": [3, 15.0], "0": [1, 20.1234]}
        record = to_record(("step", 1.5, 7, 50.0, {}, "cpu", 2, waits))
        self.assertEqual(record["group"], 2)
        self.assertEqual(record["waits"], [["0", 1, 20.123], ["1", 3, 15.0], ["p2p", 2, 7.0]])
        self.assertEqual(json.loads(encode_record(record))["waits"], record["waits"])
        no_group = to_record(("step", 1.5, 7, 50.0, {}, "cpu", None, {"0": [1, 2.0]}))
        self.assertNotIn("group", no_group)
        self.assertEqual(no_group["waits"], [["0", 1, 2.0]])

    def test_a_step_without_waits_has_no_key(self):
        self.assertNotIn("waits", to_record(("step", 1.5, 7, 50.0, {}, "cpu")))
        self.assertNotIn("waits", to_record(("step", 1.5, 7, 50.0, {}, "cpu", 2)))
        self.assertNotIn("waits", to_record(("step", 1.5, 7, 50.0, {}, "cpu", None, {})))

    def test_waits_keep_the_eight_longest_groups_sorted_by_name(self):
        waits = {str(i): [1, float(i)] for i in range(12)}
        waits["p2p"] = [4, float("nan")]
        waits["x"] = [1, -1.0]
        record = to_record(("step", 1.5, 7, 50.0, {}, "cpu", None, waits))
        self.assertEqual(record["waits"], [[str(i), 1, float(i)] for i in (10, 11, 4, 5, 6, 7, 8, 9)])

    def test_clipping(self):
        sections = {("s%d" % i): 1.0 for i in range(40)}
        record = to_record(("step", 1.0, 1, 1.0, sections, "cpu"))
        self.assertEqual(len(record["sections"]), 32)
        event = to_record(("event", 1.0, "n" * 200, "d" * 2000))
        self.assertEqual((len(event["name"]), len(event["detail"])), (128, 1024))
        self.assertEqual(to_record(("step", 1.0, 1, float("nan"), {}, "cpu"))["duration_ms"], 0.0)

    def test_snapshot(self):
        self.assertEqual(
            to_record(("snapshot", 2.0, "s", {"allocated": 1, "reserved": 2})),
            {"type": "snapshot", "t": 2.0, "name": "s", "stats": {"allocated": 1, "reserved": 2}},
        )

    def test_register(self):
        message = register_message(42, IDENTITY, {"index": 1, "uuid": "GPU-a", "name": "n", "total_bytes": 5})
        self.assertEqual(
            message,
            {
                "v": 1,
                "op": "register",
                "pid": 42,
                "job": "run-7",
                "rank": 3,
                "local_rank": 1,
                "world_size": 8,
                "hook_version": "0.1.0",
                "device": {"index": 1, "uuid": "GPU-a", "name": "n", "total_bytes": 5},
            },
        )
        self.assertIsNone(register_message(42, IDENTITY, None)["device"])
        self.assertIsNone(clean_device({"index": -1, "total_bytes": 5}))

    def test_ack(self):
        self.assertEqual(
            ack_message(12, True, freed_bytes=100, at_step=130, response="r"),
            {
                "v": 1,
                "op": "ack",
                "id": 12,
                "state": "done",
                "freed_bytes": 100,
                "at_step": 130,
                "response": "r",
                "detail": None,
            },
        )
        failed = ack_message(13, False, at_step=2, detail="boom")
        self.assertEqual((failed["state"], failed["freed_bytes"], failed["detail"]), ("failed", None, "boom"))

    def test_report_lines_are_valid_json(self):
        records = [to_record(("event", 1.0, "e%d" % i, None)) for i in range(3)]
        line = report_line([encode_record(r) for r in records])
        self.assertTrue(line.endswith(b"\n"))
        self.assertTrue(line.startswith(REPORT_HEAD))
        self.assertEqual(json.loads(line), {"v": 1, "op": "report", "records": records})
        self.assertEqual(json.loads(report_line([])), {"v": 1, "op": "report", "records": []})
        self.assertIsNone(encode_record({"t": float("nan")}))
        self.assertIsNone(encode_record({"t": 1.0, "x": "y" * MAX_REPORT_BYTES}))


class UuidTest(unittest.TestCase):
    def test_formats(self):
        want = "GPU-5c0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8"
        self.assertEqual(format_uuid("5c0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8"), want)
        self.assertEqual(format_uuid("5C0A1B2C3D4E5F60718293A4B5C6D7E8"), want)
        self.assertEqual(format_uuid(want), want)
        self.assertEqual(format_uuid(bytes.fromhex("5c0a1b2c3d4e5f60718293a4b5c6d7e8")), want)

        class CUuuid:  # torch's _CUuuid has .bytes
            bytes = bytes.fromhex("5c0a1b2c3d4e5f60718293a4b5c6d7e8")

        self.assertEqual(format_uuid(CUuuid()), want)
        self.assertEqual(format_uuid("MIG-abc"), "MIG-abc")
        self.assertIsNone(format_uuid(None))
        self.assertIsNone(format_uuid(""))


class TorchSourceTest(unittest.TestCase):
    def test_without_torch_it_reports_nothing(self):
        source = TorchMemorySource()
        self.assertFalse(source.observe())
        self.assertEqual(source.memory_stats(), {})
        self.assertIsNone(source.mem_get_info())
        self.assertIsNone(source.device_info())
        self.assertIsNone(source.memory_limit())
        source.empty_cache()

    def test_reads_the_device_the_training_thread_uses(self):
        calls = []

        class Props:
            name = "NVIDIA H100 80GB HBM3"
            total_memory = 80 * GiB

            class uuid:  # noqa: N801 (torch's _CUuuid)
                bytes = bytes(range(16))

        cuda = types.SimpleNamespace(
            initialized=False,
            is_initialized=lambda: cuda.initialized,
            current_device=lambda: 3,
            memory_stats=lambda device: (
                calls.append(device) or {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2}
            ),
            mem_get_info=lambda device: (70 * GiB, 80 * GiB),
            empty_cache=lambda: calls.append("empty"),
            get_device_properties=lambda device: Props,
        )
        torch = types.ModuleType("torch")
        torch.cuda = cuda
        with mock.patch.dict(sys.modules, {"torch": torch}):
            self.assertIsInstance(default_memory_source(), TorchMemorySource)
            source = TorchMemorySource()
            self.assertFalse(source.observe())  # CUDA not initialised: nothing, and no init
            self.assertEqual(source.memory_stats(), {})
            cuda.initialized = True
            self.assertEqual(source.memory_stats(), {})  # device not known yet
            self.assertTrue(source.observe())
            self.assertEqual(source.memory_stats()["reserved_bytes.all.current"], 2)
            self.assertEqual(source.mem_get_info(), (70 * GiB, 80 * GiB))
            source.empty_cache()
            self.assertEqual(
                source.device_info(),
                {
                    "index": 3,
                    "uuid": "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
                    "name": "NVIDIA H100 80GB HBM3",
                    "total_bytes": 80 * GiB,
                },
            )
        self.assertEqual(calls, [3, "empty"])

    def stub_torch(self, fraction=None, initialized=True):
        """A ``torch`` whose CUDA runs device 2 of 80 GiB at ``fraction``
        (``None``: a torch without ``get_per_process_memory_fraction``)."""
        calls = []
        cuda = types.SimpleNamespace(
            initialized=initialized,
            is_initialized=lambda: cuda.initialized,
            current_device=lambda: 2,
            mem_get_info=lambda device: calls.append(("mem_get_info", device)) or (70 * GiB, 80 * GiB),
            memory_stats=lambda device: {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2},
        )
        if fraction is not None:
            cuda.get_per_process_memory_fraction = lambda device: calls.append(("fraction", device)) or fraction
        torch = types.ModuleType("torch")
        torch.cuda = cuda
        enter(self, mock.patch.dict(sys.modules, {"torch": torch}))
        return cuda, calls

    def alloc_conf(self, value):
        enter(self, mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": value}))

    def without_alloc_conf(self):
        enter(self, mock.patch.dict(os.environ))
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        os.environ.pop("PYTORCH_ALLOC_CONF", None)

    def test_memory_fraction_cap(self):
        self.without_alloc_conf()
        _, calls = self.stub_torch(0.25)
        source = TorchMemorySource()
        self.assertIsNone(source.memory_limit())  # device not known yet
        self.assertTrue(source.observe())
        self.assertEqual(source.memory_limit(), (20 * GiB, "memory_fraction"))
        self.assertEqual(calls, [("fraction", 2), ("mem_get_info", 2)])
        fields = read_alloc_fields(source)
        self.assertEqual(
            fields,
            {
                "allocated": 1,
                "reserved": 2,
                "device_used": 10 * GiB,
                "device_total": 80 * GiB,
                "cap": 20 * GiB,
                "cap_source": "memory_fraction",
            },
        )

    def test_a_failing_getter_loses_only_the_cap(self):
        self.without_alloc_conf()
        cuda, _ = self.stub_torch(0.25)

        def broken(device):
            raise RuntimeError("CUDA error: unknown")

        cuda.get_per_process_memory_fraction = broken
        fields = read_alloc_fields(TorchMemorySource(2))
        self.assertEqual(fields["reserved"], 2)
        self.assertNotIn("cap", fields)
        self.assertNotIn("cap_source", fields)

    def test_alloc_conf_cap(self):
        self.alloc_conf("expandable_segments:True, per_process_memory_fraction:0.25")
        self.stub_torch(0.25)
        self.assertEqual(TorchMemorySource(2).memory_limit(), (20 * GiB, "alloc_conf"))

    def test_pytorch_alloc_conf_counts_when_the_cuda_one_is_unset(self):
        self.without_alloc_conf()
        self.stub_torch(0.25)
        os.environ["PYTORCH_ALLOC_CONF"] = "per_process_memory_fraction:0.25"
        self.assertEqual(TorchMemorySource(2).memory_limit(), (20 * GiB, "alloc_conf"))
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        self.assertEqual(TorchMemorySource(2).memory_limit(), (20 * GiB, "memory_fraction"))

    def test_a_fraction_set_since_overrides_alloc_conf(self):
        self.alloc_conf("per_process_memory_fraction:0.25")
        self.stub_torch(0.5)
        self.assertEqual(TorchMemorySource(2).memory_limit(), (40 * GiB, "memory_fraction"))

    def test_no_cap(self):
        self.alloc_conf("per_process_memory_fraction:1.0")
        _, calls = self.stub_torch(1.0)
        self.assertIsNone(TorchMemorySource(2).memory_limit())
        self.assertEqual(calls, [("fraction", 2)])

    def test_without_the_getter_only_alloc_conf_counts(self):
        self.without_alloc_conf()
        self.stub_torch(None)
        source = TorchMemorySource(2)
        self.assertIsNone(source.memory_limit())
        self.alloc_conf("per_process_memory_fraction:0.5")
        self.assertEqual(source.memory_limit(), (40 * GiB, "alloc_conf"))

    def test_no_cap_before_cuda_is_initialised(self):
        self.alloc_conf("per_process_memory_fraction:0.5")
        cuda, calls = self.stub_torch(0.5, initialized=False)
        source = TorchMemorySource(2)
        self.assertIsNone(source.memory_limit())
        self.assertEqual(calls, [], "nothing that would initialise CUDA")
        cuda.initialized = True
        self.assertEqual(source.memory_limit(), (40 * GiB, "alloc_conf"))

    def test_device_argument(self):
        self.assertEqual(TorchMemorySource(2).device, 2)
        self.assertEqual(TorchMemorySource("cuda:1").device, 1)
        with self.assertRaises(ValueError):
            TorchMemorySource("cpu")
        with self.assertRaises(TypeError):
            TorchMemorySource(1.0)


if __name__ == "__main__":
    unittest.main()
