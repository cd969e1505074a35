"""monarch.actor over baton: actors, meshes, futures, ports and supervision under Monarch's
names. Each name is baton's own concept (see the package's README section "Running Monarch
programs" for how each maps, and what is left out)."""

import base64
import os
import pickle
import sys
import threading
import types
from typing import TypeVar

from .. import _context, _mesh, _runtime
from .._actor import Actor, concurrent_endpoint, endpoint
from .._context import Context, context, current_actor_name, current_rank, current_size
from .._context import _current as _current_actor
from .._errors import ActorError, MeshFailure, UsageError
from .._future import Deferred, Future
from .._endpoint import Endpoint, as_endpoint  # noqa: F401
from .._mesh import (  # noqa: F401
    ActorMesh,
    HostMesh,
    ProcMesh,
    this_host,
    this_proc,
)
from .._point import Extent, Point
from .._port import Port as _BatonPort
from .._port import open_port
from .._value_mesh import ValueMesh
from . import config
from ._unsupported import Unsupported

ProcId = str
_T = TypeVar("_T")


class Port(_BatonPort[_T]):
    """Where values are sent (port.send(value)); pass it to actors."""


class PortReceiver:
    """The receiving end of a Channel: recv() is a Future of the next value (await it, or
    get(timeout=...))."""

    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(self, receiver):
        self._receiver = receiver

    def recv(self, timeout=None):
        """A Future of the next value: get(timeout=), or await it; `timeout` here is the
        default of its get()."""
        return Deferred(lambda t: self._receiver.recv(timeout if t is None else t))


class Channel:
    """Channel.open() -> (Port, PortReceiver): values sent to the port arrive at the receiver,
    in order per sender."""

    __class_getitem__ = classmethod(types.GenericAlias)

    @staticmethod
    def open(once=False):
        """(Port, PortReceiver); with once=True the receiver takes one value (a OncePort)."""
        port, receiver = open_port()
        p = Port.__new__(Port)
        p._core = port._core
        return p, (_OnceReceiver(receiver) if once else PortReceiver(receiver))


class _OnceReceiver(PortReceiver):
    """The receiver of a once channel: one value, then recv() refuses."""

    def recv(self, timeout=None):
        if getattr(self, "_taken", False):
            raise UsageError("this channel was opened with once=True: its one value was taken")
        self._taken = True
        return super().recv(timeout)


class Accumulator:
    """Folds the replies of every member of a mesh to one value, here: Accumulator(mesh.ep,
    identity, combine).accumulate(*args) is a Future of combine(...combine(identity, r0)...)."""

    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(self, endpoint, identity, combine):
        if not isinstance(endpoint, Endpoint):
            raise UsageError("Accumulator takes a mesh's endpoint (mesh.name), not "
                             f"{type(endpoint).__name__}")
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args, **kwargs):
        def fold(timeout):
            value = self._identity
            for _, v in self._endpoint.stream(*args, timeout=timeout, **kwargs):
                value = self._combine(value, v)
            return value

        return Deferred(fold)


def send(endpoint, args, kwargs, port=None, selection="all"):
    """Calls `endpoint` with args and kwargs on every member (selection "all") or one
    ("choose"), without waiting; with a `port`, each reply is sent to it."""
    if selection not in ("all", "choose"):
        raise UsageError(f"send: selection is 'all' or 'choose', not {selection!r}")
    if port is None and selection == "all":
        endpoint.broadcast(*args, **kwargs)
        return
    # A member's failure goes to the port in its reply's place (the receiver's recv() raises
    # it, as Monarch's port.exception), and the other members' replies still arrive.
    if selection == "choose":
        future = endpoint.choose(*args, **kwargs)

        def forward():
            try:
                value = future.get()
            except Exception as e:  # noqa: BLE001: whatever it is, the receiver raises it
                port.exception(e)
                return
            port.send(value)
    else:
        stream = endpoint.stream(*args, **kwargs)

        def forward():
            while True:
                try:
                    _, value = stream.next(None)
                except StopIteration:
                    return
                except Exception as e:  # noqa: BLE001: one member's failure; the next goes on
                    port.exception(e)
                    continue
                port.send(value)

    if port is None:
        return
    threading.Thread(target=forward, name="baton-send", daemon=True).start()


# Controllers are one per name in the whole job: a registry actor in the controller's own
# process spawns each once, and every process of the job asks it. Its handle reaches the workers
# through their environment, set before the first of them starts.
_REGISTRY_VAR = "BATON_MONARCH_CONTROLLERS"
_registry = None
_registry_lock = threading.Lock()


class _Controllers(Actor):
    """The job's controllers by name, each in a proc of its own that this actor owns."""

    def __init__(self):
        self._by_name = {}

    @endpoint
    async def get_or_spawn(self, name, cls, args, kwargs):
        if name not in self._by_name:  # one message at a time: a name is spawned once
            procs = await this_host().spawn_procs_async(per_host={"procs": 1})
            self._by_name[name] = (procs, await procs.spawn_async(name, cls, *args, **kwargs))
        return self._by_name[name][1]


def _job_registry():
    """The registry's handle: made here in the controller (before its first worker starts,
    through _before_spawn), read from the environment in a worker; None in a worker started
    without it (its controllers are then its own)."""
    global _registry
    with _registry_lock:
        if _registry is not None:
            return _registry
        if os.environ.get("BATON_PROC"):  # a worker: its controller's, if it was given one
            wire = os.environ.get(_REGISTRY_VAR)
            if wire:
                _registry = pickle.loads(base64.b64decode(wire))
        else:  # a controller: its own (what it inherited is another job's)
            _registry = this_proc().spawn("_controllers", _Controllers)
            os.environ[_REGISTRY_VAR] = base64.b64encode(pickle.dumps(_registry)).decode()
        return _registry


def _before_spawn():
    """The controller makes its registry before its first worker starts, so that every worker
    has its handle; an actor spawning procs leaves it to the controller's main thread."""
    if not os.environ.get("BATON_PROC") and _current_actor.get() is None:
        _job_registry()


_mesh._before_spawn.append(_before_spawn)

_own: dict = {}  # a worker started without the registry's handle: its own controllers
_own_lock = threading.Lock()


def get_or_spawn_controller(name, cls, *args, **kwargs):
    """A Future of the actor named `name` of class `cls`, spawned once in the whole job, in a
    proc of its own; every later call, from any process of the job, gives the same actor."""
    registry = _job_registry()
    if registry is None:
        with _own_lock:
            if name not in _own:
                procs = this_host().spawn_procs(per_host={"procs": 1})
                _own[name] = (procs, procs.spawn(name, cls, *args, **kwargs))
            mesh = _own[name][1]
        return Deferred(lambda timeout: mesh)
    return registry.get_or_spawn.call_one(name, cls, args, kwargs)


def shutdown_context():
    """Stops every proc this program started (a Future)."""
    from .._runtime import shutdown

    return Deferred(lambda timeout: shutdown())


def enable_transport(transport):
    """Monarch's choice of transport; baton picks unix sockets on a host and TLS over TCP
    between hosts itself, so this is accepted and does nothing."""


class ChannelTransport:
    Unix = "unix"
    TcpWithLocalhost = "tcp"
    TcpWithHostname = "tcp"
    MetaTlsWithHostname = "tls"


_JOBS = ("baton's jobs (baton.SshJob, SlurmJob, KubernetesJob, or baton-host agents with "
         "baton.attach)")
attach = Unsupported("monarch.actor.attach", f"attach to a job's hosts with {_JOBS}")
default_bootstrap_cmd = Unsupported("monarch.actor.default_bootstrap_cmd", f"use {_JOBS}")


def _address(worker):
    """"tcp://host:port" (or a Future of it) as baton's agents are named: "host:port"."""
    if isinstance(worker, Future):
        worker = worker.get()
    text = str(worker)
    scheme, sep, rest = text.partition("://")
    if sep and scheme not in ("tcp", "metatls"):
        raise UsageError(f"{text}: baton's agents serve TCP; give tcp://HOST:PORT (a worker "
                         "started by run_worker_loop_forever(address='tcp://HOST:PORT'))")
    return rest if sep else text


def attach_to_workers(name=None, ca=None, workers=(), **ignored):
    """The HostMesh {"hosts": N} of workers already running (run_worker_loop_forever, or
    baton-host): workers are "tcp://host:port" addresses (or Futures of them). They must share
    this program's credentials (BATON_CREDENTIALS, set before the program starts)."""
    from .._mesh import attach as _attach

    return _attach([_address(w) for w in workers])


def run_worker_loop_forever(address, ca=None, **ignored):
    """Serves this host as a worker for a controller, until it is stopped: it becomes baton's
    host agent (baton-host) listening at `address` ("tcp://host:port"). baton's agents prove
    their controller holds the job's secret: BATON_CREDENTIALS names the directory made by
    baton-host --make-credentials, shared with the controller."""
    import os

    from .._job import agent_program

    if not os.environ.get("BATON_CREDENTIALS"):
        raise UsageError(
            "run_worker_loop_forever: baton's workers only serve a controller with the job's "
            "credentials; make them once (baton-host --make-credentials DIR), copy DIR to each "
            "host, and set BATON_CREDENTIALS=DIR for the workers and the controller")
    host, _, port = _address(address).rpartition(":")
    agent = agent_program()
    if agent is None:
        raise UsageError("run_worker_loop_forever: no baton-host found (pip install baton)")
    os.execv(agent, [agent, "--advertise", host, "--port", port])


def hosts_from_config(name):
    """Monarch's stand-in for hosts named in a configuration: two hosts, each a baton-host
    agent started on this machine (baton.ProcessJob), ended with the program."""
    from .._job import ProcessJob

    return ProcessJob(hosts=2).hosts()


debug_controller = Unsupported("monarch.actor.debug_controller", "baton has no debugger yet")
Uid = Unsupported("monarch.actor.Uid", "actor ids are text in baton (current_actor_name())")


def unhandled_fault_hook(failure):
    """Called with a failure that no actor's __supervise__ handled. Returning keeps the program
    going; raising (as this default does) stops it, reporting the failure. Replace it:
    monarch.actor.unhandled_fault_hook = my_hook."""
    sys.exit(1)


def _dispatch_fault(failure, mesh, rank, actor):
    hook = getattr(sys.modules[__name__], "unhandled_fault_hook")
    try:
        hook(MeshFailure(failure, mesh, rank, actor))
    except BaseException:  # noqa: B902: any exception, SystemExit too, leaves it unhandled
        return False
    return True


def _install_fault_hook():
    if not getattr(_install_fault_hook, "done", False):
        _install_fault_hook.done = True
        import os

        if not os.environ.get("BATON_PROC"):  # the controller's hook
            _runtime.on_start(lambda rt: rt.set_supervise(_dispatch_fault))


class _Instrument:
    """A counter, histogram or gauge of get_meter(): keeps what it was given."""

    def __init__(self, name):
        self.name = name
        self.values = []

    def add(self, value, attributes=None):
        self.values.append(value)

    record = add
    set = add


class _Meter:
    def __init__(self, name):
        self.name = name

    def create_counter(self, name, *args, **kwargs):
        return _Instrument(name)

    create_histogram = create_up_down_counter = create_gauge = create_counter


def get_meter(name, *args, **kwargs):
    """A meter whose instruments keep what they are given (baton exports no telemetry yet)."""
    return _Meter(name)


class span:
    """A tracing span (a with block); baton records no traces yet."""

    def __init__(self, name, *args, **kwargs):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def traced(fn=None, **kwargs):
    """Marks a function as traced: @traced or @traced(name=...); it runs as it is."""
    if fn is None:
        return lambda f: f
    return fn


__all__ = [
    "Accumulator", "Actor", "ActorError", "current_actor_name", "as_endpoint", "current_rank",
    "current_size", "concurrent_endpoint", "endpoint", "Future", "Point", "ProcMesh", "ProcId",
    "Channel", "send", "shutdown_context", "ValueMesh", "debug_controller",
    "get_or_spawn_controller", "this_host", "this_proc", "default_bootstrap_cmd", "HostMesh",
    "context", "hosts_from_config", "Port", "PortReceiver", "Endpoint", "Extent",
    "run_worker_loop_forever", "attach_to_workers", "attach", "enable_transport", "Context",
    "ChannelTransport", "unhandled_fault_hook", "MeshFailure", "config", "get_meter", "span",
    "traced", "Uid",
]
del _context
