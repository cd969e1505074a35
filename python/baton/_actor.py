"""Python actors: subclasses of baton.Actor whose endpoints are marked @baton.endpoint."""

import inspect


class Actor:
    """The base of Python actors. An actor handles one message at a time; its endpoints are
    the methods marked @baton.endpoint (plain or async def). Define `__supervise__(self,
    failure)` to hear of the failures of meshes it spawned (return True if handled)."""


def endpoint(fn):
    """Marks a method of an Actor as an endpoint that meshes can call by name."""
    if not callable(fn):
        raise TypeError("@baton.endpoint marks a method")
    fn._baton_endpoint = True
    fn._baton_async = inspect.iscoroutinefunction(fn)
    return fn


def endpoints_of(cls):
    """The names of the endpoints of an actor class."""
    return sorted(
        name for name in dir(cls) if getattr(getattr(cls, name, None), "_baton_endpoint", False)
    )


