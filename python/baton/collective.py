"""Collectives among Python actors: allreduce (sum, avg, min, max), broadcast, allgather,
reduce_scatter and barrier on numpy arrays and torch tensors: CPU ones through Gloo, GPU ones
(CUDA/ROCm) through NCCL/RCCL loaded at run time, with the rendezvous carried by baton's
messages.

    # controller
    group = baton.collective.make_group(trainers)
    trainers.join.call(group).get()

    # in the actor
    @baton.endpoint
    async def join(self, group):
        self.comm = baton.collective.Communicator(self)
        await self.comm.join(group)

    @baton.endpoint
    async def step(self):
        await self.comm.allreduce(grads, op="avg")

A rank whose process dies fails the others' collective at once, naming it; the group is then
broken for good: make a new one of the live members.
"""

from typing import Any

from . import _baton
from ._errors import UsageError
from ._future import Future
from ._mesh import ActorMesh


def _group_from_wire(head, parts):
    return Group(_baton.Group.from_wire(head, parts))


class Group:
    """Who is in a group and where they meet; made by make_group, sent to every member."""

    def __init__(self, core):
        self._core = core

    def __len__(self):
        return self._core.size()

    def __reduce__(self):
        return (_group_from_wire, tuple(self._core.to_wire()))


def make_group(mesh: ActorMesh, timeout: float = 30.0) -> Group:
    """A group of every member of an actor mesh (a slice too), ranked in the mesh's order. A
    collective that makes no progress for `timeout` seconds fails."""
    if not isinstance(mesh, ActorMesh):
        raise UsageError("make_group takes an actor mesh (procs.spawn(...)) or a slice of one")
    return Group(_baton.make_group(mesh._core, float(timeout)))


def _memory(t, what):
    """(owner, address, element count, dtype name) of a contiguous CPU array or tensor."""
    if hasattr(t, "data_ptr") and hasattr(t, "is_contiguous"):  # a torch tensor
        if t.device.type not in ("cpu", "cuda"):  # ROCm tensors are "cuda" to torch too
            raise UsageError(f"{what}: a tensor on {t.device}; collectives take CPU or GPU tensors")
        if not t.is_contiguous():
            raise UsageError(f"{what}: a tensor that is not contiguous (.contiguous())")
        return t, t.data_ptr(), t.numel(), str(t.dtype).replace("torch.", "")
    if hasattr(t, "__array_interface__"):  # a numpy array
        if not t.flags.c_contiguous:
            raise UsageError(f"{what}: an array that is not contiguous")
        if not t.flags.writeable:
            raise UsageError(f"{what}: a read-only array")
        return t, t.ctypes.data, t.size, t.dtype.name
    raise UsageError(f"{what}: takes a numpy array or a torch tensor, not {type(t).__name__}")


class Communicator:
    """One rank's end of a group, for the actor `actor` (a member of the group). Its
    collectives run in order, each returning a Future: await it in an async endpoint. The
    arrays must not change until it completes (they are held alive until then)."""

    def __init__(self, actor):
        where = getattr(actor, "_baton_where", None)
        if where is None:
            raise UsageError("Communicator(self): made inside an actor, for that actor")
        self._actor = where[4]
        self._core = _baton.Communicator()

    def join(self, group: Group) -> Any:
        """Connects to every other rank (which join too); a Future."""
        return Future(self._core.join(group._core, self._actor), lambda v: None)

    @property
    def rank(self) -> int:
        return self._core.rank()

    @property
    def size(self) -> int:
        return self._core.size()

    def allreduce(self, t: Any, op: str = "sum") -> Future[None]:
        """Every rank's `t` becomes the elementwise `op` (sum, avg, min, max) of all ranks'."""
        owner, addr, n, dtype = _memory(t, "allreduce")
        return Future(self._core.allreduce(owner, addr, n, dtype, op), lambda v: None)

    def broadcast(self, t: Any, root: int = 0) -> Future[None]:
        """Every rank's `t` becomes rank `root`'s."""
        owner, addr, n, dtype = _memory(t, "broadcast")
        return Future(self._core.broadcast(owner, addr, n, dtype, root), lambda v: None)

    def allgather(self, inp: Any, out: Any) -> Future[None]:
        """`out` (size times `inp`'s elements) becomes every rank's `inp`, in rank order."""
        a, ia, ni, dt = _memory(inp, "allgather")
        b, oa, no, dt2 = _memory(out, "allgather")
        if dt != dt2:
            raise UsageError("allgather: the input and output differ in type")
        return Future(self._core.allgather((a, b), ia, ni, oa, no, dt), lambda v: None)

    def reduce_scatter(self, inp: Any, out: Any, op: str = "sum") -> Future[None]:
        """`inp` holds size blocks of `out`'s elements; `out` becomes the `op` of block rank."""
        a, ia, ni, dt = _memory(inp, "reduce_scatter")
        b, oa, no, dt2 = _memory(out, "reduce_scatter")
        if dt != dt2:
            raise UsageError("reduce_scatter: the input and output differ in type")
        return Future(self._core.reduce_scatter((a, b), ia, ni, oa, no, dt, op), lambda v: None)

    def barrier(self) -> Future[None]:
        return Future(self._core.barrier(), lambda v: None)
