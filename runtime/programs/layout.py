"""Lay the attention programs of a batch of requests out in one vectorised pass.

Given each request's :class:`~.tables.KeyTable` or :class:`~.tables.ValueTable`, these build
the :class:`~patton.runtime.programs.batch.Batch` that the from-scratch reference
(:func:`reference_templates.qk_template` / :func:`reference_templates.sv_template`, laid out
by :func:`reference_templates.batch`) would (``tests/test_runtime_tables.py`` checks it), without
a Python loop over instructions: every instruction's position in the batch is computed from
its request's, segment's and run's, and each field is written there with one NumPy
assignment per instruction kind. A batch of 32 requests with 128 blocks each takes a few
hundred microseconds, so a change to every table (a decode step that binds a block in each
request) costs a rebuild of the layout, not of the templates; :mod:`.layout_patch` patches
a cached layout instead when tables changed only at their ends. The eight int64 fields are
the rows of one matrix (:func:`_fields`), so a patch splices them in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace
from patton.runtime.programs.batch import Batch
from patton.runtime.programs.plans import group_masks
from patton.runtime.programs.tables import KeyTable, ValueTable
from patton.sim.isa import Opcode
from patton.sim.program import OP_ID, UNSET, Program, same, zeros

__all__ = ["FIELD_ROWS", "qk_batch", "qk_fields", "qk_triples", "sv_batch", "sv_sections",
           "cz_segments"]

_GB, _BIAS, _MAC, _RD = (OP_ID[o] for o in (Opcode.WR_GB, Opcode.WR_BIAS, Opcode.MAC_ABK,
                                          Opcode.RD_MAC))


def _unset(n: int) -> np.ndarray:
    """Return ``n`` read-only :data:`UNSET` values that store one."""
    return same(n, UNSET)


def _ro(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _masks(cfg: Config) -> tuple[np.ndarray, int]:
    by_head, by_p = group_masks(cfg)
    every = 0
    for m in by_p:
        every |= m
    return np.array(by_head, dtype=np.int64), every


#: Rows of a layout's field matrix (see :func:`_fields`).
FIELD_ROWS = ("op", "opsize", "gpr0", "channel_mask", "row", "col", "start", "size")


def _fields(total: int, defaults: tuple[int, ...]) -> np.ndarray:
    """Return an ``(8, total)`` int64 matrix, row ``f`` filled with ``defaults[f]``.

    Its rows (:data:`FIELD_ROWS`) are a layout's field arrays: contiguous views of one array,
    so that :mod:`.layout_patch` splices all fields of a batch in one call.
    """
    m = np.empty((len(FIELD_ROWS), total), dtype=np.int64)
    m[:] = np.array(defaults, dtype=np.int64)[:, None]
    return m


def _program(op: np.ndarray, opsize: np.ndarray, gpr0: np.ndarray, cmask: np.ndarray,
             row: np.ndarray, col: np.ndarray, start: np.ndarray, size: np.ndarray,
             words: int) -> Program:
    _ro(op, opsize, gpr0, cmask, row, col, start, size)
    n = len(op)
    # the payload is the step's (Batch.fill); until then a zero array that stores one word
    return Program(op, opsize, gpr0, cmask, _unset(n), row, _unset(n), col, _unset(n), start,
                   size, zeros(words))


def qk_batch(cfg: Config, layer: int, tables: Sequence[KeyTable]) -> Batch:
    """Return the QK^T batch of ``tables`` (one per request, in order).

    Request ``k``'s section is its ``heads`` query writes, then one bias/MAC/read-out triple
    per group, as :func:`reference_templates.qk_template`.
    """
    return qk_fields(cfg, layer, tables)[0]


def qk_fields(cfg: Config, layer: int, tables: Sequence[KeyTable]) -> tuple[Batch, np.ndarray]:
    """Return :func:`qk_batch` and its field matrix (rows :data:`FIELD_ROWS`, read-only)."""
    h, cols, lanes = cfg.heads, cfg.device.gb_columns, cfg.device.lanes
    width = cols * lanes
    n = len(tables)
    by_head, _ = _masks(cfg)
    ng = np.fromiter((tb.ngroups for tb in tables), dtype=np.int64, count=n)
    groups = np.concatenate([tb.groups[:tb.ngroups] for tb in tables]) if n else \
        np.zeros((0, 3), dtype=np.int64)
    sec = h + 3 * ng
    base = np.cumsum(sec) - sec
    total = int(sec.sum())
    body = n * h * width
    zero = body
    mat = _fields(total, (0, UNSET, 0, 0, UNSET, UNSET, zero, 0))
    op, opsize, gpr0, cmask, row, col, start, size = mat
    # query writes: (request, head)
    gb = (base[:, None] + np.arange(h)[None, :]).ravel()
    op[gb] = _GB
    opsize[gb] = cols
    cmask[gb] = np.tile(by_head, n)
    col[gb] = 0
    start[gb] = np.arange(n * h) * width
    size[gb] = width
    # triples: (group, 3)
    req = np.repeat(np.arange(n), ng)
    j = np.arange(len(groups)) - np.repeat(np.cumsum(ng) - ng, ng)
    d = base[req] + h + 3 * j
    op[d], op[d + 1], op[d + 2] = _BIAS, _MAC, _RD
    m = groups[:, 2]
    cmask[d] = cmask[d + 1] = cmask[d + 2] = m
    size[d] = lanes
    gpr0[d + 1] = UNSET
    opsize[d + 1] = cfg.bursts
    row[d + 1] = cfg.row(layer, 0) + groups[:, 0]
    col[d + 1] = groups[:, 1]
    prog = _program(op, opsize, gpr0, cmask, row, col, start, size, zero + lanes)
    mat.flags.writeable = False
    return Batch(prog, (n, h, width), np.zeros(0, dtype=np.int64), cfg.v_rows,
                 cfg.block_size, lanes), mat


def qk_triples(cfg: Config, layer: int, groups: np.ndarray, zero: int) -> np.ndarray:
    """Return the bias/MAC/read-out triples of O1K ``groups`` (rows of ``KeyTable.groups``).

    The result is ``(8, 3 * len(groups))``: the fields op, opsize, gpr0, channel mask, row,
    col, start and size of each instruction, as :func:`qk_batch` lays them out (payload offset
    ``zero`` is the batch's zero burst).
    """
    m = len(groups)
    out = np.empty((8, m, 3), dtype=np.int64)
    out[:] = np.array([[_BIAS, _MAC, _RD], [UNSET, cfg.bursts, UNSET], [0, UNSET, 0],
                       [0, 0, 0], [UNSET, 0, UNSET], [UNSET, 0, UNSET], [zero] * 3,
                       [cfg.device.lanes, 0, 0]], dtype=np.int64)[:, None, :]
    out[3] = groups[:, 2:3]
    out[4, :, 1] = cfg.row(layer, 0) + groups[:, 0]
    out[5, :, 1] = groups[:, 1]
    return out.reshape(8, 3 * m)


def sv_batch(cfg: Config, layer: int, tables: Sequence[ValueTable], width: int) -> Batch:
    """Return the SV batch of ``tables`` (one per request, in order) for data width ``width``.

    See :func:`sv_sections` (which also returns each request's section length and CZ blocks).
    """
    return sv_sections(cfg, layer, tables, width)[0]


def sv_sections(cfg: Config, layer: int, tables: Sequence[ValueTable],
                width: int) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray]:
    """Return the SV batch of ``tables`` (one per request, in order) for data width ``width``,
    per request its instructions and its CZ blocks, and the batch's field matrix (rows
    :data:`FIELD_ROWS`, read-only).

    Each segment is its score writes (``heads`` per run, head-major), then per
    Value row a bias, one MAC per run and a read-out, as
    :func:`reference_templates.sv_template`; a CZ block's score writes read its tile.

    Raises:
        ValueError: ``width`` is below a table's ``blocks * T`` or not a multiple of ``T``.
    """
    h, rv, t, lanes = cfg.heads, cfg.v_rows, cfg.block_size, cfg.device.lanes
    need = max((len(tb.values) for tb in tables), default=0) * t
    if width < need or width % t:
        raise ValueError(f"step data width {width} below the templates' {need} or not a "
                         f"multiple of {t}")
    n = len(tables)
    by_head, every = _masks(cfg)
    nu = np.fromiter((tb.nruns for tb in tables), dtype=np.int64, count=n)
    runs = np.concatenate([tb.rows[:tb.nruns] for tb in tables]) if n else \
        np.zeros((0, 7), dtype=np.int64)
    j, nr, cz, first, count, row0, rcol = runs.T
    req = np.repeat(np.arange(n), nu)
    head = j == 0  # a segment's first run
    seg = np.cumsum(head) - 1  # segment of each run
    snr = nr[head]
    slen = h * snr + rv * (snr + 2)
    sbase = np.cumsum(slen) - slen
    total = int(slen.sum())
    is_cz = cz == 1
    rank = np.cumsum(is_cz) - 1  # CZ block of each run (valid where is_cz)
    ntiles = int(is_cz.sum()) * h
    body = n * h * width
    zero = body + ntiles * rv * t
    mat = _fields(total, (0, UNSET, 0, every, UNSET, UNSET, zero, 0))
    op, opsize, gpr0, cmask, row, col, start, size = mat
    g = np.arange(h)[None, :]
    rb = sbase[seg]  # each run's segment base
    # score writes: (run, head)
    gb = rb[:, None] + g * nr[:, None] + j[:, None]
    op[gb] = _GB
    opsize[gb] = np.where(is_cz, rv, count)[:, None]
    cmask[gb] = by_head[None, :]
    col[gb] = rcol[:, None]
    direct = (req * (h * width) + first * t)[:, None] + g * width
    tiled = body + (rank * h)[:, None] * (rv * t) + g * (rv * t)
    start[gb] = np.where(is_cz[:, None], tiled, direct)
    size[gb] = np.where(is_cz, rv * t, count * t)[:, None]
    # per segment and Value row: bias, then (per run) MAC, then read-out
    i = np.arange(rv)[None, :]
    sb = (sbase + h * snr)[:, None] + i * (snr + 2)[:, None]
    op[sb] = _BIAS
    size[sb] = lanes
    rd = sb + snr[:, None] + 1
    op[rd] = _RD
    mac = (rb + h * nr)[:, None] + i * (nr + 2)[:, None] + 1 + j[:, None]
    op[mac] = _MAC
    gpr0[mac] = UNSET
    opsize[mac] = np.where(is_cz, 1, count)[:, None]
    row[mac] = cfg.row(layer, 0) + row0[:, None] + np.where(is_cz[:, None], 0, i)
    col[mac] = rcol[:, None] + np.where(is_cz[:, None], i, 0)
    # tile k * h + g repeats head g's scores of CZ block k
    tiles = (((req * (h * width))[is_cz][:, None] + g * width) // t + first[is_cz][:, None])
    prog = _program(op, opsize, gpr0, cmask, row, col, start, size, zero + lanes)
    seclen = np.bincount(req[head], weights=slen, minlength=n).astype(np.int64)
    ncz = np.bincount(req[is_cz], minlength=n).astype(np.int64)
    mat.flags.writeable = False
    return (Batch(prog, (n, h, width), tiles.ravel().astype(np.int64), rv, t, lanes), seclen,
            ncz, mat)


@lru_cache(maxsize=16)
def _cz_template(cfg: Config, layer: int) -> np.ndarray:
    """Return a CZ segment's fields for slot column 0 of CRS row 0 (see :func:`cz_segments`)."""
    h, rv, t, lanes = cfg.heads, cfg.v_rows, cfg.block_size, cfg.device.lanes
    by_head, every = _masks(cfg)
    gb = np.empty((8, h), dtype=np.int64)
    gb[0], gb[1], gb[2], gb[3] = _GB, rv, 0, by_head
    gb[4], gb[5], gb[6], gb[7] = UNSET, 0, np.arange(h) * (rv * t), rv * t
    body = np.empty((8, rv, 3), dtype=np.int64)
    body[:] = np.array([[_BIAS, _MAC, _RD], [UNSET, 1, UNSET], [0, UNSET, 0],
                        [every] * 3, [UNSET, cfg.row(layer, 0), UNSET], [UNSET, 0, UNSET],
                        [0] * 3, [lanes, 0, 0]], dtype=np.int64)[:, None, :]
    body[5, :, 1] = np.arange(rv)
    out = np.concatenate([gb, body.reshape(8, 3 * rv)], axis=1)
    out.flags.writeable = False
    return out


def cz_segments(cfg: Config, layer: int, czs: Sequence[CzPlace]) -> np.ndarray:
    """Return the SV instructions of CZ blocks' segments as :func:`sv_batch` lays them out.

    The result is ``(8, len(czs), heads + 3 * Rv)``, fields as :func:`qk_triples`: per head
    a score write of the block's tile, then per Value row a bias, the MAC of burst
    ``col0 + i`` and a read-out. Payload offsets are placeholders: head ``g``'s score write
    reads ``g * Rv * T`` (the block's tile relative to the first) and the others 0; the
    caller sets them.
    """
    h = cfg.heads
    m = len(czs)
    out = np.empty((8, m, h + 3 * cfg.v_rows), dtype=np.int64)
    out[:] = _cz_template(cfg, layer)[:, None, :]
    cz = np.array([(c.row, c.col0) for c in czs], dtype=np.int64).reshape(m, 2)
    out[5, :, :h] = cz[:, 1:]
    out[4, :, h + 1::3] += cz[:, :1]
    out[5, :, h + 1::3] += cz[:, 1:]
    return out
