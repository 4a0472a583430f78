"""Replay timed command schedules on the RTL channel under Verilator, in bulk.

A schedule is written to a file (one packed command per line), the Verilator build of
``tb/player.v`` around the generated channel replays it at exactly its cycles while the
simulator runs freely, and the player's results file (returned reads, flagged commands) is read
back. Python wakes up once per schedule, not once per command.

Builds are cached under ``build/`` (``patton.tb.toolchain``): the channel's Verilog is keyed by
the sources it is generated from and the channel parameters, the Verilator build by the
Verilog text.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..hw.generate import TOP, emit_verilog
from ..hw.isa import command_layout, read_layout, violation_layout
from ..hw.params import ChannelParams
from ..sim.isa import Cfr, Command
from ..sim.schedule import TimedCommand
from ..sim.timing import TIMING
from . import fst
from .toolchain import BUILD_ROOT, build_dir, environment

__all__ = ["RtlRead", "RtlViolation", "PlayResult", "SchedulePlayer"]

_HERE = Path(__file__).resolve().parent
_PLAYER = _HERE / "player.v"
_PLAYER_TOP = "patton_player"
#: Cycles the player runs after the last command: the longest read latency plus margin.
_DRAIN = max(TIMING.latency.values()) + 8
#: Verilator options. ``--no-public-flat-rw`` undoes the cocotb runner's ``--public-flat-rw``:
#: with every signal public, Verilator must assume any of them may be written from outside,
#: keeps every intermediate and re-evaluates all combinational logic on both clock edges
#: (ten times slower here). Only ``clk`` and ``done`` are public (tb/player.v). ``-O2`` replaces the
#: C++ default ``-Os`` of ``verilated.mk``.
_BUILD_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--no-public-flat-rw",
               "-CFLAGS", "-O2")
#: Simulator environment: no pytest assertion rewriting of the modules the cocotb test imports
#: (the player's test asserts nothing); it halves the simulator's start-up.
_SIM_ENV = {"COCOTB_REWRITE_ASSERTION_FILES": ""}
#: How tb/player.v splits a packed command into schedule-file fields (its parameters):
#: ``{mask, data, head}``, head = every field below ``data``.
_HEAD_BITS, _DATA_BITS, _MASK_BITS = 36, 256, 16


def _offsets(layout) -> dict[str, tuple[int, int]]:
    """Return ``{field: (offset, width)}`` of an Amaranth struct layout."""
    return {name: (f.offset, f.width) for name, f in layout}


@dataclass(frozen=True, slots=True)
class RtlRead:
    """Data the channel returned (RD on ``rdata``, RDMAC16 on ``rdata_mac``)."""

    cycle: int  # channel cycle the data was valid in
    command: Command  # RD or RDMAC16
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
    """What one replay produced."""

    reads: list[RtlRead] = field(default_factory=list)  # in return order, then issue order
    violations: list[RtlViolation] = field(default_factory=list)  # in cycle order
    counter: int = 0  # the channel's sticky violation counter at the end
    cycles: int = 0  # channel cycles simulated
    seconds: float = 0.0  # wall time of the simulation (build excluded)
    #: Final mat contents: every non-zero word, ``(bank, row, col) -> (16,) uint16``.
    mats: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)


class SchedulePlayer:
    """A Verilator build of the channel plus its schedule player.

    Args:
        params: channel organisation (few rows keep the mat arrays and builds small).
        waves: dump a waveform of every replay, ``"vcd"`` or ``"fst"`` (slower build and
            run; ``None``: no waves). FST links the system's LZ4 and zlib libraries
            (``patton.tb.fst``); VCD needs nothing.
    """

    def __init__(self, params: ChannelParams | None = None, *,
                 waves: str | None = None) -> None:
        if waves not in (None, "vcd", "fst"):
            raise ValueError(f"waves must be None, 'vcd' or 'fst', not {waves!r}")
        self.params = params if params is not None else ChannelParams(rows=64)
        self.waves = waves
        self._cmd = _offsets(command_layout(self.params))
        self._read = _offsets(read_layout(self.params))
        self._violation = _offsets(violation_layout())
        split = {"data": (_HEAD_BITS, _DATA_BITS),
                 "mask": (_HEAD_BITS + _DATA_BITS, _MASK_BITS)}
        if any(self._cmd[name] != where for name, where in split.items()) \
                or command_layout(self.params).size != _HEAD_BITS + _DATA_BITS + _MASK_BITS:
            raise ValueError(f"{self.params}: the command layout {self._cmd} does not match "
                             "tb/player.v's HEAD_BITS/DATA_BITS/MASK_BITS")
        self.build_seconds = 0.0
        self._build = self._compile()

    # -- build ---------------------------------------------------------------------------

    def _verilog(self) -> list[Path]:
        digest = hashlib.sha256(repr(sorted(vars(self.params).items())).encode())
        package = _HERE.parent
        for folder in ("hw", "sim"):
            for source in sorted((package / folder).rglob("*.py")) + sorted(
                    (package / folder).rglob("*.json")):
                digest.update(source.read_bytes())
        out = BUILD_ROOT / "verilog" / f"{TOP}-{digest.hexdigest()[:12]}"
        files = [out / f"{TOP}.v", out / "patton_mat.v"]
        if not all(f.exists() for f in files):
            files = emit_verilog(out, self.params)
        return files

    def _compile(self) -> Path:
        environment()
        from cocotb_tools.runner import get_runner

        sources = self._verilog() + [_PLAYER]
        args = list(_BUILD_ARGS) + (["--trace-fst", *fst.build_args()]
                                    if self.waves == "fst" else [])
        flags = hashlib.sha256(" ".join(args).encode()).hexdigest()[:6]
        where = build_dir(f"{_PLAYER_TOP}-{flags}" + (f"-{self.waves}" if self.waves else ""),
                          *sources)
        runner = get_runner("verilator")
        started = time.perf_counter()
        runner.build(sources=sources, hdl_toplevel=_PLAYER_TOP, build_dir=where,
                     build_args=args, waves=bool(self.waves), always=False)
        self.build_seconds = time.perf_counter() - started
        self._runner = runner
        return where

    # -- packing ---------------------------------------------------------------------------

    def _pack(self, cmd: TimedCommand) -> int:
        # ``broadcast``: CFR BROADCAST as the command's instruction was decoded (the schedule
        # carries the CFRs; W CFR puts nothing on the bus). Commands without an instruction
        # (read from a schedule file) run under the reset value, 0.
        cfr = cmd.cfr
        fields = {"valid": 1, "command": int(cmd.command), "bank": max(cmd.bank, 0),
                  "row": max(cmd.row, 0), "col": max(cmd.col, 0),
                  "broadcast": cfr[Cfr.BROADCAST] if len(cfr) > Cfr.BROADCAST else 0,
                  "data": 0, "mask": (1 << self.params.lanes) - 1}
        payload = cmd.payload
        if payload is not None:
            fields["data"] = int.from_bytes(np.asarray(payload, dtype="<u2").tobytes(), "little")
        if cmd.mask is not None and payload is not None:
            fields["mask"] = cmd.mask
        word = 0
        for name, value in fields.items():
            offset, width = self._cmd[name]
            if value >> width:
                raise ValueError(f"{cmd}: {name}={value} does not fit the {width}-bit field")
            word |= value << offset
        return word

    def _field(self, word: int, layout: dict[str, tuple[int, int]], name: str) -> int:
        offset, width = layout[name]
        return word >> offset & ((1 << width) - 1)

    # -- replay ------------------------------------------------------------------------------

    def play(self, schedule: Sequence[TimedCommand], name: str = "replay") -> PlayResult:
        """Replay one channel's schedule (cycles strictly increasing) and return the results."""
        cycles = [c.cycle for c in schedule]
        if any(b <= a for a, b in zip(cycles, cycles[1:])):
            raise ValueError("the player issues one command per cycle: cycles must strictly "
                             "increase (report same-cycle commands as bus conflicts first)")
        if len({c.channel for c in schedule}) > 1:
            raise ValueError("a schedule for one channel is expected")
        work = BUILD_ROOT / "runs" / f"{name}-{os.getpid()}"
        work.mkdir(parents=True, exist_ok=True)
        sched_path, results_path = work / "schedule.hex", work / "results.hex"
        mats_path = work / "mats.hex"
        with open(sched_path, "w") as out:
            head = (1 << _HEAD_BITS) - 1
            data = (1 << _DATA_BITS) - 1
            for cmd in schedule:
                word = self._pack(cmd)
                out.write(f"{cmd.cycle:x} {word >> (_HEAD_BITS + _DATA_BITS):x} "
                          f"{word >> _HEAD_BITS & data:x} {word & head:x}\n")
        for stale in (results_path, mats_path):
            if stale.exists():
                stale.unlink()
        started = time.perf_counter()
        self._runner.test(hdl_toplevel=_PLAYER_TOP, test_module="patton.tb.cocotb_player",
                          build_dir=self._build, test_dir=work,
                          results_xml=str(work / "results.xml"), waves=bool(self.waves),
                          extra_env=_SIM_ENV,
                          plusargs=[f"+SCHEDULE={sched_path}", f"+RESULTS={results_path}",
                                    f"+MATS={mats_path}", f"+DRAIN={_DRAIN}"])
        result = self._parse(results_path)
        result.mats = self._mats(mats_path)
        result.seconds = time.perf_counter() - started
        return result

    def _parse(self, path: Path) -> PlayResult:
        if not path.exists():
            raise RuntimeError(f"the player wrote no results ({path}); see the simulator log")
        result = PlayResult()
        lanes = self.params.lanes
        for line in path.read_text().splitlines():
            kind, cycle_hex, word_hex = line.split()
            cycle, word = int(cycle_hex, 16), int(word_hex, 16)
            if kind == "R":
                data = self._field(word, self._read, "data")
                words = np.frombuffer(data.to_bytes(2 * lanes, "little"), dtype="<u2")
                result.reads.append(RtlRead(cycle, Command(self._field(word, self._read,
                                                                        "command")),
                                            words.astype(np.uint16)))
            elif kind == "V":
                mask = self._field(word, self._violation, "rules")
                rules = frozenset(i for i in range(mask.bit_length()) if mask >> i & 1)
                result.violations.append(RtlViolation(
                    cycle, Command(self._field(word, self._violation, "command")), rules,
                    self._field(word, self._violation, "protocol")))
            elif kind == "E":
                result.cycles, result.counter = cycle, word
            else:
                raise RuntimeError(f"{path}: unexpected line {line!r}")
        result.reads.sort(key=lambda r: (r.cycle, r.issued))  # as written; made explicit
        return result

    def _mats(self, path: Path) -> dict[tuple[int, int, int], np.ndarray]:
        """Parse the mats' final dump (``hw/mat.py``): non-zero words by (bank, row, col)."""
        if not path.exists():
            raise RuntimeError(f"the mats wrote no final contents ({path}); see the simulator "
                               "log")
        mats: dict[tuple[int, int, int], np.ndarray] = {}
        columns, lanes = self.params.columns, self.params.lanes
        for line in path.read_text().splitlines():
            kind, where, addr_hex, word_hex = line.split()
            bank = re.search(r"\.bank(\d+)\.", where)
            if kind != "M" or bank is None:
                raise RuntimeError(f"{path}: unexpected line {line!r}")
            row, col = divmod(int(addr_hex, 16), columns)
            words = np.frombuffer(int(word_hex, 16).to_bytes(2 * lanes, "little"), dtype="<u2")
            mats[int(bank.group(1)), row, col] = words.astype(np.uint16)
        return mats

    def play_all(self, schedule: Iterable[TimedCommand]) -> dict[int, PlayResult]:
        """Replay a multi-channel schedule one channel at a time."""
        by_channel: dict[int, list[TimedCommand]] = {}
        for cmd in schedule:
            by_channel.setdefault(cmd.channel, []).append(cmd)
        return {ch: self.play(cmds, name=f"ch{ch}") for ch, cmds in sorted(by_channel.items())}
