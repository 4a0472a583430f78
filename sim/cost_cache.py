"""Exact reuse of cycle-model costs across programs that differ only in their row addresses.

A program's cost on the cycle model (cycles, per-channel command counts, bank-state cycles and
the row and mode state it leaves) is a function of what its instructions ask of the
controllers (:class:`patton.sim.native.Decoded`: opcode classes, banks, channel sets, column
counts) and of the start state, and of row addresses only through which of them are equal:
the controllers compare rows (is the bank open on this row?) and never order or add them.
Column addresses do not enter at all. Nor does which row a bank is open on, when no
instruction of the program asks for it: such a bank needs the same PRE whatever the row, and
keeps it through the program if nothing else opens (a bank opens only on a row some
instruction asks for). So two programs whose decoded fields are equal and whose rows are
equal in the same places, among themselves and with the start state's open rows, cost
exactly the same. Layers of a model placed alike at other rows, and decode steps that repeat
a shape, are such programs.

:class:`CostCache` keys each program on those fields with its rows named in order of first
appearance, and the start state's open rows as those names, ``OTHER`` for a row the program
does not ask for, or closed; so the key holds the pattern of equal rows and not the rows. The
end state is stored named the same way and mapped back through the program's own rows and,
for an ``OTHER``, the row that bank started on. The model's front end and drain
(``CycleModel(frontend=..., drain=...)``) are part of the key: a program costs differently
under the shared and the per-channel one. The program is decoded and keyed by the cycle
kernel (:func:`patton.sim.native.decode`, :func:`patton.sim.native.program_key`): a key is
128 bits, so two different programs or states share one with a probability of about 2^-128
(the one way a reused cost could be wrong). ``check`` re-simulates a random share of hits in
full and raises :class:`CostMismatch` if anything differs: the test suite runs it on every
hit.

A miss runs on the model, and takes what its kernel memo (:class:`patton.sim.native.Memo`)
holds when the model has one: segments of earlier programs met again. Without a memo, a miss
can also be shortened exactly. A caller that will run a program again from another
state (``run(..., again=True)``: the next query head of a GQA group, from the state the first
left) has the miss traced (:class:`patton.sim.native.Trace`); the next miss of the same
program follows that trace and stops where its run meets it, typically within the first
thirtieth of the program. ``check`` re-simulates a share of those in full as well.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from patton.sim import native
from patton.sim.cycle_model import CycleModel, DeviceState, RunResult
from patton.sim.energy import energy, energy_arrays
from patton.sim.isa import Cfr, Instruction
from patton.sim.native import FRONTENDS, Decoded, Trace
from patton.sim.program import Program

__all__ = ["Cost", "CostCache", "CostMismatch"]


class CostMismatch(AssertionError):
    """A cached cost differs from a full simulation of the same program (a bug: report it)."""


#: Interned parts kept per cost of capacity before the table starts over (a serving run
#: stores about 7 distinct parts a cost; costs dropped from the cache leave theirs behind).
PARTS_PER_COST = 16

#: A stored end state's mark for an open row that no instruction of the program asks for: the
#: bank kept the row it started with, whichever that was.
OTHER = -2


@dataclass(frozen=True, slots=True)
class _Rows:
    """The rows a key names: ``first`` in order of first appearance (name i is
    ``first[i]``), ``sorted`` with each one's name in ``rank``; ``start`` the start state's
    open rows, flat."""

    first: np.ndarray
    sorted: np.ndarray
    rank: np.ndarray
    start: np.ndarray


def _named(rows: np.ndarray, sorted_rows: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``rows`` (open rows, -1 closed) as the key names them: a program row's name, OTHER for
    any other open row, -1 closed."""
    other = np.where(rows >= 0, OTHER, -1)  # the names of rows the program does not ask for
    if not len(sorted_rows):
        return other
    at = np.minimum(np.searchsorted(sorted_rows, rows), len(sorted_rows) - 1)
    return np.where(sorted_rows[at] == rows, rank[at], other)


#: One channel's counts as ``(name, count)`` pairs (a dict's items, in its order).
_Items = tuple[tuple[str, int], ...]  # pragma: no mutate (only unevaluated annotations use it)


@dataclass(frozen=True, slots=True)
class _Cost:
    """A stored cost. Its parts are interned (:meth:`CostCache._shared`): channels and
    programs mostly repeat each other's counts and rows, and a long serving run keeps 10^5
    costs. One stored by :meth:`CostCache.cost` keeps the energy instead of the counts
    (``command_counts`` None); one stored by :meth:`CostCache.run`, the counts."""

    cycles: int
    command_counts: tuple[tuple[int, _Items], ...] | None  # (channel, its counts)
    bank_state_cycles: tuple[tuple[int, _Items], ...] | None
    open_rows: tuple[tuple[int, ...], ...]  # renamed rows (-1 closed)
    reg_mode: tuple[bool, ...]
    end_cfr: tuple[int, ...]  # the CFRs it leaves
    # with ``components_pj``: set by CostCache.cost; the default only for a cost run() stores
    energy_pj: float = 0.0  # pragma: no mutate (that cost's energy_pj is never read)
    components_pj: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class Cost:
    """What :meth:`CostCache.cost` returns: a program's cycles, its energy in pJ, that
    energy by :data:`patton.sim.energy.COMPONENTS`, and the state it leaves."""

    cycles: int
    energy_pj: float
    components_pj: tuple[float, ...]
    state: DeviceState


class CostCache:
    """A cycle model that reuses the cost of every program whose key it has seen.

    Args:
        model: the cycle model to run misses on (default: a fresh one). It must not record
            schedules: a cached result has none.
        capacity: costs kept (least recently used dropped first).
        check: share of hits re-simulated in full and compared (0 = none, 1 = every hit); the
            full simulation takes nothing from the model's memo.
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
        # what ``check`` compares with: the model simulating every instruction (no memo)
        self._full = self.model if self.model.memo is None else copy.copy(self.model)
        self._full.memo = None
        self._rng = np.random.default_rng(seed)
        self._costs: OrderedDict[bytes, _Cost] = OrderedDict()
        self._parts: dict[tuple, tuple] = {}  # every stored part, once (:meth:`_shared`)
        self._trace: Trace | None = None  # of the last miss run with ``again``
        # the last program decoded: (program, CFRs, decoded, digest of its keyed fields); a
        # program runs several times in a row (the query heads of a group, the layers)
        self._last: tuple[Program, tuple[int, ...], Decoded] | None = None
        # what tells this cache's keys apart from another setting's
        self._salt = 1 + FRONTENDS.index(self.model.frontend) + 4 * int(self.model.drain)
        self.hits = 0
        self.followed = 0  # misses run following a trace (stopping where they meet it)
        self.misses = 0
        self.checked = 0

    def _lookup(self, program: Program | Iterable[Instruction], state: DeviceState | None
                ) -> tuple[Program, DeviceState, bytes, _Rows, _Cost | None]:
        """Key ``program`` from ``state`` (default: reset) and look the key up."""
        columnar = program if isinstance(program, Program) else Program.of(list(program))
        state = DeviceState.reset(self.model.device) if state is None else state
        key, rows = self._key(columnar, state)
        return columnar, state, key, rows, self._costs.get(key)

    def _decoded(self, program: Program, state: DeviceState) -> Decoded:
        """``program`` decoded under ``state``'s CFRs (once for consecutive runs)."""
        cfr = tuple(state.cfr[c] for c in Cfr)
        last = self._last
        if last is None or last[0] is not program or last[1] != cfr:
            decoded = native.decode(program, dict(zip(Cfr, cfr)), self.model.device.channels)
            last = self._last = (program, cfr, decoded)
        return last[2]

    def cost(self, program: Program | Iterable[Instruction],
             state: DeviceState | None = None) -> Cost:
        """Return the program's cycles, energy and end state from ``state`` (default:
        reset), simulated or reused: :meth:`run` for a caller that needs no counts (it keeps
        no schedule, builds no per-channel dicts, and computes a stored cost's energy once)."""
        columnar, state, key, rows, cost = self._lookup(program, state)
        if cost is not None and cost.components_pj is not None:
            self.hits += 1
            self._costs.move_to_end(key)
            out = Cost(cost.cycles, cost.energy_pj, cost.components_pj,
                       self._state(cost, rows, state))
            if self.check and self._rng.random() < self.check:
                self.checked += 1
                self._compare_cost(columnar, state, out, "cached cost")
            return out
        self.misses += 1
        cycles, counts, stats, end = self.model.cost_decoded(
            columnar, self._decoded(columnar, state), state)
        e = energy_arrays(counts, stats, cycles)
        out = Cost(cycles, e.total * 1000.0, tuple(v * 1000.0 for v in e.components.values()),
                   end)
        if self.check and self._rng.random() < self.check:
            self.checked += 1
            self._compare_cost(columnar, state, out, "cost taken partly from the memo")
        self._store_cost(key, out, rows)
        return out

    def run(self, program: Program | Iterable[Instruction],
            state: DeviceState | None = None, *, again: bool = False) -> RunResult:
        """Return the program's cost from ``state`` (default: reset), simulated or reused.

        ``again``: the caller will run this program again from another state, so a miss is
        traced for that run to follow (module docstring).
        """
        columnar, state, key, rows, cost = self._lookup(program, state)
        if cost is None or cost.command_counts is None:
            decoded = self._decoded(columnar, state)
            self.misses += 1
            if self.model.native and self.model.memo is not None:  # segments from the memo
                result = self.model.run_decoded(columnar, decoded, state)
                if self.check and self._rng.random() < self.check:
                    self.checked += 1
                    self._compare(self._full.run(columnar, state), result, len(columnar),
                                  "cost taken partly from the memo")
            elif self.model.native:
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
                        self._compare(self._full.run(columnar, state), result,
                                      len(columnar), "followed run's cost")
            else:
                result = self.model.run(columnar, state)
            self._store(key, result, rows)
            return result
        self.hits += 1
        self._costs.move_to_end(key)
        result = self._result(cost, rows, state)
        if self.check and self._rng.random() < self.check:
            self.checked += 1
            self._compare(self._full.run(columnar, state), result, len(columnar), "cached cost")
        return result

    def _compare_cost(self, program: Program, state: DeviceState, out: Cost, what: str) -> None:
        full = self._full.run(program, state)
        e = energy(full.command_counts, full.bank_state_cycles, full.cycles)
        if (full.cycles, e.total * 1000.0, full.state) != (out.cycles, out.energy_pj, out.state):
            raise CostMismatch(f"{what} {out.cycles} cycles, {out.energy_pj} pJ; full "
                               f"simulation {full.cycles} cycles, {e.total * 1000.0} pJ "
                               f"(program of {len(program)} instructions)")

    @staticmethod
    def _compare(full: RunResult, result: RunResult, n: int, what: str) -> None:
        if (full.cycles, full.command_counts, full.bank_state_cycles, full.state) != \
                (result.cycles, result.command_counts, result.bank_state_cycles, result.state):
            raise CostMismatch(f"{what} {result.cycles} cycles, full simulation "
                               f"{full.cycles} (program of {n} instructions)")

    # -- keys ------------------------------------------------------------------------------

    def _key(self, program: Program, state: DeviceState) -> tuple[bytes, _Rows]:
        """Return the key (``native.program_key``: 128 bits) and the rows it names."""
        start = np.array(state.open_rows, dtype=np.int64)
        key, first = native.program_key(program, {c: state.cfr[c] for c in Cfr},
                                        self.model.device.channels, start,
                                        np.array(state.reg_mode, np.int64), self._salt)
        order = np.argsort(first, kind="stable")  # the sorted rows' names
        return key, _Rows(first, first[order], order, start.ravel())

    def _store(self, key: bytes, result: RunResult, rows: _Rows) -> None:
        end = result.state
        assert end is not None
        open_rows, reg_mode = self._end(end, rows)
        one = self._shared
        self._put(key, _Cost(
            result.cycles,
            one(tuple((ch, one(tuple(c.items()))) for ch, c in result.command_counts.items())),
            one(tuple((ch, one(tuple(c.items()))) for ch, c in result.bank_state_cycles.items())),
            open_rows, reg_mode, end.cfr))

    def _store_cost(self, key: bytes, out: Cost, rows: _Rows) -> None:
        open_rows, reg_mode = self._end(out.state, rows)
        self._put(key, _Cost(out.cycles, None, None, open_rows, reg_mode, out.state.cfr,
                             out.energy_pj, out.components_pj))

    def _end(self, end: DeviceState, rows: _Rows
             ) -> tuple[tuple[tuple[int, ...], ...], tuple[bool, ...]]:
        """The end state's open rows as the key names them, and its register modes, interned
        (the parts table started over first if it holds more than its bound)."""
        renamed = self._renamed(end, rows)
        if len(self._parts) > PARTS_PER_COST * self.capacity:
            self._parts.clear()  # the stored costs keep their parts; new ones share anew
        one = self._shared
        return one(tuple(one(tuple(r)) for r in renamed.tolist())), one(end.reg_mode)

    def _put(self, key: bytes, cost: _Cost) -> None:
        """Keep ``cost`` under ``key``, the least recently used cost dropped past capacity."""
        self._costs[key] = cost
        if len(self._costs) > self.capacity:
            self._costs.popitem(last=False)

    @staticmethod
    def _renamed(end: DeviceState, rows: _Rows) -> np.ndarray:
        """The end state's open rows as the key names them (``(channels, banks)``)."""
        actual = np.array(end.open_rows, dtype=np.int64)
        flat = actual.ravel()
        renamed = _named(flat, rows.sorted, rows.rank)
        kept = renamed == OTHER  # no row of the program: the bank kept its start row
        if (flat[kept] != rows.start[kept]).any():
            raise CostMismatch("a bank opened a row no instruction of the program asks for")
        return renamed.reshape(actual.shape)

    def _shared(self, part: tuple) -> tuple:
        """Return the stored tuple equal to ``part`` (``part`` itself the first time)."""
        return self._parts.setdefault(part, part)

    @staticmethod
    def _state(cost: _Cost, rows: _Rows, start: DeviceState) -> DeviceState:
        """The stored end state with the key's names mapped back onto ``rows``."""
        named = np.array(cost.open_rows, dtype=np.int64)
        flat = named.ravel()
        first = np.append(rows.first, -1)  # name i's row first[i]; name -1 (closed) -1
        actual = np.where(flat == OTHER, rows.start, first[np.maximum(flat, -1)])
        open_rows = tuple(tuple(r) for r in actual.reshape(named.shape).tolist())
        return DeviceState(open_rows, cost.reg_mode, cost.end_cfr)

    def _result(self, cost: _Cost, rows: _Rows, start: DeviceState) -> RunResult:
        assert cost.command_counts is not None
        assert cost.bank_state_cycles is not None
        counts = {ch: dict(c) for ch, c in cost.command_counts}
        states = {ch: dict(s) for ch, s in cost.bank_state_cycles}
        return RunResult(cost.cycles, counts, states, None, self._state(cost, rows, start))
