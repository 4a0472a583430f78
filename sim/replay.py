"""Execute a timed command schedule on the functional model (values follow the timing).

The cycle model decides *when* each DRAM command issues; the functional model decides what it
computes. Replaying the cycle model's schedule command by command, with each write's payload,
lane mask and CFR state taken from the schedule (``TimedCommand.payload``, ``mask``, ``cfr``:
what the host instruction carried, kept in a schedule file too), gives the values the device
returns in the order the bus carries them: the reference the RTL scoreboard compares against.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from patton.sim.functional import FunctionalModel
from patton.sim.isa import CFR_RESET, Cfr, Command
from patton.sim.protocol import UNADDRESSED
from patton.sim.schedule import TimedCommand

__all__ = ["Returned", "replay"]

_RETURNS = frozenset({Command.RD, Command.RDA, Command.RDMAC16, Command.RDAF16})
#: CFR values at reset, by ``Cfr`` id (what an empty ``TimedCommand.cfr`` stands for).
_RESET = tuple(CFR_RESET[c] for c in Cfr)


@dataclass(frozen=True, slots=True)
class Returned:
    """Data one read-type command put on the bus."""

    command: TimedCommand  # the command that returned it
    data: np.ndarray  # (16,) bfloat16 bit patterns


def _same_stream(cmd: TimedCommand, first: TimedCommand) -> bool:
    """``cmd`` continues ``first``'s run of MAC16s: same channel, row and CFRs."""
    return (cmd.command == Command.MAC16 and cmd.channel == first.channel
            and cmd.row == first.row and (cmd.cfr or _RESET) == (first.cfr or _RESET))


def replay(schedule: Iterable[TimedCommand], model: FunctionalModel) -> list[Returned]:
    """Execute ``schedule`` in cycle order on ``model``; return what each read returned.

    Configuration registers are set, per channel, to the values each command was issued under
    (``TimedCommand.cfr``; ``()`` stands for the reset values; ``W CFR`` lines put nothing on
    the bus). Every write needs its payload (the functional model refuses one without).
    """
    out: list[Returned] = []
    ordered = sorted(schedule, key=lambda c: (c.cycle, c.channel))
    i, n = 0, len(ordered)
    while i < n:
        cmd = ordered[i]
        i += 1
        if cmd.command == Command.TMOD:
            continue
        for cfr, value in zip(Cfr, cmd.cfr or _RESET):  # W CFR lines have no bus command
            if model.channels[cmd.channel].cfr[cfr] != value:
                model.set_cfr(cfr, value, [cmd.channel])
        if cmd.command == Command.MAC16:  # a stream of them: one vectorised pass
            end = i
            while end < n and _same_stream(ordered[end], cmd):
                end += 1
            model.mac16_run(cmd.channel, cmd.row if cmd.row >= 0 else None,
                            [c.col for c in ordered[i - 1:end]])
            i = end
            continue
        data = cmd.payload
        col = cmd.col
        if col < 0 and cmd.command in UNADDRESSED:
            col = 0  # R/W MEM without col= (the public format has no column): column 0
        value = model.execute(cmd.channel, cmd.command,
                              bank=cmd.bank if cmd.bank >= 0 else None,
                              row=cmd.row if cmd.row >= 0 else None,
                              col=col if col >= 0 else None,
                              data=data, mask=cmd.mask if data is not None else None)
        if cmd.command in _RETURNS:
            assert value is not None
            out.append(Returned(cmd, value))
    return out
