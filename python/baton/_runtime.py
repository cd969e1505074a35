"""The controller's runtime: made at the first use, closed at exit."""

import atexit
import os
import sys
from typing import Any, Callable

from . import _baton
from ._errors import UsageError

_rt = None
_on_start = []  # functions of the runtime, run as it starts
_on_shutdown = []  # functions run after it closed (the jobs end their hosts)
start_options: dict = {}  # the runtime's options as it starts: stop_grace_ms, exit_wait_ms
_output_shown = True  # workers' output printed here (False: kept for failure reports only)


def on_start(fn):
    """Runs fn(runtime) once this program's runtime starts (at once if it has)."""
    _on_start.append(fn)
    if _rt is not None:
        fn(_rt)


def runtime():
    global _rt
    if _rt is None:
        if os.environ.get("BATON_PROC"):
            raise UsageError("a worker process has its runtime already")
        # Workers are this interpreter running baton._worker; they find what this program
        # imports (its directory, a virtual environment) through PYTHONPATH.
        path = [os.getcwd() if p == "" else p for p in sys.path]
        os.environ["PYTHONPATH"] = os.pathsep.join(path)
        os.environ["PYTHONUNBUFFERED"] = "1"  # workers' prints reach the controller at once
        _rt = _baton.Runtime([sys.executable or "python3", "-m", "baton._worker"],
                             start_options.get("stop_grace_ms", -1),
                             start_options.get("exit_wait_ms", -1))
        if not _output_shown:
            _rt.show_output("", False)
        atexit.register(shutdown)
        for fn in _on_start:
            fn(_rt)
    return _rt


def show_all_output(shown: bool) -> None:
    """Whether every worker's output is printed here (the runtime keeps the last lines of each
    for its failure reports either way)."""
    global _output_shown
    _output_shown = shown
    if _rt is not None:
        _rt.show_output("", shown)


def on_shutdown(fn):
    """Runs fn() at each shutdown(), after the runtime closed (its procs are stopped)."""
    _on_shutdown.append(fn)


def running():
    """Whether this program's runtime is up (made, and not shut down)."""
    return _rt is not None


def shutdown() -> None:
    """Stops every proc this program started and closes the runtime."""
    global _rt
    if _rt is not None:
        rt, _rt = _rt, None
        rt.close()
    for fn in _on_shutdown:  # after the procs stopped: none is seen dying with its host
        fn()


def set_supervise(hook: Callable[[Any], bool]) -> None:
    """The controller's supervise hook: hook(failure_text) -> True if handled. Unset, a
    failure no owner handled stops the program (exit status 1), printing it."""
    from ._errors import MeshFailure

    runtime().set_supervise(
        lambda failure, mesh, rank, actor: hook(MeshFailure(failure, mesh, rank, actor))
    )
