"""Python actors: subclasses of baton.Actor whose endpoints are marked @baton.endpoint."""

from typing import Any, Callable, List, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Where:
    """One of the actor's own facts (its id, rank, point), read from where the runtime placed it.
    Not a property: a class may set an attribute of the same name (`self.rank = ...`, as
    Monarch's programs do), which then hides this one for that instance."""

    def __init__(self, index, doc):
        self._index = index
        self.__doc__ = doc

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        return obj._baton_where[self._index]


class Actor:
    """The base of Python actors. An actor handles one message at a time; its endpoints are
    the methods marked @baton.endpoint (plain or async def). A plain endpoint may block on
    get() of other calls; an async one awaits them. Define `__supervise__(self, failure)` to
    hear of the failures of meshes it spawned (return True if handled).

    Inside the actor (its __init__ too): self.rank and self.point (its place in its mesh) and
    self.actor_id; baton.context() says the same from anywhere in its code."""

    actor_id = _Where(0, "This actor's id, as text.")
    rank = _Where(2, "This actor's rank in its mesh.")
    point = _Where(3, "This actor's Point in its mesh.")


def endpoint(
    fn: Optional[F] = None, *, propagate: Any = None, explicit_response_port: bool = False,
    instrument: bool = False,
) -> Any:
    """Marks a method of an Actor as an endpoint that meshes can call by name: @endpoint, or
    @endpoint(...) with options. With explicit_response_port=True the method gets a port as
    its first argument and replies by port.send(value) (or port.exception(error)) whenever it
    likes, from any thread: the actor goes on with its next message meanwhile, and the
    caller's future completes with what was sent. `propagate` and `instrument` (Monarch's tensor
    engine and tracing) are accepted and ignored."""
    del propagate, instrument
    if fn is None:
        return lambda f: endpoint(f, explicit_response_port=explicit_response_port)
    if not callable(fn):
        raise TypeError("@endpoint marks a method")
    setattr(fn, "_baton_endpoint", True)  # plain or async: the worker looks at what a call returns
    setattr(fn, "_baton_explicit_port", bool(explicit_response_port))
    return fn


_CO_COROUTINE = 0x80  # an `async def` function's code flag (no inspect at a worker's start)


def concurrent_endpoint(fn: Optional[F] = None, **options: Any) -> Any:
    """Marks an `async def` method as an endpoint whose calls may interleave: each runs as a
    task of its own on the process's event loop, acting as its actor, which goes on with its
    next message while the task awaits; the caller's future completes when the task ends."""
    if fn is None:
        return lambda f: concurrent_endpoint(f, **options)
    if not getattr(getattr(fn, "__code__", None), "co_flags", 0) & _CO_COROUTINE:
        raise TypeError("@concurrent_endpoint marks an `async def` method")

    def start(self, port, *args, **kwargs):
        from . import _host

        _host.start_task(fn(self, *args, **kwargs), self, port)

    start.__name__, start.__qualname__, start.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return endpoint(start, explicit_response_port=True)


def endpoints_of(cls: type) -> List[str]:
    """The names of the endpoints of an actor class."""
    return sorted(
        name for name in dir(cls) if getattr(getattr(cls, name, None), "_baton_endpoint", False)
    )
