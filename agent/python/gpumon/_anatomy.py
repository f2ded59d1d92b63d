"""Automatic step anatomy: where each step's time goes, with no gpumon call in the script.

Once torch's optimizer module has been imported (the moment the global
optimizer hook is registered), the hook times four sections of every step
by itself:

- ``data``: each ``__next__`` of a ``torch.utils.data.DataLoader`` iterator
  (the wait for the next batch; on the CUDA clock, how long the GPU sat idle
  for it);
- ``forward``: each call of an outermost module (one not called from inside
  another module's forward: the model, a DDP or FSDP wrapper, a loss module);
- ``backward``: each ``torch.autograd.backward`` (what ``loss.backward()``
  calls), DDP's gradient all-reduce included;
- ``optimizer``: each ``optimizer.step()``, between the global step pre and
  post hooks.

What is left of the step is its rest (the engine reads it as the step less
its sections). The outermost modules are found during the first
:data:`DISCOVERY_STEPS` steps by torch's global module hooks, which slow
every module call a little; after that only those modules are hooked, so a
step costs four timed sections and nothing per inner module.

Explicit calls win: no automatic section is timed while a
``gpumon.section`` is open, and a name the script has timed itself
(``gpumon.section(name)``, or ``forward`` through ``gpumon.watch``) is
never timed automatically again. ``GPUMON_ANATOMY=0`` turns all of it off.
Torch is never imported here: everything is installed from modules the
script has imported already.
"""

import functools
import logging
import sys
import time
import weakref
from typing import Any, Callable, Dict, List, Optional

logger = logging.getLogger("gpumon")

#: Steps during which the global module hooks look for the outermost modules.
DISCOVERY_STEPS = 3
#: ... or seconds, for a script whose steps the hook does not see.
DISCOVERY_MAX_S = 120.0
#: Outermost modules hooked at most (a model, its loss, a second model).
MAX_OUTERMOST = 16
#: The names of the automatic sections.
SECTIONS = ("data", "forward", "backward", "optimizer")


class Anatomy:
    """The automatic sections of one hook; ``enter(name)``/``leave(name)`` are the
    runtime's (they time nothing while an explicit section is open)."""

    def __init__(
        self,
        enter: Callable[[str], bool],
        leave: Callable[[str], None],
        outermost: Callable[[Any], None] = lambda _module: None,
    ):
        self._enter = enter
        self._exit = leave
        self._outermost_seen = outermost
        self.installed: List[str] = []
        self._depth = 0
        self._discovery: Optional[List[Any]] = None
        self._discovery_t0 = 0.0
        self._boundaries = 0
        self._outermost: Dict[int, Any] = {}
        self._watched: List[Any] = []
        self._forward_off = False
        self._data_tries = 0

    # -- installing --------------------------------------------------------------

    def install(self, optimizer_module: Any) -> None:
        """Installs every part torch offers; each one that fails is left out and logged."""
        for name, part in (
            ("optimizer", lambda: self._install_optimizer(optimizer_module)),
            ("backward", self._install_backward),
            ("data", self._install_data),
            ("forward", self._install_forward),
        ):
            try:
                if part():
                    self.installed.append(name)
            except Exception as e:
                logger.info("gpumon: the automatic %s section is off: %s", name, e)

    def _install_optimizer(self, module: Any) -> bool:
        register = getattr(module, "register_optimizer_step_pre_hook", None)
        if register is None:
            return False
        register(self._optimizer_pre)
        return True

    def _optimizer_pre(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        # A pre hook's answer would replace the step's arguments: always None.
        try:
            self._enter("optimizer")
        except Exception:
            logger.debug("gpumon: the optimizer section failed", exc_info=True)

    def optimizer_done(self) -> None:
        """From the optimizer's post hook, before the step boundary."""
        self._exit("optimizer")

    def _install_backward(self) -> bool:
        autograd = sys.modules.get("torch.autograd")
        original = getattr(autograd, "backward", None)
        if original is None or getattr(original, "__gpumon_wrapped__", False):
            return False
        autograd.backward = self._timed("backward", original)
        return True

    def _install_data(self) -> bool:
        loader = sys.modules.get("torch.utils.data.dataloader")
        base = getattr(loader, "_BaseDataLoaderIter", None)
        original = getattr(base, "__next__", None)
        if original is None or getattr(original, "__gpumon_wrapped__", False):
            return False
        base.__next__ = self._timed("data", original)
        return True

    def _timed(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` timed as section ``name`` (when the runtime times it)."""
        enter, leave = self._enter, self._exit

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            on = enter(name)
            try:
                return original(*args, **kwargs)
            finally:
                if on:
                    leave(name)

        timed.__gpumon_wrapped__ = True  # type: ignore[attr-defined]
        return timed

    def _install_forward(self) -> bool:
        hooks = sys.modules.get("torch.nn.modules.module")
        pre = getattr(hooks, "register_module_forward_pre_hook", None)
        post = getattr(hooks, "register_module_forward_hook", None)
        if pre is None or post is None or self._forward_off:
            return False
        self._discovery = [pre(self._discover_pre), _post_hook(post, self._discover_post)]
        self._discovery_t0 = time.monotonic()
        return True

    # -- the forward: discovery, then the outermost modules alone ---------------------

    # Module hooks answer None (an answer would replace the input or output)
    # and never raise into the forward.

    def _discover_pre(self, module: Any, _args: Any) -> None:
        try:
            self._discover(module)
        except Exception:
            logger.debug("gpumon: the forward section failed", exc_info=True)

    def _discover(self, module: Any) -> None:
        self._depth += 1
        if self._depth == 1:
            if len(self._outermost) < MAX_OUTERMOST and id(module) not in self._outermost:
                try:
                    self._outermost[id(module)] = weakref.ref(module)
                except TypeError:
                    pass
                self._outermost_seen(module)
            self._enter("forward")
            if time.monotonic() - self._discovery_t0 > DISCOVERY_MAX_S:
                self._end_discovery()

    def _discover_post(self, _module: Any, _args: Any, _output: Any) -> None:
        try:
            if self._depth > 0:
                self._depth -= 1
                if self._depth == 0:
                    self._exit("forward")
        except Exception:
            logger.debug("gpumon: the forward section failed", exc_info=True)

    def _watched_pre(self, _module: Any, _args: Any) -> None:
        try:
            self._depth += 1
            if self._depth == 1:
                self._enter("forward")
        except Exception:
            logger.debug("gpumon: the forward section failed", exc_info=True)

    def on_boundary(self) -> None:
        """At each step boundary: ends the discovery after its steps, and
        installs the data section if the DataLoader was imported only now."""
        self._depth = 0
        if "data" not in self.installed and self._data_tries < DISCOVERY_STEPS:
            self._data_tries += 1
            try:
                if self._install_data():
                    self.installed.append("data")
            except Exception as e:
                logger.info("gpumon: the automatic data section is off: %s", e)
        if self._discovery is not None:
            self._boundaries += 1
            if self._boundaries >= DISCOVERY_STEPS:
                self._end_discovery()

    def _end_discovery(self) -> None:
        handles, self._discovery = self._discovery, None
        for handle in handles or ():
            handle.remove()
        if self._forward_off:
            return
        for ref in self._outermost.values():
            module = ref()
            if module is None:
                continue
            self._watched.append(module.register_forward_pre_hook(self._watched_pre))
            self._watched.append(_post_hook(module.register_forward_hook, self._discover_post))
        self._outermost.clear()

    def forward_off(self) -> None:
        """The script times its forward itself (``gpumon.watch``): no automatic one."""
        self._forward_off = True
        if self._discovery is not None:
            self._end_discovery()
        for handle in self._watched:
            handle.remove()
        self._watched = []


def _post_hook(register: Callable[..., Any], hook: Callable[..., None]) -> Any:
    """``register(hook, always_call=True)`` where torch has it (2.1+: the hook
    runs even when the forward raised), else ``register(hook)``."""
    try:
        return register(hook, always_call=True)
    except TypeError:
        return register(hook)
