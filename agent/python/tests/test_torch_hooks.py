"""The optimizer hook is registered by whoever imports torch, never by the hook itself."""

import importlib
import os
import sys
import tempfile
import unittest
import uuid
from unittest import mock

from gpumon import _torch_hooks

OPTIMIZER_PY = """
hooks = []
def register_optimizer_step_post_hook(hook):
    hooks.append(hook)
"""


class OptimizerHookTest(unittest.TestCase):
    def setUp(self):
        # A stand-in for torch: <pkg>/optim/optimizer.py on a temporary path.
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.pkg = "faketorch_%s" % uuid.uuid4().hex[:8]
        optim = os.path.join(self.tmp.name, self.pkg, "optim")
        os.makedirs(optim)
        open(os.path.join(self.tmp.name, self.pkg, "__init__.py"), "w").close()
        open(os.path.join(optim, "__init__.py"), "w").close()
        with open(os.path.join(optim, "optimizer.py"), "w") as f:
            f.write(OPTIMIZER_PY)
        sys.path.insert(0, self.tmp.name)
        self.addCleanup(sys.path.remove, self.tmp.name)
        self.addCleanup(self._forget_modules)
        patcher = mock.patch.object(_torch_hooks, "_installed", None)
        patcher.start()
        self.addCleanup(patcher.stop)
        meta_path = list(sys.meta_path)
        self.addCleanup(lambda: sys.meta_path.__setitem__(slice(None), meta_path))
        self.name = self.pkg + ".optim.optimizer"

    def _forget_modules(self):
        for name in list(sys.modules):
            if name == self.pkg or name.startswith(self.pkg + "."):
                del sys.modules[name]

    def hook(self, optimizer, args, kwargs):
        pass

    def test_deferred_until_the_module_is_imported(self):
        self.assertEqual(_torch_hooks.install_optimizer_hook(self.hook, self.name), "deferred")
        self.assertNotIn(self.name, sys.modules)  # not imported by the hook
        module = importlib.import_module(self.name)
        self.assertEqual(module.hooks, [self.hook])
        # The module keeps its own loader; the finder is gone.
        self.assertEqual(type(module.__loader__).__name__, "SourceFileLoader")
        self.assertIs(module.__spec__.loader, module.__loader__)
        self.assertFalse(any(getattr(f, "_name", None) == self.name for f in sys.meta_path))
        self.assertEqual(_torch_hooks.install_optimizer_hook(self.hook, self.name), "already")

    def test_immediate_when_already_imported(self):
        module = importlib.import_module(self.name)
        self.assertEqual(_torch_hooks.install_optimizer_hook(self.hook, self.name), "installed")
        self.assertEqual(module.hooks, [self.hook])

    def test_unavailable_without_the_package(self):
        self.assertEqual(
            _torch_hooks.install_optimizer_hook(self.hook, "no_such_pkg_x.optim.optimizer"), "unavailable"
        )
        self.assertIsNone(_torch_hooks._installed)

    def test_other_imports_pass_through(self):
        _torch_hooks.install_optimizer_hook(self.hook, self.name)
        importlib.import_module(self.pkg)
        self.assertTrue(any(getattr(f, "_name", None) == self.name for f in sys.meta_path))


if __name__ == "__main__":
    unittest.main()
