"""Replay timed command schedules on the RTL channel under Verilator, in bulk.

A schedule is turned into stream lines (one packed command per line, :mod:`patton.tb.driver`),
the Verilator build of ``tb/player.v`` around the generated channel replays it at exactly its
cycles while the simulator runs freely, and the player's results (returned reads, flagged
commands) are parsed back (:mod:`patton.tb.monitor`). Python wakes up once per schedule, not
once per command. :meth:`SchedulePlayer.play` is a one-segment :class:`~patton.tb.session.Session`
(a simulator that stays alive across schedules, fed through a named pipe).

Builds are cached under ``build/`` (``patton.tb.toolchain``): the channel's Verilog is keyed by
the sources it is generated from, the channel parameters and the timing profile its checker is
generated from, the Verilator build by the Verilog text (so each profile whose rules differ has
its own build).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from patton.hw.generate import TOP, emit_verilog
from patton.hw.isa import command_layout
from patton.hw.params import ChannelParams
from patton.sim.isa import Cfr
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, TIMING, Timing, timing_table
from patton.tb import fst
from patton.tb.driver import DATA_BITS as _DATA_BITS
from patton.tb.driver import HEAD_BITS as _HEAD_BITS
from patton.tb.driver import MASK_BITS as _MASK_BITS
from patton.tb.driver import Driver
from patton.tb.monitor import PlayResult, RtlRead, RtlViolation, parse_mats
from patton.tb.toolchain import BUILD_ROOT, build_dir, environment

__all__ = ["RtlRead", "RtlViolation", "PlayResult", "SchedulePlayer", "DRAIN"]

_HERE = Path(__file__).resolve().parent
_PLAYER = _HERE / "player.v"
_PLAYER_TOP = "patton_player"
#: Cycles the player runs after the last command of a segment: the longest read latency plus
#: margin.
DRAIN = _DRAIN = max(TIMING.latency.values()) + 8
#: Verilator options. ``--no-public-flat-rw`` undoes the cocotb runner's ``--public-flat-rw``:
#: with every signal public, Verilator must assume any of them may be written from outside,
#: keeps every intermediate and re-evaluates all combinational logic on both clock edges
#: (ten times slower here). Only ``clk``, ``done`` and ``segments`` are public (tb/player.v).
#: ``-O2`` replaces the C++ default ``-Os`` of ``verilated.mk``.
_BUILD_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--no-public-flat-rw",
               "-CFLAGS", "-O2")
#: Simulator environment: no pytest assertion rewriting of the modules the cocotb test imports
#: (the player's test asserts nothing); it halves the simulator's start-up.
_SIM_ENV = {"COCOTB_REWRITE_ASSERTION_FILES": ""}


def _offsets(layout) -> dict[str, tuple[int, int]]:
    """Return ``{field: (offset, width)}`` of an Amaranth struct layout."""
    return {name: (f.offset, f.width) for name, f in layout}


class SchedulePlayer:
    """A Verilator build of the channel plus its schedule player.

    Args:
        params: channel organisation (few rows keep the mat arrays and builds small).
        waves: dump a waveform of every replay, ``"vcd"`` or ``"fst"`` (slower build and
            run; ``None``: no waves). FST links the system's LZ4 and zlib libraries
            (``patton.tb.fst``); VCD needs nothing.
        build: make (or find) the Verilator build; ``False`` gives a player that only packs
            commands (a cocotb test inside the simulator uses it for its driver).
        timing: the timing profile (name or table) the RTL's timing checker is generated
            from (default ``aimsim-0f28a07``); ``timing`` holds the compiled table.
    """

    def __init__(self, params: ChannelParams | None = None, *,
                 waves: str | None = None, build: bool = True,
                 timing: Timing = DEFAULT_PROFILE) -> None:
        if waves not in (None, "vcd", "fst"):
            raise ValueError(f"waves must be None, 'vcd' or 'fst', not {waves!r}")
        self.params = params if params is not None else ChannelParams(rows=64)
        self.waves = waves
        self.timing = timing_table(timing)
        self._cmd = _offsets(command_layout(self.params))
        split = {"data": (_HEAD_BITS, _DATA_BITS),
                 "mask": (_HEAD_BITS + _DATA_BITS, _MASK_BITS)}
        if any(self._cmd[name] != where for name, where in split.items()) \
                or command_layout(self.params).size != _HEAD_BITS + _DATA_BITS + _MASK_BITS:
            raise ValueError(f"{self.params}: the command layout {self._cmd} does not match "
                             "tb/player.v's HEAD_BITS/DATA_BITS/MASK_BITS")
        self.build_seconds = 0.0
        self._runner = None
        self._build = self._compile() if build else Path()

    # -- build ---------------------------------------------------------------------------

    def _verilog(self) -> list[Path]:
        digest = hashlib.sha256(repr(sorted(vars(self.params).items())).encode())
        digest.update(self.timing.fingerprint().encode())
        package = _HERE.parent
        for folder in ("hw", "sim"):
            for source in sorted((package / folder).rglob("*.py")) + sorted(
                    (package / folder).rglob("*.json")):
                digest.update(source.read_bytes())
        out = BUILD_ROOT / "verilog" / f"{TOP}-{digest.hexdigest()[:12]}"
        # the same three files emit_verilog writes, cached or not: one file set, one build key
        files = [out / f"{TOP}.v", out / "patton_mat.v", out / f"{TOP}.vlt"]
        if not all(f.exists() for f in files):
            files = emit_verilog(out, self.params, timing=self.timing)
        return files

    def _compile(self) -> Path:
        environment()
        from cocotb_tools.runner import get_runner

        generated = self._verilog() + [_PLAYER]
        args = list(_BUILD_ARGS) + (["--trace-fst", *fst.build_args()]
                                    if self.waves == "fst" else [])
        flags = hashlib.sha256(" ".join(args).encode()).hexdigest()[:6]
        where = build_dir(f"{_PLAYER_TOP}-{flags}" + (f"-{self.waves}" if self.waves else ""),
                          *generated)
        # Verilator's own up-to-date check covers the source *paths*: build from copies inside
        # the (content-keyed) build folder, so an edit of hw/ or sim/ that leaves the Verilog
        # text unchanged (a new folder under build/verilog/) does not recompile everything.
        sources = []
        for source in generated:
            copy = where / "src" / source.name
            text = source.read_bytes()
            if not copy.exists() or copy.read_bytes() != text:
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(text)
            sources.append(copy)
        runner = get_runner("verilator")
        started = time.perf_counter()
        runner.build(sources=sources, hdl_toplevel=_PLAYER_TOP, build_dir=where,
                     build_args=args, waves=bool(self.waves), always=False)
        self.build_seconds = time.perf_counter() - started
        self._runner = runner
        return where

    @property
    def runner(self):  # noqa: ANN201 - cocotb_tools.runner.Verilator
        """The cocotb runner that made the build (a session copies its settings)."""
        return self._runner

    @property
    def build_dir(self) -> Path:
        """The Verilator build folder (the simulator binary and its cocotb glue)."""
        return self._build

    def plusargs(self, work: Path) -> list[str]:
        """The simulator plusargs of a replay in folder ``work`` (stream, results, mats)."""
        return [f"+SCHEDULE={work / 'schedule.fifo'}", f"+RESULTS={work / 'results.fifo'}",
                f"+MATS={work / 'mats.hex'}", f"+DRAIN={_DRAIN}"]

    # -- packing ---------------------------------------------------------------------------

    def _pack(self, cmd: TimedCommand) -> int:
        # ``broadcast``: CFR BROADCAST as the command's instruction was decoded (the schedule
        # carries the CFRs, also in its text form as ``cfr=``; W CFR puts nothing on the bus).
        # An empty ``cfr`` means the reset values: BROADCAST 0.
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

    def pack(self, cmd: TimedCommand) -> int:
        """Return the command port word of ``cmd`` (``hw.isa.command_layout``)."""
        return self._pack(cmd)

    # -- replay ------------------------------------------------------------------------------

    def play(self, schedule: Sequence[TimedCommand], name: str = "replay") -> PlayResult:
        """Replay one channel's schedule (cycles strictly increasing) and return the results.

        A fresh simulator from reset (a one-segment :class:`~patton.tb.session.Session`);
        ``PlayResult.mats`` holds the mats' final contents and ``seconds`` the wall time of the
        simulation, start-up and exit included (packing the commands excluded).
        """
        from patton.tb.session import Session, SimulatorError

        Driver.check(schedule)
        started = time.perf_counter()
        session = Session(self, name)
        try:
            opened = time.perf_counter() - started
            result = session.run(schedule)  # its seconds leave out the packing, as before
        finally:
            closing = time.perf_counter()
            session.close()
        if session.error is not None:
            raise SimulatorError(f"replay {name!r}: the simulator did not exit cleanly "
                                 f"({session.error}); log {session.log_path}")
        result.mats = parse_mats(session.mats_path, self.params)
        result.seconds += opened + time.perf_counter() - closing
        return result

    def play_all(self, schedule: Iterable[TimedCommand]) -> dict[int, PlayResult]:
        """Replay a multi-channel schedule one channel at a time."""
        by_channel: dict[int, list[TimedCommand]] = {}
        for cmd in schedule:
            by_channel.setdefault(cmd.channel, []).append(cmd)
        return {ch: self.play(cmds, name=f"ch{ch}") for ch, cmds in sorted(by_channel.items())}
