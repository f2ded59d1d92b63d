"""Starts gpumon's hook in training processes; put on ``PYTHONPATH`` by
``gpumon run`` and ``gpumon profile``.

Python imports the first ``sitecustomize`` it finds on ``sys.path`` at
start-up. This one first runs the next ``sitecustomize`` further along the
path (so a site's or user's own still runs), then calls ``gpumon.init()``
in a torchrun worker (``RANK`` and ``WORLD_SIZE`` set) or, with
``GPUMON_STANDALONE=1``, in the first Python process that starts: that one
becomes rank 0 of a world of 1 and takes ``GPUMON_STANDALONE`` out of its
own environment, so the processes it starts (DataLoader workers, a nested
``python``) do not register too. It skips the torchrun launcher itself,
processes started with ``GPUMON_DISABLE=1``, and (inside ``init``) children
of an already hooked worker. Nothing here may stop the interpreter from
starting: every failure is reported and swallowed.
"""


def _chain_next_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.realpath(__file__)
    here_dir = os.path.dirname(here)
    entries = list(sys.path)
    real_entries = [os.path.realpath(e or os.curdir) for e in entries]
    start = real_entries.index(here_dir) + 1 if here_dir in real_entries else 0
    for entry in entries[start:]:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None or not spec.origin:
            continue
        origin = os.path.realpath(spec.origin)
        parent = os.path.dirname(origin)
        # Another copy of this very file (gpumon run nested in gpumon run).
        if origin == here or (
            os.path.basename(parent) == "_inject" and os.path.basename(os.path.dirname(parent)) == "gpumon"
        ):
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return None


def _is_launcher():
    import os
    import sys

    argv = list(getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or [])
    if any(os.path.basename(a) == "torchrun" for a in argv[:2]):
        return True
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
    return False


def _flag(name):
    import os

    return os.environ.get(name, "").strip() not in ("", "0")


def _start_hook():
    import os

    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not launched and not _flag("GPUMON_STANDALONE"):
        return
    if _flag("GPUMON_DISABLE"):
        return
    if _is_launcher():
        return
    if not launched:
        # This process is the one: none of its children may register.
        os.environ.pop("GPUMON_STANDALONE", None)
    import gpumon

    gpumon.init()


try:
    _chained = _chain_next_sitecustomize()
except Exception as _e:  # a broken user sitecustomize must not stop Python
    import sys as _sys

    print("gpumon: error in the chained sitecustomize: %r" % (_e,), file=_sys.stderr)

try:
    _start_hook()
except Exception as _e:
    import sys as _sys

    print("gpumon: could not start the hook: %r" % (_e,), file=_sys.stderr)
