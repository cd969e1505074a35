"""Monarch's API over baton's runtime: programs written for Monarch (`monarch.actor`,
`monarch.rdma`, `monarch.job`, `monarch.spmd`, `monarch.config`) run unchanged with

    python -m baton.monarch train.py [args]       # or: python -m baton.monarch -m pytest tests/

which resolves `monarch` and its submodules to this package for that run, in the controller
and in every worker it starts. New code may `import baton.monarch as monarch`. A real `monarch`
package stays importable in programs that do not use the runner.

The names here are baton's own (baton.Actor, baton.context, ...) under Monarch's spelling;
what baton does not implement (the tensor engine) is importable and raises, when used, an error
naming the feature and what to use instead."""

import importlib
import importlib.abc
import importlib.util
import os
import sys

from .. import _future, _point
from . import _unsupported
from .config import (
    clear_runtime_config,
    configure,
    configured,
    get_global_config,
    get_runtime_config,
)

Extent = _point.Extent
Future = _future.Future

# Monarch's own submodules that baton gives (baton.monarch.<name>); any other `monarch.*` module
# imports as one whose names are all unsupported.
_SUBMODULES = ("actor", "rdma", "job", "spmd", "config")

_TENSOR_ENGINE_NAMES = (
    "coalescing", "remote", "get_active_mesh", "no_mesh", "RemoteProcessGroup",
    "function_resolvers", "Shape", "NDSlice", "Selection", "OpaqueRef", "get_active_stream",
    "Stream", "Tensor", "reduce", "reduce_", "to_mesh", "slice_mesh", "call_on_shard_and_fetch",
    "fetch_shard", "inspect", "show", "grad_function", "grad_generator", "mast_reserve",
    "set_meta", "Simulator", "world_mesh", "timer", "ActorFuture", "builtins",
)
for _name in _TENSOR_ENGINE_NAMES:
    globals()[_name] = _unsupported.Unsupported(f"monarch.{_name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `monarch` and `monarch.X` to `baton.monarch` and `baton.monarch.X`: the same
    module objects under both names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "monarch" or fullname.startswith("monarch."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        real = "baton.monarch" + spec.name[len("monarch"):]
        try:
            return importlib.import_module(real)
        except ModuleNotFoundError as e:
            # Only the module asked for, or a package of ours above it, may be missing (what
            # that module itself imports must be there).
            if e.name is None or not (real == e.name or real.startswith(e.name + ".")):
                raise
            if not e.name.startswith("baton.monarch."):
                raise
            return _unsupported.module(spec.name)

    def exec_module(self, module):
        pass  # made by create_module


ENV = "BATON_MONARCH"


def install():
    """Makes `import monarch...` give this package, in this process and (through the
    environment) in every worker it starts. What was imported as `monarch` before is dropped."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        for name in [n for n in sys.modules if n == "monarch" or n.startswith("monarch.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Finder())
    os.environ[ENV] = "1"
    from . import actor

    actor._install_fault_hook()


__all__ = ["Extent", "Future", "configure", "configured", "get_global_config",
           "get_runtime_config", "clear_runtime_config", "install",
           *_TENSOR_ENGINE_NAMES]
