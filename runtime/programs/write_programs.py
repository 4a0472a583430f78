"""Write programs of any write call, batched: one NumPy pass per kind over every piece.

A write call (:meth:`Runtime.write_many <patton.runtime.patton.lifecycle.Runtime.write_many>`)
is cut into *pieces*, one block's write in one layer. The programs of a list of pieces have
addresses that depend only on the pieces' layers, placements and token counts, so they are
cached per such list (:data:`Cache`) and a call only sets the token-dependent banks or lane
masks and the payload (Keys as given, Values spread over lanes). Decode steps take the faster,
in-place path of :mod:`patton.runtime.programs.token_writes`. Every function returns exactly the
instructions of its :mod:`patton.runtime.reference.programs` counterpart
(``tests/test_runtime_program.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace
from patton.sim.isa import Opcode, channel_bit
from patton.sim.program import UNSET, Program, make

__all__ = ["Piece", "Cache", "lane_mask", "value_order", "key_writes", "value_writes",
           "abk_writes", "o1v16_writes", "cz16_writes"]

#: One block's write in one layer: (layer, placement, first offset, data ``(n, heads, D)``).
Piece = tuple


def lane_mask(start: int, n: int) -> int:
    """Return the element mask of lanes ``start .. start + n - 1``."""
    return ((1 << n) - 1) << start


def value_order(cfg: Config) -> tuple[np.ndarray, ...]:
    """Return per-burst ``(g, p, i, b)`` of a Value write in (head, channel, row, bank) order."""
    h, p, rv, b = cfg.heads, cfg.ch_per_head, cfg.v_rows, cfg.device.banks
    return tuple(a.ravel() for a in np.indices((h, p, rv, b)))


#: Address fields of write programs by piece shapes; owned by the caller (see key_writes).
Cache = dict


def _fixed(cache: Cache | None, key: tuple, build: Callable[[], Program]) -> Program:
    if cache is None:
        return build()
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= 256:  # bound it; addresses are rebuilt on demand
            cache.clear()
        hit = cache[key] = build()
    return hit


def _shape(kind: str, pieces: list[Piece]) -> tuple:
    return (kind,) + tuple((layer, place, d.shape[0]) for layer, place, _, d in pieces)


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def key_writes(cfg: Config, pieces: list[Piece], cache: Cache | None = None) -> Program:
    """Return :func:`reference_programs.key_writes` of every piece, in order, as one program.

    Only the banks (token offsets) and the payload depend on more than the pieces' layers,
    O1Ks and token counts; with ``cache`` the rest is built once per such batch of pieces.
    """
    per = cfg.heads * cfg.bursts
    fixed = _fixed(cache, _shape("key", pieces), lambda: _key_fixed(cfg, pieces))
    starts = [s for _, _, s, _ in pieces]
    bank = fixed.bank + np.repeat(starts, [k.shape[0] * per for _, _, _, k in pieces])
    data = np.concatenate([k.reshape(-1) for _, _, _, k in pieces]).astype(np.uint16, copy=False)
    return replace(fixed, bank=_ro(bank), data=data)


def _key_fixed(cfg: Config, pieces: list[Piece]) -> Program:
    """Return the Key writes of ``pieces`` with every piece starting at offset 0, no payload."""
    h, e, lanes = cfg.heads, cfg.bursts, cfg.device.lanes
    n = np.array([k.shape[0] for _, _, _, k in pieces], dtype=np.int64)
    first = np.cumsum(n) - n
    piece = np.repeat(np.arange(len(pieces)), n)  # per token
    bank = np.arange(n.sum()) - first[piece]
    row = np.array([cfg.row(layer, k.row) for layer, k, _, _ in pieces], dtype=np.int64)[piece]
    col = np.array([k.col for _, k, _, _ in pieces], dtype=np.int64)[piece]
    chan = np.array([k.p for _, k, _, _ in pieces], dtype=np.int64)[piece]
    per = h * e
    g, b = np.divmod(np.arange(per), e)
    total = len(piece) * per
    return make(Opcode.WR_MEM, total, np.zeros(0, dtype=np.uint16),
                start=np.arange(total) * lanes, size=lanes,
                channel=(g[None, :] * cfg.ch_per_head + chan[:, None]).ravel(),
                bank=np.repeat(bank, per), row=np.repeat(row, per),
                col=(col[:, None] + b[None, :]).ravel())


def _spread(cfg: Config, pieces: list[Piece]) -> np.ndarray:
    """Return ``(pieces, H * P * Rv * B, lanes)`` words: lane ``t`` holds token ``t``."""
    m = cfg.heads * cfg.d_head
    out = np.zeros((len(pieces), m, cfg.device.lanes), dtype=np.uint16)
    by_lane: dict[int, list[int]] = {}  # single-token pieces by offset
    for k, (_, _, s, v) in enumerate(pieces):
        if v.shape[0] == 1:
            by_lane.setdefault(s, []).append(k)
    for s, ks in by_lane.items():
        vals = np.stack([pieces[k][3].reshape(m) for k in ks])
        if len(ks) == len(pieces):
            out[:, :, s] = vals
        else:
            out[np.array(ks), :, s] = vals
    for k, (_, _, s, v) in enumerate(pieces):
        if v.shape[0] != 1:
            out[k, :, s:s + v.shape[0]] = v.reshape(v.shape[0], m).T
    return out


def value_writes(cfg: Config, pieces: list[Piece], cache: Cache | None = None) -> Program:
    """Return the Value bursts of every piece, in order, as one program.

    A piece placed at a :class:`CzPlace` gives :func:`reference_programs.cz_writes`, one at a
    :class:`ValuePlace` :func:`reference_programs.o1v_writes`. Only the element masks and the
    payload depend on the token offsets (``cache`` as for :func:`key_writes`).
    """
    lanes = cfg.device.lanes
    fixed = _fixed(cache, _shape("value", pieces), lambda: _value_fixed(cfg, pieces))
    masks = [UNSET if v.shape[0] == lanes and not isinstance(place, CzPlace)
             else lane_mask(s, v.shape[0]) for _, place, s, v in pieces]
    mask = fixed.mask
    if any(m != UNSET for m in masks):
        mask = _ro(np.repeat(np.array(masks, dtype=np.int64), len(fixed) // len(pieces)))
    return replace(fixed, mask=mask, data=_spread(cfg, pieces).reshape(-1))


def _value_fixed(cfg: Config, pieces: list[Piece]) -> Program:
    """Return the Value bursts of ``pieces`` without element masks or payload."""
    lanes = cfg.device.lanes
    g, p, i, b = value_order(cfg)
    addr = []  # per piece: first row, row step, first column, column step
    for layer, place, _, _ in pieces:
        if isinstance(place, CzPlace):
            addr.append((cfg.row(layer, place.row), 0, place.col0, 1))
        else:
            addr.append((cfg.row(layer, place.row0), 1, place.col, 0))
    rbase, rstep, cbase, cstep = (np.array(a, dtype=np.int64)[:, None] for a in zip(*addr))
    total = len(pieces) * len(g)
    return make(Opcode.WR_MEM, total, np.zeros(0, dtype=np.uint16),
                start=np.arange(total) * lanes, size=lanes,
                channel=np.tile(g * cfg.ch_per_head + p, len(pieces)),
                bank=np.tile(b, len(pieces)), row=(rbase + rstep * i[None, :]).ravel(),
                col=(cbase + cstep * i[None, :]).ravel())


def _all_bank_writes(cfg: Config, op: Opcode, pieces: list[Piece], row0: np.ndarray,
                     row_step: int, col0: np.ndarray, col_step: int) -> Program:
    """Return one all-bank write ``op`` per (piece, head, channel, Value row ``i``), in order.

    Instruction (piece, g, p, i) writes row ``row0[piece] + row_step * i``, column
    ``col0[piece] + col_step * i``, lane ``t`` (the piece's offset) of every bank: word ``b``
    is the token's dimension ``p * D/P + 16 i + b`` of head ``g``.
    """
    banks = cfg.device.banks
    h, p, rv = cfg.heads, cfg.ch_per_head, cfg.v_rows
    g, pp, i = (a.ravel() for a in np.indices((h, p, rv)))
    bit = np.array([channel_bit(c) for c in range(cfg.device.channels)], dtype=np.int64)
    mask = np.array([1 << t for _, _, t, _ in pieces], dtype=np.int64)
    data = np.concatenate([d[0].reshape(-1) for _, _, _, d in pieces]).astype(np.uint16,
                                                                             copy=False)
    per = len(g)
    total = len(pieces) * per
    return make(op, total, data, start=np.arange(total) * banks, size=banks, gpr0=0,
                channel_mask=np.tile(bit[g * p + pp], len(pieces)),
                row=(row0[:, None] + row_step * i[None, :]).ravel(),
                col=(col0[:, None] + col_step * i[None, :]).ravel(),
                mask=np.repeat(mask, per))


def abk_writes(cfg: Config, pieces: list[Piece]) -> Program:
    """Return :func:`reference_programs.o1v_token_writes` of every piece (``WR_ABK`` per row)."""
    row0 = np.array([cfg.row(layer, v.row0) for layer, v, _, _ in pieces], dtype=np.int64)
    col = np.array([v.col for _, v, _, _ in pieces], dtype=np.int64)
    return _all_bank_writes(cfg, Opcode.WR_ABK, pieces, row0, 1, col, 0)


def o1v16_writes(cfg: Config, pieces: list[Piece]) -> Program:
    """Return :func:`reference_programs.o1v_token_writes` of every piece as ``WR_ABK_OPEN``,
    ordered by :func:`reference_programs.by_row` (device extension ``wr16``, no Commit Zone).

    The writes of :func:`abk_writes` without auto-precharge, stably sorted by DRAM row (=
    (layer, row): every write to one Value row is adjacent, in piece then (head, channel)
    order, so the requests that share a VRS write each of its rows under one ACT16 per channel
    and the channels stay interleaved for the shared decoder).
    """
    row0 = np.array([cfg.row(layer, v.row0) for layer, v, _, _ in pieces], dtype=np.int64)
    col = np.array([v.col for _, v, _, _ in pieces], dtype=np.int64)
    prog = _all_bank_writes(cfg, Opcode.WR_ABK_OPEN, pieces, row0, 1, col, 0)
    return prog.take(np.argsort(prog.row, kind="stable"))


def cz16_writes(cfg: Config, pieces: list[Piece]) -> Program:
    """Return :func:`reference_programs.cz_token_writes` of every piece, in order.

    Single-token pieces at :class:`CzPlace` s (device extension ``wr16``): one
    ``WR_ABK_OPEN`` per (head, channel, Value row ``i``) into the slot's CRS row, column
    ``col0 + i``, which leaves the row open. Pieces come sorted by (layer, CRS row, slot), so
    every write to one CRS row of a channel is adjacent and the controller activates it once.
    """
    assert all(isinstance(cz, CzPlace) and d.shape[0] == 1 for _, cz, _, d in pieces)
    row = np.array([cfg.row(layer, cz.row) for layer, cz, _, _ in pieces], dtype=np.int64)
    col0 = np.array([cz.col0 for _, cz, _, _ in pieces], dtype=np.int64)
    return _all_bank_writes(cfg, Opcode.WR_ABK_OPEN, pieces, row, 0, col0, 1)
