"""Endpoints that reply through a port (@endpoint(explicit_response_port=True)): the caller opens
a port, passes a ReplyPort to the members as their first argument, and its future completes
with what they send on it, while the actors go on with their next messages."""

from . import _context
from ._errors import ActorError, actor_error, encode_exception
from ._future import Deferred, FailedStreamItem, Future, StreamItem
from ._pickle import dumps_call
from ._point import points_of
from ._value_mesh import ValueMesh, _decode


class ReplyPort:
    """What an explicit-response endpoint gets first: send(value) replies to its caller (once),
    exception(error) fails the call with that error. Any thread may use it: it knows which
    member it is from since it arrived there."""

    def __init__(self, port, endpoint, sender=None):
        self._port = port
        self._endpoint = endpoint
        self._sender = sender  # (rank, actor id) of the member it arrived at

    def __reduce__(self):
        return (_arrived, (self._port, self._endpoint))

    def send(self, value):
        if self._port is not None:
            self._port.send((*self._sender, True, value))

    def exception(self, error):
        if self._port is not None:
            self._port.send((*self._sender, False, encode_exception(error)))


def _arrived(port, endpoint):
    """A ReplyPort unpickled in the member it was sent to (the running actor)."""
    rank = _context.current_rank()
    return ReplyPort(port, endpoint, (rank.rank, _context.current_actor_name()))


def _value(item, endpoint, point=None):
    """What a member replied, or its ActorError (naming its `point` in the mesh called)."""
    rank, actor, ok, value = item
    if ok:
        return value
    if point is None:
        raise actor_error(actor, endpoint, "", value)
    coords = ", ".join(f"{k}: {c}" for k, c in point.items())
    raise actor_error(actor, endpoint, f"rank {point.rank} {{{coords}}}", value, point)


def call(endpoint, args, kwargs, mode):
    """The verbs of an explicit-response endpoint: mode is call, call_one, choose, stream or
    broadcast (this module's ports are opened by the caller's process)."""
    from ._port import open_port

    mesh, name = endpoint._mesh, endpoint._name
    if mode == "broadcast":
        mesh._core.broadcast(
            name, _dumps(ReplyPort(None, name), args, kwargs, mesh._message_view()), endpoint.label
        )
        return None
    port, receiver = open_port()
    data = _dumps(ReplyPort(port, name), args, kwargs, mesh._message_view())
    if mode in ("call_one", "choose"):
        started = Future(getattr(mesh._core, mode)(name, data, endpoint.label), _decode, name)

        def one(timeout):
            started.get(timeout)  # a handler that raised fails the call
            return _value(receiver.recv(timeout), name)

        return Deferred(one)
    n = len(mesh)
    labels, sizes = mesh._core.shape()
    members = mesh._core.members()
    started = Future(mesh._core.call(name, data, endpoint.label), lambda v: None, name)
    if mode == "stream":
        points = points_of(labels, sizes)

        def items():
            started.get()
            for _ in range(n):
                item = receiver.recv()
                point = points[_place(item, members)]
                try:
                    value = _value(item, name, point)
                except ActorError as e:  # the member's failure is its item's
                    yield FailedStreamItem((point, e))
                    continue
                yield StreamItem((point, value))

        return items()

    def gather(timeout):
        started.get(timeout)
        points = points_of(labels, sizes)
        got = [None] * n
        for _ in range(n):
            item = receiver.recv(timeout)
            got[_place(item, members)] = item
        return ValueMesh(labels, sizes, [(p, _value(i, name, p)) for p, i in zip(points, got)])

    return Deferred(gather)


def _place(item, members):
    """The rank, in the mesh called, of the member that sent `item`."""
    return members.index(item[1])


def _dumps(reply, args, kwargs, view=None):
    return dumps_call((reply, *args), kwargs, view)
