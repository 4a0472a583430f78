"""Write calls: the Key and Value programs of token writes, and the Commit Zone moves they make.

A write appends token offsets to bound blocks (:meth:`Runtime.write_many
<patton.runtime.patton.lifecycle.Runtime.write_many>`). With the Commit Zone, a write that leaves a
block partial stages it in a CZ slot (taken by the block's first partial write; its Values are
kept in host memory as the commit's source) and the write that fills it publishes its O1V
(the whole block written there, the slot freed). A :class:`Writer` does that and builds the
write programs on one of two paths:

* any write call: the call is cut into pieces and built batched, addresses cached per list of
  pieces (:mod:`patton.runtime.programs.write_programs`);
* a decode step (:meth:`Writer.append`: one token per block, Commit Zone): the programs of the
  same list of blocks are kept across steps and rewritten in place
  (:class:`~patton.runtime.programs.token_writes.TokenBatch`), commits built vectorised
  (:func:`~patton.runtime.programs.token_writes.commit_writes`).

Both leave the same state and emit the same instructions (``tests/test_runtime_tables.py``).
A single-token Commit Zone Value write is one masked ``W MEM`` per (head, channel, Value row,
bank) on AiM, and one ``WR_ABK_OPEN`` per (head, channel, Value row) on a device with the
extension ``wr16`` (:attr:`Writer.cz_op`). Without the Commit Zone, a single-token Value write
that is one ``WR_ABK`` per (head, channel, Value row) on AiM (``token_op="abk"``) is one
``WR_ABK_OPEN`` each on ``wr16``, a write call's sorted by row
(:func:`~patton.runtime.programs.write_programs.o1v16_writes`, :attr:`Writer.o1v_op`);
everything else is the same on every device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
from patton.runtime.errors import CapacityError, OffsetError, ReadOnlyBlock, ShapeError
from patton.runtime.inputs import bf16_bits, check_shape
from patton.runtime.patton.allocator import Allocator
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import BlockMeta, CzPlace, RequestState, WriteMode, block_of
from patton.runtime.programs import write_programs as wp
from patton.runtime.programs.token_writes import CZ_OPS, TokenBatch, commit_writes
from patton.sim import extensions
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.isa import Instruction
from patton.sim.program import Program, concat

__all__ = ["Writes", "WriteProgram", "Writer"]


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
    """The pieces (see :data:`write_programs.Piece`) of one write call, before assembly."""

    key: list[tuple] = field(default_factory=list)  # Key pieces, in order
    value: list[tuple[str, tuple]] = field(default_factory=list)  # ("abk"|"mem", piece)
    o1v16: list[tuple] = field(default_factory=list)  # no-CZ WR_ABK_OPEN token pieces
    cz: list[tuple[tuple[int, int, int], tuple]] = field(default_factory=list)  # sort key
    commit: list[tuple] = field(default_factory=list)  # full-block O1V pieces


class Writer:
    """The write calls of one runtime (see the module docstring).

    Shares the runtime's block and request maps and its allocator (staging takes CZ slots,
    publishing frees them) and owns what only writes use: the CZ blocks' Value shadows, the
    CZ slots' placements, the write programs' address cache and the decode steps' kept
    :class:`TokenBatch` programs. Every method checks before it mutates.

    Args:
        config, mode, token_op, device_ext: as for
            :class:`~patton.runtime.patton.lifecycle.Runtime`.
        alloc: the runtime's allocator.
        blocks: the runtime's bound blocks by id.
        requests: the runtime's live requests by id.

    Attributes:
        cz_op: how a single-token Value write into a CZ slot is issued: ``"wr16"`` (one
            ``WR_ABK_OPEN`` per head, channel and Value row) with the Commit Zone on a device
            with the extension ``wr16``, else ``"mem"`` (one ``W MEM`` per bank as well).
            Fixed for the writer's life, so its kept decode-step programs never mix the two.
        o1v_op: how :attr:`WriteMode.NO_CZ` writes a single Value token into its O1V:
            ``token_op`` (``"abk"``: one ``WR_ABK`` per head, channel and Value row;
            ``"mem"``: one ``W MEM`` per bank as well), except ``"wr16"`` for ``"abk"`` on a
            device with the extension ``wr16`` (one ``WR_ABK_OPEN`` each, a write call's
            sorted by row after its other Value writes).
    """

    def __init__(self, config: Config, mode: WriteMode, token_op: str, alloc: Allocator,
                 blocks: dict[int, BlockMeta], requests: dict[int, RequestState],
                 device_ext: str = DEFAULT_EXT) -> None:
        self.config = config
        self.mode = mode
        self.token_op = token_op
        wr16 = extensions.device_ext(device_ext).has("wr16")
        self.cz_op = "wr16" if wr16 and mode is WriteMode.PATTON else "mem"
        assert self.cz_op in CZ_OPS
        self.o1v_op = "wr16" if wr16 and mode is WriteMode.NO_CZ and token_op == "abk" \
            else token_op
        self.alloc = alloc
        self.blocks = blocks
        self.requests = requests
        self._czplaces: dict[int, CzPlace] = {}  # by CZ slot
        self._addresses: wp.Cache = {}  # write-program addresses by piece shapes
        self._tokens: dict[tuple, TokenBatch] = {}  # decode-step writes by TokenBatch.key_of
        self._scratch: dict[str, np.ndarray] = {}  # arrays of the last decode step's commits
        # the CZ blocks' Value tokens (the commits' source), by CZ slot; a block's shadow is
        # its slot's entry (offsets >= filled undefined); pages are mapped on first use
        self._shadows = np.zeros((alloc.crs.capacity, config.n_layers, config.block_size,
                                  config.heads, config.d_head), dtype=np.uint16)
        # (layers, 1, heads, D): the keys/values shape of a single-token write
        self._one = (config.n_layers, 1, config.heads, config.d_head)

    def _items(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
               ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
        """Return the write items with their data as ``uint16`` bit patterns.

        Raises:
            ShapeError: an item is not ``(block_id, start, keys, values)``.
            OffsetError: a start offset is not an integer.
            DtypeError: keys or values are not ``uint16`` / ``ml_dtypes.bfloat16`` arrays.
        """
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, tuple | list) or len(item) != 4:
                raise ShapeError(f"write item {i} must be (block_id, start, keys, values), "
                                 f"got {type(item).__name__}")
            block_id, start, keys, values = item
            if isinstance(start, bool | np.bool_) or not isinstance(start, int | np.integer):
                raise OffsetError(f"start offset {start!r} of block {block_id!r} is not an "
                                  f"integer")
            out.append((block_id, start, bf16_bits(keys, f"keys of block {block_id!r}"),
                        bf16_bits(values, f"values of block {block_id!r}")))
        return out

    def _check(self, block_id: int, start: int, keys: np.ndarray,
               values: np.ndarray) -> BlockMeta:
        """Return the block of one write item, or raise what :meth:`Runtime.write` lists."""
        meta = block_of(self.blocks, block_id)
        if meta.ref_cnt != 1 or meta.full:
            raise ReadOnlyBlock(f"block {block_id} is shared, cached or full "
                                f"(ref_cnt {meta.ref_cnt}, {meta.filled} tokens)")
        c = self.config
        n = keys.shape[1] if keys.ndim == 4 else -1
        shape = (c.n_layers, n, c.heads, c.d_head)
        if n == 0:
            raise ShapeError(f"a write of 0 tokens into block {block_id}: write at least one "
                             f"token (keys/values of shape (layers, n >= 1, heads, d_head))")
        if n < 0 or keys.shape != shape or values.shape != shape:
            raise ShapeError(f"keys/values of block {block_id} must have shape (layers, "
                             f"n >= 1, heads, d_head) = {shape}, got {keys.shape} and "
                             f"{values.shape}")
        if start != meta.filled or start + n > c.block_size:
            raise OffsetError(f"write of offsets {start}..{start + n - 1} into block "
                              f"{block_id} holding {meta.filled} tokens (append only, "
                              f"offsets < {c.block_size})")
        return meta

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Writes:
        """Do :meth:`Runtime.write_many <patton.runtime.patton.lifecycle.Runtime.write_many>`."""
        if not emit:
            self._apply(self._items(items), None)
            return Writes()
        w = self.program(items)
        return WriteProgram(*(p.with_data(p.data.copy()) for p in (w.key, w.value, w.commit))
                            ).to_writes()

    def program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]) -> WriteProgram:
        """Do :meth:`Runtime.write_program <patton.runtime.patton.lifecycle.Runtime.write_program>`.

        A decode step (one uint16 token per block, with the Commit Zone) takes the fast path
        of :meth:`append`.
        """
        items = self._items(items)
        one = self._one
        if items and all(k.shape == one and v.shape == one and s == self._filled(b)
                         for b, s, k, v in items):
            fast = self._fast([it[0] for it in items],
                              np.stack([it[2][:, 0] for it in items]),
                              np.stack([it[3][:, 0] for it in items]))
            if fast is not None:
                return fast
        return self._build(items)

    def _filled(self, block_id: int) -> int:
        meta = self.blocks.get(block_id)
        return -1 if meta is None else meta.filled

    def _build(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]) -> WriteProgram:
        """Build the programs of any write call (see :meth:`program`), uncached."""
        parts = _Parts()
        self._apply(items, parts)
        c = self.config
        parts.cz.sort(key=lambda part: part[0])
        wr16 = self.cz_op == "wr16"  # single-token CZ pieces as WR_ABK_OPEN
        values = parts.value + [("cz16" if wr16 and piece[3].shape[0] == 1 else "mem", piece)
                                for _, piece in parts.cz]
        values += [("o1v16", piece) for piece in parts.o1v16]  # one run, sorted by row
        runs = [wp.abk_writes(c, [p for _, p in run]) if kind == "abk"
                else wp.o1v16_writes(c, [p for _, p in run]) if kind == "o1v16"
                else wp.cz16_writes(c, [p for _, p in run]) if kind == "cz16"
                else wp.value_writes(c, [p for _, p in run], self._addresses)
                for kind, run in groupby(values, key=lambda v: v[0])]
        key = wp.key_writes(c, parts.key, self._addresses) if parts.key else concat([])
        commit = wp.value_writes(c, parts.commit) if parts.commit else concat([])
        return WriteProgram(key, concat(runs), commit)

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> WriteProgram:
        """Do :meth:`Runtime.append <patton.runtime.patton.lifecycle.Runtime.append>`.

        With the Commit Zone, a step that writes the same blocks as an earlier one reuses its
        programs (:class:`TokenBatch`) and rewrites them in place, and new ones recycle the
        arrays of old ones; everything else takes :meth:`_build`.

        Raises:
            DtypeError, ShapeError: ``keys``/``values`` are not ``(len(block_ids), layers,
                heads, d_head)`` bfloat16 arrays; and what :meth:`Runtime.write` lists.
        """
        c = self.config
        keys = bf16_bits(keys, "keys")
        values = bf16_bits(values, "values")
        shape = (len(block_ids), c.n_layers, c.heads, c.d_head)
        meaning = "(blocks, layers, heads, d_head)"
        check_shape(keys, shape, "keys", meaning)
        check_shape(values, shape, "values", meaning)
        fast = self._fast(block_ids, keys, values)
        if fast is not None:
            return fast
        items = []
        for i, bid in enumerate(block_ids):
            meta = self.blocks.get(bid)
            items.append((bid, 0 if meta is None else meta.filled, keys[i][:, None],
                          values[i][:, None]))
        return self._build(items)

    def _fast(self, block_ids: Sequence[int], keys: np.ndarray,
              values: np.ndarray) -> WriteProgram | None:
        """Do :meth:`append` on the fast path, or return ``None`` and change nothing.

        The fast path needs the Commit Zone, ``uint16`` data of the right shape, distinct
        bound blocks that take writes, and a CZ slot for every block that becomes partial;
        :meth:`_build` handles (and reports) everything else. Metadata advances as in
        :meth:`_apply`, item by item, so both paths leave the same state.
        """
        c = self.config
        n = len(block_ids)
        shape = (n, c.n_layers, c.heads, c.d_head)
        if (self.mode is not WriteMode.PATTON or not n or keys.shape != shape
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
            batch = self._tokens[key] = TokenBatch.of(c, metas, cz, self._recycle(n, cz),
                                                      op=self.cz_op)
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

    def _apply(self, items: list[tuple[int, int, np.ndarray, np.ndarray]],
               parts: _Parts | None) -> None:
        """Check a write call whole, then advance each block (collecting pieces into ``parts``)."""
        ids = [it[0] for it in items]
        if len(set(ids)) != len(ids):
            raise OffsetError("a block may appear once per write_many call")
        metas = [self._check(*it) for it in items]
        c = self.config
        if self.mode is WriteMode.PATTON:
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
        if self.mode is WriteMode.NO_CZ and n == 1 and self.o1v_op == "wr16":
            parts.o1v16 += [(layer, meta.value, start, values[layer]) for layer in layers]
        elif self.mode is WriteMode.NO_CZ:
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
        if self.mode is WriteMode.PATTON:
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
