"""Timed DRAM command schedules: the record, and its text format.

A schedule is what a controller puts on the command bus: one :class:`TimedCommand` per issued
command. As text, one command per line::

    cycle channel command [bank row col]

with ``-`` for a field that does not apply (``74 0 ACT16 - 0 -``, ``130 0 MAC16 - 0 3``,
``45 31 TMOD``). Lines starting with ``#`` and empty lines are skipped. Every problem is reported
as ``file:line: reason`` by :class:`ScheduleError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .device import AF_ROW_BASE, DEVICE, Device
from .isa import COMMAND_SCOPE, Command, Scope

if TYPE_CHECKING:
    from .controller import Issue, Request

__all__ = ["TimedCommand", "ScheduleError", "parse", "read", "format_line", "write", "dumps"]

#: Commands that never appear on a schedule (refresh is not modelled; SYNC/EOC stay in the
#: controller).
_NOT_ON_BUS = frozenset({Command.REFab, Command.REFpb, Command.SYNC, Command.EOC})


class ScheduleError(ValueError):
    """A malformed schedule line; ``str()`` is ``file:line: reason``."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason


@dataclass(slots=True)
class TimedCommand:
    """One command on one channel's command bus.

    ``bank`` is -1 for channel-scope commands; ``row`` and ``col`` are -1 where they do not
    apply. ``request`` links back to the host request (and so to its payload) when the
    schedule came from the cycle model.
    """

    cycle: int  # controller clock (0.5 ns)
    channel: int  # channel index
    command: Command  # the command
    bank: int = -1  # bank index, -1 for channel-scope commands
    row: int = -1  # row address, -1 if none
    col: int = -1  # column address, -1 if none
    line: int = field(default=0, compare=False)  # source line (0 if not read from a file)
    request: Request | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, issue: Issue, channel: int) -> TimedCommand:
        """Return the schedule entry of a controller issue on ``channel``."""
        return cls(issue.cycle, channel, issue.command, issue.bank, issue.row, issue.col,
                   request=issue.request)

    @property
    def payload(self) -> np.ndarray | None:
        """The 16 bfloat16 words this command writes, if its instruction carried data."""
        req = self.request
        if req is None or req.ins.data is None or req.final != self.command:
            return None
        words = req.ins.data
        lanes = 16
        if words.size == lanes:
            return words
        return words[req.index * lanes:(req.index + 1) * lanes]

    @property
    def cfr(self) -> tuple[int, ...]:
        """The configuration registers (by ``Cfr`` id) its instruction was decoded under."""
        return () if self.request is None else self.request.cfr

    @property
    def mask(self) -> int | None:
        """The lane mask of the write, if its instruction carried one."""
        req = self.request
        return None if req is None else req.ins.mask


def _field(token: str, what: str) -> int:
    if token == "-":
        return -1
    try:
        value = int(token, 0)
    except ValueError:
        raise ValueError(f"{what} {token!r} is not a number or '-'") from None
    if value < 0:
        raise ValueError(f"{what} {token!r} is negative")
    return value


def _validate(cmd: TimedCommand, device: Device) -> None:
    if cmd.command in _NOT_ON_BUS:
        raise ValueError(f"{cmd.command.name} is not a bus command")
    if cmd.channel >= device.channels:
        raise ValueError(f"channel {cmd.channel} out of range 0..{device.channels - 1}")
    scope = COMMAND_SCOPE[cmd.command]
    if scope == Scope.CHANNEL and cmd.bank != -1:
        raise ValueError(f"{cmd.command.name} addresses all banks; bank must be '-'")
    if scope >= Scope.BANK and cmd.bank == -1:
        raise ValueError(f"{cmd.command.name} needs a bank")
    if cmd.bank >= device.banks:
        raise ValueError(f"bank {cmd.bank} out of range 0..{device.banks - 1}")
    if cmd.row >= device.rows and not AF_ROW_BASE <= cmd.row < AF_ROW_BASE + 8:
        raise ValueError(f"row {cmd.row} out of range 0..{device.rows - 1} "
                         f"(or an AF LUT row {AF_ROW_BASE}+0..7)")
    if cmd.col >= device.columns:
        raise ValueError(f"column {cmd.col} out of range 0..{device.columns - 1}")


def parse(lines: Iterable[str], source: str = "<schedule>",
          device: Device = DEVICE) -> Iterator[TimedCommand]:
    """Yield the commands of a schedule text; raise :class:`ScheduleError` on a bad line."""
    names = {c.name: c for c in Command}
    for number, text in enumerate(lines, start=1):
        tokens = text.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        try:
            if len(tokens) not in (3, 6):
                raise ValueError(f"expected 'cycle channel command [bank row col]', "
                                 f"got {len(tokens)} fields")
            if tokens[2] not in names:
                raise ValueError(f"unknown command {tokens[2]!r}")
            cycle = _field(tokens[0], "cycle")
            channel = _field(tokens[1], "channel")
            if cycle < 0 or channel < 0:
                raise ValueError("cycle and channel are required")
            bank, row, col = ((_field(tokens[3], "bank"), _field(tokens[4], "row"),
                               _field(tokens[5], "col")) if len(tokens) == 6 else (-1, -1, -1))
            cmd = TimedCommand(cycle, channel, names[tokens[2]], bank, row, col, line=number)
            _validate(cmd, device)
        except ValueError as error:
            raise ScheduleError(source, number, str(error)) from None
        yield cmd


def read(path: str | os.PathLike[str], device: Device = DEVICE) -> list[TimedCommand]:
    """Read a schedule file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ScheduleError(str(path), 0, f"cannot read schedule: {error.strerror}") from None
    return list(parse(text.splitlines(), str(path), device))


def format_line(cmd: TimedCommand) -> str:
    """Return the text line of one command."""
    def f(v: int) -> str:
        return "-" if v < 0 else str(v)

    if cmd.bank < 0 and cmd.row < 0 and cmd.col < 0:
        return f"{cmd.cycle} {cmd.channel} {cmd.command.name}"
    return f"{cmd.cycle} {cmd.channel} {cmd.command.name} {f(cmd.bank)} {f(cmd.row)} {f(cmd.col)}"


def dumps(schedule: Iterable[TimedCommand]) -> str:
    """Return a schedule as text."""
    return "".join(format_line(c) + "\n" for c in schedule)


def write(path: str | os.PathLike[str], schedule: Iterable[TimedCommand]) -> None:
    """Write a schedule file."""
    with open(path, "w") as out:
        for c in schedule:
            out.write(format_line(c) + "\n")
