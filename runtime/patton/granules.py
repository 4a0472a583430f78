"""Fixed, aligned granule positions tracked by bitmaps.

A :class:`PackedPool` is a set of row sets (KRSs, VRSs or CRSs), each with ``per_set`` aligned
positions (O2Ks, O2Vs or CZ slots). An :class:`Order2` is one allocated Order-2 granule with a
bitmap of its Order-1 positions.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from patton.runtime.errors import CapacityError

__all__ = ["PackedPool", "Order2", "lowest_free"]


def lowest_free(bits: int, width: int) -> int:
    """Return the lowest clear bit below ``width`` of ``bits`` (``-1`` if all are set)."""
    free = ~bits & ((1 << width) - 1)
    return (free & -free).bit_length() - 1


@dataclass(slots=True)
class PackedPool:
    """Aligned positions in ``sets`` row sets of ``per_set`` positions each, as bitmaps.

    Allocation packs: it takes the lowest free position of the fullest row set that still has
    one (ties: lowest set), so existing rows fill before new ones are opened.

    Invariants: ``used[s]`` has ``count[s]`` bits set, all below ``per_set``; ``partial`` holds
    exactly the sets with ``0 < count < per_set``; ``empty`` (a heap, lazily cleaned) holds
    every set with ``count == 0``; ``live == sum(count)``.

    Args:
        name: what the positions are (for error messages).
        sets: number of row sets.
        per_set: positions per row set.
    """

    name: str  # "O2K", "O2V" or "CZ slot"
    sets: int  # row sets
    per_set: int  # positions per row set
    used: list[int] = field(init=False)  # per set: bitmap of taken positions
    count: list[int] = field(init=False)  # per set: taken positions
    partial: set[int] = field(init=False)  # sets with 0 < count < per_set
    empty: list[int] = field(init=False)  # heap of sets that may be empty
    live: int = field(init=False)  # taken positions in all sets

    def __post_init__(self) -> None:
        self.used = [0] * self.sets
        self.count = [0] * self.sets
        self.partial = set()
        self.empty = list(range(self.sets))
        self.live = 0

    @property
    def capacity(self) -> int:
        """Positions in all sets."""
        return self.sets * self.per_set

    @property
    def free(self) -> int:
        """Free positions."""
        return self.capacity - self.live

    def pick(self) -> int:
        """Return the position :meth:`take` would allocate, without allocating it.

        Raises:
            CapacityError: every position is taken.
        """
        if self.partial:
            s = max(self.partial, key=lambda k: (self.count[k], -k))
        else:
            while self.empty and self.count[self.empty[0]]:
                heapq.heappop(self.empty)
            if not self.empty:
                raise CapacityError(f"no free {self.name} ({self.capacity} in use)")
            s = self.empty[0]
        return s * self.per_set + lowest_free(self.used[s], self.per_set)

    def take(self, position: int | None = None) -> int:
        """Allocate ``position`` (default: :meth:`pick`) and return it."""
        pos = self.pick() if position is None else position
        s, q = divmod(pos, self.per_set)
        assert not self.used[s] >> q & 1, f"{self.name} {pos} taken twice"
        self.used[s] |= 1 << q
        self.count[s] += 1
        self.live += 1
        if self.count[s] == self.per_set:
            self.partial.discard(s)
        else:
            self.partial.add(s)
        return pos

    def give(self, position: int) -> None:
        """Return ``position`` to the pool."""
        s, q = divmod(position, self.per_set)
        assert self.used[s] >> q & 1, f"{self.name} {position} freed twice"
        self.used[s] &= ~(1 << q)
        self.count[s] -= 1
        self.live -= 1
        if self.count[s] == 0:
            self.partial.discard(s)
            heapq.heappush(self.empty, s)
        else:
            self.partial.add(s)

    def taken(self) -> list[int]:
        """Return every taken position, ascending (for checks)."""
        return [s * self.per_set + q for s in range(self.sets) for q in range(self.per_set)
                if self.used[s] >> q & 1]


@dataclass(slots=True)
class Order2:
    """One allocated Order-2 granule (O2K or O2V) and its Order-1 bitmap.

    Invariants: ``used`` has ``count`` bits set, all below ``width``; the granule is in its
    pool exactly while it exists; it is returned when ``count`` drops to zero.
    """

    position: int  # position in its PackedPool
    width: int  # Order-1 positions
    owner: int | None  # request that allocates into it; None once that request finished
    used: int = 0  # bitmap of bound Order-1 positions
    count: int = 0  # bound Order-1 positions

    def bind(self, index: int) -> None:
        """Mark Order-1 position ``index`` bound."""
        assert not self.used >> index & 1
        self.used |= 1 << index
        self.count += 1

    def unbind(self, index: int) -> None:
        """Mark Order-1 position ``index`` free."""
        assert self.used >> index & 1
        self.used &= ~(1 << index)
        self.count -= 1

    @property
    def full(self) -> bool:
        """True when every Order-1 position is bound."""
        return self.count == self.width
