"""Names of Monarch's API that baton does not implement: importable, and each raises, when used,
an error naming the feature and what to use instead (never an ImportError at a script's top)."""

import types

from .._errors import UsageError


class MonarchUnsupported(UsageError):
    """A name of Monarch's API that baton does not implement was used."""


_TENSOR_ENGINE = (
    "Monarch's tensor engine (distributed tensors) is not part of baton: run torch code inside "
    "actors, and move tensors with baton.collective or RDMABuffer"
)


class Unsupported:
    """Stands for one name: calling it, making one, entering it, or reading an attribute of it
    raises MonarchUnsupported with `advice`."""

    def __init__(self, name, advice=_TENSOR_ENGINE):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_advice", advice)

    def _refuse(self, *args, **kwargs):
        raise MonarchUnsupported(f"{self._name} is not supported by baton: {self._advice}")

    __call__ = _refuse
    __enter__ = _refuse
    __iter__ = _refuse

    def __exit__(self, *exc):
        return False

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    def __getitem__(self, item):
        return self  # Stream[...] or Tensor[...] in a type hint

    def __mro_entries__(self, bases):
        self._refuse()

    def __repr__(self):
        return f"<{self._name}: not supported by baton>"


# What a missing module of Monarch's is for, by the package it is in, and what baton has instead
# (the tensor engine for the rest).
_ADVICE_BY_PACKAGE = {
    "monarch.tools": (
        "Monarch's job tools (TorchX components, launch configs and commands) are not part of "
        "baton: start the hosts with baton's jobs (baton.SshJob, SlurmJob, KubernetesJob, or "
        "baton-host agents with baton.attach)"
    ),
    "monarch.simulator": (
        "Monarch's simulator is not part of baton: run the program on this host with "
        "this_host().spawn_procs(...), which starts real processes"
    ),
}


def advice_for(name):
    """Why the Monarch module `name` is missing here, and what to use instead."""
    for package, advice in _ADVICE_BY_PACKAGE.items():
        if name == package or name.startswith(package + "."):
            return advice
    return _TENSOR_ENGINE


def _kept_names(name):
    """The names of Monarch's private module `name` that baton has: programs import Monarch's
    error classes from there to catch them."""
    if name == "monarch._rust_bindings.monarch_hyperactor.supervision":
        from .._errors import MeshFailure, SupervisionError

        return {"SupervisionError": SupervisionError, "MeshFailure": MeshFailure}
    return {}


def module(name, advice=None):
    """A module whose every attribute is Unsupported (for `from monarch.x import y`), but for
    the names baton has (_kept_names)."""
    if advice is None:
        advice = advice_for(name)
    m = types.ModuleType(name)
    m.__doc__ = f"{name}: not supported by baton. {advice}."
    for kept, value in _kept_names(name).items():
        setattr(m, kept, value)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unsupported(f"{name}.{attr}", advice)

    setattr(m, "__getattr__", __getattr__)
    m.__path__ = []  # a package: its submodules are unsupported too
    return m
