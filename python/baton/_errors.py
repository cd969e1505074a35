"""The exceptions baton raises, as Python classes."""

import builtins
import os
from typing import Optional


class BatonError(Exception):
    """The base of every baton error."""


class UsageError(BatonError):
    """A call baton cannot make as asked (a wrong argument, a call in the wrong place)."""


class TimeoutError(BatonError, builtins.TimeoutError):
    """A wait ran past its timeout; what it waited for may still complete."""


class SupervisionError(BatonError, RuntimeError):
    """The actor that would have answered failed or stopped before it replied (or its process
    died). A RuntimeError too, as Monarch's is."""


class UndeliverableError(BatonError):
    """A message could not be delivered (unknown actor, link lost)."""


class StoreError(BatonError):
    """A tensor store operation refused or failed: a bad value or box, a destination of the
    wrong size or type, a volume whose process died. The message names the key."""


class KeyNotFound(StoreError, KeyError):
    """No readable version of a key in the tensor store: never put, deleted, partial (the
    message says what its shards lack), or an old version no longer kept."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RdmaError(BatonError, builtins.RuntimeError):
    """A one-sided transfer refused or failed: out of the buffer's bounds, a buffer dropped, its
    owner gone, a timeout. The message says which buffer and what to do. (A RuntimeError too,
    as it was raised before it had a class of its own.)"""


class JobError(BatonError):
    """The hosts of a job could not be had: a host ssh cannot reach, an agent that does not
    answer, a scheduler that refuses or never gives the nodes. The message is in the tool's own
    words, with what to do."""


class ActorError(BatonError):
    """A remote endpoint raised. Keeps the original exception's type name and message, the
    remote traceback's text, the actor's id and, when called through a mesh, its point."""

    def __init__(
        self, actor, endpoint, where, remote_type, remote_message, remote_traceback, point=None
    ):
        self.actor = actor
        self.endpoint = endpoint
        self.where = where
        self.point = point
        """The actor's place in the mesh it was called through (a baton.Point with its rank),
        or None if it was not called through a mesh."""
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback
        place = f" ({where})" if where else ""
        super().__init__(
            f"{actor}{place} raised in {endpoint}: {remote_type}: {remote_message}"
            + (f"\n\nRemote traceback:\n{remote_traceback}" if remote_traceback else "")
        )

    @property
    def exception(self):
        """The remote exception, remade here with the remote message: of its own class where
        that is one of Python's built-in exceptions or a class of a module this process has
        imported (the program's own, `__main__` included), else an Exception that names it."""
        kind = _exception_class(self.remote_type)
        if kind is not None:
            try:
                return kind(self.remote_message)
            except Exception:  # noqa: BLE001: a constructor with other arguments
                pass
        return Exception(f"{self.remote_type}: {self.remote_message}")

    def in_endpoint(self, endpoint):
        """The same error, naming `endpoint` (a Python actor's method) as where it was raised,
        in place of the runtime's endpoint that ran it; a reducer's stays as it is."""
        if self.endpoint == "fold":
            return self
        return ActorError(
            self.actor, endpoint, self.where, self.remote_type, self.remote_message,
            self.remote_traceback, self.point,
        )

    def __reduce__(self):
        # Sent on as it is (to a port, or as a result): remade from its parts, not its text.
        return (ActorError, (self.actor, self.endpoint, self.where, self.remote_type,
                             self.remote_message, self.remote_traceback, self.point))


def _exception_class(name):
    """The exception class named `name` as encode_exception writes it ("KeyError",
    "module.Outer.Inner"), if this process has it: never imports anything."""
    import sys

    found = None
    if "." not in name:
        found = getattr(builtins, name, None)
    else:
        # The module is the longest prefix that names one already imported.
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            owner = sys.modules.get(".".join(parts[:i]))
            if owner is None:
                continue
            found = owner
            for attr in parts[i:]:
                found = getattr(found, attr, None)
            break
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


# How a Python exception raised in an actor travels as the runtime's error text, readable where
# the C++ runtime prints it: "[py:<type>] <message>\n\nRemote traceback:\n<traceback>".
_TRACEBACK_MARK = "\n\nRemote traceback:\n"


def _user_frames(tb):
    """`tb` without its leading frames of the machinery that ran the endpoint (baton's own
    modules, asyncio, concurrent.futures): the traceback starts where the user's code does. An
    error raised in that machinery itself keeps its last frame."""

    def machinery(filename):
        return filename.startswith(_BATON_DIR) or any(d in filename for d in _RUNNER_DIRS)

    while tb is not None and tb.tb_next is not None and machinery(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


_BATON_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RUNNER_DIRS = (f"{os.sep}asyncio{os.sep}", f"{os.sep}concurrent{os.sep}futures{os.sep}")


def encode_exception(exc, tb=None):
    """The text of `exc` with its traceback (`tb` where the runtime holds it apart), from the
    first frame of the user's code."""
    import traceback

    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    frames = _user_frames(tb or exc.__traceback__)
    text = "".join(traceback.format_exception(type(exc), exc, frames))
    return f"[py:{name}] {exc}{_TRACEBACK_MARK}{text}"


def actor_error(actor, endpoint, where, message, point=None):
    """The ActorError for a remote failure whose text is `message` (from a Python actor, as
    encode_exception wrote it, or a C++ actor's exception text), of the member at `point`."""
    if message.startswith("[py:") and "] " in message:
        name, _, rest = message[4:].partition("] ")
        text, _, tb = rest.partition(_TRACEBACK_MARK)
        return ActorError(actor, endpoint, where, name, text, tb, point)
    return ActorError(actor, endpoint, where, "RuntimeError", message, "", point)


class MeshFailure(str):
    """A failure of a mesh member, as __supervise__ and the controller's hook hear of it: the
    report's text (it is a str), with report() as Monarch spells it, the name of the mesh the
    failed member belongs to (`mesh_name`, also `mesh`; None for none), its `rank` there (None
    for none) and its `actor` id."""

    mesh_name: Optional[str]
    rank: Optional[int]
    actor: str

    def __new__(cls, text, mesh_name=None, rank=None, actor=""):
        self = super().__new__(cls, text)
        self.mesh_name = mesh_name or None
        self.rank = rank if rank is not None and rank >= 0 else None
        self.actor = actor
        return self

    @property
    def mesh(self):
        return self.mesh_name

    def report(self):
        return str(self)

    def __reduce__(self):
        return (MeshFailure, (str(self), self.mesh_name, self.rank, self.actor))
