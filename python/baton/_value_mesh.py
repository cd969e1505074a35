"""One value per member of a mesh: what a call of a whole mesh gives."""

import types

from ._pickle import loads
from ._point import Extent, Point


def _point(t):
    return Point(*t)


class ValueMesh:
    """One value per member of a mesh, in rank order. Iterating gives (point, value) pairs."""

    __class_getitem__ = classmethod(types.GenericAlias)  # ValueMesh[float] in type hints

    def __init__(self, labels, sizes, items):
        self.labels = tuple(labels)
        self.sizes = tuple(sizes)
        self._items = items

    @property
    def shape(self):
        return dict(zip(self.labels, self.sizes))

    @property
    def extent(self):
        return Extent(self.labels, self.sizes)

    def item(self, **point):
        """The value at `point` (every dimension named); of a mesh of one, item()."""
        if not point and len(self._items) == 1:
            return self._items[0][1]
        if set(point) != set(self.labels):
            raise KeyError(f"item() names every dimension of {list(self.labels)}, not "
                           f"{list(point)}")
        return self[point]

    def slice(self, **dims):
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
    return ValueMesh(labels, sizes, [(Point(*p, sizes), _decode(v)) for p, v in items])


def _plain_mesh(t):
    (labels, sizes), items = t
    return ValueMesh(labels, sizes, [(Point(*p, sizes), v) for p, v in items])
