"""Scoreboard: the RTL channel's replay of a schedule against the models' verdict on it.

Values: every read the RTL returned (RD on ``rdata``, RDMAC16 on ``rdata_mac``) must equal, bit
for bit, what the functional model returns when it replays the same schedule
(``patton.sim.replay``). Both sides are put in return order (issue cycle + latency) and, for
reads returning in the same cycle (an RD at ``t`` and an RDMAC16 at ``t + 50``), in issue
order; an RTL read's issue cycle is its return cycle minus its command's latency. The final
mat contents must be equal too, word for word (``Verdict.mat_mismatches``). Commands
``verify`` finds illegal are left out of the replay: the RTL refuses them too.
Checks: the set of (cycle, timing rule) the RTL flagged must equal the set
``patton.sim.check.verify`` lists, and so must the cycles flagged for protocol errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from patton.sim.check import Violation, verify
from patton.sim.datapath import AF_WORDS, af_lut
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.functional import FunctionalModel
from patton.sim.replay import replay
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, TIMING, Timing
from patton.tb.monitor import PlayResult, RtlRead
from patton.tb.reference import changed_words

__all__ = ["Verdict", "score", "Scoreboard", "Discrepancy", "ScoreboardError"]


@dataclass(slots=True)
class Verdict:
    """How one replay compares with the models."""

    reads: int = 0  # reads compared
    mismatches: int = 0  # reads whose value (or command, or count) differ
    rtl_timing: set[tuple[int, int]] = field(default_factory=set)  # (cycle, rule)
    model_timing: set[tuple[int, int]] = field(default_factory=set)  # (cycle, rule)
    rtl_protocol: set[int] = field(default_factory=set)  # cycles
    model_protocol: set[int] = field(default_factory=set)  # cycles
    model_bus: int = 0  # same-cycle commands the model lists (the player cannot issue them)
    mat_words: int = 0  # mat words compared (non-zero on either side)
    mat_mismatches: int = 0  # of those, words whose final contents differ

    @property
    def agree(self) -> bool:
        """True when the RTL checker and the model list the same violations."""
        return self.rtl_timing == self.model_timing and self.rtl_protocol == self.model_protocol

    @property
    def rtl_violations(self) -> int:
        """Commands the RTL flagged."""
        return len({c for c, _ in self.rtl_timing} | self.rtl_protocol)

    @property
    def model_violations(self) -> int:
        """Commands the model flagged."""
        return len({c for c, _ in self.model_timing} | self.model_protocol) + self.model_bus


def score(schedule: Sequence[TimedCommand], result: PlayResult, device: Device = DEVICE,
          values: bool = True, timing: Timing = DEFAULT_PROFILE) -> Verdict:
    """Compare one channel's replay with the models (``values=False``: checks only; ``timing``:
    the profile ``verify`` checks against, the one the RTL's checker was built for)."""
    verdict = Verdict()
    found = verify(schedule, device, timing)
    verdict.model_timing = {(v.cycle, v.rule) for v in found if v.kind == "timing"}
    verdict.model_protocol = {v.cycle for v in found if v.kind == "protocol"}
    verdict.model_bus = sum(v.kind == "bus" for v in found)
    verdict.rtl_timing = {(v.cycle, r) for v in result.violations for r in v.rules}
    verdict.rtl_protocol = {v.cycle for v in result.violations if v.protocol}
    if values:
        # Return order: RDMAC16 (2 cycles) overtakes an earlier RD (52); ties in issue order.
        # Neither the RTL nor ``verify`` executes a command with a protocol error.
        legal = [c for c in schedule if c.cycle not in verdict.model_protocol]
        model = FunctionalModel(device)
        expected = sorted(replay(legal, model),
                          key=lambda r: (r.command.cycle + TIMING.latency[r.command.command],
                                         r.command.cycle))
        got = sorted(result.reads, key=lambda r: (r.cycle, r.issued))
        verdict.reads = max(len(expected), len(got))
        verdict.mismatches = abs(len(expected) - len(got)) + sum(
            a.command.command != b.command or a.command.cycle != b.issued
            or not np.array_equal(a.data, b.data)
            for a, b in zip(expected, got))
        channel = schedule[0].channel if schedule else 0
        verdict.mat_words, verdict.mat_mismatches = _compare_mats(
            model.channels[channel].mats, result.mats, device)
    return verdict


def _compare_mats(model: dict[int, np.ndarray],
                  rtl: dict[tuple[int, int, int], np.ndarray],
                  device: Device = DEVICE) -> tuple[int, int]:
    """Compare final mat contents; return (words compared, words that differ).

    ``model``: the functional model's rows (``row -> (banks, columns, lanes)``); ``rtl``: the
    RTL's words that differ from their power-up contents (zero; in the activation-function LUT
    rows, ``AF_ROW_BASE`` and up, the default tables). Words at their power-up contents on
    both sides are not counted (:func:`~patton.tb.reference.changed_words`); a word missing on
    one side is at its power-up contents there.
    """
    want = changed_words(model, device)
    keys = want.keys() | rtl.keys()
    differ = sum(not np.array_equal(want.get(k, _initial(k, device)),
                                    rtl.get(k, _initial(k, device))) for k in keys)
    return len(keys), differ


def _initial(key: tuple[int, int, int], device: Device) -> np.ndarray:
    """The power-up contents of mat word ``(bank, row, column)``."""
    _, row, col = key
    if row >= AF_ROW_BASE and device.columns * device.lanes == AF_WORDS:
        return af_lut(row - AF_ROW_BASE).reshape(device.columns, device.lanes)[col]
    return np.zeros(device.lanes, dtype=np.uint16)


# -- the scoreboard of a live session ------------------------------------------------------------


def words_text(data: np.ndarray | None) -> str:
    """Bit patterns as text: 16 words of 4 hex digits, ``:``-separated (``-`` for none)."""
    if data is None:
        return "-"
    return ":".join(f"{int(w):04x}" for w in np.asarray(data).ravel())


def command_text(cmd: TimedCommand, opcode: str | None = None) -> str:
    """A schedule command in words, with the program instruction it came from."""
    where = " ".join(f"{k} {v}" for k, v in (("bank", cmd.bank), ("row", cmd.row),
                                               ("col", cmd.col)) if v >= 0)
    text = cmd.command.name + (f" {where}" if where else "")
    if cmd.source >= 0:
        text += f" (instruction {cmd.source}{' ' + opcode if opcode else ''})"
    return text


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """One difference between the RTL and the models, located.

    ``kind``: ``"value"`` (a read's data differs), ``"missing"`` (a read the schedule issued
    did not come back), ``"unexpected"`` (a read came back that the schedule did not issue),
    ``"violation"`` (the RTL's checker flagged a command), ``"checker"`` (the RTL's checker
    and ``verify`` disagree on a command), ``"mat"`` (a mat word differs), ``"dropped"`` (an
    instruction's commands are missing from the schedule). ``program`` counts
    the programs (segments) of the session from 1; ``cycle`` is in the program's own cycles.
    """

    kind: str
    program: int  # program number in the session, from 1
    channel: int  # channel
    cycle: int  # cycle of the command (program-relative); -1 for a mat word
    command: str  # the command (and instruction) in words
    expected: str  # what the models say
    actual: str  # what the RTL did

    def __str__(self) -> str:
        at = f" cycle {self.cycle}" if self.cycle >= 0 else ""
        return (f"program {self.program} ch {self.channel}{at} {self.command}: {self.kind}: "
                f"expected {self.expected}, RTL {self.actual}")


class ScoreboardError(AssertionError):
    """A strict scoreboard found discrepancies (``.found`` lists them)."""

    def __init__(self, found: Sequence[Discrepancy]) -> None:
        shown = "\n  ".join(str(d) for d in found[:10])
        more = f"\n  ... and {len(found) - 10} more" if len(found) > 10 else ""
        super().__init__(f"the RTL disagrees with the models ({len(found)} discrepancies):\n  "
                         f"{shown}{more}")
        self.found = list(found)


class Scoreboard:
    """Compares the RTL with the models across a session and counts what differs.

    Every method records :class:`Discrepancy` entries (the first ``keep`` are kept in
    :attr:`found`, all are counted); :meth:`settle` raises :class:`ScoreboardError` with
    those of the current program when ``strict``.

    Args:
        strict: raise at :meth:`settle` when the program just compared has a discrepancy.
        keep: discrepancies kept for reporting.
    """

    def __init__(self, strict: bool = False, keep: int = 1000) -> None:
        self.strict = strict
        #: Timing rule names by id, for messages (the default profile's; an executor of
        #: another profile sets its own).
        self.rule_names: dict[int, str] = {r.id: r.expression for r in TIMING.rules}
        self.keep = keep
        self.found: list[Discrepancy] = []
        self.reads = 0  # reads compared
        self.mismatches = 0  # reads that differ, are missing or unexpected
        self.violations = 0  # commands the RTL flagged
        self.model_violations = 0  # commands verify flagged
        self.disagreements = 0  # commands the two checkers judge differently
        self.mat_words = 0  # mat words compared
        self.mat_mismatches = 0  # of those, words that differ
        self.dropped = 0  # commands the schedule lacks (see RtlExecutor)
        self._pending: list[Discrepancy] = []

    @property
    def ok(self) -> bool:
        """True when nothing differed and nothing was flagged."""
        return not (self.mismatches or self.violations or self.model_violations
                    or self.disagreements or self.mat_mismatches or self.dropped)

    def record(self, found: Discrepancy) -> None:
        """Record one discrepancy."""
        if len(self.found) < self.keep:
            self.found.append(found)
        self._pending.append(found)

    def compare(self, expected: Sequence[tuple[TimedCommand, np.ndarray, str]],
                got: Sequence[RtlRead], program: int, channel: int) -> list[int]:
        """Compare one channel's returned reads with the expected ones.

        ``expected``: ``(read command, expected data, instruction opcode)`` per read the
        schedule issued. Reads are paired by issue cycle and command (the port takes one
        command per cycle). Returns, per expected read, the index in ``got`` of its RTL read
        (-1: missing).
        """
        by_issue = {(r.issued, r.command): i for i, r in enumerate(got)}
        paired: list[int] = []
        for cmd, want, opcode in expected:
            self.reads += 1
            i = by_issue.pop((cmd.cycle, cmd.command), -1)
            paired.append(i)
            if i < 0:
                self.mismatches += 1
                self.record(Discrepancy("missing", program, channel, cmd.cycle,
                                        command_text(cmd, opcode), words_text(want),
                                        "no read returned"))
            elif not np.array_equal(got[i].data, want):
                self.mismatches += 1
                self.record(Discrepancy("value", program, channel, cmd.cycle,
                                        command_text(cmd, opcode), words_text(want),
                                        words_text(got[i].data)))
        for (issued, command), i in sorted(by_issue.items()):
            self.reads += 1
            self.mismatches += 1
            self.record(Discrepancy("unexpected", program, channel, issued, command.name,
                                    "no read", words_text(got[i].data)))
        return paired

    def check(self, schedule: Sequence[TimedCommand], result: PlayResult,
              found: Sequence[Violation], program: int, channel: int,
              intended: bool = False) -> None:
        """Compare the RTL checker's flags (``result.violations``) with ``verify``'s
        (``found``, for ``schedule``). ``intended``: the schedule breaks rules on purpose
        (coverage stimulus); a flag both checkers agree on is counted, not recorded."""
        from patton.hw.isa import ProtocolCode

        rtl: dict[int, tuple[frozenset[int], bool, str]] = {}
        for v in result.violations:
            protocol = ProtocolCode(v.protocol).name if v.protocol else ""
            rtl[v.cycle] = (v.rules, bool(v.protocol), protocol)
        model: dict[int, tuple[set[int], bool]] = {}
        for v in found:
            if v.kind == "bus":
                continue
            rules, protocol = model.get(v.cycle, (set(), False))
            if v.kind == "timing":
                rules.add(v.rule)
            model[v.cycle] = (rules, protocol or v.kind == "protocol")
        self.violations += len(rtl)
        self.model_violations += len(model)
        at = {c.cycle: c for c in schedule}
        for cycle in sorted(rtl.keys() | model.keys()):
            got = rtl.get(cycle, (frozenset(), False, ""))
            want = model.get(cycle, (set(), False))
            cmd = at.get(cycle)
            what = command_text(cmd) if cmd is not None else "(no command)"
            actual = _flags(got[0], got[1], got[2], self.rule_names)
            expected = _flags(want[0], want[1], "", self.rule_names)
            agree = set(got[0]) == want[0] and got[1] == want[1]
            if not agree:
                self.disagreements += 1
            elif intended:
                continue
            self.record(Discrepancy("violation" if agree else "checker", program, channel,
                                    cycle, what, expected, actual))

    def mats(self, expected: dict[tuple[int, int, int], np.ndarray],
             got: dict[tuple[int, int, int], np.ndarray], program: int, channel: int,
             device: Device = DEVICE) -> None:
        """Compare mat contents: the words that differ from their power-up contents (zero; the
        default table in a LUT row) by (bank, row, column) on either side
        (:func:`~patton.tb.reference.changed_words`, the RTL's mat dump); a word missing on one
        side is at its power-up contents there."""
        for key in sorted(expected.keys() | got.keys()):
            self.mat_words += 1
            initial = _initial(key, device)
            want, have = expected.get(key, initial), got.get(key, initial)
            if not np.array_equal(want, have):
                self.mat_mismatches += 1
                bank, row, col = key
                self.record(Discrepancy("mat", program, channel, -1,
                                        f"mat word bank {bank} row {row} col {col}",
                                        words_text(want), words_text(have)))

    def settle(self) -> list[Discrepancy]:
        """End the current program: return its discrepancies; raise if ``strict``."""
        found, self._pending = self._pending, []
        if found and self.strict:
            raise ScoreboardError(found)
        return found

    def summary(self) -> dict[str, int]:
        """The counters, JSON-ready."""
        return {"reads": self.reads, "mismatches": self.mismatches,
                "violations": self.violations, "model_violations": self.model_violations,
                "disagreements": self.disagreements, "mat_words": self.mat_words,
                "mat_mismatches": self.mat_mismatches, "dropped": self.dropped}


def _flags(rules: Iterable[int], protocol: bool, name: str, names: dict[int, str]) -> str:
    parts = []
    if rules:
        parts.append("rules " + ", ".join(f"{r} {names[r]}" if r in names else str(r)
                                          for r in sorted(rules)))
    if protocol:
        parts.append(f"protocol {name}".strip())
    return "; ".join(parts) if parts else "legal"
