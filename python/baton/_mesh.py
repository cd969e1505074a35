"""Hosts, procs and actors as meshes, with the verbs of the C++ API: call, call_one, choose,
broadcast, stream; slicing by keyword; futures with get(timeout=...) that asyncio can await."""

import asyncio
import weakref

from . import _runtime
from ._actor import Actor, endpoints_of
from ._errors import UsageError
from ._pickle import dumps, dumps_call, loads
from ._point import Point


def _point(t):
    return Point(*t)


class ValueMesh:
    """One value per member of a mesh, in rank order. Iterating gives (point, value) pairs."""

    def __init__(self, labels, sizes, items):
        self.labels = tuple(labels)
        self.sizes = tuple(sizes)
        self._items = items

    @property
    def shape(self):
        return dict(zip(self.labels, self.sizes))

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def items(self):
        return list(self._items)

    def values(self):
        return [v for _, v in self._items]

    def points(self):
        return [p for p, _ in self._items]

    def __getitem__(self, where):
        """By rank (an int) or by point ({"gpus": 1} or keywords given as a dict)."""
        if isinstance(where, int):
            return self._items[where][1]
        for p, v in self._items:
            if all(p[d] == i for d, i in where.items()) and len(where) == len(p):
                return v
        raise KeyError(where)

    def __repr__(self):
        return f"ValueMesh({self.shape}, {self.values()!r})"


def _decode(t):
    data, buffers = t
    return loads(data, buffers)


def _decode_mesh(t):
    (labels, sizes), items = t
    return ValueMesh(labels, sizes, [(_point(p), _decode(v)) for p, v in items])


class Future:
    """The result of a call to come. get(timeout=None) blocks (the GIL released) and raises
    the call's failure; `await future` waits without blocking the event loop (the runtime
    wakes the loop through a file descriptor it watches, no thread per call)."""

    def __init__(self, core, convert):
        self._core = core
        self._convert = convert

    def done(self):
        return self._core.ready()

    def get(self, timeout=None):
        from ._errors import TimeoutError

        if not self._core.wait(timeout):  # refused inside an actor unless already done
            raise TimeoutError(f"no result within {timeout} s; the call may still complete")
        return self._convert(self._core.value())

    result = get

    def __await__(self):
        return _awaitable(self).__await__()


async def _awaitable(future):
    if not future.done():
        waiter = _LoopNotifier.of(asyncio.get_running_loop()).wait(future._core)
        await waiter
    return future._convert(future._core.value())


class _LoopNotifier:
    """Per event loop: one eventfd the loop watches, and the asyncio futures waiting."""

    _by_loop = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, loop):
        n = cls._by_loop.get(loop)
        if n is None:
            n = cls._by_loop[loop] = cls(loop)
        return n

    def __init__(self, loop):
        import _baton

        self._loop = loop
        self._core = _baton.Notifier()
        self._waiting = {}
        self._next = 0
        loop.add_reader(self._core.fd(), self._wake)

    def wait(self, core):
        token = self._next
        self._next += 1
        waiter = self._loop.create_future()
        self._waiting[token] = waiter
        self._core.watch(core, token)
        return waiter

    def _wake(self):
        for token in self._core.drain():
            waiter = self._waiting.pop(token, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)


def _selects(shape_labels, kwargs):
    out = []
    for dim, sel in kwargs.items():
        if dim not in shape_labels:
            raise UsageError(f"no dimension {dim!r} in a mesh of {list(shape_labels)}")
        if isinstance(sel, slice):
            if sel.step not in (None, 1):
                raise UsageError("slices of a mesh take no step")
            out.append((dim, sel.start or 0, sel.stop if sel.stop is not None else -1, False))
        elif isinstance(sel, int):
            out.append((dim, sel, sel + 1, True))
        else:
            raise UsageError(f"slice {dim}= takes an int or a slice, not {type(sel).__name__}")
    return out


def _resolve(selects, labels, sizes):
    size_of = dict(zip(labels, sizes))
    return [(d, b, size_of[d] if e == -1 else e, i) for d, b, e, i in selects]


class Endpoint:
    """An endpoint of every member of an actor mesh."""

    def __init__(self, mesh, name):
        self._mesh = mesh
        self._name = name

    def call(self, *args, **kwargs):
        """Every member; a Future of a ValueMesh of the results."""
        core = self._mesh._core.call(self._name, dumps_call(args, kwargs))
        return Future(core, _decode_mesh)

    def call_one(self, *args, **kwargs):
        """The mesh's one member (a mesh of one, else UsageError)."""
        return Future(self._mesh._core.call_one(self._name, dumps_call(args, kwargs)), _decode)

    def choose(self, *args, **kwargs):
        """One member, chosen by the runtime."""
        return Future(self._mesh._core.choose(self._name, dumps_call(args, kwargs)), _decode)

    def reduce(self, fn, *args, **kwargs):
        """Every member, the replies folded with fn(a, b) along the cast tree (in each worker
        on the way, then here), in rank order: a Future of the one value. `fn` is any picklable
        function: operator.add, max, a lambda."""
        data, buffers = dumps(fn)
        if buffers:
            raise UsageError("reduce: the function must pickle without out-of-band buffers")
        core = self._mesh._core.reduce(data, self._name, dumps_call(args, kwargs))
        return Future(core, _decode)

    def broadcast(self, *args, **kwargs):
        """Every member, no reply."""
        self._mesh._core.broadcast(self._name, dumps_call(args, kwargs))

    def stream(self, *args, timeout=None, **kwargs):
        """Every member; yields (point, value) as replies arrive. A member's failure is raised
        where its reply would be."""
        s = self._mesh._core.stream(self._name, dumps_call(args, kwargs))
        while True:
            item = s.next(timeout)
            if item is None:
                return
            p, v = item
            yield _point(p), _decode(v)


def _mesh_from_wire(head, parts, cls):
    import _baton

    return ActorMesh(_baton.ActorMesh.from_wire(head, parts), cls)


class ActorMesh:
    """One actor per member of a proc mesh (or a slice of one); its endpoints are attributes:
    `mesh.value.call()`. A mesh can be passed to actors (as an argument or a result); inside an
    actor, call it from an `async def` endpoint and `await` the future (a plain endpoint runs on
    the actor's thread, where blocking on get() is refused)."""

    def __init__(self, core, cls):
        self._core = core
        self._cls = cls

    def __reduce__(self):
        head, parts = self._core.to_wire()
        return (_mesh_from_wire, (head, parts, self._cls))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        fn = getattr(self._cls, name, None)
        if fn is None or not getattr(fn, "_baton_endpoint", False):
            raise AttributeError(
                f"{self._cls.__qualname__} has no endpoint {name!r} "
                f"(its endpoints: {', '.join(endpoints_of(self._cls)) or 'none'})"
            )
        return Endpoint(self, name)

    @property
    def shape(self):
        labels, sizes = self._core.shape()
        return dict(zip(labels, sizes))

    def __len__(self):
        return self._core.size()

    def slice(self, **dims):
        """slice(gpus=slice(0, 2)) keeps a range; slice(gpus=3) one index, dropping the dim."""
        labels, sizes = self._core.shape()
        return ActorMesh(self._core.slice(_resolve(_selects(labels, dims), labels, sizes)), self._cls)

    def stop(self):
        return Future(self._core.stop(), lambda v: None)


class ProcMesh:
    """Worker processes, one per member of a shape."""

    def __init__(self, core):
        self._core = core

    @property
    def shape(self):
        labels, sizes = self._core.shape()
        return dict(zip(labels, sizes))

    def __len__(self):
        return self._core.size()

    def spawn(self, name, cls, *args, **kwargs):
        """An actor of class `cls` in every proc, made with cls(*args, **kwargs) there."""
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise UsageError(f"spawn: {cls!r} is not a subclass of baton.Actor")
        return ActorMesh(self._core.spawn(name, dumps((cls, args, kwargs))), cls)

    def spawn_async(self, name, cls, *args, **kwargs):
        """spawn(), as a Future: inside an actor, `await` it (blocking there is refused)."""
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise UsageError(f"spawn: {cls!r} is not a subclass of baton.Actor")
        core = self._core.spawn_async(name, dumps((cls, args, kwargs)))
        return Future(core, lambda mesh: ActorMesh(mesh, cls))

    def slice(self, **dims):
        labels, sizes = self._core.shape()
        return ProcMesh(self._core.slice(_resolve(_selects(labels, dims), labels, sizes)))

    def stop(self):
        return Future(self._core.stop(), lambda v: None)


class HostMesh:
    """Hosts on which procs start. this_host() is the one this program runs on."""

    def spawn_procs(self, per_host=None, **dims):
        """Worker processes: spawn_procs({"gpus": 4}) or spawn_procs(gpus=4)."""
        import os

        import _baton

        if not os.environ.get("BATON_PROC"):  # a worker has its runtime already
            _runtime.runtime()
        shape = dict(per_host or {}, **dims)
        if not shape:
            raise UsageError("spawn_procs: give the procs' shape, e.g. {'gpus': 4}")
        return ProcMesh(_baton.spawn_procs([(k, int(v)) for k, v in shape.items()]))

    def spawn_procs_async(self, per_host=None, **dims):
        """spawn_procs(), as a Future: inside an actor, `await` it. The actor owns the procs:
        they die with it, and their failures go to its __supervise__."""
        import _baton

        shape = dict(per_host or {}, **dims)
        if not shape:
            raise UsageError("spawn_procs: give the procs' shape, e.g. {'gpus': 4}")
        core = _baton.spawn_procs_async([(k, int(v)) for k, v in shape.items()])
        return Future(core, ProcMesh)


def this_host():
    return HostMesh()
