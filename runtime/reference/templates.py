"""Reference attention templates: one request's program in columnar form, built from scratch.

A :class:`Template` holds every address of one request's QK^T or SV program in one layer;
:func:`batch` lays several templates out over one payload array, giving the
:class:`~patton.runtime.programs.batch.Batch` the runtime builds without per-request templates,
from the tables it keeps up to date (:mod:`patton.runtime.programs.tables`,
:mod:`patton.runtime.programs.layout`, :mod:`patton.runtime.programs.layout_patch`). This
from-scratch build is what those are checked against (``tests/test_runtime_tables.py``); each
template gives exactly the instructions of its :mod:`patton.runtime.reference.programs`
counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace
from patton.runtime.programs.batch import Batch
from patton.runtime.programs.plans import QkPlan, SvPlan, group_masks, o1k_groups, sv_segments
from patton.sim.isa import Opcode
from patton.sim.program import FIELDS, OP_ID, UNSET, Program, concat

__all__ = ["ZERO", "TILE", "Template", "qk_template", "sv_template", "batch"]

#: Payload source of a template instruction (``head`` array): the shared zero burst, or a CZ
#: block's scores tiled ``Rv`` times; values ``>= 0`` name the row (head) of the step's data.
ZERO, TILE = -1, -2


@dataclass(frozen=True, slots=True)
class Template:
    """The instructions of one request's attention program in one layer, minus the step data.

    Invariants: ``prog.data`` is empty; for an instruction with a payload, ``head[k] >= 0``
    means words ``start[k] ..`` of row ``head[k]`` of the step's ``(heads, width)`` data,
    :data:`TILE` means words ``start[k] ..`` of this template's tile region (tile ``j``
    occupies ``j * Rv * T ..`` and repeats row ``tiles[j, 0]``'s words
    ``tiles[j, 1] * T .. + T`` ``Rv`` times), and :data:`ZERO` the shared zero burst.
    """

    prog: Program  # addresses; start relative to the source named by head
    head: np.ndarray  # payload source per instruction (see above)
    tiles: np.ndarray  # (n, 2): head and table position of each tile
    width: int  # minimum row width of the step's data


_GB, _BIAS, _MAC, _RD = (OP_ID[o] for o in (Opcode.WR_GB, Opcode.WR_BIAS, Opcode.MAC_ABK,
                                          Opcode.RD_MAC))
_U = UNSET


def _template(rows: list[tuple[int, ...]], tiles: list[tuple[int, int]], width: int) -> Template:
    """Return the template of attention ``rows``.

    Each row is (op id, opsize, gpr0, channel_mask, row, col, payload source, start, size);
    attention instructions set no bank, channel or element mask.
    """
    a = np.array(rows, dtype=np.int64).reshape(-1, 9).T.copy()
    unset = np.full(a.shape[1], UNSET, dtype=np.int64)
    a.flags.writeable = unset.flags.writeable = False
    op, opsize, gpr0, cmask, row, col, head, start, size = a
    prog = Program(op, opsize, gpr0, cmask, unset, row, unset, col, unset, start, size,
                   np.zeros(0, dtype=np.uint16))
    return Template(prog, head, np.array(tiles, dtype=np.int64).reshape(-1, 2), width)


def qk_template(cfg: Config, layer: int, keys: list[KeyPlace]) -> tuple[Template, QkPlan]:
    """Return :func:`reference_programs.qk_program`'s instructions for O1Ks ``keys`` (table order).

    The step's data is the query tiled over the GB: ``(heads, gb_columns * lanes)`` words.
    """
    groups = o1k_groups(keys)
    by_head, by_p = group_masks(cfg)
    cols, lanes, e = cfg.device.gb_columns, cfg.device.lanes, cfg.bursts
    base = cfg.row(layer, 0)
    rows = [(_GB, cols, 0, by_head[g], _U, 0, g, 0, cols * lanes) for g in range(cfg.heads)]
    add = rows.append
    for (row, col), members in groups.items():
        mask = 0
        for p in members:
            mask |= by_p[p]
        add((_BIAS, _U, 0, mask, _U, _U, ZERO, 0, lanes))
        add((_MAC, e, _U, mask, base + row, col, ZERO, 0, 0))
        add((_RD, _U, 0, mask, _U, _U, ZERO, 0, 0))
    return _template(rows, [], cols * lanes), QkPlan(list(groups.values()), len(keys))


def sv_template(cfg: Config, layer: int,
                values: list[ValuePlace | CzPlace]) -> tuple[Template, SvPlan]:
    """Return :func:`reference_programs.sv_program`'s instructions for a table's Value placements.

    The step's data is the scores ``(heads, blocks * T)``, zero past the last token.
    """
    by_head, by_p = group_masks(cfg)
    mask = 0
    for m in by_p:
        mask |= m
    t, rv, lanes = cfg.block_size, cfg.v_rows, cfg.device.lanes
    base = cfg.row(layer, 0)
    plan = SvPlan(sv_segments(values), len(values))
    rows: list[tuple[int, ...]] = []
    add = rows.append
    tiles: list[tuple[int, int]] = []
    bias = (_BIAS, _U, 0, mask, _U, _U, ZERO, 0, lanes)
    read = (_RD, _U, 0, mask, _U, _U, ZERO, 0, 0)
    for seg in plan.segments:
        cz = seg.cz
        if cz is not None:
            pos = seg.runs[0].first
            for g in range(cfg.heads):
                add((_GB, rv, 0, by_head[g], _U, cz.col0, TILE, len(tiles) * rv * t, rv * t))
                tiles.append((g, pos))
            for i in range(rv):
                rows += (bias, (_MAC, 1, _U, mask, base + cz.row, cz.col0 + i, ZERO, 0, 0),
                         read)
            continue
        for g in range(cfg.heads):
            for r in seg.runs:
                add((_GB, r.count, 0, by_head[g], _U, r.col, g, r.first * t, r.count * t))
        for i in range(rv):
            add(bias)
            rows += [(_MAC, r.count, _U, mask, base + r.row0 + i, r.col, ZERO, 0, 0)
                     for r in seg.runs]
            add(read)
    return _template(rows, tiles, len(values) * t), plan


def batch(cfg: Config, templates: list[Template], width: int) -> Batch:
    """Lay ``templates`` out for step data of row width ``width``.

    Raises:
        ValueError: ``width`` is below a template's or not a multiple of ``T``.
    """
    need = max((tp.width for tp in templates), default=0)
    t = cfg.block_size
    if width < need or width % t:
        raise ValueError(f"step data width {width} below the templates' {need} or not a "
                         f"multiple of {t}")
    h, rv, lanes = cfg.heads, cfg.v_rows, cfg.device.lanes
    n = len(templates)
    body = n * h * width
    prog = concat([tp.prog for tp in templates])
    req = np.repeat(np.arange(n), [len(tp.prog) for tp in templates])
    head = np.concatenate([tp.head for tp in templates]) if n else prog.start
    ntiles = np.array([len(tp.tiles) for tp in templates], dtype=np.int64)
    tile0 = (np.cumsum(ntiles) - ntiles) * (rv * t)
    tiles = np.concatenate([tp.tiles for tp in templates]) if n else np.zeros((0, 2))
    src = (np.repeat(np.arange(n), ntiles) * (h * width) + tiles[:, 0] * width) // t \
        + tiles[:, 1]
    zero = body + len(src) * rv * t
    start = np.where(head >= 0, req * (h * width) + head * width + prog.start,
                     np.where(head == TILE, body + tile0[req] + prog.start, zero))
    start.flags.writeable = False
    prog = Program(prog.op, *(getattr(prog, f) for f in FIELDS), start, prog.size,
                   np.zeros(zero + lanes, dtype=np.uint16))
    return Batch(prog, (n, h, width), src.astype(np.int64), rv, t, lanes)
