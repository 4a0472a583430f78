"""NeuPIMs (Heo et al., ASPLOS'24): a request confined to one least-loaded channel.

Every layer and head of a request lives in its *home* channel, chosen when its first block is
allocated: the channel with the least load, load being the tokens of the requests homed there
(NeuPIMs balances estimated attention latency, which grows with them; we refresh it as
requests grow and drop it when they leave, the favourable reading of its Alg. 2), among the
channels with room (ties: lowest index). Pages are request-bound and asymmetric, as NeuPIMs'
all-bank layout makes them: a Key page is one unit (16 tokens, one per bank), a Value page a
whole Value group (``W`` units = 1,024 tokens along the row), so a short request strands most
of its Value page. No prefix caching (``docs/baselines.md``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.runtime.baselines.runtime import Place
from patton.runtime.baselines.spans import SpanPool
from patton.runtime.errors import CapacityError

__all__ = ["NeuPims"]


@dataclass(slots=True)
class _Home:
    channel: int
    units: int = 0  # units bound (per head)
    pages: dict[tuple[int, int], int] = field(default_factory=dict)  # (head, page) -> span
    use: dict[tuple[int, int], int] = field(default_factory=dict)  # (head, page) -> units


class NeuPims:
    """NeuPIMs' placement (see the module docstring)."""

    name = "neupims"
    prefix_caching = False
    aligned = False

    def __init__(self, g: Geometry) -> None:
        self.g = g
        self.page = g.device.columns  # units per Value page (one Value group)
        self.keys = SpanPool("NeuPIMs Key page", g.channels, g.slots, 1)
        self.values = SpanPool("NeuPIMs Value page", g.channels, g.slots, self.page)
        self.homes: dict[int, _Home] = {}
        self.load = [0] * g.channels  # units homed per channel (per head)

    @property
    def limit(self) -> int:
        """Tokens one request can hold: what its home channel holds for all its heads."""
        g = self.g
        keys = g.slots // g.heads * UNIT
        values = self.values.spans // g.heads * self.page * UNIT
        return min(keys, values) // g.block_size * g.block_size

    # ---------------------------------------------------------------- choice

    def _fits(self, c: int) -> bool:
        g = self.g
        return self.keys.available(c) >= g.heads * g.units and \
            self.values.available(c) >= g.heads

    def _choose(self) -> int:
        open_ = [c for c in range(self.g.channels) if self._fits(c)]
        if not open_:
            raise CapacityError("NeuPIMs: no channel has room for a new request")
        return min(open_, key=lambda c: (self.load[c], c))

    def _room(self, c: int, units: int) -> int:
        g = self.g
        k = self.keys.available(c) // (g.heads * g.units)
        left = (-units) % self.page  # units left in the open Value page
        v = (left + self.values.available(c) // g.heads * self.page) // g.units
        return min(k, v)

    def room(self) -> int:
        try:
            return self._room(self._choose(), 0)
        except CapacityError:
            return 0

    def room_for(self, request: int) -> int:
        home = self.homes.get(request)
        return self.room() if home is None else self._room(home.channel, home.units)

    # ---------------------------------------------------------------- placement

    def place(self, request: int, position: int) -> Place:
        g = self.g
        home = self.homes.get(request)
        c = self._choose() if home is None else home.channel
        pages = {} if home is None else home.pages
        key = np.empty((g.heads, g.units, 2), dtype=np.int64)
        value = np.empty_like(key)
        key[..., 0] = value[..., 0] = c
        need_k = g.heads * g.units
        if self.keys.available(c) < need_k:
            raise CapacityError(f"NeuPIMs: channel {c} has no Key page left for request "
                                f"{request}")
        kslots = heapq.nsmallest(need_k, self.keys.free[c])
        new_pages: list[tuple[int, int, int]] = []
        for h in range(g.heads):
            for u in range(g.units):
                j = position * g.units + u
                key[h, u, 1] = kslots[h * g.units + u]
                pg = j // self.page
                span = pages.get((h, pg))
                if span is None:
                    span = next((s for hh, pp, s in new_pages if (hh, pp) == (h, pg)), None)
                if span is None:
                    if self.values.available(c) <= len(new_pages):
                        raise CapacityError(f"NeuPIMs: channel {c} has no Value page left "
                                            f"for request {request}")
                    span = self.values.lowest(c, len(new_pages))
                    new_pages.append((h, pg, span))
                value[h, u, 1] = span * self.page + j % self.page
        return Place(key, value, (c, tuple(new_pages)))

    def bind(self, request: int, position: int, place: Place) -> None:
        g = self.g
        c, new_pages = place.tag  # type: ignore[misc]
        home = self.homes.setdefault(request, _Home(c))
        for slot in place.key[..., 1].reshape(-1).tolist():
            self.keys.take(c, slot)
        for h, pg, span in new_pages:
            self.values.take(c, span)
            home.pages[(h, pg)] = span
        for h in range(g.heads):
            for u in range(g.units):
                pg = (position * g.units + u) // self.page
                home.use[(h, pg)] = home.use.get((h, pg), 0) + 1
        home.units += g.units
        self.load[c] += g.units

    def unbind(self, request: int, place: Place) -> None:
        g = self.g
        c = int(place.key[0, 0, 0])
        home = self.homes[request]
        for slot in place.key[..., 1].reshape(-1).tolist():
            self.keys.give(c, slot)
        for h in range(g.heads):
            for u in range(g.units):
                pg = int(place.value[h, u, 1]) // self.page
                page = next(p for (hh, p), s in home.pages.items() if hh == h and s == pg)
                home.use[(h, page)] -= 1
                if home.use[(h, page)] == 0:
                    del home.use[(h, page)]
                    self.values.give(c, home.pages.pop((h, page)))
        home.units -= g.units
        self.load[c] -= g.units

    def finish(self, request: int) -> None:
        home = self.homes.get(request)
        if home is not None and home.units == 0:
            del self.homes[request]

    def check(self, bound: Iterable[tuple[int, Place]]) -> None:
        load = [0] * self.g.channels
        for request, place in bound:
            home = self.homes[request]
            assert (place.key[..., 0] == home.channel).all(), "NeuPIMs: a block off its home"
            assert (place.value[..., 0] == home.channel).all()
            load[home.channel] += self.g.units
        assert load == self.load, f"NeuPIMs: load {self.load}, bound {load}"
        pages = [0] * self.g.channels
        for home in self.homes.values():
            pages[home.channel] += len(home.pages)
        assert pages == [self.values.used(c) for c in range(self.g.channels)]
