"""One value per member of a mesh: what a call of a whole mesh gives."""

from typing import Any, Dict, Generic, Iterator, List, Sequence, Tuple, TypeVar

from ._pickle import loads
from ._point import Extent, Point, points_of, split_plan

T = TypeVar("T")


def _point(t):
    return Point(*t)


class ValueMesh(Generic[T]):
    """One value per member of a mesh, in rank order. Iterating gives (point, value) pairs."""

    def __init__(
        self, labels: Sequence[str], sizes: Sequence[int], items: List[Tuple[Point, T]]
    ) -> None:
        self.labels = tuple(labels)
        self.sizes = tuple(sizes)
        self._items = items

    @property
    def shape(self) -> Dict[str, int]:
        return dict(zip(self.labels, self.sizes))

    @property
    def extent(self) -> Extent:
        return Extent(self.labels, self.sizes)

    def item(self, **point: int) -> T:
        """The value at `point` (every dimension named); of a mesh of one, item()."""
        if not point and len(self._items) == 1:
            return self._items[0][1]
        if set(point) != set(self.labels):
            raise KeyError(f"item() names every dimension of {list(self.labels)}, not "
                           f"{list(point)}")
        return self[point]

    def slice(self, **dims: Any) -> "ValueMesh[T]":
        """The values of the members slice(**dims) keeps; an int drops its dimension."""
        for d in dims:
            if d not in self.labels:
                raise KeyError(f"no dimension {d!r} in {list(self.labels)}")

        def keep(p):
            return all(
                (p[d] in range(self.shape[d])[s]) if isinstance(s, slice) else p[d] == s
                for d, s in dims.items()
            )

        kept = [(p, v) for p, v in self._items if keep(p)]
        labels = [d for d in self.labels if not isinstance(dims.get(d, slice(None)), int)]
        sizes = [len(range(self.shape[d])[dims.get(d, slice(None))]) for d in labels]
        out = []
        for r, (p, v) in enumerate(kept):
            coords = [
                p[d] - range(self.shape[d])[dims.get(d, slice(None))].start for d in labels
            ]
            out.append((Point(labels, coords, r, sizes), v))
        return ValueMesh(labels, sizes, out)

    def __iter__(self) -> Iterator[Tuple[Point, T]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def flatten(self, name: str) -> "ValueMesh[T]":
        """The same values on one dimension named `name`, in rank order."""
        n = len(self._items)
        return ValueMesh([name], [n], [(Point([name], [r], r, [n]), v)
                                       for r, (_, v) in enumerate(self._items)])

    def split(self, **spec: Any) -> "ValueMesh[T]":
        """The same values with dimensions split, as a mesh's split() does."""
        _, labels, sizes = split_plan(self.labels, self.sizes, spec)
        points = points_of(labels, sizes)
        return ValueMesh(labels, sizes, [(p, v) for p, (_, v) in zip(points, self._items)])

    def get(self, rank: int) -> T:
        """The value of the member of rank `rank`."""
        return self._items[rank][1]

    def rename(self, **names: str) -> "ValueMesh[T]":
        """The same values with dimensions renamed: rename(hosts="dp", gpus="tp")."""
        for d in names:
            if d not in self.labels:
                raise KeyError(f"no dimension {d!r} in {list(self.labels)}")
        labels = [names.get(d, d) for d in self.labels]
        return ValueMesh(labels, self.sizes, [
            (Point(labels, [p[d] for d in self.labels], p.rank, self.sizes), v)
            for p, v in self._items
        ])

    def items(self) -> List[Tuple[Point, T]]:
        return list(self._items)

    def values(self) -> List[T]:
        return [v for _, v in self._items]

    def points(self) -> List[Point]:
        return [p for p, _ in self._items]

    def __getitem__(self, where: Any) -> T:
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
    return ValueMesh(labels, sizes, [(Point(*p, sizes), _decode(v)) for p, v in items])


def _plain_mesh(t):
    (labels, sizes), items = t
    return ValueMesh(labels, sizes, [(Point(*p, sizes), v) for p, v in items])
