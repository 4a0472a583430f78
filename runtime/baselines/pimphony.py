"""PIMphony (Kwon et al., HPCA'26): Token-Centric Partitioning over request-owned 1 MB chunks.

The channels are divided among the KV heads by ChPerHead (``channels / heads``: 4 for GQA, 1
for MHA), and each head's token axis is split over its channels (Token-Centric Partitioning):
unit ``j`` of a request goes to channel ``j mod P`` of the head's group, so every channel of
the group scores and reduces its share of the tokens. Capacity comes in request-owned DPA
chunks of 1 MB per (request, head, Key or Value): 256 units of 16 tokens for d_head 128,
striped over the group's ``P`` channels at the same rows (a *stripe* of ``256 / P`` units per
channel), allocated lazily when the request grows past its last chunk and returned when it
leaves. No prefix caching (``docs/baselines.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.runtime.baselines.runtime import Place
from patton.runtime.baselines.spans import SpanPool
from patton.runtime.errors import CapacityError, ConfigError

__all__ = ["PimPhony", "CHUNK_BYTES"]

#: Bytes of one DPA chunk.
CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class _Chunks:
    """A request's chunks: per chunk, per head, its Key and Value stripe; units bound."""

    stripes: list[tuple[tuple[int, int], ...]] = field(default_factory=list)
    use: list[int] = field(default_factory=list)  # per chunk: units bound (per head)


class PimPhony:
    """PIMphony's placement (see the module docstring)."""

    name = "pimphony"
    prefix_caching = False
    aligned = True

    def __init__(self, g: Geometry, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.g = g
        self.per = max(1, g.channels // g.heads)  # P: channels per head group
        self.chunk = chunk_bytes // (UNIT * g.d_head * 2)  # units per chunk
        if self.chunk % self.per or self.chunk // self.per > g.slots:
            raise ConfigError(f"PIMphony: a chunk of {self.chunk} units does not stripe over "
                              f"{self.per} channels of {g.slots} slots")
        self.stripe = self.chunk // self.per  # units per channel of a chunk
        # one pool per head group: the group's channels are striped in lockstep
        self.keys = SpanPool("PIMphony Key chunk", g.heads, g.slots, self.stripe)
        self.values = SpanPool("PIMphony Value chunk", g.heads, g.slots, self.stripe)
        self.chunks: dict[int, _Chunks] = {}  # request -> its chunks (the same for every head)

    def _free(self) -> int:
        return min(min(self.keys.available(h), self.values.available(h))
                   for h in range(self.g.heads))

    def room(self) -> int:
        return self._free() * self.chunk // self.g.units

    def room_for(self, request: int) -> int:
        ch = self.chunks.get(request)
        if ch is None:
            return self.room()
        used = sum(ch.use)
        return (len(ch.stripes) * self.chunk - used) // self.g.units + self.room()

    def place(self, request: int, position: int) -> Place:
        g = self.g
        ch = self.chunks.get(request) or _Chunks()
        j = position * g.units + np.arange(g.units)
        chunk = j // self.chunk
        stripes = list(ch.stripes)
        new: tuple[tuple[int, int], ...] = ()
        if int(chunk.max()) >= len(stripes):  # lazily grow by one chunk (in every head)
            if self._free() < 1:
                raise CapacityError(f"PIMphony: no free chunk for request {request}")
            new = tuple((self.keys.lowest(h), self.values.lowest(h)) for h in range(g.heads))
            stripes.append(new)
        w = j % self.chunk
        spans = np.array([stripes[c] for c in chunk.tolist()], dtype=np.int64)  # (u, h, 2)
        key = np.empty((g.heads, g.units, 2), dtype=np.int64)
        value = np.empty_like(key)
        key[..., 0] = value[..., 0] = np.arange(g.heads)[:, None] * self.per + w % self.per
        key[..., 1] = spans[:, :, 0].T * self.stripe + w // self.per
        value[..., 1] = spans[:, :, 1].T * self.stripe + w // self.per
        return Place(key, value, (tuple(chunk.tolist()), new))

    def bind(self, request: int, position: int, place: Place) -> None:
        chunks, new = place.tag  # type: ignore[misc]
        ch = self.chunks.setdefault(request, _Chunks())
        if new:
            for h, (ks, vs) in enumerate(new):
                self.keys.take(h, ks)
                self.values.take(h, vs)
            ch.stripes.append(new)
            ch.use.append(0)
        for c in chunks:
            ch.use[c] += 1

    def unbind(self, request: int, place: Place) -> None:
        chunks, _ = place.tag  # type: ignore[misc]
        ch = self.chunks[request]
        for c in chunks:
            ch.use[c] -= 1
        while ch.use and ch.use[-1] == 0:  # the tail chunk emptied: give it back
            ch.use.pop()
            for h, (ks, vs) in enumerate(ch.stripes.pop()):
                self.keys.give(h, ks)
                self.values.give(h, vs)
        if not ch.use:
            del self.chunks[request]

    def finish(self, request: int) -> None:
        pass

    def check(self, bound: Iterable[tuple[int, Place]]) -> None:
        use: dict[int, list[int]] = {}
        for request, place in bound:
            u = use.setdefault(request, [0] * len(self.chunks[request].use))
            for c in place.tag[0]:  # type: ignore[index]
                u[c] += 1
            for h in range(self.g.heads):
                assert (place.key[h, :, 0] // self.per == h).all(), \
                    "PIMphony: a unit off its head's channels"
        assert use == {r: c.use for r, c in self.chunks.items()}, "PIMphony: chunk use differs"
        held = sum(len(c.stripes) for c in self.chunks.values())
        for h in range(self.g.heads):
            assert held == self.keys.used(h) == self.values.used(h), "PIMphony: stripes leak"
