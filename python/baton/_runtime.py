"""The controller's runtime: made at the first use, closed at exit."""

import atexit
import os
import sys

from ._errors import UsageError

_rt = None
_on_start = []  # functions of the runtime, run as it starts


def on_start(fn):
    """Runs fn(runtime) once this program's runtime starts (at once if it has)."""
    _on_start.append(fn)
    if _rt is not None:
        fn(_rt)


def runtime():
    global _rt
    if _rt is None:
        import _baton

        if os.environ.get("BATON_PROC"):
            raise UsageError("a worker process has its runtime already")
        # Workers are this interpreter running baton._worker; they find what this program
        # imports (its directory, a virtual environment) through PYTHONPATH.
        path = [os.getcwd() if p == "" else p for p in sys.path]
        os.environ["PYTHONPATH"] = os.pathsep.join(path)
        os.environ["PYTHONUNBUFFERED"] = "1"  # workers' prints reach the controller at once
        _rt = _baton.Runtime([sys.executable or "python3", "-m", "baton._worker"])
        atexit.register(shutdown)
        for fn in _on_start:
            fn(_rt)
    return _rt


def running():
    """Whether this program's runtime is up (made, and not shut down)."""
    return _rt is not None


def shutdown():
    """Stops every proc this program started and closes the runtime."""
    global _rt
    if _rt is not None:
        rt, _rt = _rt, None
        rt.close()
    from . import _job

    _job.close_all()  # after their procs stopped, so that no proc is seen dying with its host


def set_supervise(hook):
    """The controller's supervise hook: hook(failure_text) -> True if handled. Unset, a
    failure no owner handled stops the program (exit status 1), printing it."""
    from ._errors import MeshFailure

    runtime().set_supervise(lambda failure: hook(MeshFailure(failure)))
