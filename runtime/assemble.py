"""Columnar command generation: the programs of :mod:`.commands` as :class:`Program` arrays.

Writes are built batched, one NumPy pass per kind over every block of a write call; their
addresses depend only on the blocks' placements and token counts, so they are cached per such
batch (:data:`Cache`) and a call only sets the token-dependent banks or lane masks and the
payload (Keys as given, Values spread over lanes); decode steps take the faster, in-place path
of :mod:`.token_writes`. Attention programs are built in two stages, as the paper's fixed
placements allow: a :class:`Template` per request and layer holds every address, and a
:class:`Batch` lays the templates of several requests out over one payload array, so a step
only copies its query or scores into that array (:meth:`Batch.fill`). The runtime builds its
batches without per-request templates, from structures it keeps up to date per request
(:mod:`.tables`, :mod:`.layout`); :func:`qk_template`, :func:`sv_template` and
:meth:`Batch.of` are the from-scratch build those are checked against
(``tests/test_runtime_tables.py``). Every function returns exactly the instructions of its
:mod:`.commands` counterpart (``tests/test_runtime_program.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from patton.sim.isa import Opcode, channel_bit

from . import commands as cmd
from .config import Config
from .metadata import CzPlace, KeyPlace, ValuePlace
from patton.sim.program import FIELDS, OP_ID, UNSET, Program, concat, make

__all__ = ["Cache", "key_writes", "value_writes", "token_writes", "Template", "Batch",
           "qk_template", "sv_template"]

#: One block's write in one layer: (layer, placement, first offset, data ``(n, heads, D)``).
Piece = tuple


def _patterns(cfg: Config) -> tuple[np.ndarray, ...]:
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
    """Return :func:`commands.key_writes` of every piece, in order, as one program.

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

    A piece placed at a :class:`CzPlace` gives :func:`commands.cz_writes`, one at a
    :class:`ValuePlace` :func:`commands.o1v_writes`. Only the element masks and the payload
    depend on the token offsets (``cache`` as for :func:`key_writes`).
    """
    lanes = cfg.device.lanes
    fixed = _fixed(cache, _shape("value", pieces), lambda: _value_fixed(cfg, pieces))
    masks = [UNSET if v.shape[0] == lanes and not isinstance(place, CzPlace)
             else cmd._lanes(s, v.shape[0]) for _, place, s, v in pieces]
    mask = fixed.mask
    if any(m != UNSET for m in masks):
        mask = _ro(np.repeat(np.array(masks, dtype=np.int64), len(fixed) // len(pieces)))
    return replace(fixed, mask=mask, data=_spread(cfg, pieces).reshape(-1))


def _value_fixed(cfg: Config, pieces: list[Piece]) -> Program:
    """Return the Value bursts of ``pieces`` without element masks or payload."""
    lanes = cfg.device.lanes
    g, p, i, b = _patterns(cfg)
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


def token_writes(cfg: Config, pieces: list[Piece]) -> Program:
    """Return :func:`commands.o1v_token_writes` of every piece (one ``WR_ABK`` per row)."""
    banks = cfg.device.banks
    h, p, rv = cfg.heads, cfg.ch_per_head, cfg.v_rows
    g, pp, i = (a.ravel() for a in np.indices((h, p, rv)))
    bit = np.array([channel_bit(c) for c in range(cfg.device.channels)], dtype=np.int64)
    row0 = np.array([cfg.row(layer, v.row0) for layer, v, _, _ in pieces], dtype=np.int64)
    col = np.array([v.col for _, v, _, _ in pieces], dtype=np.int64)
    mask = np.array([1 << t for _, _, t, _ in pieces], dtype=np.int64)
    data = np.concatenate([d[0].reshape(-1) for _, _, _, d in pieces]).astype(np.uint16,
                                                                             copy=False)
    per = len(g)
    total = len(pieces) * per
    return make(Opcode.WR_ABK, total, data, start=np.arange(total) * banks, size=banks, gpr0=0,
                channel_mask=np.tile(bit[g * p + pp], len(pieces)),
                row=(row0[:, None] + i[None, :]).ravel(), col=np.repeat(col, per),
                mask=np.repeat(mask, per))


# ----------------------------------------------------------------------------- attention

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


def qk_template(cfg: Config, layer: int, keys: list[KeyPlace]) -> tuple[Template, cmd.QkPlan]:
    """Return :func:`commands.qk_program`'s instructions for O1Ks ``keys`` (table order).

    The step's data is the query tiled over the GB: ``(heads, gb_columns * lanes)`` words.
    """
    groups = cmd.o1k_groups(keys)
    by_head, by_p = cmd.group_masks(cfg)
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
    return _template(rows, [], cols * lanes), cmd.QkPlan(list(groups.values()), len(keys))


def sv_template(cfg: Config, layer: int,
                values: list[ValuePlace | CzPlace]) -> tuple[Template, cmd.SvPlan]:
    """Return :func:`commands.sv_program`'s instructions for a table's Value placements.

    The step's data is the scores ``(heads, blocks * T)``, zero past the last token.
    """
    by_head, by_p = cmd.group_masks(cfg)
    mask = 0
    for m in by_p:
        mask |= m
    t, rv, lanes = cfg.block_size, cfg.v_rows, cfg.device.lanes
    base = cfg.row(layer, 0)
    plan = cmd.SvPlan(cmd.sv_segments(values), len(values))
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


@dataclass(frozen=True, slots=True)
class Batch:
    """Templates of several requests laid out over one payload array of a fixed shape.

    The payload is the step's data ``(requests, heads, width)`` flattened, then every tile
    (``Rv`` copies of ``T`` words), then one zero burst. Invariants: ``prog.start`` addresses
    that layout; ``width`` is a multiple of ``T`` and ``tiles[j]`` is the step data's ``T``-word
    row that tile ``j`` repeats.
    """

    prog: Program  # every request's instructions, in request order (empty payload)
    shape: tuple[int, int, int]  # (requests, heads, width) of the step's data
    tiles: np.ndarray  # per tile: its source row in the step data viewed as (-1, T)
    rv: int  # copies per tile
    t: int  # words per tile copy (block size T)
    lanes: int  # words of the zero burst
    # buffers handed out by buffer() and not yet filled: id(view) -> (view, payload)
    lent: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: Config, templates: list[Template], width: int) -> Batch:
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
        return cls(prog, (n, h, width), src.astype(np.int64), rv, t, lanes)

    def buffer(self) -> np.ndarray:
        """Return zeroed ``(requests, heads, width)`` step data that :meth:`fill` adopts as
        the payload without copying (write the step's data straight into it)."""
        out = np.zeros(len(self.prog.data), dtype=np.uint16)
        view = out[:self._body()].reshape(self.shape)
        if len(self.lent) >= 4:  # buffers never filled are forgotten (and copied if filled)
            self.lent.clear()
        self.lent[id(view)] = (view, out)
        return view

    def _body(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def fill(self, data: np.ndarray) -> Program:
        """Return the program over this step's data.

        ``data`` is ``(requests, heads, width)``, or ``(requests, heads, 1, w)`` repeated along
        each row (a query tiled over the GB). Data from :meth:`buffer` becomes the payload
        itself (once); other data is copied.
        """
        body, size = self._body(), len(self.prog.data)
        lent = self.lent.pop(id(data), None)
        if lent is not None and lent[0] is data:
            out = lent[1]
        else:
            out = np.empty(size, dtype=np.uint16)
            shape = self.shape if data.ndim == 3 else self.shape[:2] + (-1, data.shape[-1])
            out[:body].reshape(shape)[:] = data
        if len(self.tiles):
            rows = out[:body].reshape(-1, self.t)[self.tiles]
            out[body:size - self.lanes].reshape(len(self.tiles), self.rv, self.t)[:] = \
                rows[:, None, :]
        out[size - self.lanes:] = 0
        return self.prog.with_data(out)
