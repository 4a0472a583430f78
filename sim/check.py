"""Verify a timed DRAM command schedule against the timing table and the protocol.

:func:`verify` takes any schedule (from our controller, from the RTL, from a user) and lists
every violation:

``timing``
    a rule of the timing profile's table (``timing=``, default ``aimsim-0f28a07``;
    :mod:`patton.sim.timing`) is not met: the command came ``actual`` cycles after the preceding
    command the rule names, at the same node, and the rule requires ``required``. Rules apply
    exactly as the controller applies them: channel rules to every command, bank-group and bank
    rules to single-bank commands, and only the last issue of each preceding command counts.
``bus``
    two commands on one channel in the same cycle.
``protocol``
    a command that is illegal in the current state, by the one protocol definition
    :data:`patton.sim.protocol.RULES` (the functional model applies the same table): a bank or
    row it needs is missing or out of range, a column out of range; an ACT/ACT4/ACT16 while a
    target bank has another row open (the same row is a legal no-op); a column command to a
    closed bank or to a row other than the open one; an all-bank command without one row open
    in all banks (AF16: a LUT row); a MAC under CFR BROADCAST = 1 whose partner bank
    (``bank ^ 1``, which supplies the vector) is not open on the same row; a refresh with a
    target bank open; or a command in the wrong register mode (WRGB, WRMAC16, RDMAC16 and
    RDAF16 need the register mode that TMOD toggles; every other command needs normal mode,
    except TMOD and the controller's SYNC/EOC markers). ACT4/PRE4 open/close their bank
    group, RDA/WRA close their bank, WRA16 closes all banks. CFRs come from
    ``TimedCommand.cfr`` (empty: the reset values, BROADCAST = 0). A row or column of -1 is
    "not given": a given row must be the open one; RD/WR without a column address column 0
    (a public ``R/W MEM`` line has none), other column commands need one.

A command with a protocol error changes no row or mode state (as in the RTL channel, which
refuses it) but still counts as an issue for later timing rules. Legal schedules produce an
empty list; the controller's own schedules do, except one case the public simulator's
controller does not handle: it never opens a ``MAC_SBK``'s partner bank under BROADCAST = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from patton.sim.device import DEVICE, Device
from patton.sim.isa import COMMAND_SCOPE, Cfr, Command, Scope
from patton.sim.protocol import UNADDRESSED, State
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, timing_table

if TYPE_CHECKING:
    from patton.sim.cycle_model import DeviceState

__all__ = ["verify_by_channel", "Violation", "Gap", "Checker", "verify", "verify_from",
           "verify_program"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One violation found in a schedule (``rule`` and ``preceding`` only for timing)."""

    kind: str  # "timing", "bus" or "protocol"
    cycle: int  # cycle of the offending command
    channel: int  # its channel
    command: Command  # the offending command
    rule: int | None = None  # timing rule id (its slot, the same in every profile)
    preceding: Command | None = None  # the command the rule measures from
    preceding_cycle: int | None = None  # when that command issued
    required: int | None = None  # the rule's minimum gap
    actual: int | None = None  # the gap in the schedule
    detail: str = ""  # what is wrong, in words
    line: int = 0  # schedule line, if read from a file
    name: str = ""  # timing: the rule's parameter expression (e.g. "nRCDRDMAC")

    def located(self, file: object) -> str:
        """Return ``file:line: violation`` (``file: violation`` when no line is known)."""
        return f"{file}:{self.line}: {self}" if self.line else f"{file}: {self}"

    def key(self) -> tuple:
        """Identity used to compare two checkers' verdicts (model vs RTL)."""
        return (self.kind, self.cycle, self.channel, self.command, self.rule)

    def __str__(self) -> str:
        head = f"cycle {self.cycle} ch {self.channel} {self.command.name}"
        if self.kind == "timing":
            name = f" {self.name}" if self.name else ""
            return (f"{head}: rule {self.rule}{name} ({self.preceding.name} -> "
                    f"{self.command.name}): needs {self.required}, got {self.actual} (after "
                    f"{self.preceding.name} at {self.preceding_cycle})")
        return f"{head}: {self.kind}: {self.detail}"


#: A timing rule that applies to a command, with the issue it measures from:
#: ``(rule id, preceding command, cycle of its last issue at the rule's node, minimum gap)``.
Gap: TypeAlias = tuple[int, Command, int, int]


class Checker:
    """:func:`verify` of one channel, one command at a time, alive across calls.

    ``step`` takes the channel's commands in cycle order and returns each one's violations;
    ``gaps`` says which rules it was measured against. A testbench that replays schedules in
    segments separated by a quiet gap (no rule reaches across one) calls :meth:`forget`
    between them: the row and mode state stays, the issue history goes.

    Members:
        state: open rows and register mode (:class:`~patton.sim.protocol.State`).
        gaps: the rules the last stepped command was measured against, with the issue each
            measured from (``cmd.cycle - gap.when`` is the actual gap).
    """

    def __init__(self, device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE) -> None:
        self.device = device
        self.timing = timing_table(timing)
        self._names = {r.id: r.expression for r in self.timing.rules}
        self._commands = frozenset(self.timing.commands)
        self.state = State(device)
        self.gaps: list[Gap] = []
        self.forget()

    def forget(self) -> None:
        """Drop the issue history (the next command follows a quiet gap); keep the state."""
        n, d = len(Command), self.device
        self._last = {Scope.CHANNEL: [[-1] * n],
                      Scope.BANKGROUP: [[-1] * n for _ in range(d.bankgroups)],
                      Scope.BANK: [[-1] * n for _ in range(d.banks)]}
        self._cycle = -1

    def _nodes(self, cmd: TimedCommand) -> list[tuple[Scope, int]]:
        nodes = [(Scope.CHANNEL, 0)]
        if 0 <= cmd.bank < self.device.banks and COMMAND_SCOPE[cmd.command] != Scope.CHANNEL:
            nodes += [(Scope.BANKGROUP, cmd.bank // self.device.banks_per_group),
                      (Scope.BANK, cmd.bank)]
        return nodes

    def measure(self, cmd: TimedCommand, nodes: list[tuple[Scope, int]] | None = None
                ) -> list[Gap]:
        """Return the rules ``cmd`` would be measured against if it came next, each with the
        last issue of its preceding command at the rule's node (nothing changes)."""
        gaps: list[Gap] = []
        for level, node in nodes if nodes is not None else self._nodes(cmd):
            last = self._last[level][node]
            for rule, prev, gap in self.timing.before[level][cmd.command]:
                when = last[prev]
                if when >= 0:
                    gaps.append((rule, prev, when, gap))
        return gaps

    def step(self, cmd: TimedCommand) -> list[Violation]:
        """Check ``cmd`` (issued after every command stepped before), apply it; return its
        violations."""
        c, t = cmd.command, cmd.cycle
        out: list[Violation] = []
        if self._cycle == t:
            out.append(Violation("bus", t, cmd.channel, c, detail="second command in one cycle",
                                 line=cmd.line))
        self._cycle = t
        nodes = self._nodes(cmd)
        self.gaps = gaps = self.measure(cmd, nodes)
        for rule, prev, when, gap in gaps:
            if t - when < gap:
                out.append(Violation("timing", t, cmd.channel, c, rule, prev, when, gap, t - when,
                                     line=cmd.line, name=self._names.get(rule, "")))
        for level, node in nodes:
            self._last[level][node][c] = t
        problem = self._protocol(cmd)
        if problem:
            out.append(Violation("protocol", t, cmd.channel, c, detail=problem, line=cmd.line))
        return out

    def _protocol(self, cmd: TimedCommand) -> str:
        """Apply ``cmd`` to the row and mode state; return what was illegal, if any.

        The rules are :data:`patton.sim.protocol.RULES`. An illegal command changes no state
        (the RTL channel does not execute it either); it still counts as an issue for the
        timing rules.
        """
        c = cmd.command
        if c not in self._commands:  # a command of a device extension this device lacks
            return f"{c.name} is not a command of device {self.timing.ext!r}"
        bank = cmd.bank if cmd.bank >= 0 else None
        row = cmd.row if cmd.row >= 0 else None
        col = cmd.col if cmd.col >= 0 else (0 if c in UNADDRESSED else None)
        broadcast = len(cmd.cfr) > Cfr.BROADCAST and bool(cmd.cfr[Cfr.BROADCAST])
        problem = self.state.check(c, bank, row, col, broadcast)
        if problem is None:
            self.state.apply(c, bank, row)
        return problem or ""


def verify(schedule: Iterable[TimedCommand], device: Device = DEVICE,
           timing: Timing = DEFAULT_PROFILE) -> list[Violation]:
    """Return every violation in ``schedule`` (commands are taken in cycle order).

    ``timing`` is a profile name (:data:`patton.sim.timing.PROFILES`) or a compiled table; an
    unknown name raises :class:`~patton.sim.timing.UnknownProfileError`. Protocol and bus
    violations do not depend on it.
    """
    timing = timing_table(timing)
    channels: dict[int, Checker] = {}
    out: list[Violation] = []
    for cmd in sorted(schedule, key=lambda c: c.cycle):
        checker = channels.get(cmd.channel)
        if checker is None:
            checker = channels[cmd.channel] = Checker(device, timing)
        out += checker.step(cmd)
    return out


#: Far in the past: where the prelude that rebuilds a channel's row state for ``verify`` goes.
_PRELUDE = -1_000_000


def verify_from(start: DeviceState, channel: int, cmds: Sequence[TimedCommand],
                device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE) -> list[Violation]:
    """``verify`` one channel's commands as issued from the row and mode state ``start``.

    ``verify`` starts from reset; a prelude of one ACT per open bank and a TMOD (register
    mode), far in the past and far apart, rebuilds ``start`` as history no rule can reach.
    Only violations at cycle 0 or later (the program's) are returned.
    """
    prelude: list[TimedCommand] = []
    cycle = _PRELUDE
    for bank, row in enumerate(start.open_rows[channel]):
        if row >= 0:
            prelude.append(TimedCommand(cycle, channel, Command.ACT, bank, row))
            cycle += 1000
    if start.reg_mode[channel]:
        prelude.append(TimedCommand(cycle, channel, Command.TMOD))
    return [v for v in verify(prelude + list(cmds), device, timing) if v.cycle >= 0]


def verify_program(start: DeviceState, schedule: Iterable[TimedCommand], device: Device = DEVICE,
                   timing: Timing = DEFAULT_PROFILE) -> dict[int, list[Violation]]:
    """:func:`verify_from` a program's schedule, issued from ``start``: violations by channel.

    Every channel with commands has an entry (empty when it is legal).
    """
    return {ch: verify_from(start, ch, cmds, device, timing)
            for ch, cmds in _by_channel(schedule).items()}


def _by_channel(commands: Iterable[TimedCommand]) -> dict[int, list[TimedCommand]]:
    """Commands grouped by channel, each group in the given order."""
    by_channel: dict[int, list[TimedCommand]] = {}
    for c in commands:
        by_channel.setdefault(c.channel, []).append(c)
    return by_channel


def verify_by_channel(commands: list[TimedCommand], timing: str = DEFAULT_PROFILE,
                      advance: Callable[[int], object] | None = None) -> list[Violation]:
    """:func:`verify` one channel at a time (``advance(n)`` after each), merged in file order.

    Every rule and protocol check is per channel, so each channel's violations are those of
    the whole schedule on that channel; the commands of a file are in cycle order, so sorting
    the merged list by line (stable) gives ``verify``'s order. Without ``advance``, or for
    commands not read from a file, it is ``verify`` itself.
    """
    if advance is None or any(c.line == 0 for c in commands[:1]):
        return verify(commands, timing=timing)
    found = []
    for cmds in _by_channel(commands).values():
        found.extend(verify(cmds, timing=timing))
        advance(len(cmds))
    found.sort(key=lambda v: v.line)
    return found
