"""Per-request attention structure, kept in step with the block table instead of rebuilt.

A request's QK^T program has one bias/MAC/read-out triple per O1K address (its *groups*), and
its SV program splits the table's visible Value placements into runs and segments
(:func:`plans.sv_segments`). Both depend on the table only through the placements, and
decode changes only the table's end: a block is bound (appended), its first token moves it to
a Commit Zone slot, its last token commits it to its O1V. So each request keeps a
:class:`KeyTable` and a :class:`ValueTable` that are brought up to date from the first table
position that changed (the runtime records it, :attr:`RequestState.kdirty` / ``vdirty``):

* :class:`KeyTable` appends: a new O1K joins its address's group (one more member channel in
  the triple's mask) or opens a group. An edit before the end (a freed block) rebuilds it.
* :class:`ValueTable` resumes the greedy split at the first changed position, with the run
  and segment that held the position before it reopened (see :meth:`ValueTable.cut` for why
  that is exact): a decode step re-splits one or two blocks, not the table. The two edits a
  decode step makes at the table's end, a block entering its CZ slot and a CZ block committed
  into the run before it, are applied in place (:meth:`ValueTable.append_cz`,
  :meth:`ValueTable.publish_last`) and counted, so :mod:`.layout_patch` can patch a batch
  layout for them.

Their per-group and per-run rows are what :mod:`.layout` lays out over a batch of requests,
in one vectorised pass. Plans handed out are never changed afterwards (a change makes a new
plan object).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace
from patton.runtime.programs.plans import QkPlan, Run, Segment, SvPlan, sv_segments

__all__ = ["KeyTable", "ValueTable", "RUN_FIELDS"]

#: Columns of :attr:`ValueTable.rows`, one row per run (a CZ block is a one-block run).
RUN_FIELDS = ("j", "nr", "cz", "first", "count", "row0", "col")


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    """Return ``a`` with room for at least ``n`` rows (doubling; the first rows kept)."""
    if n <= len(a):
        return a
    out = np.zeros((max(n, 2 * len(a)),) + a.shape[1:], dtype=a.dtype)
    out[:len(a)] = a
    return out


@dataclass(slots=True)
class KeyTable:
    """The O1K groups of one request's table: the triples and plan of its QK^T program.

    Invariants: it describes ``table[:blocks]``; group ``k`` (first-appearance order) has
    address ``groups[k, :2]`` (row, col), channel mask ``groups[k, 2]`` (the OR of its member
    channels' masks) and members ``plan.reads[k]`` (group-relative channel -> table position);
    ``index`` maps each address to its group. While ``resets`` stays the same, groups are
    only appended and masks only gain bits (what :mod:`.layout_patch` relies on).

    Args:
        by_p: channel mask of each group-relative channel (:func:`plans.group_masks`).
    """

    by_p: Sequence[int]  # channel mask per group-relative channel
    blocks: int = 0  # table positions described
    ngroups: int = 0  # groups (rows of ``groups`` in use)
    index: dict[tuple[int, int], int] = field(default_factory=dict)  # address -> group
    groups: np.ndarray = field(default_factory=lambda: np.zeros((8, 3), dtype=np.int64))
    plan: QkPlan = field(default_factory=lambda: QkPlan([], 0))  # reads per group
    resets: int = 0  # times :meth:`cut` forgot everything (else groups only grow)
    joins: int = 0  # O1Ks that joined an existing group (its mask gained a bit)

    def cut(self, dirty: int) -> int:
        """Forget everything if position ``dirty`` changed; return the first position to add."""
        if dirty < self.blocks:
            self.resets += 1
            self.blocks = self.ngroups = 0
            self.index = {}
            self.plan = QkPlan([], 0)
        return self.blocks

    def extend(self, keys: Sequence[KeyPlace]) -> None:
        """Append the O1Ks of the next table positions."""
        if not keys:
            return
        reads = list(self.plan.reads)  # the old plan keeps its list and dicts
        self.groups = _grow(self.groups, self.ngroups + len(keys))
        for k in keys:
            pos = self.blocks
            self.blocks += 1
            bit = self.by_p[k.p]
            g = self.index.get((k.row, k.col))
            if g is None:
                g = self.index[(k.row, k.col)] = self.ngroups
                self.ngroups += 1
                reads.append({k.p: pos})
                self.groups[g] = (k.row, k.col, bit)
                continue
            if k.p in reads[g]:
                raise AssertionError(f"two O1Ks at channel {k.p}, row {k.row}, col {k.col}")
            reads[g] = {**reads[g], k.p: pos}
            self.groups[g, 2] |= bit
            self.joins += 1
        self.plan = QkPlan(reads, self.blocks)


@dataclass(slots=True)
class ValueTable:
    """The SV runs and segments of one request's table.

    Invariants: ``values`` is the visible Value placement of each described table position;
    ``plan.segments == sv_segments(values)``; ``run0[s]`` is segment ``s``'s first row in
    ``rows``; ``rows[:nruns]`` has one row per run, segments in order (columns
    :data:`RUN_FIELDS`: index in its segment, the segment's run count, 1 for a CZ block,
    first position, blocks, first VRS or CRS row, first column); ``rfirst[u]`` and ``rseg[u]``
    are run ``u``'s first position and segment. Between :meth:`cut` and :meth:`extend`,
    ``open_runs`` / ``open_run`` hold the split's unclosed segment and run. ``rebuilt`` and
    ``edits`` count the general re-splits and the in-place end edits: while ``rebuilt`` stays
    the same, the table changed only by ``edits`` (the latest one ``last_edit``), which is
    what :mod:`.layout_patch` relies on.
    """

    values: list[ValuePlace | CzPlace] = field(default_factory=list)  # per position
    run0: list[int] = field(default_factory=list)  # per segment: first row in rows
    rfirst: list[int] = field(default_factory=list)  # per run: first table position
    rseg: list[int] = field(default_factory=list)  # per run: its segment
    nruns: int = 0  # rows in use
    rows: np.ndarray = field(default_factory=lambda: np.zeros((8, len(RUN_FIELDS)),
                                                              dtype=np.int64))
    plan: SvPlan = field(default_factory=SvPlan)  # segments in order
    open_runs: tuple[Run, ...] = ()  # runs of the segment left open by cut
    open_run: Run | None = None  # O1V run left open by cut (ends just before the cut)
    rebuilt: int = 0  # times cut/extend re-split part of the table
    edits: int = 0  # in-place edits (append_cz, publish_last) so far
    last_edit: str = ""  # the latest in-place edit: "cz" or "pub"

    def cut(self, dirty: int, after: ValuePlace | CzPlace | None = None) -> int:
        """Drop what a change at position ``dirty`` may alter; return the first position to add.

        ``after`` may give the placement at ``dirty`` when only appends happened
        (``dirty >= len(values)``): a CZ block there closes the open segment as the table's
        end did, so nothing is reopened (a block bound at a decode step's boundary).

        Positions before ``d = min(dirty, len(values))`` are unchanged, and the split is greedy
        from the left, so it resumes at ``d`` from its state there: the run holding ``d - 1``
        is reopened (cut at ``d - 1``: it may grow or end), and so is its segment with the
        runs before it. If that run is the segment's first, the segment before (unless a CZ
        block's) is reopened instead: whether it closed depended on that run's columns. The
        segments before the reopened one closed on runs that end before ``d``, so they stay.
        """
        d = min(dirty, len(self.values))
        if d == len(self.values) and isinstance(after, CzPlace):
            return d
        self.rebuilt += 1
        if d == 0:
            self.values, self.run0, self.rfirst, self.rseg = [], [], [], []
            self.nruns, self.plan = 0, SvPlan()
            self.open_runs, self.open_run = (), None
            return 0
        u = bisect_right(self.rfirst, d - 1) - 1
        s = self.rseg[u]
        segs = self.plan.segments
        seg = segs[s]
        if seg.cz is not None:  # a CZ block ends at d - 1: nothing stays open
            keep, opened, run = s + 1, (), None
        else:
            j = u - self.run0[s]
            r = seg.runs[j]
            run = Run(r.first, d - r.first, r.row0, r.col)
            if j:
                keep, opened = s, seg.runs[:j]
            elif s and segs[s - 1].cz is None:
                keep, opened = s - 1, segs[s - 1].runs
            else:
                keep, opened = s, ()
        self.nruns = self.run0[keep] if keep < len(self.run0) else self.nruns
        del self.run0[keep:], self.values[d:], self.rfirst[self.nruns:], self.rseg[self.nruns:]
        self.plan = SvPlan(segs[:keep], d)
        self.open_runs, self.open_run = opened, run
        return d

    def publish_last(self, value: ValuePlace | CzPlace) -> bool:
        """Replace a CZ block at the table's end by ``value`` in place, if that is simple.

        The case of a decode step's commit: the last position's block moves from its CZ slot
        to its O1V, which continues the run ending just before it. Applies (and returns True)
        only when the last position is a CZ block, the segment before it is an O1V segment
        whose last run ends at the position before, ``value`` is the O1V column right after
        that run in its VRS, and the column is free in the segment. The greedy split
        (:func:`plans.sv_segments`) then grows that run by one block and the CZ segment
        goes; the split of every earlier position is unchanged. Otherwise changes nothing and
        returns False (:meth:`cut` and :meth:`extend` handle it).
        """
        n, segs = len(self.values), self.plan.segments
        if (n < 2 or len(segs) < 2 or not isinstance(value, ValuePlace)
                or not isinstance(self.values[-1], CzPlace) or segs[-2].cz is not None
                or self.open_run is not None or self.open_runs):
            return False
        seg = segs[-2]
        r = seg.runs[-1]
        if r.first + r.count != n - 1 or r.row0 != value.row0 or r.col + r.count != value.col:
            return False
        for other in seg.runs[:-1]:
            if other.col <= value.col < other.col + other.count:
                return False
        u = self.nruns - 1  # the CZ block's row; the run's is u - 1
        self.rows[u - 1, 4] += 1
        self.nruns = u
        del self.run0[-1], self.rfirst[-1], self.rseg[-1]
        self.values[-1] = value
        grown = Segment(seg.runs[:-1] + (Run(r.first, r.count + 1, r.row0, r.col),))
        self.plan = SvPlan(segs[:-2] + [grown], n)
        self.edits += 1
        self.last_edit = "pub"
        return True

    def append_cz(self, cz: CzPlace) -> bool:
        """Append a CZ block at the table's end in place, if nothing is left open.

        The case of a decode step's boundary: a new block's first token puts it in a CZ slot.
        A CZ block is a segment of its own and closes the one before it as the table's end
        did, so this is :meth:`cut` at the end followed by :meth:`extend` with ``[cz]``.
        Returns False, changing nothing, when a split is open (after a :meth:`cut` that
        stopped inside the table).
        """
        if self.open_run is not None or self.open_runs:
            return False
        pos, u = len(self.values), self.nruns
        self.rows = _grow(self.rows, u + 1)
        self.rows[u] = (0, 1, 1, pos, 1, cz.row, cz.col0)
        self.nruns = u + 1
        self.run0.append(u)
        self.rfirst.append(pos)
        self.rseg.append(len(self.plan.segments))
        self.values.append(cz)
        seg = Segment((Run(pos, 1, cz.row, cz.col0),), cz)
        self.plan = SvPlan(self.plan.segments + [seg], pos + 1)
        self.edits += 1
        self.last_edit = "cz"
        return True

    def extend(self, values: Sequence[ValuePlace | CzPlace]) -> None:
        """Append the visible Value placements of the table positions from :meth:`cut` on."""
        first = len(self.values)
        if not values and self.open_run is None and not self.open_runs:
            return
        self.rebuilt += 1
        segments = sv_segments(list(values), first, self.open_runs, self.open_run)
        self.open_runs, self.open_run = (), None
        self.values += values
        rows: list[tuple[int, ...]] = []
        nseg = len(self.run0)
        for k, seg in enumerate(segments):
            self.run0.append(self.nruns + len(rows))
            nr, cz = len(seg.runs), int(seg.cz is not None)
            for j, r in enumerate(seg.runs):
                rows.append((j, nr, cz, r.first, r.count, r.row0, r.col))
                self.rfirst.append(r.first)
                self.rseg.append(nseg + k)
        self.rows = _grow(self.rows, self.nruns + len(rows))
        if rows:
            self.rows[self.nruns:self.nruns + len(rows)] = rows
        self.nruns += len(rows)
        self.plan = SvPlan(self.plan.segments + segments, len(self.values))
