"""Python actors: subclasses of baton.Actor whose endpoints are marked @baton.endpoint."""


class Actor:
    """The base of Python actors. An actor handles one message at a time; its endpoints are
    the methods marked @baton.endpoint (plain or async def). Define `__supervise__(self,
    failure)` to hear of the failures of meshes it spawned (return True if handled).

    Inside the actor (its __init__ too): self.rank and self.point (its place in its mesh) and
    self.actor_id."""

    @property
    def actor_id(self):
        return self._baton_where[0]

    @property
    def rank(self):
        return self._baton_where[2]

    @property
    def point(self):
        return self._baton_where[3]


def endpoint(fn):
    """Marks a method of an Actor as an endpoint that meshes can call by name."""
    if not callable(fn):
        raise TypeError("@baton.endpoint marks a method")
    fn._baton_endpoint = True  # plain or async: the worker looks at what a call returns
    return fn


def endpoints_of(cls):
    """The names of the endpoints of an actor class."""
    return sorted(
        name for name in dir(cls) if getattr(getattr(cls, name, None), "_baton_endpoint", False)
    )


