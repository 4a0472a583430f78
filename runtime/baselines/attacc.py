"""AttAcc (Park et al., ASPLOS'24): fixed channel partitions, capacity reserved for the maximum.

Each KV head owns a fixed partition of ``channels / heads`` channels (GQA: 4, MHA: 1). A request
is admitted with one *slot* per head, a region statically reserved for the maximum context
(2,048 tokens: 128 Key units = 16 rows and 128 Value units = 2 Value groups of one channel of
the head's partition, the one with the most free slots, ties lowest), held until the request
leaves; its tokens fill the slot in order. Request-owned, no prefix caching; a request cannot
grow past the maximum context (``docs/baselines.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.runtime.baselines.runtime import Place
from patton.runtime.baselines.spans import SpanPool
from patton.runtime.errors import CapacityError, ConfigError

__all__ = ["AttAcc", "MAX_CONTEXT"]

#: The maximum context AttAcc reserves for (tokens), as PATTON's evaluation sets it (§5.1).
MAX_CONTEXT = 2048


@dataclass(slots=True)
class _Slot:
    spans: tuple[tuple[int, int, int], ...]  # per head: channel, Key span, Value span
    blocks: int = 0  # blocks bound


class AttAcc:
    """AttAcc's placement (see the module docstring)."""

    name = "attacc"
    prefix_caching = False
    aligned = False

    def __init__(self, g: Geometry, max_context: int = MAX_CONTEXT) -> None:
        if max_context % g.block_size:
            raise ConfigError(f"AttAcc: max context {max_context} is not a multiple of the "
                              f"block size {g.block_size}")
        self.g = g
        self.per = max(1, g.channels // g.heads)  # channels per head partition
        self.span = max_context // UNIT  # units per slot
        self.max_blocks = max_context // g.block_size
        self.keys = SpanPool("AttAcc Key slot", g.channels, g.slots, self.span)
        self.values = SpanPool("AttAcc Value slot", g.channels, g.slots, self.span)
        self.slots: dict[int, _Slot] = {}

    def _partition(self, h: int) -> range:
        first = (h * self.per) % self.g.channels
        return range(first, first + self.per)

    def _reserve(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        extra: dict[int, int] = {}
        for h in range(self.g.heads):
            open_ = [c for c in self._partition(h)
                     if min(self.keys.available(c), self.values.available(c)) > extra.get(c, 0)]
            if not open_:
                raise CapacityError(f"AttAcc: no free slot for head {h}")
            c = min(open_, key=lambda c: (-(self.keys.available(c) - extra.get(c, 0)), c))
            out.append((c, self.keys.lowest(c, extra.get(c, 0)),
                        self.values.lowest(c, extra.get(c, 0))))
            extra[c] = extra.get(c, 0) + 1
        return tuple(out)

    def room(self) -> int:
        try:
            self._reserve()
        except CapacityError:
            return 0
        return self.max_blocks

    def room_for(self, request: int) -> int:
        slot = self.slots.get(request)
        return self.room() if slot is None else self.max_blocks - slot.blocks

    def place(self, request: int, position: int) -> Place:
        g = self.g
        if position >= self.max_blocks:
            raise CapacityError(f"AttAcc: request {request} reached the maximum context "
                                f"{self.max_blocks * g.block_size}")
        slot = self.slots.get(request)
        spans = self._reserve() if slot is None else slot.spans
        key = np.empty((g.heads, g.units, 2), dtype=np.int64)
        value = np.empty_like(key)
        j = position * g.units + np.arange(g.units)
        for h, (c, ks, vs) in enumerate(spans):
            key[h, :, 0] = value[h, :, 0] = c
            key[h, :, 1] = ks * self.span + j
            value[h, :, 1] = vs * self.span + j
        return Place(key, value, spans if slot is None else None)

    def bind(self, request: int, position: int, place: Place) -> None:
        if place.tag is not None:
            for c, ks, vs in place.tag:  # type: ignore[attr-defined]
                self.keys.take(c, ks)
                self.values.take(c, vs)
            self.slots[request] = _Slot(place.tag)  # type: ignore[arg-type]
        self.slots[request].blocks += 1

    def unbind(self, request: int, place: Place) -> None:
        slot = self.slots[request]
        slot.blocks -= 1
        if slot.blocks == 0:  # the request left (or was preempted): its slots go
            for c, ks, vs in slot.spans:
                self.keys.give(c, ks)
                self.values.give(c, vs)
            del self.slots[request]

    def finish(self, request: int) -> None:
        pass

    def check(self, bound: Iterable[tuple[int, Place]]) -> None:
        blocks: dict[int, int] = {}
        for request, place in bound:
            blocks[request] = blocks.get(request, 0) + 1
            slot = self.slots[request]
            for h, (c, ks, vs) in enumerate(slot.spans):
                assert c in self._partition(h), f"AttAcc: head {h} off its partition"
                assert (place.key[h, :, 0] == c).all()
                assert (place.key[h, :, 1] // self.span == ks).all()
                assert (place.value[h, :, 1] // self.span == vs).all()
        assert blocks == {r: s.blocks for r, s in self.slots.items()}
