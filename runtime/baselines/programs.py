"""Programs of the baseline layouts: Key and Value writes, QK^T and SV, and their plans.

Every baseline stores its KV in the units of :mod:`.geometry`; a placement gives each unit of a
block a ``(channel, slot)`` pair per KV head, for Key and for Value. The programs here turn
placements into the shared ISA (:mod:`patton.sim.isa`), the same instructions PATTON's
programs use, so they run on every executor:

* **Key writes**: one ``W MEM`` per token and burst (token ``t`` of a unit to bank ``t``).
* **Value writes**: a prefill chunk writes bursts (one per unit, Value row and bank, the lanes
  of its tokens masked in); a decode step's single token per request writes one ``WR_ABK`` per
  Value row (word ``b`` to bank ``b``, one lane), the cheapest single-token write AiM has and
  the one PATTON-wo-CZ uses by default.
* **QK^T**: a *job* is one request's KV head; its channels' GBs get the query tiled over every
  ``E``-aligned column, then one ``WR_BIAS`` / ``MAC_ABK`` (``E`` columns) / ``RD_MAC`` per
  unit, in row order.
* **SV**: per job and channel the units' Value columns split into *segments* of disjoint
  columns (the GB holds one score burst per column); per segment the scores go to the GB,
  then per Value row one ``WR_BIAS``, a ``MAC_ABK`` per run of adjacent columns and one
  ``RD_MAC``.

The host reads every ``RD_MAC`` before it issues the next instruction (the public simulator's
DMA waits for the data), so a read-out to one channel at a time would serialise the channels.
The programs therefore run every channel's *timeline* (its jobs in batch order) in lock step:
step ``a`` sends one ``WR_BIAS`` and one ``RD_MAC`` to every channel that has an ``a``-th
unit (or SV row), and one ``MAC_ABK`` per distinct address among them, so channels whose
units share an address share the instruction (a channel mask, PATTON's Case Ch). That is the
favourable schedule the paper grants each baseline (§5.2): every channel busy in every step,
limited only by how evenly the baseline spread the batch's units over the channels (a policy
that stripes a request over a channel group also starts each request on all of them at one
step, ``aligned``, so they stay at the same addresses). Plans
(:class:`QkPlan`, :class:`SvPlan`) say what each read-out holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.sim.isa import Opcode, channel_bit, mask_channels
from patton.sim.program import FIELDS, OP_ID, UNSET, Program, Readout

__all__ = ["Job", "QkPlan", "SvPlan", "key_writes", "value_writes", "token_value_writes",
           "qk_program", "sv_program", "empty"]

_GB, _BIAS, _MAC, _RD, _W, _ABK = (OP_ID[o] for o in (
    Opcode.WR_GB, Opcode.WR_BIAS, Opcode.MAC_ABK, Opcode.RD_MAC, Opcode.WR_MEM, Opcode.WR_ABK))
_U = UNSET
#: The rows of a program being assembled: :class:`Program`'s positional fields before ``data``.
_FIELDS = ("op", *FIELDS, "start", "size")


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _assemble(columns: np.ndarray, data: np.ndarray) -> Program:
    """Return the program of an ``(11, n)`` int64 matrix of :data:`_FIELDS` over ``data``."""
    rows = [_ro(np.ascontiguousarray(columns[i])) for i in range(len(_FIELDS))]
    return Program(*rows, data)


def empty() -> Program:
    """A program with no instruction."""
    return _assemble(np.zeros((len(_FIELDS), 0), dtype=np.int64), np.zeros(0, np.uint16))


# ------------------------------------------------------------------------------ writes


def key_writes(g: Geometry, layers: int, chunks: Sequence[tuple[np.ndarray, int, np.ndarray]]
               ) -> Program:
    """Return the Key writes of ``chunks``: ``(key placement (heads, units, 2), offset, keys)``.

    ``keys`` is ``(layers, n, heads, D)`` bf16 bits of tokens ``offset .. offset + n - 1`` of
    the block; token ``o`` goes to unit ``o // 16``, bank ``o % 16``, ``E`` bursts per head.
    """
    e, h = g.bursts, g.heads
    cols, data, base = [], [], 0
    for place, offset, keys in chunks:
        n = keys.shape[1]
        o = offset + np.arange(n)
        ch = place[:, o // UNIT, 0].T  # (n, heads)
        rel, col0 = np.divmod(place[:, o // UNIT, 1].T, g.keys_per_row)
        col0 = col0 * e
        shape = (layers, n, h, e)
        layer = np.arange(layers)[:, None, None, None]
        c = np.empty((len(_FIELDS),) + shape, dtype=np.int64)
        c[0] = _W
        c[1:3] = _U
        c[3] = _U
        c[4] = (o % UNIT)[None, :, None, None]
        c[5] = layer * g.rows_per_layer + rel[None, :, :, None]
        c[6] = ch[None, :, :, None]
        c[7] = col0[None, :, :, None] + np.arange(e)
        c[8] = _U
        c[9] = base + np.arange(np.prod(shape)).reshape(shape) * UNIT
        c[10] = UNIT
        cols.append(c.reshape(len(_FIELDS), -1))
        data.append(np.ascontiguousarray(keys, dtype=np.uint16).reshape(-1))
        base += keys.size
    if not cols:
        return empty()
    return _assemble(np.concatenate(cols, axis=1), np.concatenate(data))


def value_writes(g: Geometry, layers: int,
                 chunks: Sequence[tuple[np.ndarray, int, np.ndarray]]) -> Program:
    """Return the Value bursts of ``chunks``: ``(value placement, offset, values)``.

    Per unit the chunk touches, per layer, head, Value row ``i`` and bank ``b``: one ``W MEM``
    whose lane ``t`` is dimension ``16 i + b`` of the unit's token ``t`` (lanes outside the
    chunk masked off unless it covers the whole unit).
    """
    rv, h = g.v_rows, g.heads
    cols, data, base = [], [], 0
    for place, offset, values in chunks:
        n = values.shape[1]
        pos = offset
        while pos < offset + n:
            u, lane = divmod(pos, UNIT)
            end = min(offset + n, (u + 1) * UNIT)
            m = end - pos
            seg = values[:, pos - offset:end - offset]  # (layers, m, heads, D)
            words = np.zeros((layers, h, rv, UNIT, UNIT), dtype=np.uint16)
            words[..., lane:lane + m] = seg.reshape(layers, m, h, rv, UNIT).transpose(
                0, 2, 3, 4, 1)
            ch = place[:, u, 0]  # (heads,)
            row0, col = np.divmod(place[:, u, 1], g.device.columns)
            row0 = g.key_rows + row0 * rv
            shape = (layers, h, rv, UNIT)
            c = np.empty((len(_FIELDS),) + shape, dtype=np.int64)
            c[0] = _W
            c[1:4] = _U
            c[4] = np.arange(UNIT)
            c[5] = (np.arange(layers)[:, None, None, None] * g.rows_per_layer
                    + row0[None, :, None, None] + np.arange(rv)[None, None, :, None])
            c[6] = ch[None, :, None, None]
            c[7] = col[None, :, None, None]
            c[8] = _U if m == UNIT else ((1 << m) - 1) << lane
            c[9] = base + np.arange(np.prod(shape)).reshape(shape) * UNIT
            c[10] = UNIT
            cols.append(c.reshape(len(_FIELDS), -1))
            data.append(words.reshape(-1))
            base += words.size
            pos = end
    if not cols:
        return empty()
    return _assemble(np.concatenate(cols, axis=1), np.concatenate(data))


def token_value_writes(g: Geometry, places: np.ndarray, offsets: np.ndarray,
                       values: np.ndarray) -> Program:
    """Return one ``WR_ABK`` per request, layer, head and Value row for a decode step.

    ``places`` ``(requests, heads, 2)`` is each token's Value unit, ``offsets`` its block
    offsets, ``values`` ``(requests, layers, heads, D)`` bf16 bits; word ``b`` of Value row
    ``i`` is dimension ``16 i + b``, written in lane ``offset % 16``.
    """
    n, layers, h, _ = values.shape
    rv = g.v_rows
    if n == 0:
        return empty()
    row0, col = np.divmod(places[:, :, 1], g.device.columns)  # (n, heads)
    row0 = g.key_rows + row0 * rv
    bits = np.array([channel_bit(c) for c in range(g.channels)], dtype=np.int64)
    shape = (n, layers, h, rv)
    c = np.empty((len(_FIELDS),) + shape, dtype=np.int64)
    c[0] = _ABK
    c[1] = _U
    c[2] = 0
    c[3] = bits[places[:, :, 0]][:, None, :, None]
    c[4] = _U
    c[5] = (np.arange(layers)[None, :, None, None] * g.rows_per_layer
            + row0[:, None, :, None] + np.arange(rv))
    c[6] = _U
    c[7] = col[:, None, :, None]
    c[8] = (1 << (np.asarray(offsets) % UNIT))[:, None, None, None]
    c[9] = np.arange(np.prod(shape)).reshape(shape) * UNIT
    c[10] = UNIT
    data = np.ascontiguousarray(values, dtype=np.uint16).reshape(-1)
    return _assemble(c.reshape(len(_FIELDS), -1), data)


# ------------------------------------------------------------------------------ attention


@dataclass(frozen=True, slots=True)
class Job:
    """One request's KV head in an attention program.

    ``key`` / ``value`` are ``(units, 2)`` ``(channel, slot)`` pairs of the request's units in
    table order (unit ``j`` holds tokens ``16 j ..`` of the request's table layout).
    """

    index: int  # the request's position in the batch
    head: int  # KV head
    key: np.ndarray  # (units, 2)
    value: np.ndarray  # (units, 2)


@dataclass(frozen=True, slots=True)
class QkPlan:
    """How one request's QK^T read-outs decode: per read-out, ``(head, channel, unit)``."""

    reads: list[tuple[int, int, int]]
    blocks: int  # table length
    block_size: int  # tokens per block

    def readouts(self, g: Geometry | None = None) -> int:
        """Return how many read-outs the request's part of the program returns."""
        return len(self.reads)

    def decode(self, readouts: Sequence[Readout], g: Geometry) -> np.ndarray:
        """Return bf16 scores ``(heads, blocks * block_size)`` (table layout)."""
        if len(readouts) != len(self.reads):
            raise ValueError(f"{len(readouts)} readouts for a plan of {len(self.reads)}")
        out = np.zeros((g.heads, self.blocks * self.block_size), dtype=np.uint16)
        for r, (head, ch, u) in zip(readouts, self.reads):
            if r.channel != ch:
                raise ValueError(f"a read-out came from channel {r.channel}, the plan expects "
                                 f"{ch}")
            out[head, u * UNIT:(u + 1) * UNIT] = r.data
        return out


@dataclass(frozen=True, slots=True)
class SvPlan:
    """How one request's SV read-outs decode.

    ``reads[k]`` is the request's ``k``-th read-out: ``(head, Value row i, segment, channel)``,
    lane ``b`` holding the partial sum of dimension ``16 i + b`` over that segment of that
    channel. ``segments[(head, channel)]`` lists the channel's segments, each a tuple of runs,
    each run the units at its adjacent columns, in column order. The host sums the partials
    per head and dimension over channels ascending, then segments in order (:meth:`decode`;
    the reference sums in the same order).
    """

    reads: list[tuple[int, int, int, int]]
    segments: dict[tuple[int, int], list[tuple[tuple[int, ...], ...]]]
    blocks: int
    block_size: int

    def readouts(self, g: Geometry | None = None) -> int:
        """Return how many read-outs the request's part of the program returns."""
        return len(self.reads)

    def decode(self, readouts: Sequence[Readout], g: Geometry) -> np.ndarray:
        """Return ``(heads, D)`` float32 outputs: the partials summed on the host."""
        if len(readouts) != len(self.reads):
            raise ValueError(f"{len(readouts)} readouts for a plan of {len(self.reads)}")
        parts: dict[tuple[int, int, int, int], np.ndarray] = {}
        for r, (head, i, seg, ch) in zip(readouts, self.reads):
            if r.channel != ch:
                raise ValueError(f"a read-out came from channel {r.channel}, the plan expects "
                                 f"{ch}")
            parts[(head, ch, seg, i)] = (r.data.astype(np.uint32) << 16).view(np.float32)
        out = np.zeros((g.heads, g.d_head), dtype=np.float32)
        for key in sorted(parts):
            head, _, _, i = key
            out[head, i * UNIT:(i + 1) * UNIT] += parts[key]
        return out


def _mask(channels: object) -> int:
    m = 0
    for c in channels:  # type: ignore[attr-defined]
        m |= channel_bit(int(c))
    return m


class _Emitter:
    """Instruction rows and payload words of one program being built, and the owner of
    every read-out (``order``: per read-out, the request and its plan entry)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, ...]] = []
        self.data: list[np.ndarray] = []
        self.words = 0
        self.zero = -1
        self.order: list[int] = []  # per read-out: the request's batch position

    def payload(self, words: np.ndarray) -> tuple[int, int]:
        start = self.words
        self.data.append(words)
        self.words += len(words)
        return start, len(words)

    def zeros(self) -> tuple[int, int]:
        if self.zero < 0:
            self.zero = self.payload(np.zeros(UNIT, dtype=np.uint16))[0]
        return self.zero, UNIT

    def program(self) -> Program:
        if not self.rows:
            return empty()
        cols = np.array(self.rows, dtype=np.int64).T
        data = np.concatenate(self.data) if self.data else np.zeros(0, np.uint16)
        return _assemble(cols, data)


def _timelines(jobs: Sequence[Job], kind: str, atoms: Callable[[Job, int, list[int]], list],
               aligned: bool) -> dict[int, list]:
    """Per channel, the atoms of its jobs in batch order (``atoms(job, channel, units)`` gives
    a job's atoms on a channel from its units there, in table order).

    With ``aligned`` a job starts at the same step on all its channels: each is padded with
    ``None`` (idle) up to the job's latest channel, so the channels of a head group that hold
    one request's units at the same addresses (PIMphony's stripes) stay in step and share
    each ``MAC_ABK``. Without, every channel runs its atoms back to back.
    """
    out: dict[int, list] = {}
    for job in jobs:
        place = job.key if kind == "key" else job.value
        per: dict[int, list[int]] = {}
        for u, c in enumerate(place[:, 0].tolist()):
            per.setdefault(c, []).append(u)
        start = max((len(out.get(c, ())) for c in per), default=0) if aligned else 0
        for c, units in per.items():
            line = out.setdefault(c, [])
            line.extend([None] * (start - len(line)))
            line.extend(atoms(job, c, units))
    return out


def qk_program(g: Geometry, layer: int, jobs: Sequence[Job], queries: np.ndarray,
               blocks: Sequence[int], aligned: bool = False) -> tuple[Program, list[QkPlan]]:
    """Return QK^T over ``jobs`` and one plan per request (``queries``: ``(n, heads, D)``).

    Every channel walks its own timeline (its jobs in batch order, each job's units there in
    row order) in lock step with the others: step ``a`` is one ``WR_BIAS`` to every channel
    with an ``a``-th unit, a ``MAC_ABK`` per distinct address among them, one ``RD_MAC`` to
    them all, preceded by the query's ``WR_GB`` on the channels whose ``a``-th unit starts a
    job (one per job: the same payload). With ``aligned``, a job starts on all its channels
    at one step (:func:`_timelines`). ``blocks[i]`` is request ``i``'s table length; a
    request's read-outs interleave with others', :func:`deal` splits them.
    """
    em = _Emitter()
    e, cols = g.bursts, g.device.gb_columns
    reps = cols // e
    zstart, zsize = em.zeros()
    plans = [QkPlan([], b, g.block_size) for b in blocks]

    def atoms(job: Job, c: int, units: list[int]) -> list[tuple[Job, int, int, int, bool]]:
        rel, q = np.divmod(job.key[units, 1], g.keys_per_row)
        ordered = sorted(zip(rel.tolist(), (q * e).tolist(), units))
        return [(job, r, col, u, k == 0) for k, (r, col, u) in enumerate(ordered)]

    steps = _timelines(jobs, "key", atoms, aligned)  # channel -> its atoms (None: idle)
    gb: dict[int, tuple[int, int]] = {}  # id(job) -> its query payload
    longest = max((len(line) for line in steps.values()), default=0)
    for a in range(longest):
        here = [(c, line[a]) for c, line in steps.items()
                if a < len(line) and line[a] is not None]
        if not here:
            continue
        starts: dict[int, list[int]] = {}
        for c, (job, *_rest, first) in here:
            if first:
                starts.setdefault(id(job), []).append(c)
        jobs_by_id = {id(atom[0]): atom[0] for _, atom in here}
        for jid, chans in starts.items():
            job = jobs_by_id[jid]
            if jid not in gb:
                gb[jid] = em.payload(np.tile(queries[job.index, job.head], reps))
            start, size = gb[jid]
            em.rows.append((_GB, cols, 0, _mask(chans), _U, _U, _U, 0, _U, start, size))
        m = _mask(c for c, _ in here)
        em.rows.append((_BIAS, _U, 0, m, _U, _U, _U, _U, _U, zstart, zsize))
        by_address: dict[tuple[int, int], list[int]] = {}
        for c, (_job, r, col, _u, _f) in here:
            by_address.setdefault((r, col), []).append(c)
        for (r, col), chans in sorted(by_address.items()):
            em.rows.append((_MAC, e, _U, _mask(chans), _U, g.row(layer, r), _U, col, _U, 0, 0))
        em.rows.append((_RD, _U, 0, m, _U, _U, _U, _U, _U, 0, 0))
        atom_of = dict(here)
        for c in mask_channels(m):
            job, _r, _col, u, _f = atom_of[c]
            plans[job.index].reads.append((job.head, c, u))
            em.order.append(job.index)
    return em.program(), _Dealt.wrap(plans, em.order)


def sv_program(g: Geometry, layer: int, jobs: Sequence[Job], probs: np.ndarray,
               blocks: Sequence[int], aligned: bool = False) -> tuple[Program, list[SvPlan]]:
    """Return SV over ``jobs`` and one plan per request (``probs``: ``(n, heads, width)``).

    Every channel walks its timeline of segments (per job, its units there split into runs of
    adjacent columns and GB-disjoint segments), one *atom* per segment and Value row, in lock
    step: atom step ``a`` writes the scores of the segments that start there to their
    channel's GB, then one ``WR_BIAS`` to every channel with an ``a``-th atom, the ``MAC_ABK``s
    of its runs (one instruction for the channels whose runs share addresses) and one
    ``RD_MAC`` to them all. ``aligned`` as in :func:`qk_program`.
    """
    em = _Emitter()
    rv, w = g.v_rows, g.device.columns
    zstart, zsize = em.zeros()
    plans = [SvPlan([], {}, b, g.block_size) for b in blocks]
    # channel -> atoms: (job, segment k, row i, runs ((first, count, row0, col), ...))

    def atoms(job: Job, c: int, units: list[int]) -> list[tuple[Job, int, int, tuple]]:
        grp, col = np.divmod(job.value[units, 1], w)
        row0 = g.key_rows + grp * rv
        segs = _segments(list(zip(units, row0.tolist(), col.tolist())))
        plans[job.index].segments[(job.head, c)] = [
            tuple(us for us, _r, _cl in runs) for runs in segs]
        return [(job, k, i, tuple(runs)) for k, runs in enumerate(segs) for i in range(rv)]

    steps = _timelines(jobs, "value", atoms, aligned)
    longest = max((len(line) for line in steps.values()), default=0)
    for a in range(longest):
        here = [(c, line[a]) for c, line in steps.items()
                if a < len(line) and line[a] is not None]
        if not here:
            continue
        for c, (job, _k, i, runs) in here:
            if i:
                continue
            row = probs[job.index, job.head]
            for us, _r0, cl in runs:  # the segment starts: its units' scores to the GB
                words = np.concatenate([row[u * UNIT:(u + 1) * UNIT] for u in us])
                start, size = em.payload(words.astype(np.uint16, copy=False))
                em.rows.append((_GB, len(us), 0, _mask((c,)), _U, _U, _U, cl, _U, start,
                                size))
        m = _mask(c for c, _ in here)
        em.rows.append((_BIAS, _U, 0, m, _U, _U, _U, _U, _U, zstart, zsize))
        by_runs: dict[tuple, list[int]] = {}
        for c, (_job, _k, i, runs) in here:
            key = tuple((r0 + i, cl, len(us)) for us, r0, cl in runs)
            by_runs.setdefault(key, []).append(c)
        for key, chans in sorted(by_runs.items()):
            cm = _mask(chans)
            for row, cl, count in key:
                em.rows.append((_MAC, count, _U, cm, _U, g.row(layer, row), _U, cl, _U, 0, 0))
        em.rows.append((_RD, _U, 0, m, _U, _U, _U, _U, _U, 0, 0))
        atom_of = dict(here)
        for c in mask_channels(m):
            job, k, i, _runs = atom_of[c]
            plans[job.index].reads.append((job.head, i, k, c))
            em.order.append(job.index)
    return em.program(), _Dealt.wrap(plans, em.order)


def _segments(units: list[tuple[int, int, int]]) -> list[list[tuple[tuple[int, ...], int, int]]]:
    """Split one channel's Value units (table order) into runs, then GB-disjoint segments.

    A run is ``(units, row0, col)``: units at adjacent columns ``col ..`` of one Value group,
    in column order (PIMphony's channel holds every ``P``-th unit, so a run's units need not
    be consecutive); a segment's runs use disjoint columns (the GB holds one score burst per
    column).
    """
    runs: list[list] = []
    for u, r0, cl in units:
        last = runs[-1] if runs else None
        if last is not None and last[1] == r0 and last[2] + len(last[0]) == cl:
            last[0].append(u)
        else:
            runs.append([[u], r0, cl])
    segs: list[list[tuple[tuple[int, ...], int, int]]] = []
    used = 0
    for us, r0, cl in runs:
        span = ((1 << len(us)) - 1) << cl
        if not segs or used & span:
            segs.append([])
            used = 0
        segs[-1].append((tuple(us), r0, cl))
        used |= span
    return segs


class _Dealt(list):
    """The plans of a batch, with the request each read-out of the program belongs to."""

    order: list[int]  # per read-out: the request's batch position

    @classmethod
    def wrap(cls, plans: list, order: list[int]) -> _Dealt:
        out = cls(plans)
        out.order = order
        return out


def deal(plans: Sequence[QkPlan | SvPlan], readouts: Sequence[Readout]) -> list[list[Readout]]:
    """Split a batch program's read-outs into each request's, in its plan's order."""
    order = getattr(plans, "order", None)
    if order is None:
        raise ValueError("these plans do not come from one batch program")
    if len(order) != len(readouts):
        raise ValueError(f"{len(readouts)} read-outs for a batch of {len(order)}")
    out: list[list[Readout]] = [[] for _ in plans]
    for index, r in zip(order, readouts):
        out[index].append(r)
    return out
