"""analyze_model and check_finite on real torch models (on the CPU; skipped
without torch), run in a hooked subprocess so the events are checked too.

The expected sizes are computed in the script straight from torch
(``numel() * element_size()`` of the tensors the model and the optimizer
hold), not by gpumon."""

import json
import unittest

from tests.support import run_hooked, torch_import_error

SCRIPT = r"""
import json, logging
import torch, gpumon

warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            warnings.append(record.getMessage())
logging.getLogger("gpumon").addHandler(Keep())
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        self.head = torch.nn.Linear(16, 100, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.head.alias = torch.nn.Parameter(self.body[0].bias.data)  # the same memory, another Parameter
        self.scale = torch.nn.Parameter(torch.ones(16, dtype=torch.float64))
        self.frozen = torch.nn.Linear(16, 16).to(torch.bfloat16).requires_grad_(False)

    def forward(self, x):
        h = self.body(self.embed(x)) * self.scale.float()
        return self.head(h + self.frozen(h.bfloat16()).float())

def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)

model = Net()
optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model(torch.randint(0, 100, (8,))).sum().backward()
optimizer.step()

params = [p for n, p in model.named_parameters() if n != "head.alias"]
grads = [p.grad for p in params if p.grad is not None]
state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
body = list(model.body.parameters())
body_state = [v for p in body for v in optimizer.state[p].values() if torch.is_tensor(v)]
expect = {
    "params": [len(params), sum(p.numel() for p in params), nbytes(params)],
    "grads": nbytes(grads),
    "optimizer_state": nbytes(state),
    "frozen": nbytes(model.frozen.parameters()),
    "body": nbytes(body) + nbytes([p.grad for p in body]) + nbytes(body_state),
    "root": nbytes([model.scale, model.scale.grad]) + nbytes(optimizer.state[model.scale].values()),
    "bfloat16": nbytes(model.frozen.parameters()),
}
analysis = gpumon.analyze_model(model, optimizer)

# check_finite on a finite model: one fused norm per dtype, one read of the host.
calls = {"foreach": 0, "tolist": 0}
foreach, tolist = torch._foreach_norm, torch.Tensor.tolist
def counting_foreach(*a, **k):
    calls["foreach"] += 1
    return foreach(*a, **k)
def counting_tolist(self):
    calls["tolist"] += 1
    return tolist(self)
torch._foreach_norm, torch.Tensor.tolist = counting_foreach, counting_tolist
clean = gpumon.check_finite(model)
torch._foreach_norm, torch.Tensor.tolist = foreach, tolist
dtypes = sorted({str(t.dtype) for t in params + grads})

with torch.no_grad():
    model.body[0].weight[0, :3] = float("nan")
    model.body[2].bias[1] = float("inf")
    model.body[0].weight.grad[1, 0] = float("-inf")
    model.scale.grad[2] = float("nan")
dirty = gpumon.check_finite(model)

with torch.device("meta"):
    meta = torch.nn.Linear(4, 4)
meta_analysis = gpumon.analyze_model(meta)
meta_check = gpumon.check_finite(meta)

sparse = torch.nn.Embedding(10, 4, sparse=True)
sparse(torch.tensor([1, 2, 1])).sum().backward()
g = sparse.weight.grad
sparse_expect = [g._values().numel(), nbytes([g._indices(), g._values()])]
with torch.no_grad():
    g._values()[0, 0] = float("nan")
sparse_analysis = gpumon.analyze_model(sparse)

empty_analysis = gpumon.analyze_model(torch.nn.ReLU())
empty_check = gpumon.check_finite(torch.nn.ReLU())
wide = gpumon.analyze_model(torch.nn.Sequential(*[torch.nn.Linear(4, 4 + i % 7) for i in range(300)]))
snapshot = [gpumon.save_allocator_snapshot(), gpumon.save_allocator_snapshot()]
gpumon.shutdown(2.0)
print(json.dumps({
    "expect": expect, "analysis": analysis, "calls": calls, "dtypes": dtypes, "clean": clean, "dirty": dirty,
    "meta": [meta_analysis, meta_check], "sparse": [sparse_expect, sparse_analysis],
    "empty": [empty_analysis, empty_check], "wide_modules": len(wide["by_module"]),
    "snapshot": snapshot, "warnings": warnings,
}))
"""


class ModelAnalysisTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        error = torch_import_error()
        if error is not None:
            raise unittest.SkipTest("torch cannot be imported (%s)" % error)
        cls.agent, cls.out = run_hooked(cls, SCRIPT, CUDA_VISIBLE_DEVICES="")

    def events(self, name):
        return [json.loads(e["detail"]) for e in self.agent.records("event") if e["name"] == name]

    def test_sizes_by_kind_module_and_dtype_count_shared_tensors_once(self):
        a, expect = self.out["analysis"], self.out["expect"]
        p = a["params"]
        self.assertEqual([p["tensors"], p["elements"], p["bytes"]], expect["params"])
        self.assertEqual(a["grads"]["bytes"], expect["grads"])
        self.assertEqual(a["optimizer_state"]["bytes"], expect["optimizer_state"])
        self.assertEqual(a["frozen"]["bytes"], expect["frozen"])
        self.assertEqual(a["trainable"]["bytes"] + a["frozen"]["bytes"], p["bytes"])
        self.assertEqual(a["total_bytes"], expect["params"][2] + expect["grads"] + expect["optimizer_state"])
        modules = a["by_module"]
        self.assertEqual(set(modules), {"embed", "body", "head", "frozen", "(root)"})
        self.assertEqual(modules["body"]["bytes"], expect["body"])
        self.assertEqual(modules["(root)"]["bytes"], expect["root"])
        self.assertEqual(modules["head"]["params"]["tensors"], 0, "its tied and aliased tensors count once")
        self.assertEqual(sum(m["bytes"] for m in modules.values()), a["total_bytes"])
        self.assertEqual(set(a["by_dtype"]), {"float32", "float64", "bfloat16"})
        self.assertEqual(a["by_dtype"]["bfloat16"]["bytes"], expect["bfloat16"])
        self.assertEqual((a["skipped"], a["nonfinite"]["tensors"], a["nonfinite"]["unchecked"]), (0, 0, 0))

    def test_check_finite_is_one_fused_norm_per_dtype_and_one_read(self):
        self.assertEqual(self.out["calls"], {"foreach": len(self.out["dtypes"]), "tolist": 1})
        clean = self.out["clean"]
        none = {"nan": 0, "inf": 0}
        self.assertEqual((clean["params"], clean["grads"], clean["tensors"]), (none, none, 0))

    def test_check_finite_counts_nan_and_inf_and_names_the_tensors(self):
        dirty = self.out["dirty"]
        self.assertEqual(dirty["params"], {"nan": 3, "inf": 1})
        self.assertEqual(dirty["grads"], {"nan": 1, "inf": 1})
        self.assertEqual(
            sorted((w["name"], w["of"], w["nan"], w["inf"]) for w in dirty["where"]),
            [
                ("body.0.weight", "grad", 0, 1),
                ("body.0.weight", "param", 3, 0),
                ("body.2.bias", "param", 0, 1),
                ("scale", "grad", 1, 0),
            ],
        )
        (event,) = self.events("nonfinite")  # the clean check sent none
        self.assertEqual((event["params"], event["grads"], event["tensors"]), ([3, 1], [1, 1], 4))

    def test_odd_models_give_what_can_be_read(self):
        meta, meta_check = self.out["meta"]
        self.assertEqual(meta["params"]["bytes"], (16 + 4) * 4)
        self.assertEqual(meta["nonfinite"]["unchecked"], 2)
        self.assertEqual(meta_check["unchecked"], 2)
        (elements, nbytes), sparse = self.out["sparse"]
        self.assertEqual([sparse["grads"]["elements"], sparse["grads"]["bytes"]], [elements, nbytes])
        self.assertEqual(sparse["nonfinite"]["grads"], {"nan": 1, "inf": 0})
        empty, empty_check = self.out["empty"]
        self.assertEqual((empty["total_bytes"], empty["by_module"], empty_check["tensors"]), (0, {}, 0))

    def test_the_model_event_fits_the_detail_limit(self):
        events = self.events("model")
        self.assertEqual(len(events), 5)
        first = events[0]
        self.assertEqual(first["bytes"], self.out["analysis"]["total_bytes"])
        self.assertEqual(first["modules"][0][0], "embed")
        wide = events[-1]
        self.assertEqual((wide["modules_total"], self.out["wide_modules"]), (300, 300))
        self.assertTrue(0 < len(wide["modules"]) < 300)
        sizes = [size for _, size in wide["modules"]]
        self.assertEqual(sizes, sorted(sizes, reverse=True), "the largest modules are kept")
        for event in self.agent.records("event"):
            self.assertLessEqual(len(event["detail"].encode()), 1024)

    def test_without_cuda_a_snapshot_is_none_and_said_once(self):
        self.assertEqual(self.out["snapshot"], [None, None])
        said = [w for w in self.out["warnings"] if "no allocator snapshot" in w]
        self.assertEqual(said, ["gpumon: no allocator snapshot: CUDA is not available in this process"])
        self.assertEqual(self.events("allocator_snapshot"), [])


if __name__ == "__main__":
    unittest.main()
