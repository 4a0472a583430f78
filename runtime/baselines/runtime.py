"""A translated baseline behind the runtime interface: a placement policy over explicit units.

:class:`PlacedRuntime` is the :class:`~patton.runtime.interface.KvRuntime` of every baseline
(NeuPIMs, AttAcc, BlockPIM, PIMphony). It keeps vLLM's block lifecycle (allocate / share /
free / finish / evict, reference counts, cached blocks when the policy has prefix caching) and
emits the programs of :mod:`.programs`; *where* each block's units go is its
:class:`Policy`'s, which is all that differs between the baselines (``docs/baselines.md``).

A policy without prefix caching refuses ``share`` and releases a block as soon as its last
reference goes (nothing is ever cached), as its system defines no cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from patton.runtime.baselines import programs
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.runtime.errors import (
    BlockStateError,
    DoubleFree,
    DuplicateBlock,
    UnknownBlock,
    UnknownRequest,
    ident,
)
from patton.runtime.inputs import bf16_bits, check_layer, check_shape
from patton.runtime.patton.writes import WriteProgram, Writes
from patton.sim.program import Program

__all__ = ["Place", "Policy", "Bound", "PlacedRuntime"]


@dataclass(frozen=True, slots=True)
class Place:
    """Where one block's units are: ``(heads, units, 2)`` ``(channel, slot)`` per unit.

    ``tag`` is the policy's own record of what it handed out (spans, chunks).
    """

    key: np.ndarray
    value: np.ndarray
    tag: object = None


class Policy(Protocol):
    """A baseline's placement: which channel and slots each block's units take.

    ``place`` chooses and may raise :class:`~patton.runtime.errors.CapacityError`; it changes
    nothing. ``bind`` records a ``place`` result; ``unbind`` returns a block's units;
    ``finish`` forgets a request once it holds no block. ``aligned`` says whether the
    attention programs start each request's KV head on all its channels at the same step
    (:func:`programs.qk_program`): right for a layout that stripes a request over a channel
    group at the same addresses, a waste of steps for one that scatters it.
    """

    name: str
    prefix_caching: bool
    aligned: bool

    def room(self) -> int: ...

    def room_for(self, request: int) -> int: ...

    def place(self, request: int, position: int) -> Place: ...

    def bind(self, request: int, position: int, place: Place) -> None: ...

    def unbind(self, request: int, place: Place) -> None: ...

    def finish(self, request: int) -> None: ...

    def check(self, bound: Iterable[tuple[int, Place]]) -> None: ...


@dataclass(slots=True)
class Bound:
    """One bound block. Invariants: ``0 <= filled <= block_size``; ``ref_cnt >= 0``."""

    block_id: int
    owner: int  # the request that allocated it
    place: Place
    block_size: int
    ref_cnt: int = 1
    filled: int = 0

    @property
    def full(self) -> bool:
        """Every token position written."""
        return self.filled == self.block_size


class PlacedRuntime:
    """A baseline runtime (see the module docstring).

    Args:
        config: the geometry (:class:`~.geometry.Geometry`).
        policy: the baseline's placement policy.
    """

    def __init__(self, config: Geometry, policy: Policy) -> None:
        self.config = config
        self.policy = policy
        self.name = policy.name
        self.blocks: dict[int, Bound] = {}
        self.requests: dict[int, list[int]] = {}
        # per request of the last attention step: its table's places and their units joined
        # (a table changes once a block, attention runs every step)
        self._joined: dict[int, tuple[list[Place], np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ lookups

    def _block(self, block_id: int) -> Bound:
        b = self.blocks.get(block_id)
        if b is None:
            raise UnknownBlock(f"block {block_id} is not bound")
        return b

    def _table(self, request: int) -> list[int]:
        t = self.requests.get(request)
        if t is None:
            raise UnknownRequest(f"request {request} is not live")
        return t

    def table(self, request: int) -> list[int]:
        """Return a copy of ``request``'s block table."""
        return list(self._table(request))

    def seq_len(self, request: int) -> int:
        """Return the tokens written to ``request``'s blocks."""
        return sum(self.blocks[b].filled for b in self._table(request))

    def token_index(self, request: int) -> np.ndarray:
        """Return the flat ``position * T + offset`` of each written token, in order."""
        t = self.config.block_size
        filled = np.fromiter((self.blocks[b].filled for b in self._table(request)), np.int64)
        return np.flatnonzero(np.arange(t)[None, :] < filled[:, None])

    # ------------------------------------------------------------------ capacity

    def free_blocks(self) -> int:
        """Return the blocks a new request could allocate in every layer now."""
        return self.policy.room()

    def free_blocks_for(self, request: int) -> int:
        """Return the blocks ``request`` could allocate in every layer now."""
        return self.policy.room_for(request) if request in self.requests \
            else self.policy.room()

    # ------------------------------------------------------------------ lifecycle

    def allocate(self, request: int, block_id: int) -> Place:
        """Bind a new empty block to ``request`` and append it to its table."""
        request, block_id = ident(request, "request id"), ident(block_id, "block id")
        if block_id in self.blocks:
            raise DuplicateBlock(f"block {block_id} is already bound")
        table = self.requests.get(request, [])
        place = self.policy.place(request, len(table))
        self.policy.bind(request, len(table), place)
        self.blocks[block_id] = Bound(block_id, request, place, self.config.block_size)
        table.append(block_id)
        self.requests[request] = table
        return place

    def share(self, request: int, block_id: int) -> None:
        """Append a full block another request holds (prefix caching policies only)."""
        if not self.policy.prefix_caching:
            raise BlockStateError(f"{self.name} has no prefix caching: block {block_id} "
                                  "cannot be shared")
        b = self._block(block_id)
        if not b.full:
            raise BlockStateError(f"block {block_id} is partial ({b.filled} tokens) and "
                                  "cannot be shared")
        b.ref_cnt += 1
        self.requests.setdefault(request, []).append(block_id)

    def free(self, request: int, block_id: int) -> None:
        """Drop ``request``'s reference to ``block_id`` (its last occurrence in the table)."""
        table = self._table(request)
        b = self._block(block_id)
        if block_id not in table or b.ref_cnt == 0:
            raise DoubleFree(f"request {request} does not hold block {block_id}")
        del table[len(table) - 1 - table[::-1].index(block_id)]
        b.ref_cnt -= 1
        if b.ref_cnt == 0 and not (b.full and self.policy.prefix_caching):
            self._release(b)

    def finish(self, request: int) -> None:
        """Free every block ``request`` holds (last first) and forget it."""
        table = self._table(request)
        for block_id in reversed(list(table)):
            self.free(request, block_id)
        del self.requests[request]
        self.policy.finish(request)

    def evict(self, block_id: int) -> None:
        """Unbind a cached block."""
        b = self._block(block_id)
        if b.ref_cnt:
            raise BlockStateError(f"block {block_id} is referenced ({b.ref_cnt}) and cannot be "
                                  "evicted")
        self._release(b)

    def _release(self, b: Bound) -> None:
        self.policy.unbind(b.owner, b.place)
        del self.blocks[b.block_id]

    # ------------------------------------------------------------------ writes

    def _check_item(self, block_id: int, offset: int, keys: np.ndarray,
                    values: np.ndarray) -> Bound:
        """Check one write item; return its block."""
        c = self.config
        b = self._block(block_id)
        keys, values = bf16_bits(keys, "keys"), bf16_bits(values, "values")
        n = keys.shape[1] if keys.ndim == 4 else 1
        check_shape(keys, (c.n_layers, n, c.heads, c.d_head), "keys",
                    "(layers, tokens, heads, d_head)")
        check_shape(values, keys.shape, "values", "the keys' shape")
        if offset != b.filled:
            raise BlockStateError(f"block {block_id} holds {b.filled} tokens; a write must "
                                  f"start there, not at {offset}")
        if offset + keys.shape[1] > c.block_size:
            raise BlockStateError(f"block {block_id}: {keys.shape[1]} tokens from {offset} "
                                  f"overflow its {c.block_size}")
        return b

    def write_program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
                      ) -> WriteProgram:
        """Write whole or partial blocks (``(block, offset, keys, values)``, keys
        ``(layers, n, heads, D)``); return the Key and Value programs (no commits)."""
        items = [(b, o, bf16_bits(k, "keys"), bf16_bits(v, "values")) for b, o, k, v in items]
        bound = [self._check_item(*item) for item in items]
        seen: dict[int, int] = {}
        for (block_id, offset, keys, _), b in zip(items, bound):
            if block_id in seen:
                raise BlockStateError(f"block {block_id} is written twice in one call")
            seen[block_id] = offset + keys.shape[1]
        c = self.config
        key = programs.key_writes(c, c.n_layers, [(b.place.key, o, k)
                                                  for (_, o, k, _), b in zip(items, bound)])
        value = programs.value_writes(c, c.n_layers, [(b.place.value, o, v)
                                                      for (_, o, _, v), b in zip(items, bound)])
        for (_, offset, keys, _), b in zip(items, bound):
            b.filled = offset + keys.shape[1]
        return WriteProgram(key, value, programs.empty())

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Writes:
        """Write blocks; return the programs as instruction lists (empty with ``emit=False``)."""
        if not emit:
            bound = [self._check_item(*item) for item in items]
            for (_, offset, keys, _), b in zip(items, bound):
                b.filled = offset + keys.shape[1]
            return Writes()
        wp = self.write_program(items)
        return Writes(wp.key.to_instructions(), wp.value.to_instructions(), [])

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> WriteProgram:
        """Write one token at the fill level of each block (``keys`` ``(n, layers, heads,
        D)``): Key bursts and one ``WR_ABK`` per Value row."""
        c = self.config
        keys, values = bf16_bits(keys, "keys"), bf16_bits(values, "values")
        check_shape(keys, (len(block_ids), c.n_layers, c.heads, c.d_head), "keys",
                    "(blocks, layers, heads, d_head)")
        check_shape(values, keys.shape, "values", "the keys' shape")
        if len(set(block_ids)) != len(block_ids):
            raise BlockStateError("a block appears twice in one decode step")
        bound = [self._block(b) for b in block_ids]
        for b in bound:
            if b.full:
                raise BlockStateError(f"block {b.block_id} is full")
        offsets = np.array([b.filled for b in bound], dtype=np.int64)

        def units(kind: str) -> np.ndarray:  # (requests, heads, 2): each token's unit
            return np.stack([getattr(b.place, kind)[:, o // UNIT] for b, o in
                             zip(bound, offsets.tolist())]) if bound else \
                np.zeros((0, c.heads, 2), np.int64)

        key = programs.token_key_writes(c, units("key"), offsets, keys)
        value = programs.token_value_writes(c, units("value"), offsets, values)
        for b in bound:
            b.filled += 1
        return WriteProgram(key, value, programs.empty())

    # ------------------------------------------------------------------ attention

    def _jobs(self, requests: list[int]) -> programs.Jobs:
        """One job per request and KV head, its units in table order."""
        per = []
        joined = {}
        for i, r in enumerate(requests):
            places = [self.blocks[b].place for b in self._table(r)]
            if not places:
                continue
            last = self._joined.get(r)
            if last is not None and len(last[0]) == len(places) and all(
                    a is b for a, b in zip(last[0], places)):
                key, value = last[1], last[2]
            else:
                key = np.concatenate([p.key for p in places], axis=1)
                value = np.concatenate([p.value for p in places], axis=1)
            joined[r] = (places, key, value)
            per.append((i, key, value))
        self._joined = joined
        return programs.Jobs.of(per)

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, list]:
        """QK^T of ``requests`` in ``layer`` (``queries`` ``(n, heads, D)``)."""
        c = self.config
        check_layer(layer, c.n_layers)
        queries = bf16_bits(queries, "queries")
        check_shape(queries, (len(requests), c.heads, c.d_head), "queries",
                    "(requests, heads, d_head)")
        blocks = [len(self._table(r)) for r in requests]
        return programs.qk_program(c, layer, self._jobs(requests), queries, blocks,
                                  self.policy.aligned)

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray:
        """Return zeroed scores ``(n, heads, width)`` for :meth:`sv_step`."""
        check_layer(layer, self.config.n_layers)
        need = max((len(self._table(r)) for r in requests), default=0) * self.config.block_size
        if width < need:
            raise BlockStateError(f"score width {width} is below the longest table's {need}")
        return np.zeros((len(requests), self.config.heads, width), dtype=np.uint16)

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, list]:
        """SV of ``requests`` in ``layer`` (``probs`` ``(n, heads, width)``, table layout)."""
        c = self.config
        check_layer(layer, c.n_layers)
        probs = bf16_bits(probs, "probs")
        blocks = [len(self._table(r)) for r in requests]
        need = max(blocks, default=0) * c.block_size
        if probs.ndim != 3 or probs.shape[:2] != (len(requests), c.heads) \
                or probs.shape[2] < need:
            check_shape(probs, (len(requests), c.heads, max(need, 1)), "probs",
                        "(requests, heads, at least the longest table's tokens)")
        return programs.sv_program(c, layer, self._jobs(requests), probs, blocks,
                                  self.policy.aligned)

    # ------------------------------------------------------------------ checks

    def check(self) -> None:
        """Assert every invariant: tables, reference counts, no two units on one slot."""
        c = self.config
        refs: dict[int, int] = {}
        for r, table in self.requests.items():
            for b in table:
                assert b in self.blocks, f"request {r} holds unbound block {b}"
                refs[b] = refs.get(b, 0) + 1
        taken: set[tuple[str, int, int]] = set()
        for b, meta in self.blocks.items():
            assert meta.ref_cnt == refs.get(b, 0), \
                f"block {b}: ref_cnt {meta.ref_cnt}, held {refs.get(b, 0)} times"
            assert 0 <= meta.filled <= meta.block_size
            if meta.ref_cnt == 0:
                assert meta.full and self.policy.prefix_caching, \
                    f"block {b} is unreferenced but kept"
            for kind, arr in (("key", meta.place.key), ("value", meta.place.value)):
                assert arr.shape == (c.heads, c.units, 2), arr.shape
                for ch, slot in arr.reshape(-1, 2).tolist():
                    assert 0 <= ch < c.channels and 0 <= slot < c.slots, (kind, ch, slot)
                    assert (kind, ch, slot) not in taken, f"two units on {kind} {ch}:{slot}"
                    taken.add((kind, ch, slot))
        self.policy.check((m.owner, m.place) for m in self.blocks.values())
