"""Where a member sits in its mesh (Point), and the sizes of a mesh's dimensions (Extent)."""

import collections.abc
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union


class Extent(collections.abc.Mapping):
    """The size of each dimension of a mesh, in order: a read-only mapping dim -> size."""

    __slots__ = ("labels", "sizes")

    def __init__(self, labels: Iterable[str], sizes: Iterable[int]) -> None:
        self.labels = tuple(labels)
        self.sizes = tuple(int(s) for s in sizes)
        if len(self.labels) != len(self.sizes):
            raise ValueError(f"Extent: {len(self.labels)} labels but {len(self.sizes)} sizes")

    @property
    def nelements(self) -> int:
        """How many members a mesh of this extent has."""
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def __getitem__(self, dim: str) -> int:
        try:
            return self.sizes[self.labels.index(dim)]
        except ValueError:
            raise KeyError(dim) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self):
        return "{" + ", ".join(f"'{k}': {s}" for k, s in zip(self.labels, self.sizes)) + "}"

    def __eq__(self, other):
        if isinstance(other, Extent):
            return self.labels == other.labels and self.sizes == other.sizes
        return collections.abc.Mapping.__eq__(self, other)

    def __hash__(self):
        return hash((self.labels, self.sizes))

    def __reduce__(self):
        return (Extent, (self.labels, self.sizes))


class Point(collections.abc.Mapping):
    """A member's coordinates in its mesh: a read-only mapping dim -> index, its rank, and
    (where known) the extent of the mesh it is a point of."""

    __slots__ = ("_labels", "_coords", "rank", "_sizes")

    def __init__(
        self, labels: Union[Iterable[str], int], coords: Union[Iterable[int], Extent],
        rank: Optional[int] = None, sizes: Optional[Iterable[int]] = None,
    ) -> None:
        if isinstance(labels, int) and isinstance(coords, Extent):
            # Monarch's Point(rank, extent): the point of that rank, row-major.
            at, extent = labels, coords
            if not 0 <= at < extent.nelements:
                raise IndexError(f"rank {at} is not in a mesh of {extent.nelements}")
            found = points_of(extent.labels, extent.sizes)[at]
            labels, coords = extent.labels, [found[d] for d in extent]
            rank, sizes = at, extent.sizes
        if isinstance(labels, int) or isinstance(coords, Extent) or rank is None:
            raise TypeError("Point(labels, coords, rank[, sizes]) or Point(rank, extent)")
        self._labels = tuple(labels)
        self._coords = tuple(coords)
        self.rank = rank
        self._sizes = None if sizes is None else tuple(sizes)

    @property
    def extent(self) -> Extent:
        """The extent of the mesh this is a point of."""
        if self._sizes is None:
            raise AttributeError("this point does not know its mesh's extent")
        return Extent(self._labels, self._sizes)

    def size(self, dim: str) -> int:
        """The size of dimension `dim` of the mesh this is a point of."""
        return self.extent[dim]

    def __getitem__(self, dim: str) -> int:
        try:
            return self._coords[self._labels.index(dim)]
        except ValueError:
            raise KeyError(dim) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __repr__(self):
        inner = ", ".join(f"{k}: {c}" for k, c in zip(self._labels, self._coords))
        return f"Point({{{inner}}}, rank={self.rank})"

    def __eq__(self, other):
        if isinstance(other, Point):
            return self._labels == other._labels and self._coords == other._coords
        return collections.abc.Mapping.__eq__(self, other)

    def __hash__(self):
        return hash((self._labels, self._coords))

    def __reduce__(self):
        return (Point, (self._labels, self._coords, self.rank, self._sizes))


def points_of(labels: Sequence[str], sizes: Sequence[int]) -> List[Point]:
    """Every point of a mesh of this shape, in rank order (row-major)."""
    n = 1
    for s in sizes:
        n *= s
    out = []
    for r in range(n):
        coords, rest = [], r
        for s in reversed(sizes):
            coords.append(rest % s)
            rest //= s
        out.append(Point(labels, coords[::-1], r, sizes))
    return out


def point_in_view(location: int, view: Tuple[Any, ...]) -> Optional[Point]:
    """The point, in a view of a mesh (labels, sizes, offset, strides: where its members are in
    the mesh as spawned), of the member at `location` there; None if the view leaves it out."""
    labels, sizes, offset, strides = view
    rest = location - offset
    coords = [0] * len(sizes)
    # Largest stride first: a view's dimensions do not interleave, so each coordinate is the
    # number of whole strides left (a dimension of size 1 is at 0 whatever its stride).
    for d in sorted(range(len(sizes)), key=lambda i: -strides[i]):
        if sizes[d] == 1 or rest < 0:
            continue
        coords[d], rest = divmod(rest, strides[d])
        if coords[d] >= sizes[d]:
            return None
    if rest != 0:
        return None
    rank = 0
    for c, s in zip(coords, sizes):
        rank = rank * s + c
    return Point(labels, coords, rank, sizes)


def split_plan(
    labels: Sequence[str], sizes: Sequence[int], spec: Dict[str, Any]
) -> Tuple[List[Tuple[str, List[Tuple[str, int]]]], List[str], List[int]]:
    """Monarch's split(**spec) of a mesh of this shape: each dimension named in `spec` becomes
    the dimensions it names (hosts=("dp", "pp")), sized by the other keys (pp=4); at most one
    part of each may go unsized, and takes what is left. Returns the splits [(dim, [(part,
    size), ...])] and the new labels and sizes."""
    from ._errors import UsageError

    parts = {k: v for k, v in spec.items() if k in labels}
    sized = {k: v for k, v in spec.items() if k not in labels}
    for k, v in sized.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"split: {k!r} is no dimension of {list(labels)}; as a new "
                             f"dimension's size it takes an int of 1 or more, not {v!r}")
    plan, new_labels, new_sizes, used = [], [], [], set()
    for dim, size in zip(labels, sizes):
        if dim not in parts:
            new_labels.append(dim)
            new_sizes.append(size)
            continue
        names = parts[dim]
        if isinstance(names, str) or not names:
            raise UsageError(f"split: {dim}= takes the names of its parts, e.g. ('dp', 'pp'), "
                             f"not {names!r}")
        unsized = [n for n in names if n not in sized]
        if len(unsized) > 1:
            raise UsageError(f"split of {dim!r}: size all but one of {list(names)} (e.g. "
                             f"{unsized[-1]}=2)")
        known = 1
        for n in names:
            known *= sized.get(n, 1)
        if size % known != 0:
            raise UsageError(f"split of {dim!r} (size {size}): its parts' sizes do not divide "
                             f"it ({known})")
        each = [(n, sized.get(n, size // known)) for n in names]
        used.update(names)
        plan.append((dim, each))
        new_labels += [n for n, _ in each]
        new_sizes += [k for _, k in each]
    stray = set(sized) - used
    if stray:
        raise UsageError(f"split: {sorted(stray)} name no part of a dimension being split")
    return plan, new_labels, new_sizes
