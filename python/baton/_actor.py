"""Python actors: subclasses of baton.Actor whose endpoints are marked @baton.endpoint."""

from ._errors import UsageError


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


def endpoint(fn=None, *, propagate=None, explicit_response_port=False, instrument=False):
    """Marks a method of an Actor as an endpoint that meshes can call by name: @endpoint, or
    @endpoint(...) with Monarch's options (`propagate` and `instrument` concern Monarch's
    tensor engine and tracing, and are accepted and ignored)."""
    del propagate, instrument
    if explicit_response_port:
        raise UsageError(
            "@endpoint(explicit_response_port=True) is not supported by baton yet: reply by "
            "returning the value (an async endpoint may await what it needs first), or send it "
            "on a Port the caller passes (baton.open_port())"
        )
    if fn is None:
        return endpoint
    if not callable(fn):
        raise TypeError("@baton.endpoint marks a method")
    fn._baton_endpoint = True  # plain or async: the worker looks at what a call returns
    return fn


def endpoints_of(cls):
    """The names of the endpoints of an actor class."""
    return sorted(
        name for name in dir(cls) if getattr(getattr(cls, name, None), "_baton_endpoint", False)
    )
