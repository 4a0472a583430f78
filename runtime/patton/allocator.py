"""Hierarchical granule allocation: Order-2 row-set packing and Order-1 placement.

Allocation is split into :meth:`Allocator.plan` (choose, may raise, changes nothing) and
:meth:`Allocator.apply` (mutate), so a failed allocation leaves no trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from patton.runtime.patton.config import Config
from patton.runtime.patton.granules import Order2, PackedPool, lowest_free

__all__ = ["Binding", "Allocator"]


@dataclass(frozen=True, slots=True)
class Binding:
    """Granules chosen for one new logical block.

    ``new_o2k`` / ``new_o2v`` say whether the Order-2 granule is opened by this binding.
    """

    o2k: int  # O2K position (KRS pool)
    k_slot: int  # O1K index within the O2K
    new_o2k: bool  # the O2K is allocated by this binding
    o2v: int  # O2V position (VRS pool)
    v_index: int  # O1V index (column) within the O2V
    new_o2v: bool  # the O2V is allocated by this binding


class Allocator:
    """Granule state of one layer (every layer and head group is laid out identically).

    Invariants: every live :class:`Order2` is taken in its pool and vice versa; an O2 is
    removed when its last Order-1 leaves; ``channel_load[p]`` counts bound O1Ks on channel
    ``p``; a request's open O2K/O2V (``open_k``/``open_v``) is a live granule it owns.

    Args:
        config: geometry.
    """

    def __init__(self, config: Config) -> None:
        c = config
        self.config = c
        self.krs = PackedPool("O2K", c.krs_count, c.o2k_per_krs)  # KRS row sets
        self.vrs = PackedPool("O2V", c.vrs_count, c.o2v_per_vrs)  # VRS row sets
        self.crs = PackedPool("CZ slot", c.crs_rows, c.cz_slots_per_crs)  # CRS rows
        self.o2k: dict[int, Order2] = {}  # live O2Ks by position
        self.o2v: dict[int, Order2] = {}  # live O2Vs by position
        self.channel_load = [0] * c.ch_per_head  # bound O1Ks per channel of a group
        self.rr = 0  # round-robin pointer for channel ties
        self.open_k: dict[int, int] = {}  # request -> its open O2K
        self.open_v: dict[int, int] = {}  # request -> its open O2V
        # per group-relative channel p: the bitmap of O1K indices s with s % P == p
        self._lanes = [sum(1 << s for s in range(p, c.n_o1p2, c.ch_per_head))
                       for p in range(c.ch_per_head)]

    # ------------------------------------------------------------------ choose

    def _key_slot(self, o2: Order2 | None) -> int:
        """Return the O1K index to bind: Case Ch first (least-used channel), then C.

        Among free indices it minimises (bound O1Ks of the O2K on the index's channel, the
        channel's load, round-robin distance, index): per channel only the lowest free index
        can win, so each channel is looked at once.
        """
        p_count = self.config.ch_per_head
        used = 0 if o2 is None else o2.used
        best, best_key = -1, None
        for p, lane in enumerate(self._lanes):
            free = lane & ~used
            if not free:
                continue
            s = (free & -free).bit_length() - 1
            key = ((used & lane).bit_count(), self.channel_load[p], (p - self.rr) % p_count, s)
            if best_key is None or key < best_key:
                best, best_key = s, key
        return best

    def plan(self, request: int) -> Binding:
        """Choose granules for a new block of ``request`` without changing anything.

        Raises:
            CapacityError: no O2K or O2V is available.
        """
        k = self.open_k.get(request)
        ko = self.o2k.get(k) if k is not None else None
        new_k = ko is None or ko.full
        if new_k:
            k, ko = self.krs.pick(), None
        v = self.open_v.get(request)
        vo = self.o2v.get(v) if v is not None else None
        new_v = vo is None or vo.full
        if new_v:
            v, vo = self.vrs.pick(), None
        v_index = lowest_free(0 if vo is None else vo.used, self.config.o2v_width)
        assert k is not None and v is not None
        return Binding(k, self._key_slot(ko), new_k, v, v_index, new_v)

    # ------------------------------------------------------------------ mutate

    def apply(self, request: int, b: Binding) -> None:
        """Bind the granules of a :meth:`plan` result."""
        c = self.config
        if b.new_o2k:
            self.krs.take(b.o2k)
            self.o2k[b.o2k] = Order2(b.o2k, c.n_o1p2, request)
            self.open_k[request] = b.o2k
        if b.new_o2v:
            self.vrs.take(b.o2v)
            self.o2v[b.o2v] = Order2(b.o2v, c.o2v_width, request)
            self.open_v[request] = b.o2v
        self.o2k[b.o2k].bind(b.k_slot)
        self.o2v[b.o2v].bind(b.v_index)
        p = b.k_slot % c.ch_per_head
        self.channel_load[p] += 1
        self.rr = (p + 1) % c.ch_per_head

    def release_key(self, o2k: int, slot: int) -> None:
        """Unbind an O1K; return its O2K when the last O1K leaves."""
        o2 = self.o2k[o2k]
        o2.unbind(slot)
        self.channel_load[slot % self.config.ch_per_head] -= 1
        if o2.count == 0:
            self.krs.give(o2k)
            del self.o2k[o2k]
            if o2.owner is not None and self.open_k.get(o2.owner) == o2k:
                del self.open_k[o2.owner]

    def release_value(self, o2v: int, index: int) -> None:
        """Unbind an O1V (bound or reserved); return its O2V when the last O1V leaves."""
        o2 = self.o2v[o2v]
        o2.unbind(index)
        if o2.count == 0:
            self.vrs.give(o2v)
            del self.o2v[o2v]
            if o2.owner is not None and self.open_v.get(o2.owner) == o2v:
                del self.open_v[o2.owner]

    def take_slot(self) -> int:
        """Take a CZ slot in the fullest CRS row that has one.

        Raises:
            CapacityError: every slot is in use.
        """
        return self.crs.take()

    def release_slot(self, slot: int) -> None:
        """Return a CZ slot."""
        self.crs.give(slot)

    def disown(self, request: int) -> None:
        """Forget ``request``'s open Order-2 granules (it finished); they stay while bound."""
        for table, granules in ((self.open_k, self.o2k), (self.open_v, self.o2v)):
            pos = table.pop(request, None)
            if pos is not None:
                granules[pos].owner = None
        for o2 in list(self.o2k.values()) + list(self.o2v.values()):
            if o2.owner == request:
                o2.owner = None

    # ------------------------------------------------------------------ capacity

    def free_blocks(self) -> int:
        """Return how many blocks a new request could allocate (whole free Order-2s)."""
        c = self.config
        return min(self.krs.free * c.n_o1p2, self.vrs.free * c.o2v_width)

    def free_blocks_for(self, request: int) -> int:
        """Return how many blocks ``request`` could allocate (its open O2s plus free O2s)."""
        c = self.config
        k = self.krs.free * c.n_o1p2
        v = self.vrs.free * c.o2v_width
        if request in self.open_k:
            o2 = self.o2k[self.open_k[request]]
            k += o2.width - o2.count
        if request in self.open_v:
            o2 = self.o2v[self.open_v[request]]
            v += o2.width - o2.count
        return min(k, v)
