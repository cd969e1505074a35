"""The endpoints of an actor mesh as its handle shows them (mesh.method): the verbs call,
call_one, choose, reduce, broadcast and stream; as_endpoint for a method not marked one; and the
stream of replies."""

from typing import Any, Callable, Optional

from . import _per_rank, _reply
from ._errors import ActorError, SupervisionError, UndeliverableError, UsageError
from ._future import FailedStreamItem, Future, StreamItem, _python_advice, _seconds
from ._pickle import dumps, dumps_call
from ._value_mesh import ValueMesh, _decode, _decode_mesh, _point


def _mesh_arg(args: tuple, kwargs: dict) -> bool:
    """Whether a ValueMesh is among the arguments (then each member may get its own value)."""
    for a in args:
        if isinstance(a, ValueMesh):
            return True
    return bool(kwargs) and any(isinstance(v, ValueMesh) for v in kwargs.values())


_PLAIN = object()  # a call that no ValueMesh argument or reply port routes


class Endpoint:
    """An endpoint of every member of an actor mesh."""

    def __init__(self, mesh, name, explicit=False):
        self._mesh = mesh
        self._name = name
        self._explicit = explicit  # replies through a port (explicit_response_port)
        # What the controller's metrics, stall reports and errors call it: "Class.method".
        self.label = f"{mesh._cls.__qualname__}.{name.lstrip('*')}"

    def _args(self, args, kwargs):
        return dumps_call(args, kwargs, self._mesh._message_view())

    def __call__(self, *args, **kwargs):
        raise UsageError(
            f"an endpoint of a mesh is not called directly: use mesh.{self._name}.call(...) "
            f"(every member), .call_one(...), .choose(...), .broadcast(...) or .stream(...)"
        )

    def _routed(self, verb, args, kwargs):
        """The call by `verb` with a ValueMesh argument split per member, or through a reply
        port (explicit_response_port); _PLAIN for a plain call, which the verb makes."""
        if _mesh_arg(args, kwargs) and (each := _per_rank.split(self, args, kwargs)) is not None:
            return _per_rank.call(self, each, verb)
        if self._explicit:
            return _reply.call(self, args, kwargs, verb)
        return _PLAIN

    def _verb(self, verb, decode, args, kwargs):
        routed = self._routed(verb, args, kwargs)
        if routed is not _PLAIN:
            return routed
        core = getattr(self._mesh._core, verb)(self._name, self._args(args, kwargs), self.label)
        return Future(core, decode, self._name, self._mesh)

    def call(self, *args: Any, **kwargs: Any) -> "Future[ValueMesh[Any]]":
        """Every member; a Future of a ValueMesh of the results."""
        return self._verb("call", _decode_mesh, args, kwargs)

    def call_one(self, *args: Any, **kwargs: Any) -> "Future[Any]":
        """The mesh's one member (a mesh of one, else UsageError)."""
        return self._verb("call_one", _decode, args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> "Future[Any]":
        """One member, chosen by the runtime."""
        return self._verb("choose", _decode, args, kwargs)

    def reduce(self, fn: Callable[[Any, Any], Any], *args: Any, **kwargs: Any) -> "Future[Any]":
        """Every member, the replies folded with fn(a, b) along the cast tree (in each worker
        on the way, then here), in rank order: a Future of the one value. `fn` is any picklable
        function: operator.add, max, a lambda."""
        data, buffers = dumps(fn)
        if buffers:
            raise UsageError("reduce: the function must pickle without out-of-band buffers")
        core = self._mesh._core.reduce(data, self._name, self._args(args, kwargs), self.label)
        return Future(core, _decode, self._name, self._mesh)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Every member, no reply."""
        if self._routed("broadcast", args, kwargs) is _PLAIN:
            self._mesh._core.broadcast(self._name, self._args(args, kwargs), self.label)

    def stream(self, *args: Any, timeout: Optional[float] = None, **kwargs: Any) -> Any:
        """Every member; an iterator of (point, value) as replies arrive. A member's failure is
        raised where its reply would be, and a reply not there within `timeout` seconds raises
        TimeoutError; either way the stream goes on with the next reply on the next next()."""
        routed = self._routed("stream", args, kwargs)
        if routed is not _PLAIN:
            return routed
        core = self._mesh._core.stream(self._name, self._args(args, kwargs), self.label)
        return Stream(core, timeout, self._name)


class NotAnEndpoint:
    """A method of the mesh's actor class that is not marked @endpoint: as_endpoint(it) calls
    it as one; any other use says to mark it."""

    def __init__(self, mesh, name):
        self._mesh = mesh
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise AttributeError(
            f"{self._mesh._cls.__qualname__}.{self._name} is not an endpoint: mark it with "
            f"@endpoint to call it through the mesh (or call as_endpoint(mesh."
            f"{self._name}))"
        )

    __call__ = _refuse

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()


def as_endpoint(method: Any, *, propagate: Any = None,
                explicit_response_port: bool = False) -> "Endpoint":
    """A method of a mesh's actors that is not marked @endpoint, called as one:
    as_endpoint(mesh.method).call(...)."""
    if not isinstance(method, NotAnEndpoint):
        raise UsageError("as_endpoint takes a mesh's method that is not an endpoint "
                         f"(as_endpoint(mesh.method)), not {type(method).__name__}")
    return Endpoint(method._mesh, "*" + method._name, explicit_response_port)


_STREAM_TIMEOUT = object()  # next()'s default: the stream's own timeout


class Stream:
    """Replies of stream(), one per member, as they arrive: (point, value) items (each also a
    completed Future of its value). A member's failure is its item: reading that item's value
    (get(), await, unpacking it) raises it, and the stream goes on with the other members.
    Iterate it, or `async for` in asyncio."""

    def __init__(self, core, timeout, endpoint):
        self._core = core
        self._timeout = timeout
        self._endpoint = endpoint

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def next(self, timeout: Any = _STREAM_TIMEOUT) -> StreamItem:
        """The next reply, waiting at most `timeout` seconds (None: as long as it takes; by
        default the stream's timeout); StopIteration once every member answered."""
        timeout = _seconds(self._timeout if timeout is _STREAM_TIMEOUT else timeout)
        try:
            item = self._core.next(timeout)
        except UsageError as e:
            raise _python_advice(e) from None
        except ActorError as e:  # the member's failure is its item's (the stream goes on)
            return FailedStreamItem((e.point, e.in_endpoint(self._endpoint)))
        except (SupervisionError, UndeliverableError) as e:
            return FailedStreamItem((getattr(e, "point", None), e))
        if item is None:
            raise StopIteration
        p, v = item
        return StreamItem((_point(p), _decode(v)))

    def __aiter__(self):
        return self

    async def __anext__(self):
        import asyncio

        # Waited for on a thread of asyncio's, never on the event loop's own.
        item = await asyncio.get_running_loop().run_in_executor(None, self._next_or_end)
        if item is None:
            raise StopAsyncIteration
        return item

    def _next_or_end(self):
        try:
            return self.next()
        except StopIteration:
            return None
