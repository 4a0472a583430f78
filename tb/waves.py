"""A waveform of one step of a served run: channel 0's schedule mirrored into an FST session.

:class:`Waves` observes the serving step driver (its ``ran`` hook, :mod:`patton.serving.
driver`): every program's channel-0 commands, from the first step to the end of step
``step``, replayed on a second Verilator build of the channel that dumps an FST waveform
(``patton demo --waves STEP``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patton.hw.params import ChannelParams
from patton.tb.player import SchedulePlayer
from patton.tb.session import Session

__all__ = ["Waves"]


class Waves:
    """Channel 0's schedule mirrored into a waveform session until the end of a step.

    Args:
        step: the last step mirrored.
        rows: rows per bank of the RTL build.
        out: the folder the waveform is written to (``step<step>.fst``).
    """

    def __init__(self, step: int, rows: int, out: Path) -> None:
        self.step = step
        self.out = out
        self.session = Session(SchedulePlayer(ChannelParams(rows=rows), waves="fst"),
                               "demo-waves")
        self.first: int | None = None  # the waveform cycle where the step begins
        self.closed = False

    def ran(self, work: Any, phase: str, program: Any, result: Any) -> None:
        """Replay a program's channel-0 commands (up to the end of :attr:`step`)."""
        step = work.index
        if self.closed or step > self.step or result is None:
            return
        cmds = [c for c in result.schedule if c.channel == 0]
        if not cmds:
            return
        if step == self.step and self.first is None:
            self.first = self.session.offset
        self.session.run(cmds)

    def close(self) -> str:
        """End the session, move the waveform into place; return what was written, in words."""
        if self.closed:
            return "waveform: closed already"
        self.closed = True
        end = self.session.cycles
        self.session.close()
        dump = self.session.work / "dump.fst"
        if not dump.exists():
            return f"waveform: the simulator wrote no {dump}"
        target = self.out / f"step{self.step}.fst"
        self.out.mkdir(parents=True, exist_ok=True)
        dump.replace(target)
        if self.first is None:
            return (f"waveform: {target} (step {self.step} was not reached or had no command "
                    "on channel 0)")
        return (f"waveform: {target}: channel 0, step {self.step} spans cycles "
                f"{self.first}..{end} (clock period 2 ns)")
