"""Decode-step writes: one token into each of several blocks, with the program kept across steps.

A decode step appends one token to every running request. Its Key bursts and its Commit Zone
Value bursts have addresses fixed by the blocks' placements, so a :class:`TokenBatch` builds
them once per list of blocks and every later step with the same blocks only rewrites what
depends on the token: the Key payload and banks, the Value payload words that hold the token,
and the Value lane masks and payload offsets.

The Value payload uses a *sliding window* layout. Burst ``j``'s token word sits at
``LEAD + j * lanes`` of an array that is zero everywhere else (``LEAD = lanes - 1``), and the
burst's payload is the ``lanes``-word window that starts ``t`` words before it (``t`` = the
token's offset in its block). The window holds the token in lane ``t`` and zeros in every other
lane, exactly the canonical payload of :func:`reference_programs.cz_writes`, so a step writes
only the ``H * D`` token words per block and layer and never has to clear the lane the
previous step wrote. When every token of the step has the same offset (a synchronised batch),
the program shifts its payload view instead of its offsets, and the masks and banks are one
broadcast value: nothing per burst is rewritten but the token word.

On a device with the extension ``wr16`` the Commit Zone Value writes are ``WR_ABK_OPEN``
instead (``op="wr16"``, :func:`write_programs.cz16_writes`): one per (head, channel, Value row
``i``) whose 16 words are the token's dimensions ``p * D/P + 16 i ..`` of the head, one per
bank, so the payload is the step's Values as they are (``H * D`` contiguous words per piece,
instruction ``k`` at ``16 k``) and a step rewrites them and the lane masks, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import BlockMeta, ValuePlace
from patton.runtime.programs.write_programs import value_order
from patton.sim.isa import Opcode, channel_bit
from patton.sim.program import OP_ID, UNSET, Program
from patton.sim.program import same as _same

__all__ = ["CZ_OPS", "TokenBatch", "commit_writes"]

#: How a :class:`TokenBatch` issues its Commit Zone Value writes: ``"mem"`` (one masked ``W MEM``
#: per head, channel, Value row and bank) or ``"wr16"`` (one ``WR_ABK_OPEN`` per head, channel
#: and Value row: device extension ``wr16``).
CZ_OPS = ("mem", "wr16")


def _ro(a: np.ndarray) -> np.ndarray:
    """Return a read-only view of ``a`` (``a`` itself stays writable for its owner)."""
    v = a.view()
    v.flags.writeable = False
    return v


@lru_cache(maxsize=16)
def _pattern(cfg: Config, n: int) -> tuple[np.ndarray, ...]:
    """Return read-only (channel, bank, start, base) of ``n`` Value bursts in pieces.

    Channel and bank follow :func:`write_programs.value_writes`' (head, channel, Value row, bank)
    order; ``start`` is ``lanes * j`` (burst ``j``'s own words) and ``base`` is
    ``LEAD + lanes * j`` (its token word in the sliding-window layout).
    """
    g, p, _, b = value_order(cfg)
    k = -(-n // len(g))
    lanes = cfg.device.lanes
    start = np.arange(n, dtype=np.int64) * lanes
    out = (np.tile(g * cfg.ch_per_head + p, k)[:n], np.tile(b, k)[:n], start,
           start + (lanes - 1))
    for a in out:
        a.flags.writeable = False
    return out


@lru_cache(maxsize=16)
def _abk_pattern(cfg: Config, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Return read-only (channel mask, start) of ``n`` all-bank writes in pieces.

    The channel masks follow :func:`write_programs.cz16_writes`' (head, channel, Value row)
    order; ``start`` is ``banks * k`` (instruction ``k``'s 16 words).
    """
    h, p, rv = cfg.heads, cfg.ch_per_head, cfg.v_rows
    g, pp, _ = (a.ravel() for a in np.indices((h, p, rv)))
    bit = np.array([channel_bit(c) for c in range(cfg.device.channels)], dtype=np.int64)
    k = -(-n // len(g))
    out = (np.tile(bit[g * p + pp], k)[:n], np.arange(n, dtype=np.int64) * cfg.device.banks)
    for a in out:
        a.flags.writeable = False
    return out


def _slot_addresses(cfg: Config, vkeys: list[tuple[int, int, int]], old: TokenBatch | None,
                    vrow: np.ndarray, vcol: np.ndarray) -> None:
    """Fill the CZ Value writes' rows ``vrow`` ``(pieces, n)`` and columns ``vcol``
    ``(pieces, heads x P, Rv[, banks])`` for the slots ``vkeys`` ``(layer, CRS row, col0)``:
    every piece's, or, when ``old`` (the batch whose arrays these are) differs in a few
    slots only, those pieces' (the rest kept their sorted position)."""
    steps = np.arange(cfg.v_rows).reshape((cfg.v_rows,) + (1,) * (vcol.ndim - 3))
    moved = None if old is None else \
        [i for i, (a, b) in enumerate(zip(old.vkeys, vkeys)) if a != b]
    if moved is None or len(moved) > 4:
        vrow[:] = np.array([[cfg.row(layer, row)] for layer, row, _ in vkeys],
                           dtype=np.int64).reshape(len(vkeys), 1)
        col0 = np.array([c0 for _, _, c0 in vkeys], dtype=np.int64)
        np.add(col0.reshape((len(vkeys), 1, 1) + (1,) * (vcol.ndim - 3)), steps[None, None],
               out=vcol)
        return
    for i in moved:
        layer, row, c0 = vkeys[i]
        vrow[i] = cfg.row(layer, row)
        np.add(steps[None], c0, out=vcol[i])


@dataclass(slots=True)
class TokenBatch:
    """The Key and Commit Zone Value bursts of one token per block, for a fixed list of blocks.

    Item ``i`` of a step writes one token into ``metas[i]``; ``cz[i]`` says whether the write
    leaves the block partial (its Value goes to its CZ slot, in :attr:`value`) or fills it
    (its Value goes out with the caller's commit, not here). Key pieces are (item, layer) in
    item-major order, as :meth:`Runtime.write_program` emits them; CZ pieces are sorted by
    (layer, CRS row, first burst), each piece's bursts as :func:`write_programs.value_writes`
    (``op == "mem"``) or its ``WR_ABK_OPEN`` s as :func:`write_programs.cz16_writes`
    (``op == "wr16"``).

    Invariants: every field of :attr:`key` but ``bank``, and of :attr:`value` but ``start``,
    ``mask`` and ``data``, is fixed at construction and follows ``kparams`` / ``vkeys``;
    with ``op == "mem"`` ``vdata`` is zero except at the token words ``LEAD + j * lanes``,
    with ``op == "wr16"`` it is the CZ pieces' Values (``(pieces, H * D)``) and only ``mask``
    changes per step; ``op`` is fixed (a writer's batches, and the ones built from them, all
    have its one op); ``metas`` keeps the blocks alive, so the ``id`` key of a batch
    (:meth:`key_of`) cannot name another block while the batch is cached.

    Programs returned by :meth:`fill` are views of this batch's buffers: they stay valid until
    the next :meth:`fill` of this batch or of a batch built from it (``old`` of :meth:`of`).
    """

    metas: tuple[BlockMeta, ...]  # the written blocks, in item order
    slots: np.ndarray  # CZ slot of each CZ item, in item order
    key: Program  # Key bursts (bank set per step; payload is kdata)
    value: Program  # CZ Value bursts (start, mask and payload view set per step)
    src: np.ndarray  # per CZ piece: its (item * layers + layer) row of the step's Values
    order: str  # "item": src is 0, 1, ...; "layer": layer-major over all items; or "gather"
    base: np.ndarray  # (CZ pieces, H * D): the token word of each burst in vdata ("mem"), or
    # (CZ pieces, H * P * Rv): each WR_ABK_OPEN's payload start ("wr16")
    kdata: np.ndarray  # Key payload buffer, (items, layers, heads, D)
    vdata: np.ndarray  # sliding-window Value payload buffer ("mem"), the Values ("wr16")
    tokens: np.ndarray  # view of vdata's token words: (items, layers, H, D) for order "item",
    # (layers, items, H, D) for "layer", (CZ pieces, H * D) for "gather"
    windows: dict[int, np.ndarray]  # per offset t met so far: read-only vdata from LEAD - t
    lanes: int  # words per burst
    bufs: dict[str, np.ndarray]  # the writable arrays behind the programs (for recycling)
    kparams: np.ndarray  # (items, 3): each item's O1K (p, row, col)
    vkeys: list[tuple[int, int, int]]  # per CZ piece, in order: (layer, CRS row, first burst)
    op: str = "mem"  # one of CZ_OPS: the CZ Value writes' instruction

    @staticmethod
    def key_of(metas: Sequence[BlockMeta], cz: Sequence[bool]) -> tuple:
        """Return the cache key of a step writing ``metas`` (CZ or commit per ``cz``)."""
        return tuple(map(id, metas)) + tuple(cz)

    @classmethod
    def of(cls, cfg: Config, metas: Sequence[BlockMeta], cz: Sequence[bool],
           old: TokenBatch | None = None, *, op: str = "mem") -> TokenBatch:
        """Build the batch for ``metas`` (every ``cz`` block's slot already taken).

        ``op`` (one of :data:`CZ_OPS`) is how the CZ Value writes are issued; ``old`` must
        have the same one.

        ``old`` is a batch that is no longer used: its buffers are taken over where they fit
        (fresh memory costs a page fault per 4 KB when first written) and patched rather than
        rewritten: the Key addresses of the items whose O1K changed, the Value addresses of the
        CZ pieces whose slot changed (a step's new blocks usually take the slots the last
        commits freed, so few or none). The sliding-window payload needs no clearing: every
        batch of its size sets the same token words.
        """
        m, nl, lanes = len(metas), cfg.n_layers, cfg.device.lanes
        h, d, e = cfg.heads, cfg.d_head, cfg.bursts
        bufs: dict[str, np.ndarray] = {}

        def buf(name: str, shape: tuple[int, ...], dtype: type = np.int64) -> bool:
            """Take ``old``'s array ``name`` if it has ``shape``; return whether it did."""
            a = None if old is None else old.bufs.get(name)
            kept = a is not None and a.shape == shape
            bufs[name] = a if kept else np.empty(shape, dtype=dtype)
            return kept

        # Key bursts: (item, layer, head, burst); kparams[i] = (p, row, col) of item i's O1K
        kparams = np.array([[meta.key.p, meta.key.row, meta.key.col] for meta in metas],
                           dtype=np.int64).reshape(m, 3)
        shape4 = (m, nl, h, e)
        kept = buf("kchan", shape4) & buf("krow", shape4) & buf("kcol", shape4)
        kchan, krow, kcol = bufs["kchan"], bufs["krow"], bufs["kcol"]
        heads = np.arange(h)[None, :, None] * cfg.ch_per_head
        layers = np.array([cfg.row(layer, 0) for layer in range(nl)])[:, None, None]
        bursts = np.arange(e)[None, None, :]
        if kept and old is not None:  # placements are interned by the runtime: identity
            changed = [i for i, (a, b) in enumerate(zip(old.metas, metas))
                       if a.key is not b.key and a.key != b.key]
        else:
            changed = list(range(m))
        if len(changed) > 4:
            kp = kparams.reshape(m, 3, 1, 1, 1)
            np.add(heads, kp[:, 0], out=kchan)
            np.add(layers, kp[:, 1], out=krow)
            np.add(bursts, kp[:, 2], out=kcol)
        else:
            for i in changed:
                p, row, col = kparams[i].tolist()
                np.add(heads, p, out=kchan[i])
                np.add(layers, row, out=krow[i])
                np.add(bursts, col, out=kcol[i])
        buf("kdata", (m, nl, h, d), np.uint16)
        kdata = bufs["kdata"]
        nk = m * nl * h * e
        key = Program(_same(nk, OP_ID[Opcode.WR_MEM]), _same(nk, UNSET), _same(nk, UNSET),
                      _same(nk, UNSET), _same(nk, 0), _ro(krow).reshape(-1),
                      _ro(kchan).reshape(-1), _ro(kcol).reshape(-1), _same(nk, UNSET),
                      _pattern(cfg, nk)[2], _same(nk, lanes), _ro(kdata).reshape(-1))
        # CZ Value bursts: (piece, head, channel, Value row, bank), pieces sorted
        order = sorted(((layer, meta.cz.row, meta.cz.col0), i * nl + layer)
                       for i, meta in enumerate(metas) if cz[i] and meta.cz is not None
                       for layer in range(nl))
        assert len(order) == sum(cz) * nl, "a CZ item without a slot"
        vkeys = [k for k, _ in order]
        src = np.array([k for _, k in order], dtype=np.int64)
        slots = np.array([meta.slot for i, meta in enumerate(metas) if cz[i]], dtype=np.int64)
        nv, per = len(src), h * d
        if op != "mem":
            assert op in CZ_OPS and (old is None or old.op == op), (op, old and old.op)
            return cls._wr16(cfg, metas, slots, key, src, vkeys, kdata, bufs, kparams, old,
                             buf)
        lead = lanes - 1
        if not buf("vdata", (lead + nv * per * lanes,), np.uint16):
            bufs["vdata"][:] = 0
        vdata = bufs["vdata"]
        shape5 = (nv, h * cfg.ch_per_head, cfg.v_rows, cfg.device.banks)
        kept = buf("vrow", (nv, per)) & buf("vcol", shape5)
        vrow, vcol = bufs["vrow"], bufs["vcol"]
        _slot_addresses(cfg, vkeys, old if kept else None, vrow, vcol)
        n = nv * per
        chan, bank, start, base = _pattern(cfg, n)
        value = Program(_same(n, OP_ID[Opcode.WR_MEM]), _same(n, UNSET), _same(n, UNSET),
                        _same(n, UNSET), bank, _ro(vrow).reshape(-1), chan,
                        _ro(vcol).reshape(-1), _same(n, UNSET), start, _same(n, lanes),
                        _ro(vdata))
        words = vdata[lead::lanes]
        if nv == m * nl and (src == np.arange(m * nl)).all():
            how, tokens = "item", words.reshape(m, nl, h, d)
        elif nv == m * nl and (src == np.arange(m * nl).reshape(m, nl).T.ravel()).all():
            how, tokens = "layer", words.reshape(nl, m, h, d)
        else:
            how, tokens = "gather", words.reshape(-1, per)
        windows = old.windows if old is not None and old.vdata is vdata else {}
        return cls(tuple(metas), slots, key, value, src, how, base.reshape(-1, per), kdata,
                   vdata, tokens, windows, lanes, bufs, kparams, vkeys)

    @classmethod
    def _wr16(cls, cfg: Config, metas: Sequence[BlockMeta], slots: np.ndarray, key: Program,
              src: np.ndarray, vkeys: list[tuple[int, int, int]], kdata: np.ndarray,
              bufs: dict[str, np.ndarray], kparams: np.ndarray, old: TokenBatch | None,
              buf: Callable[..., bool]) -> TokenBatch:
        """Finish :meth:`of` with ``op="wr16"``: the CZ Value writes as ``WR_ABK_OPEN``.

        Instruction ``k`` = (piece, g, p, i) writes CRS row ``cfg.row(layer, row)``, column
        ``col0 + i``; its payload is words ``16 k ..`` of ``vdata`` = the pieces' ``(H * D)``
        Values. ``buf`` takes ``old``'s arrays over as in :meth:`of`, and kept addresses are
        patched as there.
        """
        m, nl, lanes = len(metas), cfg.n_layers, cfg.device.lanes
        h, d, rv = cfg.heads, cfg.d_head, cfg.v_rows
        nv, per = len(src), h * cfg.ch_per_head * rv
        buf("vdata", (nv, h * d), np.uint16)  # every word rewritten by each step
        vdata = bufs["vdata"]
        shape3 = (nv, h * cfg.ch_per_head, rv)
        kept = buf("vrow", (nv, per)) & buf("vcol", shape3)
        vrow, vcol = bufs["vrow"], bufs["vcol"]
        _slot_addresses(cfg, vkeys, old if kept else None, vrow, vcol)
        n = nv * per
        cmask, start = _abk_pattern(cfg, n)
        value = Program(_same(n, OP_ID[Opcode.WR_ABK_OPEN]), _same(n, UNSET), _same(n, 0),
                        cmask, _same(n, UNSET), _ro(vrow).reshape(-1), _same(n, UNSET),
                        _ro(vcol).reshape(-1), _same(n, UNSET), start,
                        _same(n, cfg.device.banks), _ro(vdata).reshape(-1))
        words = vdata.reshape(-1)
        if nv == m * nl and (src == np.arange(m * nl)).all():
            how, tokens = "item", words.reshape(m, nl, h, d)
        elif nv == m * nl and (src == np.arange(m * nl).reshape(m, nl).T.ravel()).all():
            how, tokens = "layer", words.reshape(nl, m, h, d)
        else:
            how, tokens = "gather", vdata
        return cls(tuple(metas), slots, key, value, src, how, start.reshape(nv, per), kdata,
                   vdata, tokens, {}, lanes, bufs, kparams, vkeys, "wr16")

    def _buf(self, name: str) -> np.ndarray:
        """Return this batch's int64 array ``name`` shaped like :attr:`base` (kept)."""
        a = self.bufs.get(name)
        if a is None or a.shape != self.base.shape:
            a = self.bufs[name] = np.empty(self.base.shape, dtype=np.int64)
        return a

    def fill(self, t: int | None, starts: np.ndarray | None, keys: np.ndarray,
             values: np.ndarray) -> tuple[Program, Program]:
        """Return the (Key, CZ Value) programs of a step, rewriting the buffers in place.

        Every token is at offset ``t``, or (``t is None``) item ``i``'s at ``starts[i]``;
        ``keys`` and ``values`` are ``(items, layers, heads, D)``. Both programs are views of
        this batch's buffers (valid until the next :meth:`fill`).
        """
        self.kdata[...] = keys
        kp, vp = self.key, self.value
        if t is not None:
            bank = _same(len(kp), t)
        else:
            assert starts is not None
            bank = _ro(np.repeat(starts, len(kp) // len(starts)))
        key = Program(kp.op, kp.opsize, kp.gpr0, kp.channel_mask, bank, kp.row, kp.channel,
                      kp.col, kp.mask, kp.start, kp.size, kp.data)
        if not len(self.src):
            return key, vp
        if self.order == "item":
            self.tokens[...] = values
        elif self.order == "layer":
            self.tokens[...] = values.transpose(1, 0, 2, 3)
        else:
            self.tokens[...] = values.reshape(len(self.metas) * values.shape[1], -1)[self.src]
        if self.op == "wr16":  # addresses and payload offsets fixed: the masks follow t
            if t is not None:
                mask = _same(len(vp), 1 << t)
            else:
                assert starts is not None
                mask = self._buf("mask")
                np.left_shift(1, starts[self.src // values.shape[1]][:, None], out=mask)
                mask = _ro(mask).reshape(-1)
            return key, Program(vp.op, vp.opsize, vp.gpr0, vp.channel_mask, vp.bank, vp.row,
                                vp.channel, vp.col, mask, vp.start, vp.size, vp.data)
        if t is not None:
            # lane 0's windows over a payload view shifted by t
            data = self.windows.get(t)
            if data is None:
                data = self.windows[t] = _ro(self.vdata[self.lanes - 1 - t:])
            start, mask = vp.start, _same(len(vp), 1 << t)
        else:
            assert starts is not None
            t_of = starts[self.src // values.shape[1]][:, None]
            start, mask = self._buf("start"), self._buf("mask")
            np.subtract(self.base, t_of, out=start)
            np.left_shift(1, t_of, out=mask)
            start, mask = _ro(start).reshape(-1), _ro(mask).reshape(-1)
            data = self.value.data  # the whole of vdata
        value = Program(vp.op, vp.opsize, vp.gpr0, vp.channel_mask, vp.bank, vp.row, vp.channel,
                        vp.col, mask, start, vp.size, data)
        return key, value


def commit_writes(cfg: Config, places: Sequence[ValuePlace], full: np.ndarray,
                  scratch: dict[str, np.ndarray]) -> Program:
    """Return the commits of whole blocks to their O1Vs (:func:`reference_programs.o1v_writes`).

    ``full`` is ``(blocks, layers, T, heads, D)``: block ``k``'s every token, to O1V
    ``places[k]``. Pieces are (block, layer) in that order, as :meth:`Runtime.write_program`
    emits a commit; the payload is ``full`` transposed once (lane ``t`` = token ``t``). The
    program's arrays are kept in ``scratch`` and rewritten by the next call with the same one.
    """
    nb, nl, t = full.shape[:3]
    h, d, rv, lanes = cfg.heads, cfg.d_head, cfg.v_rows, cfg.device.lanes
    hp = h * cfg.ch_per_head

    def buf(name: str, shape: tuple[int, ...], dtype: type = np.int64) -> np.ndarray:
        a = scratch.get(name)
        if a is None or a.shape != shape:
            a = scratch[name] = np.empty(shape, dtype=dtype)
        return a

    pl = np.array([[p.row0, p.col] for p in places], dtype=np.int64).reshape(nb, 1, 2, 1, 1, 1)
    layers = np.array([cfg.row(layer, 0) for layer in range(nl)]).reshape(1, nl, 1, 1, 1)
    shape = (nb, nl, hp, rv, cfg.device.banks)
    row = np.add(layers + pl[:, :, 0], np.arange(rv)[:, None], out=buf("row", shape))
    col = buf("col", shape)
    col[:] = pl[:, :, 1]
    data = buf("data", (nb, nl, d * h, t), np.uint16)
    data[:] = full.reshape(nb, nl, t, -1).transpose(0, 1, 3, 2)
    n = row.size
    chan, bank, start, _ = _pattern(cfg, n)
    return Program(_same(n, OP_ID[Opcode.WR_MEM]), _same(n, UNSET), _same(n, UNSET),
                   _same(n, UNSET), bank, _ro(row).reshape(-1), chan, _ro(col).reshape(-1),
                   _same(n, UNSET), start, _same(n, lanes), _ro(data).reshape(-1))
