"""A ValueMesh passed to a mesh's endpoint as an argument, of the mesh's own extent, is a value
per member: each member is called with its own (the value at its point). Under Monarch's
semantics (a program run by `python -m baton.monarch`) it travels whole, as in Monarch."""

from typing import Any, Dict, List, Optional, Tuple

from . import _context
from ._future import Deferred, StreamItem
from ._point import points_of
from ._value_mesh import ValueMesh


def split(endpoint: Any, args: tuple, kwargs: dict) -> Optional[List[Tuple[tuple, Dict]]]:
    """Each member's (args, kwargs), by rank, if an argument is a ValueMesh of the called mesh's
    extent; None if none is (a ValueMesh of another extent is passed whole)."""
    if _context.monarch_semantics():  # Monarch passes a ValueMesh whole
        return None
    extent = endpoint._mesh.extent
    given = [a for a in (*args, *kwargs.values()) if isinstance(a, ValueMesh)]
    if not any(m.extent == extent for m in given):
        return None

    def pick(a: Any, rank: int) -> Any:
        return a[rank] if isinstance(a, ValueMesh) and a.extent == extent else a

    return [
        (tuple(pick(a, r) for a in args), {k: pick(v, r) for k, v in kwargs.items()})
        for r in range(extent.nelements)
    ]


def call(endpoint: Any, each: List[Tuple[tuple, Dict]], verb: str) -> Any:
    """The verb (call, broadcast, stream, call_one, choose) made of one call per member, each
    with its own arguments."""
    mesh = endpoint._mesh
    extent = mesh.extent
    points = points_of(extent.labels, extent.sizes)
    members = [
        type(endpoint)(mesh.slice(**dict(p)), endpoint._name, endpoint._explicit) for p in points
    ]
    if verb == "broadcast":
        for member, (a, k) in zip(members, each):
            member.broadcast(*a, **k)
        return None
    futures = [member.call_one(*a, **k) for member, (a, k) in zip(members, each)]
    if verb in ("call_one", "choose"):
        return futures[0]
    if verb == "stream":
        return (StreamItem((p, f.get())) for p, f in zip(points, futures))
    return Deferred(lambda timeout: ValueMesh(
        extent.labels, extent.sizes, [(p, f.get(timeout)) for p, f in zip(points, futures)]
    ))
