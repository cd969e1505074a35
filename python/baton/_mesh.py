"""Hosts, procs and actors as meshes, with the verbs of the C++ API: call, call_one, choose,
broadcast, stream; slicing by keyword."""

import collections.abc
import inspect
import operator
import os
import re
from typing import Any, Callable, Dict, Generic, Iterable, List, Optional, TypeVar, Union

from . import _baton
from . import _context, _runtime
from ._actor import Actor, endpoint, endpoints_of
from ._endpoint import Endpoint, NotAnEndpoint
from ._errors import UsageError
from ._future import Deferred, Future, _python_advice
from ._pickle import dumps
from ._point import Extent, split_plan
from ._value_mesh import _plain_mesh


def _integer(v):
    """v as an int if it is an integer (a numpy one too) other than a bool; else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _bound(v, dim, what):
    """A slice's start or stop, an integer."""
    i = _integer(v)
    if i is None:
        raise UsageError(f"slice {dim}= takes ints for its {what}, not {type(v).__name__}")
    return i


def _selects(labels, sizes, kwargs):
    """(dim, begin, end, drop the dim) for each selection, indices counted from the end where
    negative, as Python's sequences count them."""
    size_of = dict(zip(labels, sizes))
    out = []
    for dim, sel in kwargs.items():
        if dim not in size_of:
            raise UsageError(f"no dimension {dim!r} in a mesh of {list(labels)}")
        n = size_of[dim]
        i = _integer(sel)
        if isinstance(sel, slice):
            if sel.step not in (None, 1):
                raise UsageError("slices of a mesh take no step")
            begin, end, _ = slice(
                None if sel.start is None else _bound(sel.start, dim, "start"),
                None if sel.stop is None else _bound(sel.stop, dim, "stop"),
            ).indices(n)  # clamped to the mesh, as Python's sequences clamp slices
            if begin >= end:
                raise UsageError(f"slice {dim}={sel.start}:{sel.stop} selects none of its {n}")
            out.append((dim, begin, end, False))
        elif i is not None:
            if not -n <= i < n:
                raise UsageError(f"index {i} out of bounds for {dim!r} (size {n})")
            out.append((dim, i % n, i % n + 1, True))
        else:
            raise UsageError(f"slice {dim}= takes an int or a slice, not {type(sel).__name__}")
    return out


class _Done(collections.abc.Coroutine):
    """What a call that completed at once returns: a finished coroutine (for await and
    asyncio.run, as Monarch's async methods give) with get() for synchronous code."""

    def send(self, value):
        raise StopIteration(None)

    def throw(self, *exc):
        raise exc[0] if len(exc) == 1 else exc[1]

    def close(self):
        pass

    def __await__(self):
        return iter(())

    def get(self, timeout=None):
        return None

    result = get


def _mesh_from_wire(head, parts, cls, view=False):
    return ActorMesh(_baton.ActorMesh.from_wire(head, parts), cls, view=view)


class _Mesh:
    """What every mesh has: a shape, a size, views by slicing, and stop()."""

    _core: Any

    @property
    def shape(self) -> Dict[str, int]:
        labels, sizes = self._core.shape()
        return dict(zip(labels, sizes))

    @property
    def extent(self) -> Extent:
        """The size of each dimension, in order (an Extent)."""
        return Extent(*self._core.shape())

    @property
    def _labels(self) -> List[str]:
        """The dimensions' names, in order (Monarch's programs read it)."""
        return list(self._core.shape()[0])

    @property
    def sizes(self) -> Dict[str, int]:
        return self.shape

    def size(self, dim: Union[None, str, Iterable[str]] = None) -> int:
        """How many members: all of them, or along `dim` (a name or several)."""
        shape = self.shape
        dims = list(shape) if dim is None else [dim] if isinstance(dim, str) else list(dim)
        n = 1
        for d in dims:
            if d not in shape:
                raise KeyError(f"no dimension {d!r} in a mesh of {list(shape)}")
            n *= shape[d]
        return n

    def __len__(self) -> int:
        return self._core.size()

    def _sliced(self, dims):
        labels, sizes = self._core.shape()
        return self._core.slice(_selects(labels, sizes, dims))

    def _view(self, core: Any) -> Any:
        raise NotImplementedError

    def flatten(self, name: str) -> Any:
        """The same members on one dimension named `name`, in rank order."""
        return self._view(self._core.flatten(name))

    def rename(self, **names: str) -> Any:
        """The same members with dimensions renamed: rename(hosts="dp", gpus="tp")."""
        core = self._core
        for old, new in names.items():
            core = core.rename(old, new)
        return self._view(core)

    def split(self, **spec: Any) -> Any:
        """The same members with dimensions split, as in Monarch: split(hosts=("dp", "pp"),
        pp=4) makes hosts into dp x pp, pp of size 4 (row-major)."""
        labels, sizes = self._core.shape()
        plan, _, _ = split_plan(labels, sizes, spec)
        core = self._core
        for dim, parts in plan:
            core = core.split(dim, parts)
        return self._view(core)

    def stop(self, reason: str = "stopped by client") -> "Future[None]":
        """Stops the mesh's actors (Monarch's `reason` is accepted; baton does not keep it)."""
        return Future(self._core.stop(), lambda v: None)

    @property
    def initialized(self) -> "Future[bool]":
        """A Future of True once the mesh is up: at once, since spawning returns only once
        every member is (Monarch's programs wait on it)."""
        return Deferred(lambda timeout: True)


A = TypeVar("A")


class ActorMesh(_Mesh, Generic[A]):
    """One actor per member of a proc mesh (or a slice of one); its endpoints are attributes:
    `mesh.value.call()`. A mesh can be passed to actors (as an argument or a result); inside an
    actor, a plain endpoint may block on get() (the actor handles one message at a time
    meanwhile), an `async def` endpoint awaits the future."""

    def __init__(
        self, core: Any, cls: type, procs: Optional["ProcMesh"] = None, view: bool = False
    ) -> None:
        self._core = core
        self._cls = cls
        self._procs = procs  # held: the procs live at least as long as their actors' handle
        self._is_view = view  # sliced, renamed, flattened or split from the mesh as spawned

    def __reduce__(self):
        head, parts = self._core.to_wire()
        return (_mesh_from_wire, (head, parts, self._cls, self._is_view))

    def _message_view(self) -> Optional[tuple]:
        """What a call to a view carries, for its members' message_rank (their point in the
        view): its dimensions, sizes and where its members are in the mesh as spawned."""
        if not self._is_view:
            return None
        labels, sizes = self._core.shape()
        offset, strides = self._core.locations()
        return (tuple(labels), tuple(sizes), offset, tuple(strides))

    def __getattr__(self, name: str) -> Endpoint:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = getattr(self._cls, name, None)
        if callable(fn) and not getattr(fn, "_baton_endpoint", False):
            return NotAnEndpoint(self, name)  # type: ignore[return-value]
        if fn is None or not getattr(fn, "_baton_endpoint", False):
            raise AttributeError(
                f"{self._cls.__qualname__} has no endpoint {name!r} "
                f"(its endpoints: {', '.join(endpoints_of(self._cls)) or 'none'})"
            )
        return Endpoint(self, name, getattr(fn, "_baton_explicit_port", False))

    def slice(self, **dims: Any) -> "ActorMesh[A]":
        """slice(gpus=slice(0, 2)) keeps a range; slice(gpus=3) one index, dropping the dim."""
        return self._view(self._sliced(dims))

    def _view(self, core: Any) -> "ActorMesh[A]":
        return ActorMesh(core, self._cls, self._procs, view=True)


class ProcMesh(_Mesh):
    """Worker processes, one per member of a shape."""

    name: Optional[str] = None  # as given to spawn_procs

    def __init__(self, core: Any, host_mesh: Optional["HostMesh"] = None) -> None:
        self._core = core
        self._host_mesh = host_mesh

    @property
    def host_mesh(self) -> "HostMesh":
        """The hosts these procs run on (this host for procs of this one)."""
        return self._host_mesh if self._host_mesh is not None else this_host()

    def spawn(self, name: str, cls: Any, *args: Any, **kwargs: Any) -> Any:
        """An actor of class `cls` in every proc, made with cls(*args, **kwargs) there; or a C++
        actor its program exposed, with cls = baton.cpp("Name") (positional arguments)."""
        if isinstance(cls, cpp):
            return self.spawn_async(name, cls, *args, **kwargs).get()
        _check_spawn(name, cls)
        if _context.monarch_semantics() and _context.on_event_loop():
            return _spawned(self.spawn_async(name, cls, *args, **kwargs))
        try:
            core = self._core.spawn(name, dumps((cls, args, kwargs)))
        except UsageError as e:
            raise _python_advice(e, "`await procs.spawn_async(...)` instead") from None
        return ActorMesh(core, cls, self)

    def spawn_async(self, name: str, cls: Any, *args: Any, **kwargs: Any) -> "Future[Any]":
        """spawn(), as a Future: in an async endpoint, `await` it."""
        if isinstance(cls, cpp):
            _check_spawn(name, None)
            if kwargs:
                raise UsageError("a C++ actor's constructor takes positional arguments only")
            core = _baton.spawn_exposed(self._core, name, cls.name, list(args))
            return Future(core, lambda mesh: CppActorMesh(mesh, cls, self))
        _check_spawn(name, cls)
        core = self._core.spawn_async(name, dumps((cls, args, kwargs)))
        return Future(core, lambda mesh: ActorMesh(mesh, cls, self))

    def slice(self, **dims: Any) -> "ProcMesh":
        return ProcMesh(self._sliced(dims), self._host_mesh)

    def _view(self, core: Any) -> "ProcMesh":
        return ProcMesh(core, self._host_mesh)

    def activate(self) -> Any:
        """Monarch's tensor engine (a mesh as the device of torch calls) is not part of baton."""
        raise UsageError(
            "ProcMesh.activate() is Monarch's tensor engine, which baton does not implement: run "
            "torch code inside actors, and move tensors with baton.collective or RDMABuffer"
        )

    def logging_option(
        self, stream_to_client: bool = True, aggregate_window_sec: Optional[float] = None,
        level: Any = None,
    ) -> "_Done":
        """How these procs' output reaches this program's terminal: stream_to_client=False
        keeps it from being printed here (it is still kept for failure reports);
        aggregate_window_sec sets how long the same line from several procs is waited for to
        print it once with their ranks (for every mesh: the runtime has one window; 0 prints
        each line as it comes). Done at once: what it returns is already complete (await it,
        asyncio.run it, get() it, or drop it)."""
        if aggregate_window_sec is not None and not stream_to_client:
            raise UsageError("logging_option: aggregate_window_sec needs stream_to_client=True")
        if os.environ.get("BATON_PROC"):  # a worker's procs print at the controller
            return _Done()
        rt = _runtime.runtime()
        for name in {p.rpartition(".")[0] for p in self._core.proc_names()}:
            rt.show_output(name, bool(stream_to_client))
        if aggregate_window_sec is not None:
            rt.set_output_window(int(float(aggregate_window_sec) * 1000))
        return _Done()

    def __copy__(self):
        return self  # a handle: copies would name the same procs

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError(
            "a ProcMesh stays with whoever spawned it and cannot be sent: pass an actor mesh "
            "instead, or let the actor spawn procs of its own (await spawn_procs_async(...))"
        )


class HostMesh:
    """Hosts on which procs start. this_host() is the one this program runs on; attach() gives
    the hosts of a job, each running an agent (baton-host) with the job's credentials
    (BATON_CREDENTIALS names them here)."""

    def __init__(self, core=None):
        self._core = core  # None: this host

    def __len__(self):
        return 1 if self._core is None else self._core.size()

    @property
    def extent(self):
        """{"hosts": H}."""
        return Extent(("hosts",), (len(self),))

    def stop(self, reason: str = "stopped by client"):
        """Stops every proc mesh this program started on these hosts (Monarch's `reason` is
        accepted; baton does not keep it)."""
        if self._core is None:
            raise UsageError("stop() is for the hosts of a job; stop this host's proc meshes")
        return Future(self._core.stop(), lambda v: None)

    @property
    def initialized(self) -> "Future[bool]":
        """A Future of True: the hosts are up once the mesh is made."""
        return Deferred(lambda timeout: True)

    def spawn_procs(
        self, per_host: Optional[Dict[str, int]] = None, bootstrap: Optional[Callable] = None,
        name: Optional[str] = None, program: Optional[List[str]] = None, **dims: int,
    ) -> ProcMesh:
        """Worker processes: spawn_procs({"gpus": 4}) or spawn_procs(gpus=4); with no shape,
        one proc per host ({"procs": 1}). `bootstrap` (a function, plain or async, that
        pickles by reference) runs once in every proc before this returns; its failure stops
        the procs and is raised here. `name` is checked as a mesh name and kept as the mesh's
        `name` (the procs are named by the runtime). `program` ([executable, args...]) runs a
        C++ program of yours instead of this interpreter: one that exposes its actors
        (baton::expose) and constructs a baton::Runtime first thing; spawn them with
        baton.cpp("Name")."""
        if not os.environ.get("BATON_PROC"):  # a worker has its runtime already
            _runtime.runtime()
        return _spawned(self.spawn_procs_async(per_host, bootstrap, name, program, **dims))

    def spawn_procs_async(
        self, per_host: Optional[Dict[str, int]] = None, bootstrap: Optional[Callable] = None,
        name: Optional[str] = None, program: Optional[List[str]] = None, **dims: int,
    ) -> "Future[ProcMesh]":
        """spawn_procs(), as a Future: inside an actor, `await` it. The actor owns the procs:
        they die with it, and their failures go to its __supervise__."""
        if per_host is not None and not isinstance(per_host, dict):
            raise UsageError(f"spawn_procs: give the shape as a dict, e.g. {{'gpus': 4}}, "
                             f"not {type(per_host).__name__}")
        for hook in _before_spawn:
            hook()
        if bootstrap is not None and not callable(bootstrap):
            raise UsageError(f"spawn_procs: bootstrap is a function run in every proc, not "
                             f"{type(bootstrap).__name__}")
        if name is not None:
            _check_spawn(name, None)
        shape = dict(per_host or {}, **dims) or {"procs": 1}
        pairs = []
        for k, v in shape.items():
            size = _integer(v)
            if not isinstance(k, str) or size is None or size < 1:
                raise UsageError(
                    f"spawn_procs: each dimension is a name and a size of 1 or more, e.g. "
                    f"{{'gpus': 4}}; not {k!r}: {v!r}"
                )
            pairs.append((k, size))
        if self._core is not None:
            if program:
                raise UsageError("spawn_procs: the hosts of a job run this program's interpreter")
            future: "Future[ProcMesh]" = Future(self._core.spawn_procs_async(pairs),
                                                lambda core: ProcMesh(core, self))
        else:
            program = [os.path.abspath(program[0]), *program[1:]] if program else []
            future = Future(_baton.spawn_procs_async(pairs, program),
                            lambda core: ProcMesh(core, self))
        if bootstrap is None and name is None:
            return future

        def ready(timeout):
            procs = future.get(timeout)
            procs.name = name
            if bootstrap is not None:
                _bootstrap(procs, bootstrap)
            return procs

        return Deferred(ready)


class _Bootstrap(Actor):
    """Runs a proc mesh's bootstrap function in each of its procs."""

    def __init__(self, setup: Callable) -> None:
        self._setup = setup

    @endpoint
    async def run(self) -> None:
        got = self._setup()
        if inspect.isawaitable(got):
            await got


def _bootstrap(procs: ProcMesh, setup: Callable) -> None:
    """Runs `setup` in every proc of `procs`; its failure stops them and is raised."""
    try:
        runner = procs.spawn("_bootstrap", _Bootstrap, setup)
        try:
            runner.run.call().get()
        finally:
            runner.stop().get()
    except BaseException:
        procs.stop().get()
        raise


# Run before procs are spawned (baton.monarch's job-wide controllers make theirs here).
_before_spawn: List[Callable[[], None]] = []

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _check_spawn(name, cls):
    """A mesh's name and an actor class, checked here rather than in every proc."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            f"spawn: {name!r} is not a mesh name: use 1-128 characters of [A-Za-z0-9_.-]"
        )
    if cls is None:
        return
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise UsageError(
            f"spawn: {cls!r} is not a subclass of Actor (baton.Actor, or monarch.actor.Actor)"
        )
    endpoints = endpoints_of(cls)
    private = [n for n in endpoints if n.startswith("_")]
    if private:
        raise UsageError(
            f"spawn: {cls.__qualname__}'s endpoint(s) {', '.join(private)} start with '_', which a "
            f"mesh never looks up: rename them"
        )
    hidden = [n for n in endpoints if any(n in vars(k) for k in ActorMesh.__mro__)]
    if hidden:
        raise UsageError(
            f"spawn: {cls.__qualname__}'s endpoint(s) {', '.join(hidden)} have the name of the "
            f"mesh's own {'method' if len(hidden) == 1 else 'methods'}, which would hide them: "
            f"rename them"
        )


class cpp:
    """A C++ actor type that a worker program exposed by name (baton::expose<A, Args...>):
    procs.spawn("trainers", baton.cpp("Trainer"), 42)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"baton.cpp({self.name!r})"


def _cpp_mesh_from_wire(head, parts, kind):
    return CppActorMesh(_baton.ExposedMesh.from_wire(head, parts), kind)


class CppEndpoint:
    """An endpoint of every member of a mesh of C++ actors: the same verbs, with arguments
    and results converted (None, bool, int, float, str, bytes, lists, dicts; numpy arrays and
    tensors as lists)."""

    def __init__(self, mesh, name):
        self._mesh = mesh
        self._name = name

    def call(self, *args):
        return Future(self._mesh._core.call(self._name, list(args)), _plain_mesh)

    def call_one(self, *args):
        return Future(self._mesh._core.call_one(self._name, list(args)), lambda v: v)

    def choose(self, *args):
        return Future(self._mesh._core.choose(self._name, list(args)), lambda v: v)

    def broadcast(self, *args):
        self._mesh._core.broadcast(self._name, list(args))


class CppActorMesh(_Mesh):
    """C++ actors spawned from Python; endpoints by name: `trainers.train.call(1)`."""

    def __init__(self, core, kind, procs=None):
        self._core = core
        self._kind = kind
        self._procs = procs

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return CppEndpoint(self, name)

    def slice(self, **dims):
        return self._view(self._sliced(dims))

    def _view(self, core: Any) -> "CppActorMesh":
        return CppActorMesh(core, self._kind, self._procs)

    def __reduce__(self):
        head, parts = self._core.to_wire()
        return (_cpp_mesh_from_wire, (head, parts, self._kind))


def this_host() -> "HostMesh":
    return HostMesh()


def _spawned(future: "Future[Any]") -> Any:
    """A spawn's mesh, waited for. In an async endpoint baton refuses to wait (it would hold the
    event loop) and points to the _async form, except under Monarch's semantics: there a spawn
    returns its mesh, so it is waited for on a thread outside the actor, with the loop held."""
    if not (_context.monarch_semantics() and _context.on_event_loop()):
        return future.get()
    import threading

    got: Dict[str, Any] = {}

    def wait() -> None:
        try:
            got["mesh"] = future.get()
        except BaseException as e:  # noqa: B902: raised where the spawn was asked for
            got["error"] = e

    waiter = threading.Thread(target=wait, name="baton-spawn", daemon=True)
    waiter.start()
    waiter.join()
    if "error" in got:
        raise got["error"]
    return got["mesh"]


def this_proc() -> ProcMesh:
    """This process's own proc, a ProcMesh of no dimensions: actors spawned on it run in this
    process (the controller's, or a worker's beside its other actors) and are called like any
    others. Its stop() does nothing; stop their actor meshes instead."""
    if not os.environ.get("BATON_PROC"):  # a worker has its runtime already
        _runtime.runtime()
    return ProcMesh(_baton.this_proc())


def attach(addresses: Union[str, "os.PathLike[str]", List[str]]) -> "HostMesh":
    """The hosts whose agents (baton-host) listen at `addresses` ("host:port"), as a mesh of
    hosts {"hosts": H}; their procs run this interpreter with this program's PYTHONPATH, so the
    hosts need the same Python and packages at the same paths (a shared filesystem, an image).
    attach("FILE") reads the addresses a job saved."""
    _runtime.runtime()
    if isinstance(addresses, (str, os.PathLike)):
        return HostMesh(_baton.attach_file(os.fspath(addresses)))
    return HostMesh(_baton.attach(list(addresses)))
