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
step ``a`` sends one ``WR_BIAS`` and one ``RD_MAC`` to every channel that has an ``a``-th unit
(or SV row), and one ``MAC_ABK`` per distinct address among them, so channels whose units share
an address share the instruction (a channel mask, PATTON's Case Ch). That is the favourable
schedule the paper grants each baseline (§5.2): every channel busy in every step, limited only
by how evenly the baseline spread the batch's units over the channels (a policy that stripes a
request over a channel group also starts each request on all of them at one step, ``aligned``,
so they stay at the same addresses). Plans (:class:`UnitQkPlan`, :class:`UnitSvPlan`) say what
each read-out holds. The builders lay out every timeline and step at once with array sorts over
the batch's units, not instruction by instruction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from patton.runtime.baselines.geometry import UNIT, Geometry
from patton.sim.isa import MASK_BITS, Opcode, channel_bit
from patton.sim.program import FIELDS, OP_ID, UNSET, Program, Readout

__all__ = ["Jobs", "Reads", "UnitQkPlan", "UnitSvPlan", "key_writes", "value_writes",
           "token_key_writes", "token_value_writes", "qk_program", "sv_program", "empty"]

_GB, _BIAS, _MAC, _RD, _W, _ABK = (OP_ID[o] for o in (
    Opcode.WR_GB, Opcode.WR_BIAS, Opcode.MAC_ABK, Opcode.RD_MAC, Opcode.WR_MEM, Opcode.WR_ABK))
_U = UNSET
#: The rows of a program being assembled: :class:`Program`'s positional fields before ``data``.
_FIELDS = ("op", *FIELDS, "start", "size")
#: The channel-mask bit of every channel.
_BIT = np.array([channel_bit(c) for c in range(MASK_BITS)], dtype=np.int64)


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


def token_key_writes(g: Geometry, places: np.ndarray, offsets: np.ndarray,
                     keys: np.ndarray) -> Program:
    """:func:`key_writes` of one token per request (a decode step), built at once: the same
    program as ``key_writes(g, layers, [(place, offset, keys[i][:, None]) ...])``.

    ``places`` ``(requests, heads, 2)`` is each token's Key unit, ``offsets`` its block
    offsets, ``keys`` ``(requests, layers, heads, D)`` bf16 bits.
    """
    n, layers, h, _ = keys.shape
    e = g.bursts
    if n == 0:
        return empty()
    offsets = np.asarray(offsets, dtype=np.int64)
    rel, col0 = np.divmod(places[:, :, 1], g.keys_per_row)  # (n, heads)
    shape = (n, layers, h, e)
    c = np.empty((len(_FIELDS),) + shape, dtype=np.int64)
    c[0] = _W
    c[1:4] = _U
    c[4] = (offsets % UNIT)[:, None, None, None]
    c[5] = (np.arange(layers)[None, :, None, None] * g.rows_per_layer
            + rel[:, None, :, None])
    c[6] = places[:, :, 0][:, None, :, None]
    c[7] = (col0 * e)[:, None, :, None] + np.arange(e)
    c[8] = _U
    c[9] = np.arange(np.prod(shape)).reshape(shape) * UNIT
    c[10] = UNIT
    data = np.ascontiguousarray(keys, dtype=np.uint16).reshape(-1)
    return _assemble(c.reshape(len(_FIELDS), -1), data)


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
    shape = (n, layers, h, rv)
    c = np.empty((len(_FIELDS),) + shape, dtype=np.int64)
    c[0] = _ABK
    c[1] = _U
    c[2] = 0
    c[3] = _BIT[places[:, :, 0]][:, None, :, None]
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
class Jobs:
    """The jobs of an attention program: one per request of the batch and KV head.

    Job ``k``'s ``(channel, slot)`` pairs of its request's units in table order (unit ``j``
    holds tokens ``16 j ..`` of the request's table layout) are ``key[key_at[k]:key_at[k] +
    key_sizes[k]]`` (and likewise for Values): the jobs' placements concatenated in job order.
    """

    index: np.ndarray  # per job: its request's position in the batch
    head: np.ndarray  # per job: its KV head
    key_sizes: np.ndarray  # per job: its units
    key: np.ndarray  # (units, 2), every job's in job order
    value_sizes: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def of(cls, requests: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> Jobs:
        """The jobs of ``(batch position, key places (heads, units, 2), value places (heads,
        units, 2))`` per request, a job per head, in request then head order."""
        if not requests:
            none = np.zeros(0, dtype=np.int64)
            return cls(none, none, none, np.zeros((0, 2), np.int64), none,
                       np.zeros((0, 2), np.int64))
        heads = requests[0][1].shape[0]
        index = np.repeat(np.array([i for i, _, _ in requests], dtype=np.int64), heads)
        head = np.tile(np.arange(heads, dtype=np.int64), len(requests))
        key_sizes = np.repeat(np.array([k.shape[1] for _, k, _ in requests], dtype=np.int64),
                              heads)
        value_sizes = np.repeat(np.array([v.shape[1] for _, _, v in requests],
                                         dtype=np.int64), heads)
        key = np.concatenate([k.reshape(-1, 2) for _, k, _ in requests]).astype(np.int64,
                                                                                 copy=False)
        value = np.concatenate([v.reshape(-1, 2) for _, _, v in requests]).astype(np.int64,
                                                                                   copy=False)
        return cls(index, head, key_sizes, key, value_sizes, value)


class Reads(Sequence):
    """A plan's read-outs, one tuple of ints each, in order.

    A program's builder hands them over as columns (:meth:`put`, one array per tuple field);
    the tuples are made when first looked at, so a caller that only costs the program (and
    never decodes its read-outs) does not pay for them.
    """

    __slots__ = ("_columns", "_items", "_source")

    def __init__(self, items: Sequence[tuple[int, ...]] = ()) -> None:
        self._columns: list[np.ndarray] = []
        self._items = list(items)
        self._source: _Deal | None = None  # the batch that deals them, when first looked at

    def put(self, columns: Sequence[np.ndarray]) -> None:
        """Append the read-outs whose fields are ``columns`` (equal lengths)."""
        if self._columns:
            self._made()
        self._columns = list(columns)

    def _made(self) -> list[tuple[int, ...]]:
        if self._source is not None:
            self._source.deal()
        if self._columns:
            self._items.extend(zip(*(c.tolist() for c in self._columns)))
            self._columns = []
        return self._items

    def __len__(self) -> int:
        if self._source is not None:
            self._source.deal()
        return len(self._items) + (len(self._columns[0]) if self._columns else 0)

    def __getitem__(self, i):  # type: ignore[override]
        return self._made()[i]

    def __iter__(self):
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Reads({self._made()!r})"


@dataclass(frozen=True, slots=True)
class UnitQkPlan:
    """How one request's QK^T read-outs decode: per read-out, ``(head, channel, unit)``."""

    reads: Reads
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
class UnitSvPlan:
    """How one request's SV read-outs decode.

    ``reads[k]`` is the request's ``k``-th read-out: ``(head, Value row i, segment, channel)``,
    lane ``b`` holding the partial sum of dimension ``16 i + b`` over that segment of that
    channel. ``segments[(head, channel)]`` lists the channel's segments, each a tuple of runs,
    each run the units at its adjacent columns, in column order. The host sums the partials
    per head and dimension over channels ascending, then segments in order (:meth:`decode`;
    the reference sums in the same order).
    """

    reads: Reads
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


#: A field of the rows :func:`_rows` builds: one value for all, or one per row.
_Field = np.ndarray | int


@dataclass(frozen=True, slots=True)
class _Units:
    """The units of a batch's jobs (their Key or Value placements), grouped per job and channel.

    The *groups* are in job order, a job's channels in the order its table first reaches them;
    the units are grouped, in table order within a group.
    """

    job: np.ndarray  # per unit: its job's position in the batch
    unit: np.ndarray  # per unit: its index in the job's table
    slot: np.ndarray  # per unit
    group: np.ndarray  # per unit: its group (non-decreasing)
    first: np.ndarray  # per group: its first unit
    gjob: np.ndarray  # per group: its job
    gch: np.ndarray  # per group: its channel

    @classmethod
    def of(cls, jobs: Jobs, kind: str) -> _Units:
        """The units of ``jobs``' ``kind`` (``"key"`` or ``"value"``) placements."""
        sizes, place = (jobs.key_sizes, jobs.key) if kind == "key" else \
            (jobs.value_sizes, jobs.value)
        n = len(place)
        job = np.repeat(np.arange(len(jobs)), sizes)
        unit = np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        key = job * MASK_BITS + place[:, 0]
        first = np.full(len(jobs) * MASK_BITS, n, dtype=np.int64)  # per key: its first unit
        np.minimum.at(first, key, np.arange(n))
        keys = np.flatnonzero(first < n)
        number = np.empty_like(first)  # the groups numbered in order of first appearance
        number[keys[np.argsort(first[keys])]] = np.arange(len(keys))
        group = number[key]
        o = np.argsort(group, kind="stable")
        gfirst = np.searchsorted(group[o], np.arange(len(keys)))
        return cls(job[o], unit[o], place[o, 1], group[o], gfirst, job[o][gfirst],
                   place[o, 0][gfirst])

    def counts(self) -> np.ndarray:
        """Units per group."""
        return np.diff(self.first, append=len(self.job))

    def channel_order(self) -> np.ndarray:
        """Per channel, its rank among the channels in order of their first group."""
        chans, first = np.unique(self.gch, return_index=True)
        rank = np.zeros(MASK_BITS, dtype=np.int64)
        rank[chans] = np.argsort(np.argsort(first))
        return rank


def _starts(u: _Units, atoms: np.ndarray, aligned: bool) -> np.ndarray:
    """Per group, the step of its first atom on its channel's timeline (``atoms``: per group).

    Every channel runs its groups' atoms (its jobs' in batch order) back to back. With
    ``aligned`` a job starts at the same step on all its channels, where the latest of them
    is free (the others idle up to it), so the channels of a head group that hold one
    request's units at the same addresses (PIMphony's stripes) stay in step and share each
    ``MAC_ABK``.
    """
    if not aligned:
        o = _order(u.gch)
        begin = np.cumsum(atoms[o]) - atoms[o]
        new = np.diff(u.gch[o], prepend=-1) != 0
        out = np.empty_like(begin)
        out[o] = begin - np.maximum.accumulate(np.where(new, begin, 0))
        return out
    line = [0] * MASK_BITS
    starts: list[int] = []  # per job
    chans, sizes = u.gch.tolist(), atoms.tolist()
    cuts = [0, *(np.flatnonzero(np.diff(u.gjob)) + 1).tolist(), len(chans)]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        cs = chans[lo:hi]
        start = max(map(line.__getitem__, cs))
        for c, n in zip(cs, sizes[lo:hi]):
            line[c] = start + n
        starts.append(start)
    return np.repeat(starts, np.diff(cuts))


def _order(*keys: np.ndarray) -> np.ndarray:
    """Return the stable order of members by ``keys`` (non-negative, the first primary)."""
    spans = [int(k.max(initial=0)) + 1 for k in keys]
    if math.prod(spans) >= 1 << 63:
        return np.lexsort(keys[::-1])
    key = keys[0].astype(np.int64)
    for k, span in zip(keys[1:], spans[1:]):  # one mixed-radix key: one sort, not one per key
        key = key * span + k
    return np.argsort(key, kind="stable")


def _classes(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort members by ``keys`` (:func:`_order`).

    Returns the order, per sorted member its class (equal keys, numbered ascending) and per
    class its first sorted member's position.
    """
    o = _order(*keys)
    new = np.zeros(len(o), dtype=bool)
    new[:1] = True
    for k in keys:
        s = k[o]
        new[1:] |= s[1:] != s[:-1]
    return o, np.cumsum(new) - 1, np.flatnonzero(new)


def _masks(cls: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Per class, the channel mask of its members' ``bits``."""
    out = np.zeros(cls[-1] + 1 if len(cls) else 0, dtype=np.int64)
    np.bitwise_or.at(out, cls, bits)
    return out


def _ranges(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Return ``first[k] .. first[k] + count[k] - 1`` for every ``k``, concatenated."""
    ends = np.cumsum(count)
    return np.arange(ends[-1] if len(ends) else 0) + np.repeat(first - ends + count, count)


def _rows(step: np.ndarray, op: int, mask: np.ndarray, opsize: _Field = _U, gpr0: _Field = _U,
          row: _Field = _U, col: _Field = _U, start: _Field = 0,
          size: _Field = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(step, rows)``: instructions of ``op`` (an ``(11, n)`` :data:`_FIELDS` matrix)."""
    c = np.full((len(_FIELDS), len(step)), _U, dtype=np.int64)
    c[0], c[1], c[2], c[3], c[5], c[7], c[9], c[10] = (op, opsize, gpr0, mask, row, col, start,
                                                        size)
    return step, c


def _program(parts: Sequence[tuple[np.ndarray, np.ndarray]], data: np.ndarray) -> Program:
    """Return the program of ``parts`` (:func:`_rows`, each in its order): step by step, a
    step's rows in the order of ``parts``."""
    step = np.concatenate([s for s, _ in parts])
    kind = np.repeat(np.arange(len(parts)), [len(s) for s, _ in parts])
    return _assemble(np.concatenate([c for _, c in parts], axis=1)[:, _order(step, kind)], data)


def _lockstep(step: np.ndarray, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step with an atom: the step and the mask of its channels (``bits``: per atom)."""
    masks = np.zeros(step.max() + 1, dtype=np.int64)
    np.bitwise_or.at(masks, step, bits)
    steps = np.flatnonzero(masks)
    return steps, masks[steps]


class _Deal:
    """A batch program's read-outs, dealt to its requests' plans when first looked at: read-out
    ``r`` is atom ``atoms[r]`` of request ``index[atom]``, with the ``fields`` (per atom) its
    plan records. A caller that only costs the program never deals them."""

    __slots__ = ("plans", "atoms", "index", "fields", "done")

    def __init__(self, plans: Sequence[UnitQkPlan | UnitSvPlan], atoms: np.ndarray,
                 index: np.ndarray,
                 *fields: np.ndarray) -> None:
        self.plans, self.atoms, self.index, self.fields = plans, atoms, index, fields
        self.done = False
        for plan in plans:
            plan.reads._source = self

    def owners(self) -> np.ndarray:
        """Per read-out: its request's position in the batch."""
        return self.index[self.atoms]

    def deal(self) -> None:
        """Give each plan its read-outs (once)."""
        if self.done:
            return
        self.done = True
        o = self.atoms[np.argsort(self.owners(), kind="stable")]
        cuts = np.searchsorted(self.index[o], np.arange(len(self.plans) + 1)).tolist()
        columns = [f[o] for f in self.fields]
        for plan, lo, hi in zip(self.plans, cuts[:-1], cuts[1:]):
            plan.reads._source = None
            plan.reads.put([c[lo:hi] for c in columns])


class _Segments(dict):
    """An :class:`UnitSvPlan`'s ``segments``, filled for every plan of the batch when one is
    first looked at (``fill``, called once)."""

    __slots__ = ("_fill",)

    def __init__(self) -> None:
        super().__init__()
        self._fill: Callable[[], None] | None = None

    def _filled(self) -> _Segments:
        if self._fill is not None:
            fill, self._fill = self._fill, None
            fill()
        return self

    def __getitem__(self, key):  # type: ignore[override]
        return dict.__getitem__(self._filled(), key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self._filled(), key)

    def __iter__(self):
        return dict.__iter__(self._filled())

    def __len__(self) -> int:
        return dict.__len__(self._filled())

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self._filled(), other)

    def keys(self):  # type: ignore[override]
        return dict.keys(self._filled())

    def values(self):  # type: ignore[override]
        return dict.values(self._filled())

    def items(self):  # type: ignore[override]
        return dict.items(self._filled())

    def get(self, key, default=None):  # type: ignore[override]
        return dict.get(self._filled(), key, default)

    def __repr__(self) -> str:
        return dict.__repr__(self._filled())


def qk_program(g: Geometry, layer: int, jobs: Jobs, queries: np.ndarray,
               blocks: Sequence[int], aligned: bool = False) -> tuple[Program, list[UnitQkPlan]]:
    """Return QK^T over ``jobs`` and one plan per request (``queries``: ``(n, heads, D)``).

    Every channel walks its own timeline (its jobs in batch order, each job's units there in
    row order) in lock step with the others: step ``a`` is one ``WR_BIAS`` to every channel
    with an ``a``-th unit, a ``MAC_ABK`` per distinct address among them (in address order),
    one ``RD_MAC`` to them all, preceded by the query's ``WR_GB`` on the channels whose
    ``a``-th unit starts a job (one per job, in the order of the channels' first appearance:
    the same payload, placed when the job first starts). With ``aligned``, a job starts on
    all its channels at one step (:func:`_starts`). ``blocks[i]`` is request ``i``'s table
    length; a request's read-outs interleave with others', :func:`deal` splits them.
    """
    e, cols = g.bursts, g.device.gb_columns
    plans = [UnitQkPlan(Reads(), b, g.block_size) for b in blocks]
    u = _Units.of(jobs, "key")
    if not len(u.job):
        return empty(), _Dealt.wrap(plans, [])
    index, head = jobs.index, jobs.head
    ident = np.arange(len(jobs), dtype=np.int64)
    o = _order(u.group, u.slot)  # each group's units in row order (one atom each)
    job, unit, slot, grp = u.job[o], u.unit[o], u.slot[o], u.group[o]
    pos = np.arange(len(o)) - u.first[grp]
    step = _starts(u, u.counts(), aligned)[grp] + pos
    ch = u.gch[grp]
    bit = _BIT[ch]
    # WR_GB: per step and job starting there, its channels; the job's first one orders them
    f = np.flatnonzero(pos == 0)
    fo, cls, lead = _classes(step[f], ident[job[f]])
    f = f[fo]
    by = np.full(len(lead), MASK_BITS, dtype=np.int64)
    np.minimum.at(by, cls, u.channel_order()[ch[f]])
    go = _order(step[f][lead], by)
    gjob = ident[job[f][lead]][go]
    _, once = np.unique(gjob, return_index=True)
    payload = gjob[np.sort(once)]  # jobs in the order their query is placed
    rank = np.empty(len(jobs), dtype=np.int64)
    rank[payload] = np.arange(len(payload))
    words = np.tile(queries[index[payload], head[payload]], (1, cols // e))
    size = words.shape[1]
    data = np.concatenate([np.zeros(UNIT, dtype=np.uint16), words.reshape(-1)])
    gb = _rows(step[f][lead][go], _GB, _masks(cls, bit[f])[go], cols, 0, col=0,
               start=UNIT + size * rank[gjob], size=size)
    bias_step, m = _lockstep(step, bit)
    mo, cls, lead = _classes(step, slot)
    rel, q = np.divmod(slot[mo][lead], g.keys_per_row)
    mac = _rows(step[mo][lead], _MAC, _masks(cls, bit[mo]), e, row=g.row(layer, rel),
                col=q * e)
    ro = _order(step, MASK_BITS - 1 - ch)  # per step, in mask_channels order
    deal = _Deal(plans, ro, index[job], head[job], ch, unit)
    program = _program([gb, _rows(bias_step, _BIAS, m, gpr0=0, start=0, size=UNIT), mac,
                        _rows(bias_step, _RD, m, gpr0=0)], data)
    return program, _Dealt.wrap(plans, deal)


def sv_program(g: Geometry, layer: int, jobs: Jobs, probs: np.ndarray,
               blocks: Sequence[int], aligned: bool = False) -> tuple[Program, list[UnitSvPlan]]:
    """Return SV over ``jobs`` and one plan per request (``probs``: ``(n, heads, width)``).

    Every channel walks its timeline of segments (per job, its units there split into runs of
    adjacent columns and GB-disjoint segments, :func:`_segments`), one *atom* per segment and
    Value row, in lock step: atom step ``a`` writes the scores of the segments that start there
    to their channel's GB (channels in order of first appearance), then one ``WR_BIAS`` to
    every channel with an ``a``-th atom, the ``MAC_ABK``s of its runs (one instruction for the
    channels whose runs share addresses, in the order of their runs' ``(row, column, count)``)
    and one ``RD_MAC`` to them all. ``aligned`` as in :func:`qk_program`.
    """
    rv, w = g.v_rows, g.device.columns
    plans = [UnitSvPlan(Reads(), _Segments(), b, g.block_size) for b in blocks]
    u = _Units.of(jobs, "value")
    if not len(u.job):
        return empty(), _Dealt.wrap(plans, [])
    index, head = jobs.index, jobs.head
    vgroup, col = np.divmod(u.slot, w)
    row0 = g.key_rows + vgroup * rv
    # runs: a group's units (table order) at adjacent columns of one Value group
    new = np.ones(len(col), dtype=bool)
    new[1:] = (np.diff(u.group) != 0) | (np.diff(row0) != 0) | (np.diff(col) != 1)
    rfirst = np.flatnonzero(new)
    run = np.cumsum(new) - 1  # per unit
    rlen = np.diff(rfirst, append=len(col))
    rrow, rcol = row0[rfirst], col[rfirst]
    starts = _segments(u.group, col, run, rfirst)
    sfirst = np.flatnonzero(starts)  # per segment: its first run
    seg = np.cumsum(starts) - 1  # per run
    sruns = np.diff(sfirst, append=len(rfirst))
    sgroup = u.group[rfirst[sfirst]]
    gseg = np.searchsorted(sgroup, np.arange(len(u.first)))  # per group: its first segment
    k = np.arange(len(sfirst)) - gseg[sgroup]  # per segment: its index in its group
    sstep = _starts(u, np.diff(gseg, append=len(sfirst)) * rv, aligned)[sgroup] + k * rv
    sch, sjob = u.gch[sgroup], u.gjob[sgroup]
    # WR_GB: per step, the runs of the segments starting there, by channel
    go = _order(sstep[seg], u.channel_order()[sch[seg]])
    size = rlen[go] * UNIT
    units = _ranges(rfirst[go], rlen[go])
    j = u.job[units]
    bursts = sliding_window_view(probs, UNIT, axis=2)[:, :, ::UNIT]  # per unit: its scores
    words = bursts[index[j], head[j], u.unit[units]]
    data = np.concatenate([np.zeros(UNIT, dtype=np.uint16),
                           words.reshape(-1).astype(np.uint16, copy=False)])
    gb = _rows(sstep[seg[go]], _GB, _BIT[sch[seg[go]]], rlen[go], 0, col=rcol[go],
               start=UNIT + np.cumsum(size) - size, size=size)
    # atoms: (segment, Value row i), steps sstep .. sstep + rv - 1
    aseg = np.repeat(np.arange(len(sfirst)), rv)
    ai = np.tile(np.arange(rv), len(sfirst))
    astep, abit = sstep[aseg] + ai, _BIT[sch[aseg]]
    bias_step, m = _lockstep(astep, abit)
    # MAC_ABK: the atoms of a step with equal runs share them; ordered by their runs
    mo, cls, lead = _classes(astep, rrow[sfirst[aseg]] + ai, _shapes(seg, rrow, rcol, rlen)[aseg])
    lseg, li = aseg[mo][lead], ai[mo][lead]
    runs = _ranges(sfirst[lseg], sruns[lseg])
    mac = _rows(np.repeat(astep[mo][lead], sruns[lseg]), _MAC,
                np.repeat(_masks(cls, abit[mo]), sruns[lseg]), rlen[runs],
                row=g.row(layer, rrow[runs] + np.repeat(li, sruns[lseg])), col=rcol[runs])
    ro = _order(astep, MASK_BITS - 1 - sch[aseg])  # per step, in mask_channels order
    deal = _Deal(plans, ro, index[sjob][aseg], head[sjob][aseg], ai, k[aseg], sch[aseg])

    def fill() -> None:  # every plan's segments, when one is first looked at
        for plan in plans:
            plan.segments._fill = None
        unit = u.unit.tolist()
        run_units = [tuple(unit[a:a + n]) for a, n in zip(rfirst.tolist(), rlen.tolist())]
        segments = [tuple(run_units[a:a + n]) for a, n in zip(sfirst.tolist(), sruns.tolist())]
        for jb, c, lo, hi in zip(u.gjob.tolist(), u.gch.tolist(), gseg.tolist(),
                                 [*gseg[1:].tolist(), len(sfirst)]):
            dict.__setitem__(plans[int(index[jb])].segments, (int(head[jb]), c),
                             segments[lo:hi])

    for plan in plans:
        plan.segments._fill = fill
    program = _program([gb, _rows(bias_step, _BIAS, m, gpr0=0, start=0, size=UNIT), mac,
                        _rows(bias_step, _RD, m, gpr0=0)], data)
    return program, _Dealt.wrap(plans, deal)


def _segments(group: np.ndarray, col: np.ndarray, run: np.ndarray,
              rfirst: np.ndarray) -> np.ndarray:
    """Return which runs start a segment: per group, greedily, a run joins the segment of the
    runs before it unless it shares a column with one of them (the GB holds one score burst
    per column).

    ``group``, ``col`` and ``run`` are per unit (grouped, table order), ``rfirst`` per run its
    first unit. A run's units are at adjacent columns ``col ..`` of one Value group (PIMphony's
    channel holds every ``P``-th unit, so they need not be consecutive in the table).
    """
    o = _order(group, col)  # a group's units per column, in table order
    same = (np.diff(group[o]) == 0) & (np.diff(col[o]) == 0)
    before = np.full(len(col), -1, dtype=np.int64)
    before[o[1:][same]] = run[o[:-1][same]]
    clash = np.maximum.reduceat(before, rfirst)  # the latest earlier run sharing a column
    gfirst = np.maximum.accumulate(np.where(np.diff(group[rfirst], prepend=-1) != 0,
                                            np.arange(len(rfirst)), 0))
    starts = gfirst == np.arange(len(rfirst))
    current = -1  # the segment being filled: its first run
    maybe = np.flatnonzero(clash >= 0)
    for r, c, first in zip(maybe.tolist(), clash[maybe].tolist(), gfirst[maybe].tolist()):
        current = max(current, first)  # a new group starts with a new segment
        if c >= current:
            starts[r] = True
            current = r
    return starts


def _shapes(seg: np.ndarray, rrow: np.ndarray, rcol: np.ndarray,
            rlen: np.ndarray) -> np.ndarray:
    """Per segment, the rank of its runs' ``(row, column, count)`` sequence, rows relative to
    its first run's, in lexicographic order (a prefix first): with the first run's row, the
    order of the segments' ``MAC_ABK`` address sequences."""
    first = np.flatnonzero(np.diff(seg, prepend=-1) != 0)
    pos = np.arange(len(seg)) - first[seg]
    key = np.zeros((len(first), 3 * (pos.max() + 1)), dtype=np.int64)  # 0: no such run
    rel = rrow - rrow[first[seg]]
    key[seg, 3 * pos] = rel - rel.min() + 1
    key[seg, 3 * pos + 1] = rcol
    key[seg, 3 * pos + 2] = rlen
    o, cls, _ = _classes(*key.T)
    rank = np.empty(len(first), dtype=np.int64)
    rank[o] = cls
    return rank


class _Dealt(list):
    """The plans of a batch, with the request each read-out of the program belongs to (the
    interface's ``Plans``: :meth:`split` deals the read-outs)."""

    _order: _Deal | list[int]

    @property
    def order(self) -> list[int]:
        """Per read-out: the request's batch position."""
        if isinstance(self._order, _Deal):
            self._order = self._order.owners().tolist()
        return self._order

    def split(self, readouts: Sequence[Readout]) -> list[list[Readout]]:
        """Each request's read-outs, in its plan's order (:func:`deal`)."""
        return deal(self, readouts)

    @classmethod
    def wrap(cls, plans: list, order: _Deal | list[int]) -> _Dealt:
        out = cls(plans)
        out._order = order
        return out


def deal(plans: Sequence[UnitQkPlan | UnitSvPlan],
         readouts: Sequence[Readout]) -> list[list[Readout]]:
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
