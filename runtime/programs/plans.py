"""Attention plans: a table's O1K groups and SV segments, and how read-outs decode.

A QK^T program has one bias/MAC/read-out triple per O1K address (:func:`o1k_groups`: O1Ks at
one address in different channels share it, Case Ch); an SV program one accumulation per
segment (:func:`sv_segments`: runs of adjacent O1V columns whose GB columns are disjoint, or
one CZ-resident block). :class:`QkPlan` and :class:`SvPlan` say which read-out holds what, so
the host turns a program's read-outs into scores and outputs. Every program generator of the
runtime (:mod:`patton.runtime.programs.layout`, :mod:`patton.runtime.programs.layout_patch`,
:mod:`patton.runtime.programs.tables`) and the references (:mod:`patton.runtime.reference.programs`,
:mod:`patton.runtime.reference.templates`) follow these plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace
from patton.sim.isa import channel_bit
from patton.sim.program import Readout

__all__ = ["group_masks", "o1k_groups", "QkPlan", "Run", "Segment", "SvPlan", "sv_segments",
           "Contiguous"]


@lru_cache(maxsize=64)
def group_masks(cfg: Config) -> tuple[list[int], list[int]]:
    """Return the channel masks of each head group and of each group-relative channel."""
    by_head = []
    for g in range(cfg.heads):
        m = 0
        for p in range(cfg.ch_per_head):
            m |= channel_bit(cfg.channel(g, p))
        by_head.append(m)
    by_p = []
    for p in range(cfg.ch_per_head):
        m = 0
        for g in range(cfg.heads):
            m |= channel_bit(cfg.channel(g, p))
        by_p.append(m)
    return by_head, by_p



def o1k_groups(keys: list[KeyPlace]) -> dict[tuple[int, int], dict[int, int]]:
    """Group O1Ks (table order) by address: ``(row, col) -> {channel p: table position}``.

    O1Ks at one address in different channels (Case Ch) share a QK^T command triple; two at
    one address in the same channel would overlap, which the allocator never does.
    """
    groups: dict[tuple[int, int], dict[int, int]] = {}
    for pos, k in enumerate(keys):
        members = groups.setdefault((k.row, k.col), {})
        if k.p in members:
            raise AssertionError(f"two O1Ks at channel {k.p}, row {k.row}, col {k.col}")
        members[k.p] = pos
    return groups


@dataclass(slots=True)
class QkPlan:
    """How to read a QK^T program's RD_MAC results back.

    ``reads[k]`` maps each group-relative channel ``p`` of the ``k``-th RD_MAC to the table
    position of its O1K; the read-out of device channel ``g * P + p`` holds head ``g``'s scores,
    bank ``b`` the score of token offset ``b``. Each RD_MAC returns one read-out per head and
    member channel.
    """

    reads: list[dict[int, int]]  # per RD_MAC: group-relative channel -> table position
    blocks: int  # table length

    def readouts(self, cfg: Config) -> int:
        """Return how many read-outs the program returns (one per RD_MAC channel)."""
        return sum(len(entry) for entry in self.reads) * cfg.heads

    def decode(self, readouts: list[Readout], cfg: Config) -> np.ndarray:
        """Return bf16 scores ``(heads, blocks * T)`` from the readouts of the program."""
        t = cfg.block_size
        out = np.zeros((cfg.heads, self.blocks * t), dtype=np.uint16)
        k = 0
        for entry in self.reads:
            for _ in range(len(entry) * cfg.heads):
                r = readouts[k]
                k += 1
                g, p = divmod(r.channel, cfg.ch_per_head)
                pos = entry[p]
                out[g, pos * t:(pos + 1) * t] = r.data
        if k != len(readouts):
            raise ValueError(f"{len(readouts)} readouts for a plan of {k}")
        return out


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive table entries whose O1Vs are adjacent columns of one VRS."""

    first: int  # table position of the first block
    count: int  # blocks (= columns)
    row0: int  # VRS first row (layer-relative)
    col: int  # first column


@dataclass(frozen=True, slots=True)
class Segment:
    """One accumulation unit of SV: O1V runs sharing the GB (disjoint columns), or a CZ slot.

    For runs, each Value row is one WR_BIAS, the runs' MAC_ABKs and one RD_MAC (the reduction
    continues across O2V and VRS boundaries); for a CZ slot (``cz`` set, ``runs`` holding its
    one block), every Order-0 is biased, multiplied and read separately.
    """

    runs: tuple[Run, ...]  # O1V runs (or the CZ block as a one-block run)
    cz: CzPlace | None = None  # set for a CZ-resident partial block


@dataclass(slots=True)
class SvPlan:
    """Segments of an SV program, in execution order; see :meth:`decode`."""

    segments: list[Segment] = field(default_factory=list)  # in order
    blocks: int = 0  # table length

    def readouts(self, cfg: Config) -> int:
        """Return how many read-outs the program returns (one per RD_MAC channel)."""
        return len(self.segments) * cfg.v_rows * cfg.heads * cfg.ch_per_head

    def decode(self, readouts: list[Readout], cfg: Config) -> np.ndarray:
        """Return ``(heads, D)`` float32 outputs: read-outs summed on the host, in order."""
        out = np.zeros((cfg.heads, cfg.d_head), dtype=np.float32)
        per = cfg.heads * cfg.ch_per_head
        k = 0
        banks = np.arange(cfg.device.banks)
        for _seg in self.segments:
            for i in range(cfg.v_rows):
                for r in readouts[k:k + per]:
                    g, p = divmod(r.channel, cfg.ch_per_head)
                    vals = (r.data.astype(np.uint32) << 16).view(np.float32)
                    out[g, cfg.value_dim(p, i, banks)] += vals
                k += per
        if k != len(readouts):
            raise ValueError(f"{len(readouts)} readouts for a plan of {k}")
        return out


def sv_segments(values: list[ValuePlace | CzPlace], first: int = 0,
                open_runs: tuple[Run, ...] = (), open_run: Run | None = None) -> list[Segment]:
    """Split a table's Value placements into runs, then segments (see :class:`Segment`).

    ``values[k]`` is table position ``first + k``. To continue a split that stopped before
    ``first``, pass the runs of the segment it had not closed (``open_runs``) and the O1V run
    it had not closed (``open_run``, ending at ``first - 1``); the result then starts with that
    segment (by default: a split from the table's start).
    """
    runs: list[Run | tuple[int, CzPlace]] = []
    # the open run: first, count, row0, col
    cur: list[int] | None = None if open_run is None else \
        [open_run.first, open_run.count, open_run.row0, open_run.col]
    for pos, v in enumerate(values, first):
        if isinstance(v, CzPlace):
            if cur is not None:
                runs.append(Run(*cur))
                cur = None
            runs.append((pos, v))
        elif cur is not None and cur[2] == v.row0 and cur[3] + cur[1] == v.col:
            cur[1] += 1
        else:
            if cur is not None:
                runs.append(Run(*cur))
            cur = [pos, 1, v.row0, v.col]
    if cur is not None:
        runs.append(Run(*cur))
    segments: list[Segment] = []
    current: list[Run] = list(open_runs)
    cols = 0
    for r in current:
        cols |= ((1 << r.count) - 1) << r.col
    for r in runs:
        if isinstance(r, tuple):
            pos, cz = r
            if current:
                segments.append(Segment(tuple(current)))
                current, cols = [], 0
            segments.append(Segment((Run(pos, 1, cz.row, cz.col0),), cz))
            continue
        span = ((1 << r.count) - 1) << r.col
        if current and cols & span:
            segments.append(Segment(tuple(current)))
            current, cols = [], 0
        current.append(r)
        cols |= span
    if current:
        segments.append(Segment(tuple(current)))
    return segments


class Contiguous(list):
    """The plans of a batch program whose read-outs come request after request, each
    request's :meth:`~QkPlan.readouts` of them (PATTON's batches; the interface's ``Plans``).
    """

    config: Config

    @classmethod
    def of(cls, plans: list, config: Config) -> Contiguous:
        """``plans`` of a batch laid out on ``config``."""
        out = cls(plans)
        out.config = config
        return out

    def split(self, readouts: Sequence[Readout]) -> list[list[Readout]]:
        """Each request's read-outs, in its plan's order.

        Raises:
            ValueError: the read-outs do not add up to the plans'.
        """
        out, k = [], 0
        for plan in self:
            n = plan.readouts(self.config)
            out.append(list(readouts[k:k + n]))
            k += n
        if k != len(readouts):
            raise ValueError(f"{len(readouts)} read-outs for plans of {k}")
        return out
