"""Where a member sits in its mesh (Point), and the sizes of a mesh's dimensions (Extent)."""

import collections.abc
from typing import Iterable, Iterator, List, Optional, Sequence


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
        self, labels: Iterable[str], coords: Iterable[int], rank: int,
        sizes: Optional[Iterable[int]] = None,
    ) -> None:
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
