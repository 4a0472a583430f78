"""The PATTON runtime: vLLM's block pool over placement metadata, and the programs it emits.

Mirrors vLLM's block pool (vLLM 0.33's, restated in ``patton.serving.block_pool``): a block id
is bound by :meth:`Runtime.allocate`, written by :meth:`Runtime.write`, shared by
:meth:`Runtime.share` (reference count up, nothing copied), released by :meth:`Runtime.free`
(reference count down; a full block at zero references stays mapped as *cached*; a partial one
is released with its CZ slot and reserved O1V) and unbound by :meth:`Runtime.evict`. Every
method checks before it mutates, so a raised :class:`PattonError` leaves the runtime unchanged.

This file holds the block lifecycle and capacity; the runtime hands its writes to a
:class:`~patton.runtime.patton.writes.Writer` (Commit Zone staging and commits, the write
programs; a decode step's through :meth:`Runtime.append`), its attention to an
:class:`~patton.runtime.programs.attention.AttentionCache` (per-request tables and the batches
of :meth:`Runtime.qk_step` / :meth:`Runtime.sv_step`), and its checks to
:mod:`patton.runtime.patton.invariants`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from patton.runtime.errors import (
    BlockStateError,
    DoubleFree,
    DuplicateBlock,
    ident,
)
from patton.runtime.inputs import bf16_bits, check_layer, check_shape
from patton.runtime.patton import invariants
from patton.runtime.patton.allocator import Allocator
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import (
    BlockMeta,
    CzPlace,
    KeyPlace,
    RequestState,
    ValuePlace,
    WriteMode,
    block_of,
    request_of,
)
from patton.runtime.patton.writes import WriteProgram, Writer, Writes
from patton.runtime.programs.attention import AttentionCache
from patton.runtime.programs.plans import QkPlan, SvPlan
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.extensions import device_ext as _ext
from patton.sim.isa import Instruction
from patton.sim.program import Program

__all__ = ["Runtime", "Writes", "WriteProgram", "TOKEN_OPS"]

#: How a runtime without the Commit Zone writes one Value token into its O1V: one ``WR_ABK``
#: per Value row, or one masked ``W MEM`` per bank and Value row.
TOKEN_OPS = ("abk", "mem")


class Runtime:
    """PATTON (or an ablation of it) for one model on one device.

    Args:
        config: geometry (``Config(o2v_blocks=device.columns)`` is the no-O2V ablation).
        mode: :attr:`WriteMode.PATTON` or the no-Commit-Zone ablation :attr:`WriteMode.NO_CZ`.
        token_op: how :attr:`WriteMode.NO_CZ` writes a single Value token into its O1V: ``"abk"``
            (one ``WR_ABK`` per Value row, the default: fewest commands and cycles) or
            ``"mem"`` (one masked ``W MEM`` per bank and Value row, as the paper describes).
        device_ext: the device's extension set (:data:`patton.sim.extensions.EXTENSIONS`,
            default ``"aim"``). With the extension ``wr16`` (``"aim+wr16"``) and the Commit
            Zone, a single-token Value write into a CZ slot is one ``WR_ABK_OPEN`` per head,
            channel and Value row instead of one ``W MEM`` per bank as well; without the
            Commit Zone and with ``token_op="abk"``, a single-token Value write into its O1V
            is one ``WR_ABK_OPEN`` per head, channel and Value row instead of a ``WR_ABK``,
            a write call's sorted by row (the requests sharing a VRS open each row once);
            every other program, and every program under ``"aim"``, is the same. The
            programs then run only on a device (an executor's timing table) with that
            extension.

    Attributes:
        blocks: bound blocks by engine block id.
        requests: live requests by id.
        alloc: the granule allocator (shared by every layer).
        writer: the write calls (Commit Zone staging and commits, write programs).
        attention: the per-request attention tables and batches.
    """

    def __init__(self, config: Config, mode: WriteMode = WriteMode.PATTON, *,
                 token_op: str = "abk", device_ext: str = DEFAULT_EXT) -> None:
        if token_op not in TOKEN_OPS:
            raise ValueError(f"token_op must be one of {', '.join(TOKEN_OPS)}, not {token_op!r}")
        self.device_ext = _ext(device_ext).name  # UnknownExtensionError (a ValueError)
        self.config = config
        self.mode = mode
        self.token_op = token_op
        self.alloc = Allocator(config)
        self.blocks: dict[int, BlockMeta] = {}
        self.requests: dict[int, RequestState] = {}
        # placements by granule position (Config's address arithmetic, done once per position)
        self._kplaces: dict[tuple[int, int], KeyPlace] = {}
        self._vplaces: dict[tuple[int, int], ValuePlace] = {}
        self.writer = Writer(config, mode, token_op, self.alloc, self.blocks, self.requests,
                             self.device_ext)
        self.attention = AttentionCache(config, self.blocks, self.requests)

    # ------------------------------------------------------------------ lookups

    def _block(self, block_id: int) -> BlockMeta:
        return block_of(self.blocks, block_id)

    def _request(self, request: int) -> RequestState:
        return request_of(self.requests, request)

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

    def free_blocks_for(self, request: int) -> int:
        """Return the blocks ``request`` could allocate in every layer: the room left in its
        open Order-2 granules plus whole free ones (a new request has no open granule)."""
        return self.alloc.free_blocks_for(request)

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
        request, block_id = ident(request, "request id"), ident(block_id, "block id")
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
        self.attention.forget(request)

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

    def write(self, block_id: int, start: int, keys: np.ndarray,
              values: np.ndarray) -> Writes:
        """Write token offsets ``start .. start + n - 1`` of a block (Key and Value).

        ``keys`` and ``values`` are bfloat16 of shape ``(layers, n, heads, d_head)``: ``uint16``
        bit patterns or ``ml_dtypes.bfloat16`` arrays (any other dtype is refused, not cast).
        Writes append (``start`` equals the block's fill level). With the Commit Zone, a partial
        block's Values go to its CZ slot (taken by the block's first partial write); the write
        that fills the block commits it: the whole block is written to its reserved O1V (the
        last tokens are folded into the commit), the O1V becomes visible and the slot is freed.
        A write of a whole block at once goes straight to the O1V.

        Raises:
            UnknownBlock: not bound.
            ReadOnlyBlock: shared, cached or already full.
            DtypeError: keys or values are not bfloat16 (``uint16`` / ``ml_dtypes.bfloat16``).
            ShapeError: keys or values are not ``(layers, n >= 1, heads, d_head)``, alike.
            OffsetError: offsets out of range, not appending, or a block twice in one call.
            CapacityError: the block becomes partial and no CZ slot is free.
        """
        return self.write_many([(block_id, start, keys, values)])

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Writes:
        """Write several blocks at once (each at most once); CZ writes grouped by CRS row.

        With ``emit=False`` only the metadata advances and no program is built (to set up a
        state whose data is already in place, e.g. in benchmarks).
        """
        return self.writer.write_many(items, emit=emit)

    def write_program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
                      ) -> WriteProgram:
        """Do :meth:`write_many` and return its programs in columnar form.

        A decode step (one uint16 token per block, with the Commit Zone) takes the fast path
        of :meth:`append`, whose arrays are rewritten in place by later writes: the returned
        programs are valid until the next write call (:meth:`WriteProgram.copy` keeps them).
        """
        return self.writer.program(items)

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> WriteProgram:
        """Write one token at the fill level of each block: a decode step's writes.

        ``keys`` and ``values`` are bfloat16 (as for :meth:`write`) of shape
        ``(len(block_ids), layers, heads, d_head)`` (else :class:`ShapeError`); row ``i`` is the
        token of ``block_ids[i]``. Same as :meth:`write_program` with the item
        ``(block_ids[i], filled, keys[i][:, None], values[i][:, None])`` per block, and as
        fast as the runtime gets: with the Commit Zone, a step that writes the same blocks as
        an earlier one reuses its programs
        (:class:`~patton.runtime.programs.token_writes.TokenBatch`) and rewrites them in place,
        and new ones recycle the arrays of old ones, so the returned programs are valid until
        the next write call (:meth:`WriteProgram.copy` keeps them).

        Raises:
            as :meth:`write`.
        """
        return self.writer.append(block_ids, keys, values)

    # ------------------------------------------------------------------ attention

    def qk(self, request: int, layer: int,
           query: np.ndarray) -> tuple[list[Instruction], QkPlan]:
        """Return the QK^T program of ``request`` in ``layer`` for ``query`` ``(heads, D)``.

        The plan's :meth:`~patton.runtime.programs.plans.QkPlan.decode` gives
        ``(heads, blocks * T)`` scores; index them with :meth:`token_index`. ``query`` is
        bfloat16 (``uint16`` bit patterns or ``ml_dtypes.bfloat16``).

        Raises:
            UnknownRequest: not live.
            LayerError: ``layer`` outside ``0 .. layers - 1``.
            DtypeError, ShapeError: ``query`` is not a bfloat16 ``(heads, d_head)`` array.
        """
        c = self.config
        self._request(request)
        check_layer(layer, c.n_layers)
        query = bf16_bits(query, "query")
        check_shape(query, (c.heads, c.d_head), "query", "(heads, d_head)")
        prog, plans = self.qk_step([request], layer, query[None])
        return prog.to_instructions(), plans[0]

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, list[QkPlan]]:
        """Return one QK^T program for ``requests`` (in order) and each one's plan.

        ``queries`` is bfloat16 ``(requests, heads, D)``. The program is each request's :meth:`qk`
        program in turn, so its read-outs split by
        :meth:`~patton.runtime.programs.plans.QkPlan.readouts`.

        Raises:
            UnknownRequest, LayerError, DtypeError, ShapeError: as :meth:`qk`.
        """
        return self.attention.qk_step(requests, layer, queries)

    def sv(self, request: int, layer: int,
           probs: np.ndarray) -> tuple[list[Instruction], SvPlan]:
        """Return the SV program of ``request`` in ``layer`` for scores ``(heads, seq_len)``.

        The plan's :meth:`~patton.runtime.programs.plans.SvPlan.decode` gives ``(heads, D)``
        float32 outputs.
        ``probs`` is bfloat16 (``uint16`` bit patterns or ``ml_dtypes.bfloat16``), one score per
        written token (:meth:`seq_len`), in :meth:`token_index` order.

        Raises:
            UnknownRequest: not live.
            LayerError: ``layer`` outside ``0 .. layers - 1``.
            DtypeError, ShapeError: ``probs`` is not a bfloat16 ``(heads, seq_len)`` array.
        """
        c = self.config
        state = self._request(request)
        check_layer(layer, c.n_layers)
        probs = bf16_bits(probs, "probs")
        check_shape(probs, (c.heads, self.seq_len(request)), "probs", "(heads, seq_len)")
        padded = np.zeros((1, c.heads, len(state.table) * c.block_size), dtype=np.uint16)
        padded[0][:, self.token_index(request)] = probs
        prog, plans = self.sv_step([request], layer, padded)
        return prog.to_instructions(), plans[0]

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray:
        """Return zeroed ``(requests, heads, width)`` scores for :meth:`sv_step` to use in place.

        Scores written into it become the SV program's payload without a copy.

        Raises:
            UnknownRequest, LayerError: as :meth:`sv`.
            ShapeError: ``width`` is not a multiple of ``T`` covering every table.
        """
        return self.attention.sv_buffer(requests, layer, width)

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, list[SvPlan]]:
        """Return one SV program for ``requests`` (in order) and each one's plan.

        ``probs`` is ``(requests, heads, width)`` bfloat16 in table layout (token ``o`` of
        table position ``k`` at ``k * T + o``), zero where no token was written; ``width`` is
        at least every table's ``blocks * T``. The program is each request's :meth:`sv`
        program in turn (read-outs split by :meth:`~patton.runtime.programs.plans.SvPlan.readouts`).

        Raises:
            UnknownRequest, LayerError: as :meth:`sv`.
            DtypeError: ``probs`` is not bfloat16.
            ShapeError: ``probs`` is not ``(requests, heads, width)`` with ``width`` a
                multiple of ``T`` covering every table.
        """
        return self.attention.sv_step(requests, layer, probs)

    def placements(self, block_id: int) -> tuple[KeyPlace, ValuePlace | CzPlace]:
        """Return the visible Key and Value placements of a block."""
        meta = self._block(block_id)
        return meta.key, meta.visible

    # ------------------------------------------------------------------ checks

    def state(self) -> tuple:
        """Return a comparable snapshot of everything mutable (:func:`invariants.state`)."""
        return invariants.state(self)

    def check(self) -> None:
        """Assert every invariant (:func:`invariants.check`).

        Raises:
            AssertionError: naming the first violated invariant.
        """
        invariants.check(self)
