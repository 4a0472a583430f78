"""Monitor: collects what the schedule player reports (read-outs, checker flags, segment ends).

The player (``tb/player.v``) writes its results as lines, in hex: ``H <cycle>`` once when it is
ready, ``R <cycle> <read>`` per returned read, ``V <cycle> <violation>`` per flagged command,
``E <cycle> <counter>`` at each segment end and ``M <cycle>`` after a mat dump. The monitor
parses them incrementally (:meth:`feed` takes any chunk of bytes, whole lines or not) into one
:class:`~patton.tb.player.PlayResult` per segment, and parses mat dumps (``hw/mat.py``).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from patton.hw.isa import hw_isa
from patton.hw.params import ChannelParams
from patton.sim.device import AF_ROW_BASE
from patton.sim.isa import Command
from patton.sim.timing import TIMING, Timing, timing_table

__all__ = ["RtlRead", "RtlViolation", "PlayResult", "Monitor", "parse_mats"]


@dataclass(frozen=True, slots=True)
class RtlRead:
    """Data the channel returned (RD on ``rdata``, RDMAC16 and RDAF16 on ``rdata_mac``)."""

    cycle: int  # channel cycle the data was valid in
    command: Command  # RD, RDMAC16 or RDAF16
    data: np.ndarray  # (16,) uint16 bfloat16 bit patterns

    @property
    def issued(self) -> int:
        """Cycle of the command that read it (return cycle minus its latency)."""
        return self.cycle - TIMING.latency[self.command]


@dataclass(frozen=True, slots=True)
class RtlViolation:
    """A command the channel's checker flagged."""

    cycle: int  # cycle of the offending command
    command: Command  # the command
    rules: frozenset[int]  # timing rules it broke (ids of sim.timing.TIMING.rules)
    protocol: int  # hw.isa.ProtocolCode value (0: executed)


@dataclass(slots=True)
class PlayResult:
    """What one replay (one segment of a session) produced.

    Cycles are the schedule's own (a session subtracts the offset it replayed the segment at);
    ``counter`` is the number of commands the channel's sticky counter added in the segment.
    """

    reads: list[RtlRead] = field(default_factory=list)  # in return order, then issue order
    violations: list[RtlViolation] = field(default_factory=list)  # in cycle order
    counter: int = 0  # the channel's violation counter (added in this segment)
    cycles: int = 0  # channel cycles simulated (the end line's cycle)
    seconds: float = 0.0  # wall time of the simulation (build excluded)
    #: Mat contents: every word that differs from its power-up contents (zero; in the LUT rows,
    #: rows ``AF_ROW_BASE + k``, the default table), ``(bank, row, col) -> (16,) uint16``.
    mats: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)


def _offsets(layout) -> dict[str, tuple[int, int]]:
    """Return ``{field: (offset, width)}`` of an Amaranth struct layout."""
    return {name: (f.offset, f.width) for name, f in layout}


class Monitor:
    """Parses the player's result lines into per-segment results.

    Args:
        params: channel organisation (lane count, for the read words).
        timing: the timing table the channel was built for (default ``aimsim-0f28a07``): its
            device extension set and slots give the violation word's layout (the rule mask is
            one bit wider under ``aim+wr16``).

    Attributes:
        ready: the ``H`` line was seen (the player opened its files).
        segments: finished segments not yet taken (:meth:`take`).
        dumps: cycles of the mat dumps reported and not yet taken.
        counter: the channel's sticky violation counter at the last end line.
        cycle: the cycle of the last end line (0 before the first).
    """

    def __init__(self, params: ChannelParams, timing: Timing | None = None) -> None:
        table = timing_table(timing)
        isa = hw_isa(table.ext, table.slots)
        self.lanes = params.lanes
        self._read = _offsets(isa.read_layout(params))
        self._violation = _offsets(isa.violation_layout())
        self._partial = b""
        self._current = PlayResult()
        self.ready = False
        self.segments: deque[PlayResult] = deque()
        self.dumps: deque[int] = deque()
        self.counter = 0
        self.cycle = 0
        self.lines = 0  # lines parsed

    def _field(self, word: int, layout: dict[str, tuple[int, int]], name: str) -> int:
        offset, width = layout[name]
        return word >> offset & ((1 << width) - 1)

    def feed(self, data: bytes) -> None:
        """Parse every complete line of ``data`` (a partial last line waits for the rest)."""
        text = self._partial + data
        lines = text.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line:
                self.line(line.decode())

    def line(self, line: str) -> None:
        """Parse one result line."""
        self.lines += 1
        parts = line.split()
        kind = parts[0] if parts else ""
        if kind == "R" and len(parts) == 3:
            word = int(parts[2], 16)
            data = self._field(word, self._read, "data")
            words = np.frombuffer(data.to_bytes(2 * self.lanes, "little"), dtype="<u2")
            self._current.reads.append(RtlRead(
                int(parts[1], 16), Command(self._field(word, self._read, "command")),
                words.astype(np.uint16)))
        elif kind == "V" and len(parts) == 3:
            word = int(parts[2], 16)
            mask = self._field(word, self._violation, "rules")
            rules = frozenset(i for i in range(mask.bit_length()) if mask >> i & 1)
            self._current.violations.append(RtlViolation(
                int(parts[1], 16), Command(self._field(word, self._violation, "command")), rules,
                self._field(word, self._violation, "protocol")))
        elif kind == "E" and len(parts) == 3:
            done, self._current = self._current, PlayResult()
            done.cycles = int(parts[1], 16)
            counter = int(parts[2], 16)
            done.counter = counter - self.counter
            self.counter, self.cycle = counter, done.cycles
            done.reads.sort(key=lambda r: (r.cycle, r.issued))  # as written; made explicit
            self.segments.append(done)
        elif kind == "M" and len(parts) == 2:
            self.dumps.append(int(parts[1], 16))
        elif kind == "H" and len(parts) == 2:
            self.ready = True
        else:
            raise RuntimeError(f"the player wrote an unexpected line {line!r}")

    def take(self) -> PlayResult | None:
        """Return the oldest finished segment, or ``None`` if none is finished."""
        return self.segments.popleft() if self.segments else None


def parse_mats(path: Path, params: ChannelParams) -> dict[tuple[int, int, int], np.ndarray]:
    """Parse a mat dump (``hw/mat.py``): the words that differ from their power-up contents,
    by (bank, row, col); the LUT rows behind a mat's ``params.rows`` normal rows are named as
    the schedule names them, ``AF_ROW_BASE + k``."""
    if not path.exists():
        raise RuntimeError(f"the mats wrote no contents ({path}); see the simulator log")
    mats: dict[tuple[int, int, int], np.ndarray] = {}
    columns, lanes = params.columns, params.lanes
    for line in path.read_text().splitlines():
        kind, where, addr_hex, word_hex = line.split()
        bank = re.search(r"\.bank(\d+)\.", where)
        if kind != "M" or bank is None:
            raise RuntimeError(f"{path}: unexpected line {line!r}")
        row, col = divmod(int(addr_hex, 16), columns)
        if row >= params.rows:
            row += AF_ROW_BASE - params.rows
        words = np.frombuffer(int(word_hex, 16).to_bytes(2 * lanes, "little"), dtype="<u2")
        mats[int(bank.group(1)), row, col] = words.astype(np.uint16)
    return mats
