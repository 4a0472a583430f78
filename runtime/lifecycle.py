"""The PATTON runtime: block lifecycle over placement metadata, and the programs it emits.

Mirrors vLLM's block pool (``reference/vllm-kv-cache.md``): a block id is bound by
:meth:`Runtime.allocate`, written by :meth:`Runtime.write`, shared by :meth:`Runtime.share`
(reference count up, nothing copied), released by :meth:`Runtime.free` (reference count down;
a full block at zero references stays mapped as *cached*; a partial one is released with its
CZ slot and reserved O1V) and unbound by :meth:`Runtime.evict`. Every method checks before it
mutates, so a raised :class:`PattonError` leaves the runtime unchanged.

A decode step's writes go through :meth:`Runtime.append` (programs kept across steps,
:mod:`.token_writes`) and its attention through :meth:`Runtime.qk_step` /
:meth:`Runtime.sv_step` (per-request :mod:`.tables` kept in step with the lifecycle calls,
laid out by :mod:`.layout` and patched step to step by :mod:`.layout_patch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np

from patton.sim.isa import Instruction

from . import assemble as asm
from . import commands as cmd
from .allocator import Allocator
from .config import Config
from .errors import (
    BlockStateError, CapacityError, DoubleFree, DuplicateBlock, OffsetError, ReadOnlyBlock, UnknownBlock,
    UnknownRequest,
)
from . import layout_patch as patch
from .metadata import CLEAN, BlockMeta, CzPlace, KeyPlace, Mode, RequestState, ValuePlace
from patton.sim.program import Program, concat
from .tables import KeyTable, ValueTable
from .token_writes import TokenBatch, commit_writes

__all__ = ["Runtime", "Writes", "WriteProgram"]


@dataclass(slots=True)
class Writes:
    """The programs of one write call, by kind (all in the shared ISA, explicit columns)."""

    key: list[Instruction] = field(default_factory=list)  # Key tokens to O1Ks
    value: list[Instruction] = field(default_factory=list)  # Value tokens (CZ slot or O1V)
    commit: list[Instruction] = field(default_factory=list)  # CZ slot -> O1V commits

    @property
    def all(self) -> list[Instruction]:
        """Every instruction: Keys, then Values, then commits."""
        return self.key + self.value + self.commit


@dataclass(frozen=True, slots=True)
class WriteProgram:
    """The programs of one write call, by kind, in columnar form (see :class:`Writes`)."""

    key: Program  # Key tokens to O1Ks
    value: Program  # Value tokens (CZ slot or O1V)
    commit: Program  # CZ slot -> O1V commits

    @property
    def all(self) -> Program:
        """Every instruction: Keys, then Values, then commits (a new program)."""
        return concat([self.key, self.value, self.commit])

    def copy(self) -> WriteProgram:
        """Return the programs with arrays of their own (to keep them past the next write)."""
        return WriteProgram(self.key.copy(), self.value.copy(), self.commit.copy())

    def to_writes(self) -> Writes:
        """Expand every program to instruction objects."""
        return Writes(self.key.to_instructions(), self.value.to_instructions(),
                      self.commit.to_instructions())


@dataclass(slots=True)
class _Parts:
    """The pieces (see :data:`assemble.Piece`) of one write call, before assembly."""

    key: list[tuple] = field(default_factory=list)  # Key pieces, in order
    value: list[tuple[str, tuple]] = field(default_factory=list)  # ("abk"|"mem", piece)
    cz: list[tuple[tuple[int, int, int], tuple]] = field(default_factory=list)  # sort key
    commit: list[tuple] = field(default_factory=list)  # full-block O1V pieces


class Runtime:
    """PATTON (or an ablation of it) for one model on one device.

    Args:
        config: geometry (``Config(o2v_blocks=device.columns)`` is the no-O2V ablation).
        mode: :attr:`Mode.PATTON` or the no-Commit-Zone ablation :attr:`Mode.NO_CZ`.
        token_op: how :attr:`Mode.NO_CZ` writes a single Value token into its O1V: ``"abk"``
            (one ``WR_ABK`` per Value row, the default: fewest commands and cycles) or
            ``"mem"`` (one masked ``W MEM`` per bank and Value row, as the paper describes).

    Attributes:
        blocks: bound blocks by engine block id.
        requests: live requests by id.
        alloc: the granule allocator (shared by every layer).
    """

    def __init__(self, config: Config, mode: Mode = Mode.PATTON, *,
                 token_op: str = "abk") -> None:
        if token_op not in ("abk", "mem"):
            raise ValueError(f"token_op must be 'abk' or 'mem', not {token_op!r}")
        self.config = config
        self.mode = mode
        self.token_op = token_op
        self.alloc = Allocator(config)
        self.blocks: dict[int, BlockMeta] = {}
        # placements by granule position (Config's address arithmetic, done once per position)
        self._kplaces: dict[tuple[int, int], KeyPlace] = {}
        self._vplaces: dict[tuple[int, int], ValuePlace] = {}
        self._czplaces: dict[int, CzPlace] = {}  # by CZ slot
        self.requests: dict[int, RequestState] = {}
        # per request: its QK^T groups and SV segments, kept in step with its table
        self._ktabs: dict[int, KeyTable] = {}
        self._vtabs: dict[int, ValueTable] = {}
        # per (layer, kind): the last batch, by its requests' versions and data width, and
        # what it was laid out from (layout_patch.QkLayout / SvLayout, to patch it)
        self._batches: dict[tuple[int, str],
                            tuple[tuple, asm.Batch, list, patch.QkLayout | patch.SvLayout]] = {}
        self._writes: asm.Cache = {}  # write-program addresses by piece shapes
        self._tokens: dict[tuple, TokenBatch] = {}  # decode-step writes by TokenBatch.key_of
        self._scratch: dict[str, np.ndarray] = {}  # arrays of the last decode step's commits
        # the CZ blocks' Value tokens (the commits' source), by CZ slot; a block's shadow is
        # its slot's entry (offsets >= filled undefined); pages are mapped on first use
        self._shadows = np.zeros((self.alloc.crs.capacity, config.n_layers, config.block_size,
                                  config.heads, config.d_head), dtype=np.uint16)
        # (layers, 1, heads, D): the keys/values shape of a single-token write
        self._one = (config.n_layers, 1, config.heads, config.d_head)

    # ------------------------------------------------------------------ lookups

    def _block(self, block_id: int) -> BlockMeta:
        meta = self.blocks.get(block_id)
        if meta is None:
            raise UnknownBlock(f"block {block_id!r} is not bound")
        return meta

    def _request(self, request: int) -> RequestState:
        state = self.requests.get(request)
        if state is None:
            raise UnknownRequest(f"request {request!r} is not live")
        return state

    def table(self, request: int) -> list[int]:
        """Return a copy of ``request``'s block table."""
        return list(self._request(request).table)

    def seq_len(self, request: int) -> int:
        """Return the tokens written to ``request``'s blocks."""
        return sum(self.blocks[b].filled for b in self._request(request).table)

    def token_index(self, request: int) -> np.ndarray:
        """Return the flat ``position * T + offset`` of each written token, in order."""
        t = self.config.block_size
        filled = np.fromiter((self.blocks[b].filled for b in self._request(request).table),
                             dtype=np.int64)
        return np.flatnonzero(np.arange(t)[None, :] < filled[:, None])

    # ------------------------------------------------------------------ capacity

    def free_blocks(self) -> int:
        """Return the blocks a new request could allocate in every layer."""
        return self.alloc.free_blocks()

    def free_tokens(self) -> int:
        """Return the token capacity of :meth:`free_blocks`."""
        return self.free_blocks() * self.config.block_size

    def free_slots(self) -> int:
        """Return free Commit Zone slots per layer."""
        return self.alloc.crs.free

    def cached(self) -> list[int]:
        """Return the ids of cached (zero-reference, full) blocks."""
        return [b for b, m in self.blocks.items() if m.ref_cnt == 0]

    # ------------------------------------------------------------------ lifecycle

    def allocate(self, request: int, block_id: int) -> BlockMeta:
        """Bind a new, empty block to ``request`` and append it to its table.

        Raises:
            DuplicateBlock: ``block_id`` is still bound.
            CapacityError: no O2K/O2V is free.
        """
        if not isinstance(block_id, int) or block_id < 0:
            raise UnknownBlock(f"block id {block_id!r} is not a non-negative integer")
        if block_id in self.blocks:
            raise DuplicateBlock(f"block {block_id} is bound (evict it first)")
        c = self.config
        b = self.alloc.plan(request)
        self.alloc.apply(request, b)
        key = self._kplaces.get((b.o2k, b.k_slot))
        if key is None:
            key = self._kplaces[(b.o2k, b.k_slot)] = KeyPlace(*c.key_place(b.o2k, b.k_slot))
        value = self._vplaces.get((b.o2v, b.v_index))
        if value is None:
            value = self._vplaces[(b.o2v, b.v_index)] = ValuePlace(*c.value_place(b.o2v,
                                                                                   b.v_index))
        meta = BlockMeta(block_id, request, b, key, value, None, c.block_size)
        self.blocks[block_id] = meta
        state = self.requests.get(request)
        if state is None:
            state = self.requests[request] = RequestState(request)
        state.table.append(block_id)
        state.version += 1
        state.kversion += 1
        return meta

    def share(self, request: int, block_id: int) -> None:
        """Append a full block to ``request``'s table (reference count up, nothing copied).

        Raises:
            UnknownBlock: not bound.
            BlockStateError: the block is not full (partial blocks stay private).
        """
        meta = self._block(block_id)
        if not meta.full:
            raise BlockStateError(f"block {block_id} is partial ({meta.filled} tokens); only "
                                  f"full blocks can be shared")
        meta.ref_cnt += 1
        state = self.requests.setdefault(request, RequestState(request))
        state.table.append(block_id)
        state.version += 1
        state.kversion += 1

    def free(self, request: int, block_id: int) -> None:
        """Drop ``request``'s reference to ``block_id``.

        At zero references a full block stays mapped as cached; a partial block is released
        (O1K, reserved O1V and CZ slot).

        Raises:
            UnknownRequest, UnknownBlock: not live / not bound.
            DoubleFree: the request does not reference the block.
        """
        state = self._request(request)
        meta = self._block(block_id)
        if block_id not in state.table:
            raise DoubleFree(f"request {request} does not reference block {block_id}")
        idx = len(state.table) - 1 - state.table[::-1].index(block_id)
        del state.table[idx]
        state.version += 1
        state.kversion += 1
        state.kdirty = min(state.kdirty, idx)
        state.vdirty = min(state.vdirty, idx)
        meta.ref_cnt -= 1
        if meta.ref_cnt == 0 and not meta.full:
            self._unbind(meta)

    def finish(self, request: int) -> None:
        """Free every block of ``request`` (last first) and forget the request."""
        state = self._request(request)
        for block_id in reversed(list(state.table)):
            self.free(request, block_id)
        del self.requests[request]
        self.alloc.disown(request)
        self._ktabs.pop(request, None)
        self._vtabs.pop(request, None)
        self._batches.clear()  # the id may come back with the same version

    def evict(self, block_id: int) -> None:
        """Unbind a cached block: release its O1K and O1V (and their O2s when emptied).

        Raises:
            UnknownBlock: not bound.
            BlockStateError: a request still references it.
        """
        meta = self._block(block_id)
        if meta.ref_cnt:
            raise BlockStateError(f"block {block_id} has {meta.ref_cnt} reference(s); only "
                                  f"cached blocks can be evicted")
        self._unbind(meta)

    def _unbind(self, meta: BlockMeta) -> None:
        b = meta.binding
        self.alloc.release_key(b.o2k, b.k_slot)
        self.alloc.release_value(b.o2v, b.v_index)
        if meta.slot is not None:
            self.alloc.release_slot(meta.slot)
        del self.blocks[meta.block_id]

    # ------------------------------------------------------------------ writes

    def _check_write(self, block_id: int, start: int, keys: np.ndarray,
                     values: np.ndarray) -> BlockMeta:
        meta = self._block(block_id)
        if meta.ref_cnt != 1 or meta.full:
            raise ReadOnlyBlock(f"block {block_id} is shared, cached or full "
                                f"(ref_cnt {meta.ref_cnt}, {meta.filled} tokens)")
        c = self.config
        n = keys.shape[1] if keys.ndim == 4 else -1
        shape = (c.n_layers, n, c.heads, c.d_head)
        if n <= 0 or keys.shape != shape or values.shape != shape:
            raise OffsetError(f"keys/values must have shape (layers, n >= 1, heads, d_head) = "
                              f"{shape}, got {keys.shape} and {values.shape}")
        if start != meta.filled or start + n > c.block_size:
            raise OffsetError(f"write of offsets {start}..{start + n - 1} into block "
                              f"{block_id} holding {meta.filled} tokens (append only, "
                              f"offsets < {c.block_size})")
        return meta

    def write(self, block_id: int, start: int, keys: np.ndarray,
              values: np.ndarray) -> Writes:
        """Write token offsets ``start .. start + n - 1`` of a block (Key and Value).

        ``keys`` and ``values`` are bf16 bit patterns of shape ``(layers, n, heads, d_head)``.
        Writes append (``start`` equals the block's fill level). With the Commit Zone, a
        partial block's Values go to its CZ slot (taken by the block's first partial write); the write that fills the block commits it:
        the whole block is written to its reserved O1V (the last tokens are folded into the
        commit), the O1V becomes visible and the slot is freed. A write of a whole block at
        once goes straight to the O1V.

        Raises:
            UnknownBlock: not bound.
            ReadOnlyBlock: shared, cached or already full.
            OffsetError: offsets out of range, not appending, or wrong shapes.
            CapacityError: the block becomes partial and no CZ slot is free.
        """
        return self.write_many([(block_id, start, keys, values)])

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Writes:
        """Write several blocks at once (each at most once); CZ writes grouped by CRS row.

        With ``emit=False`` only the metadata advances and no program is built (to set up a
        state whose data is already in place, e.g. in benchmarks).
        """
        if not emit:
            self._write(items, None)
            return Writes()
        w = self.write_program(items)
        return WriteProgram(*(p.with_data(p.data.copy()) for p in (w.key, w.value, w.commit))
                            ).to_writes()

    def write_program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
                      ) -> WriteProgram:
        """Do :meth:`write_many` and return its programs in columnar form.

        A decode step (one uint16 token per block, with the Commit Zone) takes the fast path
        of :meth:`append`, whose arrays are rewritten in place by later writes: the returned
        programs are valid until the next write call (:meth:`WriteProgram.copy` keeps them).
        """
        one = self._one
        if items and all(k.shape == one and v.shape == one and s == self._filled(b)
                         for b, s, k, v in items):
            fast = self._append([it[0] for it in items],
                                np.stack([it[2][:, 0] for it in items]),
                                np.stack([it[3][:, 0] for it in items]))
            if fast is not None:
                return fast
        return self._write_program(items)

    def _filled(self, block_id: int) -> int:
        meta = self.blocks.get(block_id)
        return -1 if meta is None else meta.filled

    def _write_program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
                       ) -> WriteProgram:
        """Build the programs of any write call (see :meth:`write_program`), uncached."""
        parts = _Parts()
        self._write(items, parts)
        c = self.config
        parts.cz.sort(key=lambda part: part[0])
        values = parts.value + [("mem", piece) for _, piece in parts.cz]
        runs = [asm.token_writes(c, [p for _, p in run]) if kind == "abk"
                else asm.value_writes(c, [p for _, p in run], self._writes)
                for kind, run in groupby(values, key=lambda v: v[0])]
        key = asm.key_writes(c, parts.key, self._writes) if parts.key else concat([])
        commit = asm.value_writes(c, parts.commit) if parts.commit else concat([])
        return WriteProgram(key, concat(runs), commit)

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> WriteProgram:
        """Write one token at the fill level of each block: a decode step's writes.

        ``keys`` and ``values`` are bf16 bit patterns ``(blocks, layers, heads, d_head)``;
        row ``i`` is the token of ``block_ids[i]``. Same as :meth:`write_program` with the item
        ``(block_ids[i], filled, keys[i][:, None], values[i][:, None])`` per block, and as
        fast as the runtime gets: with the Commit Zone, a step that writes the same blocks as
        an earlier one reuses its programs (:class:`TokenBatch`) and rewrites them in place,
        and new ones recycle the arrays of old ones, so the returned programs are valid until
        the next write call (:meth:`WriteProgram.copy` keeps them).

        Raises:
            as :meth:`write`.
        """
        fast = self._append(block_ids, keys, values)
        if fast is not None:
            return fast
        items = []
        for i, bid in enumerate(block_ids):
            meta = self.blocks.get(bid)
            items.append((bid, 0 if meta is None else meta.filled, keys[i][:, None],
                          values[i][:, None]))
        return self._write_program(items)

    def _append(self, block_ids: Sequence[int], keys: np.ndarray,
                values: np.ndarray) -> WriteProgram | None:
        """Do :meth:`append` on the fast path, or return ``None`` and change nothing.

        The fast path needs the Commit Zone, ``uint16`` data of the right shape, distinct
        bound blocks that take writes, and a CZ slot for every block that becomes partial;
        :meth:`_write_program` handles (and reports) everything else. Metadata advances as in
        :meth:`_write`, item by item, so both paths leave the same state.
        """
        c = self.config
        n = len(block_ids)
        shape = (n, c.n_layers, c.heads, c.d_head)
        if (self.mode is not Mode.PATTON or not n or keys.shape != shape
                or values.shape != shape or keys.dtype != np.uint16
                or values.dtype != np.uint16):
            return None
        blocks = self.blocks
        try:
            metas = [blocks[b] for b in block_ids]
        except (KeyError, TypeError):  # unbound (or unhashable) ids: reported by the slow path
            return None
        if len(set(block_ids)) != n:
            return None
        last = c.block_size - 1
        t0 = metas[0].filled
        uniform = True
        need = 0
        for meta in metas:
            f = meta.filled
            if meta.ref_cnt != 1 or f > last:
                return None
            if f != t0:
                uniform = False
            if meta.cz is None and f < last:
                need += 1
        if need > self.alloc.crs.free:
            return None
        # checked: from here on nothing raises
        if uniform and t0 < last and not need:  # a steady step: every block stays in the CZ
            for meta in metas:
                meta.filled += 1
            cz = [True] * n
            starts = None
            commit = None
        else:
            starts = np.fromiter((m.filled for m in metas), dtype=np.int64, count=n)
            cz, commit = self._advance_tokens(metas, values)
        key = TokenBatch.key_of(metas, cz)
        batch = self._tokens.get(key)
        if batch is None:
            batch = self._tokens[key] = TokenBatch.of(c, metas, cz, self._recycle(n, cz))
        if len(batch.slots) == n:
            self._shadows[batch.slots, :, t0 if uniform else starts] = values
        elif len(batch.slots):
            pick = np.flatnonzero(cz)
            assert starts is not None
            self._shadows[batch.slots, :, starts[pick]] = values[pick]
        kprog, vprog = batch.fill(t0 if uniform else None, starts, keys, values)
        return WriteProgram(kprog, vprog, concat([]) if commit is None else commit)

    def _recycle(self, n: int, cz: list[bool]) -> TokenBatch | None:
        """Return a cached :class:`TokenBatch` to build the next one from (and forget it).

        The cache keeps two batches (a step that writes the same blocks as one of them reuses
        it as is). A new batch takes over, and patches, the latest one of the same shape
        (items and CZ pieces), else the oldest once two are kept.
        """
        tokens = self._tokens
        ncz = sum(cz)
        for key in reversed(list(tokens)):
            b = tokens[key]
            if len(b.metas) == n and len(b.slots) == ncz:
                return tokens.pop(key)
        if len(tokens) >= 2:
            return tokens.pop(next(iter(tokens)))
        return None

    def _advance_tokens(self, metas: list[BlockMeta],
                        values: np.ndarray) -> tuple[list[bool], Program | None]:
        """Advance each block by one token (stage it, or publish it and build its commit).

        Returns whether each write stays in the Commit Zone, and the commits' program.
        """
        last = self.config.block_size - 1
        cz = []
        done: list[int] = []  # items whose write commits
        slots: list[int] = []  # their CZ slots (shadows), read before a new block reuses one
        places = []
        for i, meta in enumerate(metas):
            if meta.filled < last:
                self._stage(meta)
                cz.append(True)
            else:
                cz.append(False)
                done.append(i)
                slots.append(-1 if meta.slot is None else meta.slot)
                places.append(meta.value)
                self._publish(meta)
            meta.filled += 1
        if not done:
            return cz, None
        s0 = slots[0]
        if s0 >= 0 and slots == list(range(s0, s0 + len(slots))):
            full = self._shadows[s0:s0 + len(slots)]  # a view (the slots are released)
        else:
            shape = (len(done),) + self._shadows.shape[1:]
            full = self._scratch.get("full")
            if full is None or full.shape != shape:
                full = self._scratch["full"] = np.empty(shape, dtype=np.uint16)
            np.take(self._shadows, slots, axis=0, out=full)  # (commits, layers, T, heads, D)
            if -1 in slots:  # a block filled to T - 1 without the Commit Zone (not in PATTON)
                full[np.array(slots) == -1] = 0
        full[:, :, last] = values[done]
        return cz, commit_writes(self.config, places, full, self._scratch)

    def _write(self, items: list[tuple[int, int, np.ndarray, np.ndarray]],
               parts: _Parts | None) -> None:
        ids = [it[0] for it in items]
        if len(set(ids)) != len(ids):
            raise OffsetError("a block may appear once per write_many call")
        metas = [self._check_write(*it) for it in items]
        c = self.config
        if self.mode is Mode.PATTON:
            need = sum(1 for m, it in zip(metas, items)
                       if m.cz is None and it[1] + it[2].shape[1] < c.block_size)
            if need > self.alloc.crs.free:
                raise CapacityError(f"{need} partial block(s) need a CZ slot, "
                                    f"{self.alloc.crs.free} free")
        for meta, (_, start, keys, values) in zip(metas, items):
            if parts is not None:
                self._emit(parts, meta, start, keys, values)
            self._advance(meta, start, keys.shape[1], values)

    def _emit(self, parts: _Parts, meta: BlockMeta, start: int, keys: np.ndarray,
              values: np.ndarray) -> None:
        """Collect the pieces of one block's write (before its metadata advances)."""
        c = self.config
        n = keys.shape[1]
        layers = range(c.n_layers)
        parts.key += [(layer, meta.key, start, keys[layer]) for layer in layers]
        if self.mode is Mode.NO_CZ:
            kind = "abk" if n == 1 and self.token_op == "abk" else "mem"
            parts.value += [(kind, (layer, meta.value, start, values[layer]))
                            for layer in layers]
        elif start + n < c.block_size:
            self._stage(meta)
            cz = meta.cz
            assert cz is not None
            parts.cz += [((layer, cz.row, cz.col0), (layer, cz, start, values[layer]))
                         for layer in layers]
        else:
            full = np.zeros((c.n_layers, c.block_size, c.heads, c.d_head), dtype=np.uint16)
            if meta.shadow is not None:
                full[:, :start] = meta.shadow[:, :start]
            full[:, start:] = values
            pieces = [(layer, meta.value, 0, full[layer]) for layer in layers]
            if start == 0:
                parts.value += [("mem", piece) for piece in pieces]
            else:
                parts.commit += pieces

    def _advance(self, meta: BlockMeta, start: int, n: int, values: np.ndarray) -> None:
        """Advance a block's metadata for a write: stage it in the CZ, or publish its O1V."""
        c = self.config
        if self.mode is Mode.PATTON:
            if start + n < c.block_size:
                self._stage(meta)
                assert meta.shadow is not None
                meta.shadow[:, start:start + n] = values
            else:
                self._publish(meta)
        meta.filled += n

    def _stage(self, meta: BlockMeta) -> None:
        """Give a block that becomes partial a CZ slot (its visible placement)."""
        if meta.cz is None:
            meta.slot = slot = self.alloc.take_slot()
            cz = self._czplaces.get(slot)
            if cz is None:
                cz = self._czplaces[slot] = CzPlace(*self.config.cz_place(slot))
            meta.cz = cz
            meta.shadow = self._shadows[slot]
            self._moved(meta)

    def _moved(self, meta: BlockMeta) -> None:
        """Note that a written block's visible Value placement changed (in its owner's table)."""
        state = self.requests[meta.owner]
        state.version += 1
        table = state.table
        pos = len(table) - 1
        if table[pos] != meta.block_id:  # a written block is its owner's alone
            pos = table.index(meta.block_id)
        state.vdirty = min(state.vdirty, pos)

    def _publish(self, meta: BlockMeta) -> None:
        """Make a full block's O1V visible and free its CZ slot, if it had one."""
        if meta.slot is not None:
            self.alloc.release_slot(meta.slot)
            self._moved(meta)
        meta.slot = None
        meta.cz = None
        meta.shadow = None

    # ------------------------------------------------------------------ attention

    def _keys(self, request: int) -> KeyTable:
        """Return ``request``'s :class:`KeyTable`, brought up to date with its table."""
        state = self._request(request)
        tb = self._ktabs.get(request)
        if tb is None:
            tb = self._ktabs[request] = KeyTable(cmd.group_masks(self.config)[1])
        if state.kdirty != CLEAN or tb.blocks != len(state.table):
            first = tb.cut(state.kdirty)
            blocks = self.blocks
            tb.extend([blocks[b].key for b in state.table[first:]])
            state.kdirty = CLEAN
        return tb

    def _values(self, request: int) -> ValueTable:
        """Return ``request``'s :class:`ValueTable`, brought up to date with its table."""
        state = self._request(request)
        tb = self._vtabs.get(request)
        if tb is None:
            tb = self._vtabs[request] = ValueTable()
        table = state.table
        n = len(tb.values)
        if state.vdirty != CLEAN or n != len(table):
            blocks = self.blocks
            if state.vdirty == n - 1 == len(table) - 1 and \
                    tb.publish_last(self._value_place(blocks[table[-1]])):  # a commit
                state.vdirty = CLEAN
                return tb
            after = None
            if state.vdirty >= n and len(table) > n:  # appends only
                after = self._value_place(blocks[table[n]])
                if len(table) == n + 1 and isinstance(after, CzPlace) and tb.append_cz(after):
                    state.vdirty = CLEAN  # a boundary: the new block is in its CZ slot
                    return tb
            first = tb.cut(state.vdirty, after)
            tb.extend([self._value_place(blocks[b]) for b in table[first:]])
            state.vdirty = CLEAN
        return tb

    def _batch(self, requests: list[int], layer: int, kind: str,
               width: int) -> tuple[asm.Batch, list]:
        """Return the batch of ``requests``' programs.

        Cached by the requests' versions and ``width``; when some tables changed, the last
        batch of the same requests is patched for them (:mod:`.layout_patch`), else (or when
        the patch does not apply) the batch is laid out anew.
        """
        reqs = self.requests
        try:
            if kind == "qk":
                versions = tuple([reqs[r].kversion for r in requests])
            else:
                versions = tuple([reqs[r].version for r in requests])
        except KeyError:
            for r in requests:
                self._request(r)
            raise
        key = (tuple(requests), versions, width)
        hit = self._batches.get((layer, kind))
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        c = self.config
        refresh = self._keys if kind == "qk" else self._values
        lay: patch.QkLayout | patch.SvLayout | None = None
        if hit is not None and hit[0][0] == key[0]:  # same requests: patch the changed ones
            old = hit[3]
            changed = [k for k, (a, b) in enumerate(zip(hit[0][1], versions)) if a != b]
            if len(changed) <= patch.MAX_CHANGED:
                tabs: list = list(old.tables)
                for k in changed:
                    tabs[k] = refresh(requests[k])
                if isinstance(old, patch.QkLayout):
                    lay = patch.qk_patch(c, layer, old, tabs, changed)
                else:
                    lay = patch.sv_patch(c, layer, old, tabs, changed, width)
        if lay is None:
            tabs = [refresh(r) for r in requests]
            lay = patch.qk_layout(c, layer, tabs) if kind == "qk" else \
                patch.sv_layout(c, layer, tabs, width)
        batch = lay.batch
        plans: list = [tb.plan for tb in lay.tables]
        self._batches[(layer, kind)] = (key, batch, plans, lay)
        return batch, plans

    def qk(self, request: int, layer: int,
           query: np.ndarray) -> tuple[list[Instruction], cmd.QkPlan]:
        """Return the QK^T program of ``request`` in ``layer`` for ``query`` ``(heads, D)``.

        The plan's :meth:`~commands.QkPlan.decode` gives ``(heads, blocks * T)`` scores;
        index them with :meth:`token_index`.
        """
        prog, plans = self.qk_step([request], layer, query[None])
        return prog.to_instructions(), plans[0]

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, list[cmd.QkPlan]]:
        """Return one QK^T program for ``requests`` (in order) and each one's plan.

        ``queries`` is ``(requests, heads, D)``. The program is each request's :meth:`qk`
        program in turn, so its read-outs split by :meth:`~commands.QkPlan.readouts`.
        """
        c = self.config
        batch, plans = self._batch(requests, layer, "qk", c.device.gb_columns * c.device.lanes)
        return batch.fill(queries[:, :, None, :]), plans

    def _value_place(self, meta: BlockMeta) -> ValuePlace | CzPlace:
        return meta.cz if meta.cz is not None else meta.value

    def sv(self, request: int, layer: int,
           probs: np.ndarray) -> tuple[list[Instruction], cmd.SvPlan]:
        """Return the SV program of ``request`` in ``layer`` for scores ``(heads, seq_len)``.

        The plan's :meth:`~commands.SvPlan.decode` gives ``(heads, D)`` float32 outputs.
        """
        c = self.config
        state = self._request(request)
        padded = np.zeros((1, c.heads, len(state.table) * c.block_size), dtype=np.uint16)
        padded[0][:, self.token_index(request)] = probs
        prog, plans = self.sv_step([request], layer, padded)
        return prog.to_instructions(), plans[0]

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray:
        """Return zeroed ``(requests, heads, width)`` scores for :meth:`sv_step` to use in place.

        Scores written into it become the SV program's payload without a copy.
        """
        return self._batch(requests, layer, "sv", width)[0].buffer()

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, list[cmd.SvPlan]]:
        """Return one SV program for ``requests`` (in order) and each one's plan.

        ``probs`` is ``(requests, heads, width)`` bf16 bits in table layout (token ``o`` of
        table position ``k`` at ``k * T + o``), zero where no token was written; ``width`` is
        at least every table's ``blocks * T``. The program is each request's :meth:`sv`
        program in turn (read-outs split by :meth:`~commands.SvPlan.readouts`).
        """
        batch, plans = self._batch(requests, layer, "sv", probs.shape[2])
        return batch.fill(probs), plans

    def placements(self, block_id: int) -> tuple[KeyPlace, ValuePlace | CzPlace]:
        """Return the visible Key and Value placements of a block."""
        meta = self._block(block_id)
        return meta.key, self._value_place(meta)

    # ------------------------------------------------------------------ checks

    def state(self) -> tuple:
        """Return a comparable snapshot of everything mutable (for tests: unchanged on error)."""
        a = self.alloc
        blocks = tuple(sorted(
            (b, m.owner, m.binding, m.key, m.value, m.cz, m.slot, m.ref_cnt, m.filled,
             None if m.shadow is None else m.shadow[:, :m.filled].tobytes())
            for b, m in self.blocks.items()))
        reqs = tuple(sorted((r, tuple(s.table)) for r, s in self.requests.items()))
        pools = tuple((tuple(p.used), p.live) for p in (a.krs, a.vrs, a.crs))
        o2 = tuple(tuple(sorted((k, o.used, o.owner) for k, o in d.items()))
                   for d in (a.o2k, a.o2v))
        return (blocks, reqs, pools, o2, tuple(a.channel_load), a.rr,
                tuple(sorted(a.open_k.items())), tuple(sorted(a.open_v.items())))

    def check(self) -> None:
        """Assert every invariant: no overlapping granules, exact accounting, no leaks.

        Raises:
            AssertionError: naming the first violated invariant.
        """
        c, a = self.config, self.alloc
        refs: dict[int, int] = {}
        for s in self.requests.values():
            for b in s.table:
                assert b in self.blocks, f"request {s.request} holds unbound block {b}"
                refs[b] = refs.get(b, 0) + 1
        cells: dict[tuple[int, int, int], str] = {}

        def claim(cell: tuple[int, int, int], what: str) -> None:
            assert cell not in cells, f"{what} overlaps {cells[cell]} at {cell}"
            cells[cell] = what

        k_count: dict[int, int] = {}
        v_count: dict[int, int] = {}
        load = [0] * c.ch_per_head
        slots = set()
        for bid, m in self.blocks.items():
            assert m.ref_cnt == refs.get(bid, 0), f"block {bid} ref_cnt {m.ref_cnt}"
            assert m.ref_cnt > 0 or m.full, f"unreferenced partial block {bid}"
            assert 0 <= m.filled <= c.block_size
            b = m.binding
            partial = self.mode is Mode.PATTON and 0 < m.filled < c.block_size
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
                assert req in self.requests and granules[pos].owner == req
