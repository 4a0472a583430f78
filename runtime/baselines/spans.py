"""Aligned spans of unit slots per channel: what every baseline allocator hands out.

A channel's Key (or Value) slots (:meth:`Geometry.key_slot`) are cut into aligned *spans* of
``align`` slots: one slot (a NeuPIMs Key page), a Key row of 8 (a BlockPIM block), a Value
group of 64 (a NeuPIMs Value page), a PIMphony chunk's share of a channel, an AttAcc slot. A
:class:`SpanPool` hands out the lowest free span of a channel, so rows fill from the top.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from patton.runtime.errors import CapacityError

__all__ = ["SpanPool"]


@dataclass(slots=True)
class SpanPool:
    """Free spans of ``align`` slots in each of ``channels`` channels of ``slots`` slots.

    Invariants: ``free[c]`` is a heap of the free span indices of channel ``c``, each below
    ``spans``; ``taken[c]`` is the set of the others; ``len(free[c]) + len(taken[c]) ==
    spans``.
    """

    name: str  # what a span is (for error messages)
    channels: int
    slots: int  # slots per channel
    align: int  # slots per span
    free: list[list[int]] = field(init=False, compare=False)  # follows from taken
    taken: list[set[int]] = field(init=False)

    def __post_init__(self) -> None:
        if self.align < 1 or self.slots < self.align:
            raise CapacityError(f"{self.name}: a span of {self.align} slots does not fit in "
                                f"{self.slots}")
        self.free = [list(range(self.spans)) for _ in range(self.channels)]
        self.taken = [set() for _ in range(self.channels)]

    @property
    def spans(self) -> int:
        """Spans per channel."""
        return self.slots // self.align

    def available(self, channel: int) -> int:
        """Free spans of ``channel``."""
        return len(self.free[channel])

    def used(self, channel: int) -> int:
        """Taken spans of ``channel``."""
        return len(self.taken[channel])

    def lowest(self, channel: int, skip: int = 0) -> int:
        """Return the lowest free span of ``channel`` after ``skip`` others (not taking it).

        Raises:
            CapacityError: fewer than ``skip + 1`` spans are free.
        """
        heap = self.free[channel]
        if len(heap) <= skip:
            raise CapacityError(f"no free {self.name} in channel {channel} "
                                f"({self.spans} in use)")
        return heap[0] if skip == 0 else heapq.nsmallest(skip + 1, heap)[-1]

    def take(self, channel: int, span: int) -> None:
        """Take ``span`` of ``channel`` (free)."""
        heap = self.free[channel]
        assert span not in self.taken[channel], f"{self.name} {channel}:{span} taken twice"
        if heap and heap[0] == span:
            heapq.heappop(heap)
        else:
            heap.remove(span)
            heapq.heapify(heap)
        self.taken[channel].add(span)

    def give(self, channel: int, span: int) -> None:
        """Return ``span`` of ``channel``."""
        assert span in self.taken[channel], f"{self.name} {channel}:{span} freed twice"
        self.taken[channel].discard(span)
        heapq.heappush(self.free[channel], span)

    def slots_of(self, span: int) -> range:
        """The slots of ``span``."""
        return range(span * self.align, (span + 1) * self.align)
