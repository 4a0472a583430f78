"""BlockPIM (Li et al., DAC'25): hardware-bound blocks, each in the least-filled channel.

A block is ``block_size`` (128) tokens of one KV head: its Keys fill one row of a channel (8
Key units of 8 bursts) and its Values 8 adjacent columns of one Value group, so the block size
is tied to the row (BlockPIM's "channel-row mapping"). Each KV head's block goes, at
allocation, to the channel with the fewest blocks bound (ties: lowest index), counting the
block's heads placed before it; Key and Value of a block share the channel. Blocks are managed
in one pool with vLLM's scheduler and prefix caching (``docs/baselines.md``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from patton.runtime.baselines.geometry import Geometry
from patton.runtime.baselines.runtime import Place
from patton.runtime.baselines.spans import SpanPool
from patton.runtime.errors import CapacityError

__all__ = ["BlockPim"]


class BlockPim:
    """BlockPIM's placement (see the module docstring)."""

    name = "blockpim"
    prefix_caching = True
    aligned = False

    def __init__(self, g: Geometry) -> None:
        self.g = g
        self.keys = SpanPool("BlockPIM Key row", g.channels, g.slots, g.units)
        self.values = SpanPool("BlockPIM Value block", g.channels, g.slots, g.units)

    def room(self) -> int:
        free = sum(min(self.keys.available(c), self.values.available(c))
                   for c in range(self.g.channels))
        return free // self.g.heads

    def room_for(self, request: int) -> int:
        return self.room()

    def place(self, request: int, position: int) -> Place:
        g = self.g
        extra = [0] * g.channels
        key = np.empty((g.heads, g.units, 2), dtype=np.int64)
        value = np.empty_like(key)
        spans = []
        for h in range(g.heads):
            open_ = [c for c in range(g.channels)
                     if min(self.keys.available(c), self.values.available(c)) > extra[c]]
            if not open_:
                raise CapacityError(f"BlockPIM: no channel has room for head {h} of a block")
            c = min(open_, key=lambda c: (self.keys.used(c) + extra[c], c))
            ks, vs = self.keys.lowest(c, extra[c]), self.values.lowest(c, extra[c])
            extra[c] += 1
            key[h, :, 0] = value[h, :, 0] = c
            key[h, :, 1] = self.keys.slots_of(ks)
            value[h, :, 1] = self.values.slots_of(vs)
            spans.append((c, ks, vs))
        return Place(key, value, tuple(spans))

    def bind(self, request: int, position: int, place: Place) -> None:
        for c, ks, vs in place.tag:  # type: ignore[attr-defined]
            self.keys.take(c, ks)
            self.values.take(c, vs)

    def unbind(self, request: int, place: Place) -> None:
        for c, ks, vs in place.tag:  # type: ignore[attr-defined]
            self.keys.give(c, ks)
            self.values.give(c, vs)

    def finish(self, request: int) -> None:
        pass

    def check(self, bound: Iterable[tuple[int, Place]]) -> None:
        taken: list[set[int]] = [set() for _ in range(self.g.channels)]
        for _, place in bound:
            for c, ks, vs in place.tag:  # type: ignore[attr-defined]
                assert ks not in taken[c], f"BlockPIM: Key row {ks} of channel {c} twice"
                taken[c].add(ks)
                assert vs in self.values.taken[c]
        assert taken == self.keys.taken, "BlockPIM: taken Key rows differ from bound blocks"
        assert [len(t) for t in self.keys.taken] == [len(t) for t in self.values.taken]
