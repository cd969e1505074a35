"""Who and where the running actor is: context(), and the rank helpers over it. Each message to
a Python actor (its constructor too) runs with its actor set here; outside actors (the
controller) the context is the client's, at the point of a mesh of no dimensions."""

import contextvars
import os
import threading
from typing import Any, Dict, Optional

from ._point import Point

# The running actor, for each message (set in the message's own contextvars context).
_current: "contextvars.ContextVar[Any]" = contextvars.ContextVar("baton.actor", default=None)
# The message's point in the view of the mesh it was sent to, where that is not the mesh as
# spawned (else None: the actor's own point).
_message_point: "contextvars.ContextVar[Optional[Point]]" = contextvars.ContextVar(
    "baton.message_point", default=None
)


def monarch_semantics() -> bool:
    """Where Monarch's semantics differ from baton's own, a program run by `python -m
    baton.monarch` (and its workers) gets Monarch's: spawns return their meshes inside async
    endpoints (waited for with the event loop held, where baton refuses and points to
    spawn_async), and a ValueMesh passed as an argument travels whole (baton gives each member
    its own value)."""
    return "BATON_MONARCH" in os.environ


# The thread of this process's event loop, where async endpoints run (set by _host).
_loop_thread: "Optional[int]" = None


def on_event_loop() -> bool:
    """Whether this thread is the event loop's, where async endpoints run."""
    return _loop_thread is not None and threading.get_ident() == _loop_thread


class Instance:
    """The running actor, as context() shows it: its id, its mesh's name, its rank (a Point in
    its mesh, with that mesh's extent), and the object itself."""

    def __init__(self, actor_id: str, mesh: str, rank: Point, obj: Any = None) -> None:
        self.actor_id = actor_id
        self.mesh_name = mesh
        self.rank = rank
        self.actor = obj

    @property
    def name(self) -> str:
        return self.mesh_name

    @property
    def proc(self) -> Any:
        """The proc this actor runs in, as a ProcMesh of one (spawn siblings there)."""
        from ._mesh import this_proc

        return this_proc()

    @property
    def proc_id(self) -> str:
        """The name of the proc this actor runs in."""
        return self.actor_id.partition("/")[0]

    def __repr__(self):
        return f"Instance({self.actor_id}, rank={self.rank})"


class Context:
    """What context() gives: the running actor (actor_instance) and the message's point in the
    mesh it was sent to (message_rank): in a slice (or a renamed, flattened or split view), the
    actor's place there, as in Monarch; else the actor's own point."""

    def __init__(self, instance: Instance, message_point: Optional[Point] = None) -> None:
        self.actor_instance = instance
        self._message_point = message_point

    @property
    def message_rank(self) -> Point:
        if self._message_point is not None:
            return self._message_point
        return self.actor_instance.rank

    def __repr__(self):
        return f"Context({self.actor_instance!r})"


_CLIENT = Context(Instance("client", "", Point((), (), 0, ())))


def context() -> Context:
    """The running actor's Context; the client's outside actors."""
    actor = _current.get()
    if actor is None:
        return _CLIENT
    actor_id, mesh, _, point, _ = actor._baton_where
    return Context(Instance(actor_id, mesh, point, actor), _message_point.get())


def current_rank() -> Point:
    """The running message's point in the mesh it was sent to (a slice's: the actor's place in
    the slice); rank=0 with no dimensions outside actors."""
    return context().message_rank


def current_size() -> Dict[str, int]:
    """The size of each dimension of the mesh the running message was sent to: {"gpus": 4}."""
    return dict(context().message_rank.extent)


def current_actor_name() -> str:
    """The running actor's id, as text ("client" outside actors)."""
    return str(context().actor_instance.actor_id)


def enter(actor):
    """Sets the running actor for the message now starting (in its own context), at its own
    point until set_message_point says otherwise."""
    _current.set(actor)
    _message_point.set(None)


def set_message_point(point: Optional[Point]) -> None:
    """The running message's point in the view of the mesh it was sent to."""
    _message_point.set(point)
