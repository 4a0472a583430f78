"""Exact reuse of cycle-model costs across programs that differ only in their row addresses.

A program's cost on the cycle model (cycles, per-channel command counts, bank-state cycles and
the row and mode state it leaves) is a function of what its instructions ask of the
controllers (:class:`patton.sim.native.Decoded`: opcode classes, banks, channel sets, column
counts) and of the start state, and of row addresses only through which of them are equal:
the controllers compare rows (is the bank open on this row?) and never order or add them.
Column addresses do not enter at all. So two programs whose decoded fields are equal and
whose rows, start rows included, are equal in the same places cost exactly the same. Layers
of a model placed alike at other rows, and decode steps that repeat a shape, are such
programs.

:class:`CostCache` keys each program on those fields with its rows renamed in order of first
appearance (start state first), so the key holds the pattern of equal rows and not the rows;
the end state is stored renamed and mapped back through the program's own rows. The model's
front end (``CycleModel(frontend=...)``) is part of the key: a program costs differently
under the shared and the per-channel one. Keys are
SHA-256 digests of the canonical arrays. ``check`` re-simulates a random share of hits in full
and raises :class:`CostMismatch` if anything differs: the test suite runs it on every hit.

A miss can also be shortened exactly. A caller that will run a program again from another
state (``run(..., again=True)``: the next query head of a GQA group, from the state the first
left) has the miss traced (:class:`patton.sim.native.Trace`); the next miss of the same
program follows that trace and stops where its run meets it, typically within the first
thirtieth of the program. ``check`` re-simulates a share of those in full as well.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from patton.sim.cycle_model import CycleModel, DeviceState, RunResult
from patton.sim.isa import Cfr, Instruction
from patton.sim.native import Decoded, Trace
from patton.sim.program import Program

__all__ = ["CostCache", "CostMismatch"]

#: Decoded fields that enter the key (column addresses do not affect timing; ``behaviour``
#: stands for the per-op columns, one to one).
KEYED = ("behaviour", "bank", "columns", "targets")


class CostMismatch(AssertionError):
    """A cached cost differs from a full simulation of the same program (a bug: report it)."""


#: Interned parts kept per cost of capacity before the table starts over (a serving run
#: stores about 7 distinct parts a cost; costs dropped from the cache leave theirs behind).
PARTS_PER_COST = 16

#: One channel's counts as ``(name, count)`` pairs (a dict's items, in its order).
_Items = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class _Cost:
    """A stored cost. Its parts are interned (:meth:`CostCache._shared`): channels and
    programs mostly repeat each other's counts and rows, and a long serving run keeps 10^5
    costs."""

    cycles: int
    command_counts: tuple[tuple[int, _Items], ...]  # (channel, its counts)
    bank_state_cycles: tuple[tuple[int, _Items], ...]
    open_rows: tuple[tuple[int, ...], ...]  # renamed rows (-1 closed)
    reg_mode: tuple[bool, ...]


class CostCache:
    """A cycle model that reuses the cost of every program whose key it has seen.

    Args:
        model: the cycle model to run misses on (default: a fresh one). It must not record
            schedules: a cached result has none.
        capacity: costs kept (least recently used dropped first).
        check: share of hits re-simulated in full and compared (0 = none, 1 = every hit).
        seed: seed of the draw that picks the checked hits.
    """

    def __init__(self, model: CycleModel | None = None, *, capacity: int = 4096,
                 check: float = 0.0, seed: int = 0) -> None:
        self.model = model if model is not None else CycleModel()
        if self.model.record:
            raise ValueError("a cost cache keeps no schedules: use CycleModel(record=False)")
        if not 0.0 <= check <= 1.0:
            raise ValueError(f"check is a share of hits in [0, 1], not {check}")
        self.capacity = capacity
        self.check = check
        self._rng = np.random.default_rng(seed)
        self._costs: OrderedDict[bytes, _Cost] = OrderedDict()
        self._parts: dict[tuple, tuple] = {}  # every stored part, once (:meth:`_shared`)
        self._trace: Trace | None = None  # of the last miss run with ``again``
        # the last program decoded: (program, CFRs, decoded, digest of its keyed fields); a
        # program runs several times in a row (the query heads of a group, the layers)
        self._last: tuple[Program, tuple[int, ...], Decoded, bytes] | None = None
        self.hits = 0
        self.followed = 0  # misses run following a trace (stopping where they meet it)
        self.misses = 0
        self.checked = 0

    def run(self, program: Program | Iterable[Instruction],
            state: DeviceState | None = None, *, again: bool = False) -> RunResult:
        """Return the program's cost from ``state`` (default: reset), simulated or reused.

        ``again``: the caller will run this program again from another state, so a miss is
        traced for that run to follow (module docstring).
        """
        columnar = program if isinstance(program, Program) else Program.of(list(program))
        dev = self.model.device
        state = DeviceState.reset(dev) if state is None else state
        cfr = tuple(state.cfr[c] for c in Cfr)
        last = self._last
        if last is None or last[0] is not columnar or last[1] != cfr:
            decoded = Decoded(columnar, dict(zip(Cfr, cfr)), dev.channels)
            last = self._last = (columnar, cfr, decoded, self._fields(decoded))
        decoded = last[2]
        key, rows = self._key(decoded, state, last[3])
        cost = self._costs.get(key)
        if cost is None:
            self.misses += 1
            if self.model.native:
                follow = self._trace if self._trace is not None and \
                    self._trace.follows(decoded) else None
                result = self.model.run_decoded(columnar, decoded, state,
                                                trace=again and follow is None, follow=follow)
                if result.trace is not None:
                    self._trace = result.trace
                if follow is not None:
                    self.followed += 1
                    if self.check and self._rng.random() < self.check:
                        self.checked += 1
                        self._compare(self.model.run(columnar, state), result,
                                      len(columnar), "followed run's cost")
            else:
                result = self.model.run(columnar, state)
            self._store(key, result, rows)
            return result
        self.hits += 1
        self._costs.move_to_end(key)
        result = self._result(cost, rows, decoded)
        if self.check and self._rng.random() < self.check:
            self.checked += 1
            self._compare(self.model.run(columnar, state), result, len(columnar), "cached cost")
        return result

    @staticmethod
    def _compare(full: RunResult, result: RunResult, n: int, what: str) -> None:
        if (full.cycles, full.command_counts, full.bank_state_cycles, full.state) != \
                (result.cycles, result.command_counts, result.bank_state_cycles, result.state):
            raise CostMismatch(f"{what} {result.cycles} cycles, full simulation "
                               f"{full.cycles} (program of {n} instructions)")

    # -- keys ------------------------------------------------------------------------------

    def _fields(self, decoded: Decoded) -> bytes:
        """Return the digest of the program's part of the key: all but its rows."""
        digest = hashlib.sha256()
        digest.update(self.model.frontend.encode() + b"\0")
        digest.update(np.int64(decoded.n).tobytes())
        for name in KEYED:
            digest.update(getattr(decoded, name).tobytes())
        return digest.digest()

    def _key(self, decoded: Decoded, state: DeviceState, fields: bytes | None = None
             ) -> tuple[bytes, np.ndarray]:
        """Return the key (``fields``: :meth:`_fields`, made if None) and the program's distinct
        rows in order of first appearance."""
        start = np.array(state.open_rows, dtype=np.int64).reshape(-1)
        dram = decoded.columns > 0
        values = np.concatenate((start, decoded.row[dram]))
        # rows come in runs: rename the first of each run (every row's first appearance is
        # one), then give each entry its run's name
        heads = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        runs = values[heads]
        real = runs >= 0
        rows, first, inverse = np.unique(runs[real], return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(rows), dtype=np.int64)
        rank[order] = np.arange(len(rows))
        named = np.full(len(runs), -1, dtype=np.int64)
        named[real] = rank[inverse.reshape(-1)]
        renamed = np.repeat(named, np.diff(np.append(heads, len(values))))
        digest = hashlib.sha256(self._fields(decoded) if fields is None else fields)
        digest.update(renamed.tobytes())
        digest.update(np.array(state.reg_mode, dtype=np.int8).tobytes())
        return digest.digest(), rows[order]

    def _store(self, key: bytes, result: RunResult, rows: np.ndarray) -> None:
        name = {int(r): i for i, r in enumerate(rows.tolist())}
        end = result.state
        renamed = tuple(tuple(-1 if r < 0 else name[r] for r in bank_rows)
                        for bank_rows in end.open_rows)
        if len(self._parts) > PARTS_PER_COST * self.capacity:
            self._parts.clear()  # the stored costs keep their parts; new ones share anew
        one = self._shared
        self._costs[key] = _Cost(
            result.cycles,
            one(tuple((ch, one(tuple(c.items()))) for ch, c in result.command_counts.items())),
            one(tuple((ch, one(tuple(c.items()))) for ch, c in result.bank_state_cycles.items())),
            one(tuple(one(bank_rows) for bank_rows in renamed)), one(end.reg_mode))
        if len(self._costs) > self.capacity:
            self._costs.popitem(last=False)

    def _shared(self, part: tuple) -> tuple:
        """Return the stored tuple equal to ``part`` (``part`` itself the first time)."""
        return self._parts.setdefault(part, part)

    @staticmethod
    def _result(cost: _Cost, rows: np.ndarray, decoded: Decoded) -> RunResult:
        actual = rows.tolist()
        open_rows = tuple(tuple(-1 if r < 0 else int(actual[r]) for r in bank_rows)
                          for bank_rows in cost.open_rows)
        counts = {ch: dict(c) for ch, c in cost.command_counts}
        states = {ch: dict(s) for ch, s in cost.bank_state_cycles}
        return RunResult(cost.cycles, counts, states, None,
                         DeviceState(open_rows, cost.reg_mode, decoded.end_cfr))
