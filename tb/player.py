"""Replay timed command schedules on the RTL channel under Verilator, in bulk.

A schedule is turned into stream lines (one packed command per line, :mod:`patton.tb.driver`),
the Verilator build of ``tb/player.v`` around the generated channel replays it at exactly its
cycles while the simulator runs freely, and the player's results (returned reads, flagged
commands) are parsed back (:mod:`patton.tb.monitor`). Python wakes up once per schedule, not
once per command. :meth:`SchedulePlayer.play` is a one-segment :class:`~patton.tb.session.Session`
(a simulator that stays alive across schedules, fed through a named pipe).

Builds are cached under ``build/`` (``patton.tb.toolchain``): the channel's Verilog is keyed by
the sources it is generated from, the channel parameters and the timing profile its checker is
generated from (with its device extension set, when not ``aim``), the Verilator build by the
Verilog text (so each profile whose rules differ, and each extension set, has its own build).
A player packs only the commands of its table's extension set: a command of another set (WR16
on ``aim``) is refused before anything is replayed.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from patton.hw.generate import TOP, emit_verilog
from patton.hw.isa import hw_isa
from patton.hw.params import ChannelParams
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.isa import CFR_RESET, Cfr, Command
from patton.sim.protocol import RULES, Operand, State, Targets
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, timing_table
from patton.tb import fst
from patton.tb.driver import DATA_BITS as _DATA_BITS
from patton.tb.driver import DRAIN, Driver
from patton.tb.driver import HEAD_BITS as _HEAD_BITS
from patton.tb.driver import MASK_BITS as _MASK_BITS
from patton.tb.monitor import PlayResult, RtlRead, RtlViolation, parse_mats
from patton.tb.toolchain import BUILD_ROOT, build_dir, build_dir_path, environment, locked

__all__ = ["PLAY", "RtlRead", "RtlViolation", "PlayResult", "SchedulePlayer", "skip_idle",
           "idle_skipped", "restore", "open_rows_filled"]

_HERE = Path(__file__).resolve().parent
_PLAYER = _HERE / "player.v"
_PLAYER_TOP = "patton_player"
#: The player's own main (``tb/player_main.cpp``), linked in the build folder as :data:`PLAY`
#: beside cocotb's: a live session runs it, the cocotb regressions run cocotb's.
_MAIN = _HERE / "player_main.cpp"
#: The player's stream reader (DPI-C, ``tb/player_dpi.cpp``), compiled into both executables.
_DPI = _HERE / "player_dpi.cpp"
#: The executable a session runs (in :attr:`SchedulePlayer.build_dir`).
PLAY = "patton_play"
#: Make rules that link :data:`PLAY` from the objects of cocotb's build (``Vtop.mk``'s
#: variables), without cocotb's VPI library (``VM_USER_LDLIBS`` replaced on the command line).
_PLAY_RULES = f"""\
include Vtop.mk
{PLAY}.o: src/{_MAIN.name}
\t$(OBJCACHE) $(CXX) $(CXXFLAGS) $(CPPFLAGS) $(OPT_FAST) -c -o $@ $<
{PLAY}: {PLAY}.o {_DPI.stem}.o $(VK_GLOBAL_OBJS) $(VM_PREFIX)__ALL.a
\t$(LINK) $(LDFLAGS) $^ $(LOADLIBES) $(LDLIBS) $(LIBS) -o $@
"""
#: Verilator options. ``--no-public-flat-rw`` undoes the cocotb runner's ``--public-flat-rw``:
#: with every signal public, Verilator must assume any of them may be written from outside,
#: keeps every intermediate and re-evaluates all combinational logic on both clock edges
#: (ten times slower here). Only ``clk``, ``done`` and ``segments`` are public (tb/player.v).
#: ``-O2`` replaces the C++ default ``-Os`` of ``verilated.mk``. ``-fno-dfg``: the dataflow
#: optimiser names its temporaries per instance, so the 16 MAC units would each get a function
#: of their own again (:mod:`patton.hw.shared`); without it they share one
#: (``benchmarks/rtl_speedup.py`` measures the simulator).
BUILD_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--no-public-flat-rw",
              "-fno-dfg", "-CFLAGS", "-O2")
#: Verilator options of a coverage build (``coverage=True``): line and toggle coverage points,
#: counted in the simulator and written when it exits (``patton.tb.code_coverage`` reads them).
#: ``-O0`` (the last ``-O`` counts): a counter per signal bit makes the C++ five times bigger,
#: and g++ -O2 spends over 15 minutes on it (two cores), -O0 under two.
_COVERAGE_ARGS = ("--coverage-line", "--coverage-toggle", "-CFLAGS", "-O0")


def _offsets(layout) -> dict[str, tuple[int, int]]:
    """Return ``{field: (offset, width)}`` of an Amaranth struct layout."""
    return {name: (f.offset, f.width) for name, f in layout}


#: CFR values at reset, by ``Cfr`` id (what an empty ``TimedCommand.cfr`` stands for).
_RESET = tuple(CFR_RESET[c] for c in Cfr)
#: The row count in the header comment of a generated channel (``hw/generate.py``).
_ROWS = re.compile(r"Organisation: .*?, (\d+) rows,")
#: Rows of the probe player :meth:`SchedulePlayer.built_rows` makes (only its options count).
_PROBE_ROWS = 64
#: tb/player.v's parameter defaults (``parameter NAME = value``): the ``aim`` channel's port
#: widths. A channel whose violation port is wider (an extension's rule slots) is built with
#: ``VIOLATION_BITS`` set (:meth:`SchedulePlayer._parameters`).
_DEFAULTS = {name: int(value) for name, value in re.findall(
    r"parameter\s+(\w+)\s*=\s*(\d+)", _PLAYER.read_text())}


def _sources() -> list[Path]:
    """The sources the channel's Verilog is generated from (``hw/``, ``sim/``), in key order."""
    package = _HERE.parent
    out: list[Path] = []
    for folder in ("hw", "sim"):
        out += sorted((package / folder).rglob("*.py")) + sorted(
            (package / folder).rglob("*.json"))
    return out


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
            from (default ``aimsim-0f28a07``); ``timing`` holds the compiled table. Its device
            extension set (``timing.ext``) is the channel's: the commands it decodes and the
            commands :meth:`pack` takes.
        coverage: build with Verilator line and toggle coverage (its own build folder,
            suffix ``-cov``); each session's simulator writes its counts to
            :attr:`Session.coverage_path <patton.tb.session.Session.coverage_path>` when it
            exits (:mod:`patton.tb.code_coverage` reads them).
    """

    def __init__(self, params: ChannelParams | None = None, *,
                 waves: str | None = None, build: bool = True,
                 timing: Timing = DEFAULT_PROFILE, coverage: bool = False) -> None:
        if waves not in (None, "vcd", "fst"):
            raise ValueError(f"waves must be None, 'vcd' or 'fst', not {waves!r}")
        self.params = params if params is not None else ChannelParams(rows=64)
        self.waves = waves
        self.coverage = coverage
        self.timing = timing_table(timing)
        self.isa = hw_isa(self.timing.ext, self.timing.slots)
        self._commands = frozenset(self.timing.commands)
        layout = self.isa.command_layout(self.params)
        self._cmd = _offsets(layout)
        split = {"data": (_HEAD_BITS, _DATA_BITS),
                 "mask": (_HEAD_BITS + _DATA_BITS, _MASK_BITS)}
        if any(self._cmd[name] != where for name, where in split.items()) \
                or layout.size != _HEAD_BITS + _DATA_BITS + _MASK_BITS:
            raise ValueError(f"{self.params}: the command layout {self._cmd} does not match "
                             "tb/player.v's HEAD_BITS/DATA_BITS/MASK_BITS")
        if self.isa.read_layout(self.params).size != _DEFAULTS["READ_BITS"]:
            raise ValueError(f"{self.params}: the read layout does not match tb/player.v's "
                             "READ_BITS")
        self.build_seconds = 0.0
        self._runner = None
        self._build = self._compile() if build else Path()

    # -- build ---------------------------------------------------------------------------

    def _verilog_files(self) -> list[Path]:
        """The channel's Verilog files for these parameters, profile and sources (they may
        not exist yet)."""
        digest = hashlib.sha256(repr(sorted(vars(self.params).items())).encode())
        digest.update(self.timing.fingerprint().encode())
        for source in _sources():
            digest.update(source.read_bytes())
        out = BUILD_ROOT / "verilog" / f"{TOP}-{digest.hexdigest()[:12]}"
        # the same three files emit_verilog writes, cached or not: one file set, one build key
        return [out / f"{TOP}.v", out / "patton_mat.v", out / f"{TOP}.vlt"]

    def _verilog(self) -> list[Path]:
        files = self._verilog_files()
        with locked(files[0].parent):
            if not all(f.exists() for f in files):
                files = emit_verilog(files[0].parent, self.params, timing=self.timing)
        return files

    def _args(self) -> list[str]:
        return list(BUILD_ARGS) + (["--trace-fst", *fst.build_args()]
                                    if self.waves == "fst" else []) + (
            list(_COVERAGE_ARGS) if self.coverage else [])

    def _where(self, generated: list[Path], make: bool = True) -> Path:
        flags = hashlib.sha256(" ".join(self._args()).encode()).hexdigest()[:6]
        name = f"{_PLAYER_TOP}-{flags}" + (f"-{self.waves}" if self.waves else "") + (
            "-cov" if self.coverage else "")
        return build_dir(name, *generated) if make else build_dir_path(name, *generated)

    @classmethod
    def cached(cls, params: ChannelParams, *, waves: str | None = None,
               timing: Timing = DEFAULT_PROFILE, coverage: bool = False) -> bool:
        """True when the simulator for these parameters is already built under ``build/``
        (its Verilog emitted from today's sources and the Verilator build of that Verilog
        made), so that a player for them starts in seconds."""
        probe = cls(params, waves=waves, build=False, timing=timing, coverage=coverage)
        files = probe._verilog_files()
        if not all(f.exists() for f in files):
            return False
        return (probe._where(files + [_PLAYER, _DPI], make=False) / _PLAYER_TOP).is_file()

    @classmethod
    def built_rows(cls, *, waves: str | None = None) -> list[int]:
        """Row counts of the simulators built under ``build/`` with these build options (from
        whatever sources; :meth:`cached` says whether one is today's), ascending."""
        probe = cls(ChannelParams(rows=_PROBE_ROWS), waves=waves, build=False)
        flags = hashlib.sha256(" ".join(probe._args()).encode()).hexdigest()[:6]
        name = f"{_PLAYER_TOP}-{flags}" + (f"-{waves}" if waves else "")
        found: set[int] = set()
        for folder in (BUILD_ROOT / "verilator").glob(f"{name}-*"):
            if folder.name.count("-") != name.count("-") + 1:
                continue  # another option set (a -vcd/-fst build of the same flags)
            source = folder / "src" / f"{TOP}.v"
            if not (folder / _PLAYER_TOP).is_file() or not source.is_file():
                continue
            with open(source, encoding="utf-8", errors="replace") as text:
                head = text.read(4096)
            match = _ROWS.search(head)
            if match:
                found.add(int(match.group(1)))
        return sorted(found)

    def _compile(self) -> Path:
        environment()
        from cocotb_tools.runner import get_runner

        generated = self._verilog() + [_PLAYER, _DPI]
        args = self._args()
        where = self._where(generated)
        # Verilator's own up-to-date check covers the source *paths*: build from copies inside
        # the (content-keyed) build folder, so an edit of hw/ or sim/ that leaves the Verilog
        # text unchanged (a new folder under build/verilog/) does not recompile everything.
        with locked(where):
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
            verilog = [s for s in sources if s.suffix != ".cpp"]
            cpp = [str(s) for s in sources if s.suffix == ".cpp"]  # Verilator compiles them
            runner.build(sources=verilog, hdl_toplevel=_PLAYER_TOP, build_dir=where,
                         build_args=args + cpp, waves=bool(self.waves), always=False,
                         **self._parameters())
            self._link(where)
            self.build_seconds = time.perf_counter() - started
        self._runner = runner
        return where

    def _parameters(self) -> dict:
        """The player's Verilog parameters that differ from tb/player.v's defaults, as
        ``runner.build`` arguments: none on ``aim`` (so the default build is what it was)."""
        bits = self.isa.violation_layout().size
        if bits == _DEFAULTS["VIOLATION_BITS"]:
            return {}
        return {"parameters": {"VIOLATION_BITS": bits}}

    def _link(self, where: Path) -> None:
        """Link :data:`PLAY` in the build folder ``where`` (make's own up-to-date check: a
        second of compiling the first time, nothing after)."""
        copy = where / "src" / _MAIN.name
        text = _MAIN.read_bytes()
        if not copy.exists() or copy.read_bytes() != text:
            copy.write_bytes(text)
        rules = where / f"{PLAY}.mk"
        if not rules.exists() or rules.read_text() != _PLAY_RULES:
            rules.write_text(_PLAY_RULES)
        args = self._args()  # their -LDFLAGS (build/fst-libs on a bare machine), not cocotb's
        ldflags = " ".join(args[i + 1] for i, a in enumerate(args[:-1]) if a == "-LDFLAGS")
        # make writes where the build's own output goes (file descriptors 1 and 2, which a
        # caller may have sent to a log: ``toolchain.quiet``)
        done = subprocess.run(["make", "-C", str(where), "-f", rules.name, PLAY,
                               f"VM_TRACE={int(bool(self.waves))}", f"VM_USER_LDLIBS={ldflags}"])
        if done.returncode != 0:
            raise RuntimeError(f"linking {PLAY} in {where} failed (make exit code "
                               f"{done.returncode}; its output is with the build's)")

    @property
    def binary(self) -> Path:
        """The simulator a session runs (:data:`PLAY`, the player's own main)."""
        return self._build / PLAY

    @property
    def runner(self):
        """The cocotb runner that made the build (a session copies its settings)."""
        return self._runner

    @property
    def build_dir(self) -> Path:
        """The Verilator build folder (the simulator binary and its cocotb glue)."""
        return self._build

    def plusargs(self, work: Path) -> list[str]:
        """The simulator plusargs of a replay in folder ``work`` (stream, results, mats; the
        coverage counts of a coverage build)."""
        return [f"+SCHEDULE={work / 'schedule.fifo'}", f"+RESULTS={work / 'results.fifo'}",
                f"+MATS={work / 'mats.hex'}", f"+DRAIN={DRAIN}"] + (
            [f"+verilator+coverage+file+{work / 'coverage.dat'}"] if self.coverage else [])

    # -- packing ---------------------------------------------------------------------------

    def _pack(self, cmd: TimedCommand) -> int:
        if cmd.command not in self._commands:  # an extension's command this device lacks
            self.timing.device.refuse(cmd.command)
            raise ValueError(f"{cmd}: {cmd.command.name} is not a command of device "
                             f"{self.timing.ext!r}")
        # ``broadcast``, ``ewmul_bg``: CFR BROADCAST and EWMUL_BG as the command's instruction
        # was decoded (the schedule carries the CFRs, also in its text form as ``cfr=``; W CFR
        # puts nothing on the bus). An empty ``cfr`` means the reset values (BROADCAST 0,
        # EWMUL_BG 1). A LUT row AF_ROW_BASE + k goes as ``lut`` = 1, ``row`` = k.
        cfr = cmd.cfr or _RESET
        row = max(cmd.row, 0)
        lut = row >= AF_ROW_BASE
        fields = {"valid": 1, "command": int(cmd.command), "bank": max(cmd.bank, 0),
                  "row": row - AF_ROW_BASE if lut else row, "col": max(cmd.col, 0),
                  "broadcast": cfr[Cfr.BROADCAST], "ewmul_bg": cfr[Cfr.EWMUL_BG],
                  "lut": int(lut), "data": 0, "mask": (1 << self.params.lanes) - 1}
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
        """Return the command port word of ``cmd`` (``hw.isa.command_layout``).

        Raises ``ValueError`` (:class:`~patton.sim.extensions.NotOnDeviceError` for a command
        of a device extension this player's set lacks, which names the set that has it) when
        ``cmd`` is not a command of the player's device, or a field does not fit."""
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
        to_play, starts, shifts = skip_idle(open_rows_filled(schedule, self.isa.IMPLEMENTED),
                                            self.timing.quiet)
        started = time.perf_counter()
        session = Session(self, name)
        try:
            opened = time.perf_counter() - started
            result = session.run(to_play)  # its seconds leave out the packing, as before
        finally:
            closing = time.perf_counter()
            session.close()
        if session.error is not None:
            raise SimulatorError(f"replay {name!r}: the simulator did not exit cleanly "
                                 f"({session.error}); log {session.log_path}")
        result.mats = parse_mats(session.mats_path, self.params)
        result.seconds += opened + time.perf_counter() - closing
        return restore(result, starts, shifts)

    def play_all(self, schedule: Iterable[TimedCommand]) -> dict[int, PlayResult]:
        """Replay a multi-channel schedule one channel at a time."""
        by_channel: dict[int, list[TimedCommand]] = {}
        for cmd in schedule:
            by_channel.setdefault(cmd.channel, []).append(cmd)
        return {ch: self.play(cmds, name=f"ch{ch}") for ch, cmds in sorted(by_channel.items())}


# -- what the player does to a schedule before it replays it ------------------------------------


def skip_idle(schedule: Sequence[TimedCommand], quiet: int
              ) -> tuple[Sequence[TimedCommand], list[int], list[int]]:
    """Shorten every idle gap longer than ``quiet`` cycles to ``quiet``; return the schedule to
    replay and the map back (``starts``: replayed cycles where a shift begins, ``shifts``: what
    to add from there on; :func:`restore`).

    Exact: after ``quiet`` idle cycles (:attr:`TimingTable.quiet
    <patton.sim.timing.TimingTable.quiet>`: the largest rule gap plus the longest completion
    latency) no timing rule and no earlier command's completion can matter, and the channel
    holds no other time-dependent state (no refresh is modelled), so the channel does the same
    on the shortened schedule, cycle for cycle in each stretch between long gaps. A schedule
    without such a gap is returned as it is (``starts == [0]``, ``shifts == [0]``). The gap
    before the first command counts from cycle 0 (reset).
    """
    starts, shifts = [0], [0]
    shift = 0
    last = 0
    out: list[TimedCommand] | None = None
    for i, cmd in enumerate(schedule):
        gap = cmd.cycle - last
        last = cmd.cycle
        if gap > quiet:
            if out is None:
                out = list(schedule[:i])
            shift += gap - quiet
            starts.append(cmd.cycle - shift)
            shifts.append(shift)
        if out is not None:
            out.append(TimedCommand(cmd.cycle - shift, cmd.channel, cmd.command, cmd.bank,
                                    cmd.row, cmd.col, cmd.line, cmd.payload, cmd.mask,
                                    cmd.cfr, cmd.source))
    return (schedule if out is None else out), starts, shifts


def idle_skipped(schedule: Sequence[TimedCommand], quiet: int) -> int:
    """Idle cycles :func:`skip_idle` leaves out of a replay of ``schedule``."""
    skipped = 0
    last = 0
    for cmd in schedule:
        if cmd.cycle - last > quiet:
            skipped += cmd.cycle - last - quiet
        last = cmd.cycle
    return skipped


def restore(result: PlayResult, starts: list[int], shifts: list[int]) -> PlayResult:
    """Map a replay of :func:`skip_idle`'s schedule back to the schedule's own cycles.

    A read returns within ``quiet`` cycles of its command, before the next shortened gap ends,
    so each returned cycle maps with the shift of the stretch it falls in.
    """
    if len(starts) == 1:
        return result

    def back(cycle: int) -> int:
        return cycle + shifts[bisect.bisect_right(starts, cycle) - 1]

    result.reads = [RtlRead(back(r.cycle), r.command, r.data) for r in result.reads]
    result.violations = [RtlViolation(back(v.cycle), v.command, v.rules, v.protocol)
                         for v in result.violations]
    result.cycles = back(result.cycles)
    return result


#: Commands whose row operand is optional (the open row is meant when none is given), by the
#: banks they target: the protocol's (``sim/protocol.py``).
_ROW_OPTIONAL = {c: RULES[c].targets for c in Command if RULES[c].row is Operand.OPTIONAL}


def open_rows_filled(schedule: Sequence[TimedCommand],
                     implemented: frozenset[Command] | None = None) -> Sequence[TimedCommand]:
    """Give every command of one channel's schedule whose row is optional and not given the row
    it means: the open one.

    The protocol lets a column command leave its row out (``-``: the bank's open row is used;
    ``sim/protocol.py``, ``docs/protocol.md``) and the schedule reader accepts that, but the
    RTL's command port always carries a row and the channel compares it with the open row. So
    the player tracks the open rows as the RTL does (the commands it executes, ``implemented``,
    default :data:`patton.hw.isa.IMPLEMENTED`, when legal: :class:`~patton.sim.protocol.State`)
    and sends the target bank's open row (bank 0's for an all-bank command); a closed bank gets
    row 0, which the channel flags as the model does (no open row). Commands that name their row
    (every command the cycle model schedules) are sent as they are; a schedule with no
    row-less command is returned unchanged.
    """
    if not any(c.row < 0 and c.command in _ROW_OPTIONAL for c in schedule):
        return schedule
    from patton.hw.isa import IMPLEMENTED
    from patton.sim.protocol import CLOSED, UNADDRESSED

    implemented = IMPLEMENTED if implemented is None else implemented
    state = State(DEVICE)
    out: list[TimedCommand] = []
    for cmd in schedule:
        c = cmd.command
        if cmd.row < 0 and c in _ROW_OPTIONAL:
            bank = cmd.bank if _ROW_OPTIONAL[c] is not Targets.ALL else 0
            row = int(state.open_rows[bank]) if 0 <= bank < DEVICE.banks else CLOSED
            cmd = TimedCommand(cmd.cycle, cmd.channel, c, cmd.bank, max(row, 0), cmd.col,
                               cmd.line, cmd.payload, cmd.mask, cmd.cfr, cmd.source)
        out.append(cmd)
        if c in implemented:
            bank = cmd.bank if cmd.bank >= 0 else None
            row = cmd.row if cmd.row >= 0 else None
            col = cmd.col if cmd.col >= 0 else (0 if c in UNADDRESSED else None)
            broadcast = len(cmd.cfr) > Cfr.BROADCAST and bool(cmd.cfr[Cfr.BROADCAST])
            if state.check(c, bank, row, col, broadcast) is None:
                state.apply(c, bank, row)
    return out
