"""Hooks into torch: the global optimizer step hook and ``watch(model)``.

The optimizer hook is installed in the thread that imports torch: at once
when ``torch.optim.optimizer`` is already imported, else by a finder on
``sys.meta_path`` that registers it right after that module has run. So the
hook never imports torch itself (``gpumon run`` calls ``init()`` at
interpreter start, before the script chose its device or start method), and
never registers from the reporter thread while an optimizer may be stepping.

``watch`` is duck-typed: any object with ``register_forward_pre_hook`` and
``register_forward_hook`` (a ``torch.nn.Module``) will do.
"""

import importlib.util
import logging
import sys
from typing import Any, Callable, List, Optional

logger = logging.getLogger("gpumon")

#: The module that defines ``register_optimizer_step_post_hook``.
OPTIMIZER_MODULE = "torch.optim.optimizer"

_installed: Optional[str] = None


def install_optimizer_hook(
    hook: Callable[..., None],
    module_name: str = OPTIMIZER_MODULE,
    then: Optional[Callable[[Any], None]] = None,
) -> str:
    """Registers ``hook(optimizer, args, kwargs)`` after every ``optimizer.step()``,
    then calls ``then(module)`` (the automatic sections install there).

    Returns ``"installed"``, ``"deferred"`` (done when the module is
    imported), ``"unavailable"`` (no torch) or ``"already"``. Once per process.
    """
    global _installed
    if _installed is not None:
        return "already"
    module = sys.modules.get(module_name)
    if module is not None and not _initializing(module):
        _installed = module_name
        _register(module, hook, then)
        return "installed"
    top = module_name.partition(".")[0]
    try:
        importable = top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        importable = False
    if not importable:
        return "unavailable"
    _installed = module_name
    sys.meta_path.insert(0, _AfterImport(module_name, lambda m: _register(m, hook, then)))
    return "deferred"


def _register(module: Any, hook: Callable[..., None], then: Optional[Callable[[Any], None]] = None) -> None:
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        logger.info(
            "gpumon: this torch has no register_optimizer_step_post_hook (torch < 2.0); "
            "call gpumon.step() by hand"
        )
        return
    register(hook)
    if then is not None:
        then(module)


def _initializing(module: Any) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(spec is not None and getattr(spec, "_initializing", False))


class _AfterImport:
    """A meta path finder that calls ``then(module)`` once ``name`` has been executed.

    It finds the module through the other finders and wraps its loader only
    for the time of ``exec_module``: the module ends up with its own loader
    and spec, as if this finder had never been there.
    """

    def __init__(self, name: str, then: Callable[[Any], None]):
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        self._remove()
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(loader, self._then)
        return spec

    def _remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _NotifyingLoader:
    def __init__(self, inner: Any, then: Callable[[Any], None]):
        self._inner = inner
        self._then = then

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        try:
            self._then(module)
        except Exception:
            logger.warning("gpumon: installing the optimizer step hook failed", exc_info=True)


class WatchHandle:
    """What :func:`gpumon.watch` returns; :meth:`remove` takes the hooks off."""

    def __init__(self, handles: List[Any]):
        self._handles = handles

    def remove(self) -> None:
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles = []


def watch_module(module: Any, on_enter: Callable[[], None], on_exit: Callable[[], None]) -> WatchHandle:
    """Calls ``on_enter`` before and ``on_exit`` after every forward of ``module``."""
    pre = getattr(module, "register_forward_pre_hook", None)
    post = getattr(module, "register_forward_hook", None)
    if not callable(pre) or not callable(post):
        raise TypeError(
            "gpumon.watch() needs a torch.nn.Module (register_forward_pre_hook and "
            "register_forward_hook), not %s" % type(module).__name__
        )

    def before_forward(_module: Any, _args: Any) -> None:
        on_enter()

    def after_forward(_module: Any, _args: Any, _output: Any) -> None:
        on_exit()

    return WatchHandle([pre(before_forward), post(after_forward)])
