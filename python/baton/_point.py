"""Where a member sits in its mesh."""

import collections.abc


class Point(collections.abc.Mapping):
    """A member's coordinates in its mesh: a read-only mapping dim -> index, and its rank."""

    __slots__ = ("_labels", "_coords", "rank")

    def __init__(self, labels, coords, rank):
        self._labels = tuple(labels)
        self._coords = tuple(coords)
        self.rank = rank

    def __getitem__(self, dim):
        try:
            return self._coords[self._labels.index(dim)]
        except ValueError:
            raise KeyError(dim) from None

    def __iter__(self):
        return iter(self._labels)

    def __len__(self):
        return len(self._labels)

    def __repr__(self):
        inner = ", ".join(f"{l}: {c}" for l, c in zip(self._labels, self._coords))
        return f"Point({{{inner}}}, rank={self.rank})"

    def __eq__(self, other):
        if isinstance(other, Point):
            return self._labels == other._labels and self._coords == other._coords
        return collections.abc.Mapping.__eq__(self, other)

    def __hash__(self):
        return hash((self._labels, self._coords))
