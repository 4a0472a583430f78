"""Invariant checks of a runtime: a comparable snapshot, and every invariant asserted.

For tests (``tests/test_runtime_props.py`` runs :func:`check` after every random step and
compares :func:`state` before and after every failed call); the runtime never calls them.
"""

from __future__ import annotations

from typing import Protocol

from patton.runtime.patton.allocator import Allocator
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import BlockMeta, CzPlace, RequestState, WriteMode

__all__ = ["Checked", "state", "check"]


class Checked(Protocol):
    """What the checks read of a runtime (:class:`~patton.runtime.patton.lifecycle.Runtime`)."""

    config: Config
    mode: WriteMode
    alloc: Allocator
    blocks: dict[int, BlockMeta]
    requests: dict[int, RequestState]


def state(rt: Checked) -> tuple:
    """Return a comparable snapshot of everything mutable (for tests: unchanged on error)."""
    a = rt.alloc
    blocks = tuple(sorted(
        (b, m.owner, m.binding, m.key, m.value, m.cz, m.slot, m.ref_cnt, m.filled,
         None if m.shadow is None else m.shadow[:, :m.filled].tobytes())
        for b, m in rt.blocks.items()))
    reqs = tuple(sorted((r, tuple(s.table)) for r, s in rt.requests.items()))
    pools = tuple((tuple(p.used), p.live) for p in (a.krs, a.vrs, a.crs))
    o2 = tuple(tuple(sorted((k, o.used, o.owner) for k, o in d.items()))
               for d in (a.o2k, a.o2v))
    return (blocks, reqs, pools, o2, tuple(a.channel_load), a.rr,
            tuple(sorted(a.open_k.items())), tuple(sorted(a.open_v.items())))


def check(rt: Checked) -> None:
    """Assert every invariant: no overlapping granules, exact accounting, no leaks.

    Raises:
        AssertionError: naming the first violated invariant.
    """
    c, a = rt.config, rt.alloc
    refs: dict[int, int] = {}
    for s in rt.requests.values():
        for b in s.table:
            assert b in rt.blocks, f"request {s.request} holds unbound block {b}"
            refs[b] = refs.get(b, 0) + 1
    cells: dict[tuple[int, int, int], str] = {}

    def claim(cell: tuple[int, int, int], what: str) -> None:
        assert cell not in cells, f"{what} overlaps {cells[cell]} at {cell}"
        cells[cell] = what

    k_count: dict[int, int] = {}
    v_count: dict[int, int] = {}
    load = [0] * c.ch_per_head
    slots = set()
    for bid, m in rt.blocks.items():
        assert m.ref_cnt == refs.get(bid, 0), f"block {bid} ref_cnt {m.ref_cnt}"
        assert m.ref_cnt > 0 or m.full, f"unreferenced partial block {bid}"
        assert 0 <= m.filled <= c.block_size
        b = m.binding
        partial = rt.mode is WriteMode.PATTON and 0 < m.filled < c.block_size
        assert (m.cz is not None) == partial == (m.slot is not None), bid
        assert m.cz is not None or m.shadow is None, bid
        assert b.o2k in a.o2k and b.o2v in a.o2v, f"block {bid} in a freed O2"
        assert a.o2k[b.o2k].used >> b.k_slot & 1 and a.o2v[b.o2v].used >> b.v_index & 1
        k_count[b.o2k] = k_count.get(b.o2k, 0) + 1
        v_count[b.o2v] = v_count.get(b.o2v, 0) + 1
        load[m.key.p] += 1
        assert c.krs_base <= m.key.row < c.vrs_base, f"O1K of {bid} outside the KRS region"
        for e in range(c.bursts):
            claim((m.key.p, m.key.row, m.key.col + e), f"O1K {bid}")
        assert c.vrs_base <= m.value.row0 and \
            m.value.row0 + c.v_rows <= c.vrs_base + c.vrs_count * c.v_rows
        for p in range(c.ch_per_head):
            for i in range(c.v_rows):
                claim((p, m.value.row0 + i, m.value.col), f"O1V {bid}")
        if m.cz is not None:
            assert m.slot not in slots and m.cz == CzPlace(*c.cz_place(m.slot))
            slots.add(m.slot)
            assert m.cz.row < c.crs_rows
            for p in range(c.ch_per_head):
                for i in range(c.v_rows):
                    claim((p, m.cz.row, m.cz.col0 + i), f"CZ slot of {bid}")
    for pool, granules, counts in ((a.krs, a.o2k, k_count), (a.vrs, a.o2v, v_count)):
        assert set(pool.taken()) == set(granules), f"{pool.name} pool and granules differ"
        assert pool.live == len(granules)
        for pos, o2 in granules.items():
            assert o2.count == counts.get(pos, 0) > 0, f"{pool.name} {pos} count/leak"
            assert o2.used.bit_count() == o2.count
    assert set(a.crs.taken()) == slots, "CZ slot leak"
    assert load == a.channel_load, "channel load accounting"
    for table, granules in ((a.open_k, a.o2k), (a.open_v, a.o2v)):
        for req, pos in table.items():
            assert req in rt.requests and granules[pos].owner == req
