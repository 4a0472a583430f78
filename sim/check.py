"""Verify a timed DRAM command schedule against the timing table and the protocol.

:func:`verify` takes any schedule (from our controller, from the RTL, from a user) and lists
every violation:

``timing``
    a rule of the table is not met: the command came ``actual`` cycles after the preceding
    command the rule names, at the same node, and the rule requires ``required``. Rules apply
    exactly as the controller applies them: channel rules to every command, bank-group and bank
    rules to single-bank commands, and only the last issue of each preceding command counts.
``bus``
    two commands on one channel in the same cycle.
``protocol``
    a command that is illegal in the current state: a column command to a closed bank or to a
    row other than the open one, an all-bank command without the same row open in all banks,
    an ACT to an open bank, an ACT16 while a bank has another row open, a MAC under CFR
    BROADCAST = 1 whose partner bank (``bank ^ 1``, which supplies the vector) is not open on
    the same row, or a command in the wrong register mode (WRGB, WRMAC16, RDMAC16 and RDAF16
    need the register mode that TMOD toggles; everything else needs normal mode). CFRs come
    from ``TimedCommand.cfr`` (a schedule file carries none: BROADCAST = 0).

A command with a protocol error changes no row or mode state (as in the RTL channel, which
refuses it) but still counts as an issue for later timing rules. Legal schedules produce an
empty list; the controller's own schedules do, except one case the public simulator's
controller does not handle: it never opens a ``MAC_SBK``'s partner bank under BROADCAST = 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .device import DEVICE, Device
from .isa import (
    ALL_ROWS_COMMANDS, BANK_ROW_COMMANDS, COMMAND_SCOPE, REG_MODE_COMMANDS, Cfr, Command, Scope,
)
from .schedule import TimedCommand
from .timing import TIMING, TimingTable

__all__ = ["Violation", "verify"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One violation found in a schedule (``rule`` and ``preceding`` only for timing)."""

    kind: str  # "timing", "bus" or "protocol"
    cycle: int  # cycle of the offending command
    channel: int  # its channel
    command: Command  # the offending command
    rule: int | None = None  # timing rule id (index in the table)
    preceding: Command | None = None  # the command the rule measures from
    preceding_cycle: int | None = None  # when that command issued
    required: int | None = None  # the rule's minimum gap
    actual: int | None = None  # the gap in the schedule
    detail: str = ""  # what is wrong, in words
    line: int = 0  # schedule line, if read from a file

    def key(self) -> tuple:
        """Identity used to compare two checkers' verdicts (model vs RTL)."""
        return (self.kind, self.cycle, self.channel, self.command, self.rule)

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        head = f"{where}cycle {self.cycle} ch {self.channel} {self.command.name}"
        if self.kind == "timing":
            return (f"{head}: rule {self.rule} ({self.preceding.name} -> {self.command.name}) "
                    f"needs {self.required} cycles after {self.preceding.name} at "
                    f"{self.preceding_cycle}, got {self.actual}")
        return f"{head}: {self.kind}: {self.detail}"


class _Channel:
    """What the checker remembers about one channel."""

    def __init__(self, device: Device) -> None:
        n = len(Command)
        self.last = {Scope.CHANNEL: [[-1] * n],
                     Scope.BANKGROUP: [[-1] * n for _ in range(device.bankgroups)],
                     Scope.BANK: [[-1] * n for _ in range(device.banks)]}
        self.open_row = [-1] * device.banks
        self.reg_mode = False
        self.last_cycle = -1


def verify(schedule: Iterable[TimedCommand], device: Device = DEVICE,
           timing: TimingTable = TIMING) -> list[Violation]:
    """Return every violation in ``schedule`` (commands are taken in cycle order)."""
    per_group = device.banks_per_group
    channels: dict[int, _Channel] = {}
    out: list[Violation] = []
    for cmd in sorted(schedule, key=lambda c: c.cycle):
        ch = channels.setdefault(cmd.channel, _Channel(device))
        c, t = cmd.command, cmd.cycle
        if ch.last_cycle == t:
            out.append(Violation("bus", t, cmd.channel, c, detail="second command in one cycle",
                                 line=cmd.line))
        ch.last_cycle = t
        banked = cmd.bank >= 0 and COMMAND_SCOPE[c] != Scope.CHANNEL
        nodes = [(Scope.CHANNEL, 0)]
        if banked:
            nodes += [(Scope.BANKGROUP, cmd.bank // per_group), (Scope.BANK, cmd.bank)]
        for level, node in nodes:
            last = ch.last[level][node]
            for rule, prev, gap in timing.before[level][c]:
                when = last[prev]
                if when >= 0 and t - when < gap:
                    out.append(Violation("timing", t, cmd.channel, c, rule, prev, when, gap,
                                         t - when, line=cmd.line))
        for level, node in nodes:
            ch.last[level][node][c] = t
        problem = _protocol(ch, cmd)
        if problem:
            out.append(Violation("protocol", t, cmd.channel, c, detail=problem, line=cmd.line))
    return out


def _protocol(ch: _Channel, cmd: TimedCommand) -> str:
    """Apply ``cmd`` to the channel's row and mode state; return what was illegal, if any.

    An illegal command changes no state (the RTL channel does not execute it either); it still
    counts as an issue for the timing rules.
    """
    c = cmd.command
    if c == Command.TMOD:
        ch.reg_mode = not ch.reg_mode
        return ""
    if (c in REG_MODE_COMMANDS) != ch.reg_mode:
        return f"{c.name} issued in {'register' if ch.reg_mode else 'normal'} mode"
    rows = ch.open_row
    if c == Command.ACT:
        if rows[cmd.bank] >= 0:
            return f"bank {cmd.bank} already open on row {rows[cmd.bank]}"
        rows[cmd.bank] = cmd.row
        return ""
    if c == Command.ACT16:
        # Re-activating the row a bank already has open is what the public controller does
        # when only some banks are open on the target row; another row is a conflict.
        other = [b for b, r in enumerate(rows) if r >= 0 and r != cmd.row]
        if other:
            return f"ACT16 row {cmd.row} with bank {other[0]} open on row {rows[other[0]]}"
        rows[:] = [cmd.row] * len(rows)
        return ""
    if c == Command.PRE:
        rows[cmd.bank] = -1
        return ""
    if c == Command.PREA:
        rows[:] = [-1] * len(rows)
        return ""
    if c in BANK_ROW_COMMANDS:
        if rows[cmd.bank] < 0:
            return f"bank {cmd.bank} is closed"
        if cmd.row >= 0 and rows[cmd.bank] != cmd.row:
            return f"bank {cmd.bank} has row {rows[cmd.bank]} open, not {cmd.row}"
        if c == Command.MAC and len(cmd.cfr) > Cfr.BROADCAST and cmd.cfr[Cfr.BROADCAST]:
            partner = cmd.bank ^ 1  # the vector comes from the partner bank's open row
            if rows[partner] != rows[cmd.bank]:
                state = "closed" if rows[partner] < 0 else f"on row {rows[partner]}"
                return (f"MAC under CFR BROADCAST = 1 reads partner bank {partner}, which is "
                        f"{state}, not on row {rows[cmd.bank]}")
        return ""
    if c in ALL_ROWS_COMMANDS:
        if any(r < 0 for r in rows) or len(set(rows)) != 1:
            problem = "needs the same row open in all banks"
        elif cmd.row >= 0 and rows[0] != cmd.row:
            problem = f"all banks have row {rows[0]} open, not {cmd.row}"
        else:
            problem = ""
        if c == Command.WRA16 and not problem:
            rows[:] = [-1] * len(rows)
        return problem
    return ""
