"""Driver: feeds timed commands to the schedule player (``tb/player.v``) as stream lines.

The player takes one command per line, ``<cycle> <mask> <data> <head>`` in hex (the packed
command of ``patton.hw.isa.command_layout`` split as ``{mask, data, head}``), and control lines:
``S <drain>`` ends a segment (drain, report ``E``, read on), ``M`` dumps the mats, ``Q`` quits.
The driver turns a schedule into those lines, each command moved by an ``offset`` (the channel
cycle the schedule's cycle 0 is replayed at), and writes them to a stream when it has one (a
regular file the player follows, ``+FOLLOW``); :class:`patton.tb.session.Session` pushes the
same bytes through a named pipe instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO

from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING

__all__ = ["Driver", "HEAD_BITS", "DATA_BITS", "MASK_BITS", "DRAIN", "DRAIN_MARGIN"]

#: Margin of :data:`DRAIN` beyond the longest completion latency.
DRAIN_MARGIN = 8
#: Cycles the player runs after the last command of a segment: the longest read latency plus
#: margin.
DRAIN = max(TIMING.latency.values()) + DRAIN_MARGIN

#: How tb/player.v splits a packed command into stream fields (its parameters):
#: ``{mask, data, head}``, head = every field below ``data``.
HEAD_BITS, DATA_BITS, MASK_BITS = 38, 256, 16


class Driver:
    """Encodes schedules (and control lines) for the player; optionally writes them.

    Args:
        pack: packs one command into the command port word (``SchedulePlayer.pack``).
        stream: where :meth:`send` writes (binary, flushed after each call); ``None``: the
            caller transports the bytes :meth:`segment` returns.
    """

    def __init__(self, pack: Callable[[TimedCommand], int], stream: BinaryIO | None = None) -> None:
        self.pack = pack
        self.stream = stream
        self.commands = 0  # commands encoded so far
        self.segments = 0  # segments encoded so far

    @staticmethod
    def check(schedule: Sequence[TimedCommand]) -> None:
        """Raise ``ValueError`` unless ``schedule`` is one channel's, cycles strictly rising."""
        cycles = [c.cycle for c in schedule]
        if any(b <= a for a, b in zip(cycles, cycles[1:])):
            raise ValueError("the player issues one command per cycle: cycles must strictly "
                             "increase (report same-cycle commands as bus conflicts first)")
        if len({c.channel for c in schedule}) > 1:
            raise ValueError("a schedule for one channel is expected")

    def commands_text(self, schedule: Sequence[TimedCommand], offset: int = 0) -> bytes:
        """Return the command lines of ``schedule``, cycles moved by ``offset``."""
        head = (1 << HEAD_BITS) - 1
        data = (1 << DATA_BITS) - 1
        pack = self.pack
        lines = []
        for cmd in schedule:
            word = pack(cmd)
            lines.append(f"{cmd.cycle + offset:x} {word >> (HEAD_BITS + DATA_BITS):x} "
                         f"{word >> HEAD_BITS & data:x} {word & head:x}\n")
        self.commands += len(lines)
        return "".join(lines).encode()

    def segment(self, schedule: Sequence[TimedCommand], offset: int, drain: int) -> bytes:
        """Return one segment: the commands, then ``S <drain>`` (the player reports ``E``)."""
        self.check(schedule)
        self.segments += 1
        return self.commands_text(schedule, offset) + f"S {drain}\n".encode()

    @staticmethod
    def dump() -> bytes:
        """The line that makes the mats dump their words now (the player reports ``M``)."""
        return b"M\n"

    @staticmethod
    def quit() -> bytes:
        """The line that ends the simulation."""
        return b"Q\n"

    def send(self, data: bytes) -> None:
        """Write ``data`` to the stream and flush it."""
        if self.stream is None:
            raise RuntimeError("this driver has no stream; transport the bytes yourself")
        self.stream.write(data)
        self.stream.flush()
