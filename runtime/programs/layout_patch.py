"""Patch a cached batch layout for the few requests whose attention tables changed.

:func:`layout.qk_batch` and :func:`layout.sv_batch` lay a batch out in one vectorised pass, some
35 and 60 NumPy calls whatever the number of requests, so laying out two requests costs about
as much as laying out 32. In a server whose requests are not in step (their last blocks at
different fill levels), a decode step changes only a few requests' tables, at their ends:

* QK^T: a bind either adds a member channel to one of the request's O1K groups (its mask gains
  a bit: 3 of 4 binds under Case Ch) or appends a group. Every field of a QK^T instruction
  depends only on its request's table and index in the batch, so the new layout is the old one
  with those masks rewritten and the new triples spliced in at the sections' ends
  (:func:`qk_patch`).
* SV: a block's first token appends a CZ segment (:meth:`ValueTable.append_cz`), its last token
  removes it and grows the run before it by one block (:meth:`ValueTable.publish_last`). The
  segment is spliced in or out at the section's end and the run's score writes and MACs widened;
  what depends on other requests, the CZ tiles' payload offsets (tiles are numbered over the
  batch) and the zero burst's, is rewritten for the whole batch in two vectorised assignments
  (:func:`sv_patch`).

Both return ``None`` when they do not apply (another request list, a narrower data width, a
table that was re-split rather than edited at its end, or more than :data:`MAX_CHANGED`
changed requests); the caller then lays the batch out anew. The new pieces of all changed
requests are built in one vectorised pass and every field is spliced in one concatenation,
so a patch costs about 15 NumPy calls plus a few Python operations per changed request.
``tests/test_runtime_tables.py`` checks the patched layouts against the rebuilt ones after
random lifecycles and staggered decode steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.programs.batch import Batch
from patton.runtime.programs.layout import _GB, cz_segments, qk_fields, qk_triples, sv_sections
from patton.runtime.programs.tables import KeyTable, ValueTable
from patton.sim.program import UNSET, Program, same, zeros

__all__ = ["QkLayout", "qk_layout", "qk_patch", "SvLayout", "sv_layout", "sv_patch",
           "MAX_CHANGED"]

#: Changed requests beyond which a patch is not tried: its Python work grows with them, the
#: rebuild's does not (patching all 32 requests of ``benchmarks/runtime_decode_step.py`` still
#: measured as fast as the rebuild or faster).
MAX_CHANGED = 64


@dataclass(frozen=True, slots=True)
class QkLayout:
    """A QK^T batch and what it was laid out from, so that it can be patched.

    Invariants: ``batch`` equals :func:`layout.qk_batch` of ``tables`` as they were when it was
    made: table ``k`` (``tables[k]``, then with ``resets[k]`` resets, ``joins[k]`` joins and
    ``ngroups[k]`` groups) owns the instructions ``base[k] .. base[k] + heads + 3 *
    ngroups[k] - 1``. The batch's arrays are read-only and never change (a patch makes new
    ones); the layout keeps the table objects alive and reads them only when patching.
    """

    batch: Batch  # the layout
    fields: np.ndarray  # (8, instructions): its field arrays (layout.FIELD_ROWS), read-only
    tables: tuple[KeyTable, ...]  # per request: its table (the object)
    resets: tuple[int, ...]  # per request: the table's reset count when laid out
    joins: tuple[int, ...]  # per request: the table's join count when laid out
    ngroups: np.ndarray  # per request: groups laid out
    base: np.ndarray  # per request: first instruction of its section


def qk_layout(cfg: Config, layer: int, tables: Sequence[KeyTable]) -> QkLayout:
    """Lay ``tables`` out from scratch (:func:`layout.qk_batch`) and keep what a patch needs."""
    batch, mat = qk_fields(cfg, layer, tables)
    ng = np.fromiter((tb.ngroups for tb in tables), dtype=np.int64, count=len(tables))
    sec = cfg.heads + 3 * ng
    return QkLayout(batch, mat, tuple(tables), tuple(tb.resets for tb in tables),
                    tuple(tb.joins for tb in tables), ng, np.cumsum(sec) - sec)


def qk_patch(cfg: Config, layer: int, old: QkLayout, tables: Sequence[KeyTable],
             changed: Sequence[int]) -> QkLayout | None:
    """Return ``old`` patched for ``tables`` whose entries ``changed`` (ascending) grew.

    ``tables[k]`` must be ``old.tables[k]``, unchanged since ``old`` was laid out, for every
    ``k`` not in ``changed`` (the runtime knows from the request versions). Returns ``None``
    (nothing done) when a changed table is another object, was reset or lost groups, or
    more than :data:`MAX_CHANGED` changed.
    """
    n = len(tables)
    if n != len(old.tables) or len(changed) > MAX_CHANGED:
        return None
    grown = []  # (request, old groups, new groups, joined old groups)
    for k in changed:
        tb = tables[k]
        ng0 = int(old.ngroups[k])
        if tb is not old.tables[k] or tb.resets != old.resets[k] or tb.ngroups < ng0:
            return None
        grown.append((k, ng0, tb.ngroups, tb.joins != old.joins[k]))
    h = cfg.heads
    b = old.batch
    zero = b.shape[0] * h * b.shape[2]
    new_groups = [tables[k].groups[ng0:ng] for k, ng0, ng, _ in grown if ng > ng0]
    if new_groups:  # every request's new triples at once, spliced in at its section's end
        tri = qk_triples(cfg, layer, np.concatenate(new_groups), zero)
        edits, u = [], 0
        for k, ng0, ng, _ in grown:
            if ng > ng0:
                edits.append((int(old.base[k]) + h + 3 * ng0, 0, tri[:, u:u + 3 * (ng - ng0)]))
                u += 3 * (ng - ng0)
        mat = _splice(old.fields, edits)
    else:
        mat = old.fields.copy()
    shift = np.zeros(n, dtype=np.int64)
    ngroups = old.ngroups.copy()
    for k, ng0, ng, _ in grown:
        shift[k] = 3 * (ng - ng0)
        ngroups[k] = ng
    base = old.base + (np.cumsum(shift) - shift)
    cmask = mat[3]
    for k, ng0, _, joined in grown:  # members that joined old groups: the triples' masks
        if joined and ng0:
            at = int(base[k]) + h
            cmask[at:at + 3 * ng0].reshape(ng0, 3)[:] = tables[k].groups[:ng0, 2:3]
    op, opsize, gpr0, cmask, row, col, start, size = _frozen(mat)
    unset = same(mat.shape[1], UNSET)
    new = Batch(Program(op, opsize, gpr0, cmask, unset, row, unset, col, unset, start, size,
                        b.prog.data), b.shape, b.tiles, b.rv, b.t, b.lanes)
    return QkLayout(new, mat, tuple(tables), tuple(tb.resets for tb in tables),
                    tuple(tb.joins for tb in tables), ngroups, base)


def _splice(a: np.ndarray, edits: list[tuple[int, int, np.ndarray | None]]) -> np.ndarray:
    """Return a copy of ``a`` with each ``(at, deleted, inserted)`` applied along its last
    axis (``at`` ascending, positions in ``a``)."""
    parts, prev = [], 0
    for at, deleted, inserted in edits:
        parts.append(a[..., prev:at])
        if inserted is not None:
            parts.append(inserted)
        prev = at + deleted
    parts.append(a[..., prev:])
    return np.concatenate(parts, axis=-1)


def _frozen(mat: np.ndarray) -> list[np.ndarray]:
    """Make ``mat`` and its rows read-only; return the rows."""
    rows = list(mat)
    for a in rows:
        a.flags.writeable = False
    mat.flags.writeable = False
    return rows


@dataclass(frozen=True, slots=True)
class SvLayout:
    """An SV batch and what it was laid out from, so that it can be patched.

    Invariants: ``batch`` equals :func:`layout.sv_batch` of ``tables`` as they were when it was
    made, for data width ``width``: table ``k`` (then with ``rebuilt[k]`` re-splits and
    ``edits[k]`` end edits) owns the ``seclen[k]`` instructions from ``base[k]`` and its
    ``ncz[k]`` CZ blocks' tiles, which follow those of the requests before it (``heads``
    tile rows each). The batch's arrays are read-only and never change (a patch makes new
    ones); the layout keeps the table objects alive and reads them only when patching.
    """

    batch: Batch  # the layout
    fields: np.ndarray  # (8, instructions): its field arrays (layout.FIELD_ROWS), read-only
    width: int  # step data width
    tables: tuple[ValueTable, ...]  # per request: its table (the object)
    rebuilt: tuple[int, ...]  # per request: the table's re-split count when laid out
    edits: tuple[int, ...]  # per request: the table's end-edit count when laid out
    seclen: np.ndarray  # per request: instructions
    ncz: np.ndarray  # per request: CZ blocks (tiles of heads rows each)

    @property
    def base(self) -> np.ndarray:
        """Per request: its section's first instruction."""
        return np.cumsum(self.seclen) - self.seclen


def sv_layout(cfg: Config, layer: int, tables: Sequence[ValueTable], width: int) -> SvLayout:
    """Lay ``tables`` out from scratch (:func:`layout.sv_batch`) and keep what a patch needs."""
    batch, seclen, ncz, mat = sv_sections(cfg, layer, tables, width)
    return SvLayout(batch, mat, width, tuple(tables), tuple(tb.rebuilt for tb in tables),
                    tuple(tb.edits for tb in tables), seclen, ncz)


def sv_patch(cfg: Config, layer: int, old: SvLayout, tables: Sequence[ValueTable],
             changed: Sequence[int], width: int) -> SvLayout | None:
    """Return ``old`` patched for ``tables`` whose entries ``changed`` (ascending) were edited
    at their ends once each (a CZ block appended or the last one published).

    Unchanged entries must be ``old``'s tables as they were (see :func:`qk_patch`). Returns
    ``None`` (nothing done) when a changed table is another object, ``width`` is narrower
    than ``old``'s (or than a table), a changed table was re-split or edited other than once,
    or more than :data:`MAX_CHANGED` changed. A wider ``width`` moves every score write's
    payload offset (request ``k``, head ``g`` reads row ``k * heads + g`` of the step data).
    """
    n = len(tables)
    if (n != len(old.tables) or width < old.width or width % cfg.block_size
            or len(changed) > MAX_CHANGED):
        return None
    for k in changed:
        tb = tables[k]
        if (tb is not old.tables[k] or tb.rebuilt != old.rebuilt[k]
                or tb.edits != old.edits[k] + 1 or len(tb.values) * cfg.block_size > width):
            return None  # (a table wider than the step data: the rebuild reports it)
    h, rv, t = cfg.heads, cfg.v_rows, cfg.block_size
    span = h + 3 * rv  # a CZ segment's instructions
    w0 = old.width
    body0, body = n * h * w0, n * h * width
    b = old.batch
    seclen, ncz = old.seclen.copy(), old.ncz.copy()
    base = old.base
    tile0 = np.cumsum(ncz) - ncz
    # classify (Python per changed request), then build every inserted piece at once
    added = [k for k in changed if tables[k].last_edit == "cz"]
    grown = [k for k in changed if tables[k].last_edit != "cz"]  # "pub": run before grows
    ntiles = len(b.tiles) + (len(added) - len(grown)) * h
    zero0, zero = body0 + len(b.tiles) * rv * t, body + ntiles * rv * t
    segs = tsrc = None
    if added:
        czs = [tables[k].values[-1] for k in added]
        segs = cz_segments(cfg, layer, czs)
        segs[6, :, :h] += body0  # score writes read tiles (renumbered below)
        segs[6, :, h:] = zero
        req = np.array(added, dtype=np.int64)
        pos = np.array([len(tables[k].values) - 1 for k in added], dtype=np.int64)
        tsrc = (req[:, None] * (h * width) + np.arange(h) * width) // t + pos[:, None]
    edits: list[tuple[int, int, np.ndarray | None]] = []
    tedits: list[tuple[int, int, np.ndarray | None]] = []
    a = 0
    for k in changed:
        end = int(base[k] + seclen[k])
        tend = int(tile0[k] + ncz[k]) * h
        if a < len(added) and added[a] == k:
            assert segs is not None and tsrc is not None
            edits.append((end, 0, segs[:, a]))
            tedits.append((tend, 0, tsrc[a]))
            seclen[k] += span
            ncz[k] += 1
            a += 1
        else:
            edits.append((end - span, span, None))
            tedits.append((tend - h, h, None))
            seclen[k] -= span
            ncz[k] -= 1
    mat = _splice(old.fields, edits)
    op, opsize, gpr0, cmask, row, col, start, size = mat
    tiles = b.tiles
    if width != w0:  # a wider step: tile rows of request k, head g move to row k * heads + g
        tiles = tiles // (w0 // t) * (width // t) + tiles % (w0 // t)
    tiles = _splice(tiles, tedits)
    if grown:  # the last run of each one's last segment: score writes and MACs one wider
        base = np.cumsum(seclen) - seclen
        g = np.array(grown, dtype=np.int64)
        nr = np.array([len(tables[k].plan.segments[-1].runs) for k in grown], dtype=np.int64)
        s0 = (base[g] + seclen[g] - (h * nr + rv * (nr + 2)))[:, None]
        gb = s0 + np.arange(h) * nr[:, None] + (nr - 1)[:, None]
        opsize[gb] += 1
        size[gb] += t
        opsize[s0 + h * nr[:, None] + np.arange(rv) * (nr + 2)[:, None] + nr[:, None]] += 1
    # payload offsets that depend on the whole batch: CZ tiles (numbered in batch order) and
    # the zero burst after them; direct score writes point below the step data's end. Before
    # the first edit only a wider step or a moved zero burst changes anything.
    lo = 0 if width != w0 or zero != zero0 else edits[0][0] if edits else len(op)
    is_gb = op[lo:] == _GB
    tiled = lo + np.flatnonzero(is_gb & (start[lo:] >= body0))
    if width != w0:  # a wider step: score (request, head) rows start further apart
        direct = np.flatnonzero(is_gb & (start < body0))
        at = start[direct]
        start[direct] = at // w0 * width + at % w0
    if zero != zero0:
        start[lo:][~is_gb] = zero
    rank0 = int(tile0[changed[0]]) * h if lo and changed else 0  # tiles before lo stay
    assert rank0 + len(tiled) == ntiles == len(tiles), "CZ score writes and tiles disagree"
    start[tiled] = body + (rank0 + np.arange(len(tiled))) * (rv * t)
    op, opsize, gpr0, cmask, row, col, start, size = _frozen(mat)
    unset = same(len(op), UNSET)
    new = Batch(Program(op, opsize, gpr0, cmask, unset, row, unset, col, unset, start, size,
                        zeros(zero + b.lanes)), (n, h, width), tiles, b.rv, b.t, b.lanes)
    return SvLayout(new, mat, width, tuple(tables), tuple(tb.rebuilt for tb in tables),
                    tuple(tb.edits for tb in tables), seclen, ncz)
