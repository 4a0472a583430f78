"""Lay the attention programs of a batch of requests out in one vectorised pass.

Given each request's :class:`~.tables.KeyTable` or :class:`~.tables.ValueTable`, these build
the :class:`~.assemble.Batch` that :func:`assemble.qk_template` / :func:`assemble.sv_template`
and :meth:`assemble.Batch.of` would (``tests/test_runtime_tables.py`` checks it), without
a Python loop over instructions: every instruction's position in the batch is computed from
its request's, segment's and run's, and each field is written there with one NumPy
assignment per instruction kind. A batch of 32 requests with 128 blocks each takes a few
hundred microseconds, so a change to every table (a decode step that binds a block in each
request) costs a rebuild of the layout, not of the templates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from patton.sim.isa import Opcode

from .assemble import Batch
from .commands import group_masks
from .config import Config
from .program import OP_ID, UNSET, Program, same
from .tables import KeyTable, ValueTable

__all__ = ["qk_batch", "sv_batch"]

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


def _program(op: np.ndarray, opsize: np.ndarray, gpr0: np.ndarray, cmask: np.ndarray,
             row: np.ndarray, col: np.ndarray, start: np.ndarray, size: np.ndarray,
             words: int) -> Program:
    _ro(op, opsize, gpr0, cmask, row, col, start, size)
    n = len(op)
    # the payload is the step's (Batch.fill); until then a zero array that stores one word
    return Program(op, opsize, gpr0, cmask, _unset(n), row, _unset(n), col, _unset(n), start,
                   size, np.broadcast_to(np.uint16(0), (words,)))


def qk_batch(cfg: Config, layer: int, tables: Sequence[KeyTable]) -> Batch:
    """Return the QK^T batch of ``tables`` (one per request, in order).

    Request ``k``'s section is its ``heads`` query writes, then one bias/MAC/read-out triple
    per group, as :func:`assemble.qk_template`.
    """
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
    op = np.empty(total, dtype=np.int64)
    opsize = np.full(total, UNSET, dtype=np.int64)
    gpr0 = np.zeros(total, dtype=np.int64)
    cmask = np.empty(total, dtype=np.int64)
    row = np.full(total, UNSET, dtype=np.int64)
    col = np.full(total, UNSET, dtype=np.int64)
    start = np.full(total, zero, dtype=np.int64)
    size = np.zeros(total, dtype=np.int64)
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
    return Batch(prog, (n, h, width), np.zeros(0, dtype=np.int64), cfg.v_rows,
                 cfg.block_size, lanes)


def sv_batch(cfg: Config, layer: int, tables: Sequence[ValueTable], width: int) -> Batch:
    """Return the SV batch of ``tables`` (one per request, in order) for data width ``width``.

    Each segment is its score writes (``heads`` per run, head-major), then per
    Value row a bias, one MAC per run and a read-out, as :func:`assemble.sv_template`; a CZ
    block's score writes read its tile.

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
    op = np.empty(total, dtype=np.int64)
    opsize = np.full(total, UNSET, dtype=np.int64)
    gpr0 = np.zeros(total, dtype=np.int64)
    cmask = np.full(total, every, dtype=np.int64)
    row = np.full(total, UNSET, dtype=np.int64)
    col = np.full(total, UNSET, dtype=np.int64)
    start = np.full(total, zero, dtype=np.int64)
    size = np.zeros(total, dtype=np.int64)
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
    return Batch(prog, (n, h, width), tiles.ravel().astype(np.int64), rv, t, lanes)
