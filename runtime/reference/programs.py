"""Reference program builders: the runtime's programs as lists of instructions, one by one.

Placements and data in, :class:`~patton.sim.isa.Instruction` lists out, every instruction with
its column explicit (the ``col=`` extension), built instruction by instruction in the order the
runtime emits them. The runtime builds the same programs in columnar form
(:mod:`patton.runtime.programs.write_programs`, :mod:`patton.runtime.programs.token_writes`,
:mod:`patton.runtime.programs.layout`, :mod:`patton.runtime.programs.layout_patch`); these
builders are what that is checked against (``tests/test_runtime_program.py``,
``tests/test_runtime_tables.py``), field by field and payload word by payload word.

Writes use conventional ``W MEM`` bursts (FR-FCFS, pipelined across banks) except the
no-Commit-Zone ablation's single-token Value write, which uses ``WR_ABK`` (one WRA16 per
Value row, word ``b`` to bank ``b``, one-lane mask), and, on a device with the extension
``wr16`` (:mod:`patton.sim.extensions`), the Commit Zone's single-token Value write, which uses
``WR_ABK_OPEN`` (the same, one WR16 that leaves the CRS row open), and the no-CZ one, which
uses ``WR_ABK_OPEN`` too, a batch's sorted by row (:func:`by_row`); ``docs/runtime.md`` §4
gives the cycle-model numbers behind these choices. Attention programs are built per request
and per layer; the part that does not depend on this step's data (bias, MAC and read-out
triples) is fixed by the block placements and can be cached by the caller (``memo``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace
from patton.runtime.programs.plans import QkPlan, SvPlan, group_masks, o1k_groups, sv_segments
from patton.sim.isa import Instruction, Opcode, channel_bit

__all__ = ["key_writes", "cz_writes", "cz_token_writes", "o1v_writes", "o1v_token_writes",
           "by_row", "qk_body", "qk_program", "sv_body", "sv_program"]

_W = Opcode.WR_MEM


def _lanes(start: int, n: int) -> int:
    return ((1 << n) - 1) << start


def key_writes(cfg: Config, layer: int, key: KeyPlace, start: int,
               keys: np.ndarray) -> list[Instruction]:
    """Write Key tokens ``start ..`` (``keys``: ``(n, heads, D)`` bf16 bits) to an O1K.

    Token ``t`` goes to bank ``t``, its ``D`` elements to ``E`` consecutive bursts.
    """
    e = cfg.bursts
    lanes = cfg.device.lanes
    row = cfg.row(layer, key.row)
    out = []
    for j in range(keys.shape[0]):
        bank = start + j
        for g in range(cfg.heads):
            ch = cfg.channel(g, key.p)
            vec = keys[j, g].reshape(e, lanes)
            for b in range(e):
                out.append(Instruction(_W, channel=ch, bank=bank, row=row, col=key.col + b,
                                       data=vec[b]))
    return out


def _by_dim(cfg: Config, values: np.ndarray, g: int, start: int) -> np.ndarray:
    """Return ``(P, Rv, B, lanes)`` words: lane ``t`` holds token ``t`` of each dimension."""
    n = values.shape[0]
    p, rv, b = cfg.ch_per_head, cfg.v_rows, cfg.device.banks
    words = np.zeros((p, rv, b, cfg.device.lanes), dtype=np.uint16)
    words[..., start:start + n] = values[:, g].reshape(n, p, rv, b).transpose(1, 2, 3, 0)
    return words


def _value_bursts(cfg: Config, values: np.ndarray, start: int, mask: int | None,
                  where: Callable[[int], tuple[int, int]]) -> list[Instruction]:
    """Return one ``W MEM`` burst per head, channel, Value row ``i`` and bank.

    ``where(i)`` gives the (DRAM row, column) that Value row ``i`` of the block lands in.
    """
    out = []
    for g in range(cfg.heads):
        words = _by_dim(cfg, values, g, start)
        for p in range(cfg.ch_per_head):
            ch = cfg.channel(g, p)
            for i in range(cfg.v_rows):
                row, col = where(i)
                for b in range(cfg.device.banks):
                    out.append(Instruction(_W, channel=ch, bank=b, row=row, col=col,
                                           data=words[p, i, b], mask=mask))
    return out


def cz_writes(cfg: Config, layer: int, cz: CzPlace, start: int,
              values: np.ndarray) -> list[Instruction]:
    """Write Value tokens ``start ..`` (``(n, heads, D)``) into a CZ slot (lane = token).

    Per channel this touches one CRS row: ``Rv`` masked bursts in each of the 16 banks.
    """
    row = cfg.row(layer, cz.row)
    return _value_bursts(cfg, values, start, _lanes(start, values.shape[0]),
                         lambda i: (row, cz.col0 + i))


def o1v_writes(cfg: Config, layer: int, value: ValuePlace, start: int,
               values: np.ndarray) -> list[Instruction]:
    """Write Value tokens as bursts into an O1V (a commit, a full prefill block, or tokens).

    One burst per bank per Value row; lanes outside ``start .. start + n - 1`` are masked off
    unless the write covers the whole block.
    """
    n = values.shape[0]
    mask = None if n == cfg.device.lanes else _lanes(start, n)
    return _value_bursts(cfg, values, start, mask,
                         lambda i: (cfg.row(layer, value.row0 + i), value.col))


def o1v_token_writes(cfg: Config, layer: int, value: ValuePlace, t: int,
                     values: np.ndarray, op: Opcode = Opcode.WR_ABK) -> list[Instruction]:
    """Write one Value token straight into its O1V with ``WR_ABK`` (no-CZ ablation).

    One WRA16 per Value row and channel: word ``b`` goes to bank ``b`` in lane ``t``. With
    ``op=Opcode.WR_ABK_OPEN`` (device extension ``wr16``) the same writes leave their rows
    open (one WR16 each); a batch of them is then ordered by :func:`by_row`.
    """
    return _all_bank(cfg, op, t, values, [cfg.row(layer, value.row0 + i)
                                          for i in range(cfg.v_rows)], [value.col] * cfg.v_rows)


def _all_bank(cfg: Config, op: Opcode, t: int, values: np.ndarray, rows: list[int],
              cols: list[int]) -> list[Instruction]:
    """One all-bank write ``op`` per head, channel and Value row ``i`` (at ``rows[i]``,
    ``cols[i]``): word ``b`` of burst ``i`` goes to bank ``b`` in lane ``t``."""
    out = []
    for g in range(cfg.heads):
        words = _by_dim(cfg, values[:1], g, 0)[..., 0]  # (P, Rv, B)
        for p in range(cfg.ch_per_head):
            mask = channel_bit(cfg.channel(g, p))
            for i in range(cfg.v_rows):
                out.append(Instruction(op, gpr0=0, channel_mask=mask, row=rows[i],
                                       col=cols[i], data=words[p, i].copy(), mask=1 << t))
    return out


def by_row(instructions: list[Instruction]) -> list[Instruction]:
    """Return a batch's no-CZ ``WR_ABK_OPEN`` token writes in the order the runtime issues them.

    A stable sort by DRAM row, which is by (layer, row) (a layer's rows are one band): every
    write to one Value row is adjacent, so each channel opens it once for all the requests
    whose O1Vs share its VRS, and within a row the writes keep their order (piece, then head
    and channel: the channels interleaved).
    """
    return sorted(instructions, key=lambda ins: ins.row)


def cz_token_writes(cfg: Config, layer: int, cz: CzPlace, t: int,
                    values: np.ndarray) -> list[Instruction]:
    """Write one Value token into a CZ slot with ``WR_ABK_OPEN`` (device extension ``wr16``).

    One WR16 per head, channel and Value row ``i``: word ``b`` goes to bank ``b`` in lane
    ``t`` of column ``cz.col0 + i`` of the slot's CRS row, which stays open.
    """
    return _all_bank(cfg, Opcode.WR_ABK_OPEN, t, values,
                     [cfg.row(layer, cz.row)] * cfg.v_rows,
                     [cz.col0 + i for i in range(cfg.v_rows)])


def _zeros(cfg: Config) -> np.ndarray:
    return np.zeros(cfg.device.lanes, dtype=np.uint16)


# ----------------------------------------------------------------------------- QK^T


#: Memo of the bias/MAC/read-out triple per (config, layer, row, col, member channels).
Memo = dict


def _triple(cfg: Config, layer: int, row: int, col: int,
            ps: tuple[int, ...]) -> tuple[Instruction, Instruction, Instruction]:
    mask = 0
    for p in ps:
        for g in range(cfg.heads):
            mask |= channel_bit(cfg.channel(g, p))
    return (Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=mask, data=_zeros(cfg)),
            Instruction(Opcode.MAC_ABK, opsize=cfg.bursts, channel_mask=mask,
                        row=cfg.row(layer, row), col=col),
            Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask))


def qk_body(cfg: Config, layer: int, keys: list[KeyPlace],
            memo: Memo | None = None) -> tuple[list[Instruction], QkPlan]:
    """Return the data-independent part of QK^T over O1Ks ``keys`` (table order).

    O1Ks at the same row and column in different channels (Case Ch) share one
    WR_BIAS / MAC_ABK / RD_MAC triple; every O1K keeps its own bias and read-out. A triple
    depends only on its address and member channels, so it is built once per such key and
    reused from ``memo`` (the placement fixes it; per step only the table is walked).
    """
    groups = o1k_groups(keys)
    memo = {} if memo is None else memo
    body: list[Instruction] = []
    reads = []
    for (row, col), members in groups.items():
        key = (cfg, layer, row, col, tuple(sorted(members)))
        triple = memo.get(key)
        if triple is None:
            triple = memo[key] = _triple(cfg, layer, row, col, key[4])
        body.extend(triple)
        reads.append(members)
    return body, QkPlan(reads, len(keys))


def qk_program(cfg: Config, query: np.ndarray, body: list[Instruction]) -> list[Instruction]:
    """Return QK^T: the query (``(heads, D)`` bf16 bits) tiled over each group's GB, then ``body``.

    The query is duplicated at every ``E``-aligned GB column, i.e. at every O1K column offset.
    """
    by_head, _ = group_masks(cfg)
    cols = cfg.device.gb_columns
    reps = cols // cfg.bursts
    out = [Instruction(Opcode.WR_GB, opsize=cols, gpr0=0, channel_mask=by_head[g], col=0,
                       data=np.tile(query[g], reps)) for g in range(cfg.heads)]
    out.extend(body)
    return out


# ----------------------------------------------------------------------------- SV


def sv_body(cfg: Config, layer: int, values: list[ValuePlace | CzPlace],
            memo: Memo | None = None) -> tuple[list[list[Instruction]], SvPlan]:
    """Return, per segment, the data-independent bias/MAC/read-out instructions, and the plan.

    A segment's instructions depend only on its addresses (table positions do not appear in
    them), so they are built once per segment shape and reused from ``memo``.
    """
    _, by_p = group_masks(cfg)
    mask = 0
    for m in by_p:
        mask |= m
    zeros = _zeros(cfg)
    plan = SvPlan(sv_segments(values), len(values))
    bodies = []
    memo = {} if memo is None else memo
    for seg in plan.segments:
        key = (cfg, layer, seg.cz, tuple((r.count, r.row0, r.col) for r in seg.runs))
        hit = memo.get(key)
        if hit is not None:
            bodies.append(hit)
            continue
        body: list[Instruction] = []
        memo[key] = body
        for i in range(cfg.v_rows):
            body.append(Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=mask, data=zeros))
            if seg.cz is not None:
                body.append(Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=mask,
                                        row=cfg.row(layer, seg.cz.row), col=seg.cz.col0 + i))
            else:
                for r in seg.runs:
                    body.append(Instruction(Opcode.MAC_ABK, opsize=r.count, channel_mask=mask,
                                            row=cfg.row(layer, r.row0 + i), col=r.col))
            body.append(Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask))
        bodies.append(body)
    return bodies, plan


def sv_program(cfg: Config, probs: np.ndarray, bodies: list[list[Instruction]],
               plan: SvPlan) -> list[Instruction]:
    """Return SV for ``probs`` (``(heads, blocks * T)`` bf16 bits, zero past the last token).

    Before each segment the scores go to the GB at the O1V column offsets (``Rv`` copies of
    the block's scores at the CZ slot's bursts for a CZ-resident block).
    """
    by_head, _ = group_masks(cfg)
    t = cfg.block_size
    out: list[Instruction] = []
    for seg, body in zip(plan.segments, bodies):
        for g in range(cfg.heads):
            if seg.cz is not None:
                pos = seg.runs[0].first
                data = np.tile(probs[g, pos * t:(pos + 1) * t], cfg.v_rows)
                out.append(Instruction(Opcode.WR_GB, opsize=cfg.v_rows, gpr0=0,
                                       channel_mask=by_head[g], col=seg.cz.col0, data=data))
                continue
            for r in seg.runs:
                data = probs[g, r.first * t:(r.first + r.count) * t]
                out.append(Instruction(Opcode.WR_GB, opsize=r.count, gpr0=0,
                                       channel_mask=by_head[g], col=r.col, data=data))
        out.extend(body)
    return out
