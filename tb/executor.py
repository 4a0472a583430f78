"""RTL executor: PATTON programs on live RTL channels under Verilator, checked as they run.

:class:`RtlExecutor` implements the executor interface of :mod:`patton.sim.executor`
(``run(program) -> Result``). The RTL has no host controller, so the cycle model's schedule is
its stimulus: a :class:`~patton.sim.executor.CycleExecutor` schedules each program (and
executes it on its functional model), the schedule's commands for every *bundled* channel go to
that channel's live RTL simulation (a :class:`~patton.tb.session.Session`), and the RTL's reads
come back as the result's read-outs. A scoreboard compares every RTL read with the functional
model's value and every RTL checker flag with ``verify``.

The device stays alive across calls, on every side: the RTL sessions keep their mats, open rows
and registers (accumulators, global buffer, register mode), the cycle executor keeps its row and
mode state and its functional model. Each program is replayed :attr:`TIMING.quiet
<patton.sim.timing.TimingTable.quiet>` cycles or more after the last one's end, so no timing rule
spans two programs (as the cycle model assumes).

Decisions:

- **Bundled channels.** The device may have 32 channels; the executor simulates on the RTL only
  the ones it is given (``channels``, e.g. one ChPerHead group: :func:`head_channels`). An
  instruction that touches another channel is an error naming it (``outside="error"``, the
  default), or runs on the models only (``outside="model"``: its read-outs are the functional
  model's, counted in :attr:`RtlStats.model_reads`).
- **What the RTL cannot replay** is refused before anything runs (so the models and the RTL
  never diverge): a write without ``data=`` (its payload would come from GPRs or be implicit),
  an instruction whose command this RTL version rejects by design (``hw.isa.REJECTED``; no
  instruction's final command is one today, the check stays for the table), a row beyond the
  RTL build's ``rows``.
- **Read-outs** are the RTL's values, in the canonical order of
  :class:`~patton.sim.program.Readout`: each RTL read is matched to its schedule command by issue
  cycle (return cycle minus latency), the command to its instruction by ``TimedCommand.source``.
  ``R GPR`` read-outs are host values (the functional model's; the RTL has no GPRs).
- **Cycles.** ``Result.cycles`` is the cycle model's (the RTL executes exactly that schedule);
  :attr:`RtlResult.rtl_cycles` holds what each RTL channel simulated for the program (its last
  command plus the drain).
- **Checking.** Discrepancies are counted (:attr:`scoreboard`, :attr:`stats`); with
  ``strict=True`` (the default) a program with any raises
  :class:`~patton.tb.scoreboard.ScoreboardError` naming program, channel, cycle, command,
  expected and actual. A simulator that dies raises :class:`~patton.tb.session.SimulatorError`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from patton.hw.isa import hw_isa
from patton.hw.params import ChannelParams
from patton.sim.check import verify_from
from patton.sim.cycle_model import DeviceState
from patton.sim.datapath import af_lut
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.executor import CycleExecutor, Peek, Result, Simulated, closed
from patton.sim.isa import Command, Instruction, Opcode
from patton.sim.program import OPCODES, UNSET, Program, Readout
from patton.sim.protocol import LUT_ROWS
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing
from patton.tb.driver import DRAIN
from patton.tb.player import SchedulePlayer
from patton.tb.reference import changed_words
from patton.tb.scoreboard import Discrepancy, Scoreboard
from patton.tb.session import Session

__all__ = ["RtlExecutor", "RtlResult", "RtlStats", "head_channels"]

#: Commands whose data the RTL returns.
_READS = frozenset({Command.RD, Command.RDMAC16, Command.RDAF16})
_instances = 0


def _dense_row(row: int, rows: int) -> int:
    """The index of ``row`` in an array of a build's ``rows`` normal rows then its LUT rows."""
    return rows + row - AF_ROW_BASE if row >= AF_ROW_BASE else row


def head_channels(config, head: int) -> list[int]:  # noqa: ANN001 - runtime.config.Config
    """Return the channels of KV head ``head``'s ChPerHead group (``config.channel(head, p)``)."""
    return [config.channel(head, p) for p in range(config.ch_per_head)]


@dataclass(slots=True)
class RtlResult(Result):
    """A :class:`~patton.sim.executor.Result` plus what the RTL observed.

    ``readouts`` are the RTL's values (model-only channels and ``R GPR`` excepted, see
    :class:`RtlExecutor`); ``cycles`` is the cycle model's count. ``rtl_cycles[channel]`` is
    the channel cycles the RTL simulated for the program (its last command plus the drain;
    channels that received no command are absent; ``simulated_cycles`` is the longest);
    ``discrepancies`` lists what the scoreboard found in this program (empty when it passed).
    """

    rtl_cycles: dict[int, int] = field(default_factory=dict)  # per bundled channel


@dataclass(slots=True)
class RtlStats:
    """Totals over the executor's life (the scoreboard counts the comparisons)."""

    programs: int = 0  # programs run
    commands: int = 0  # commands replayed on the RTL (all bundled channels)
    model_cycles: int = 0  # the cycle model's cycles, summed over programs
    rtl_cycles: int = 0  # RTL channel cycles simulated, max over channels, summed
    model_reads: int = 0  # read-outs from channels run on the models only
    seconds: float = 0.0  # wall time in run()
    rtl_seconds: float = 0.0  # of which waiting for the RTL (the channels run in parallel)


class RtlExecutor:
    """Runs programs on live RTL channels (Verilator), scheduled by the cycle model.

    Args:
        device: organisation of the device the programs address.
        channels: the channels simulated on the RTL (each its own simulator process).
        rows: rows per bank of the RTL build (a Verilator build per row count, cached).
        waves: ``"vcd"`` or ``"fst"`` to dump each channel's waveform (into its session
            folder, written when the executor closes).
        strict: raise :class:`~patton.tb.scoreboard.ScoreboardError` when a program's RTL
            reads or checker flags differ from the models'.
        outside: ``"error"`` (refuse instructions for other channels) or ``"model"`` (run
            them on the models only).
        timing: timing profile (name or table, default ``aimsim-0f28a07``) of the cycle
            model, the RTL's timing checker (its own Verilator build per profile) and the
            ``verify`` its flags are compared with.
        name: prefix of the session folders (``build/runs/<name>-ch<c>-<pid>``).
        timeout: seconds without progress before a simulator is declared hung.

    Use as a context manager (or call :meth:`close`); the simulators also end at interpreter
    exit.
    """

    def __init__(self, device: Device = DEVICE, channels: Iterable[int] = (0,), *,
                 rows: int = 64, waves: str | None = None, strict: bool = True,
                 outside: str = "error", timing: Timing = DEFAULT_PROFILE,
                 name: str | None = None, timeout: float = 120.0) -> None:
        global _instances
        if outside not in ("error", "model"):
            raise ValueError(f"outside must be 'error' or 'model', not {outside!r}")
        self.device = device
        self.channels = sorted(set(int(c) for c in channels))
        if not self.channels:
            raise ValueError("bundle at least one channel")
        bad = [c for c in self.channels if not 0 <= c < device.channels]
        if bad:
            raise ValueError(f"channels {bad} are not on a {device.channels}-channel device")
        if rows > device.rows:
            raise ValueError(f"rows={rows} exceeds the device's {device.rows}")
        self.rows = rows
        self.outside = outside
        self.cycle = CycleExecutor(device, timing, record=True)
        self.timing = self.cycle.timing
        self.model = self.cycle.model
        self.scoreboard = Scoreboard(strict=strict)
        self.scoreboard.rule_names = {r.id: r.expression for r in self.timing.rules}
        self.stats = RtlStats()
        #: Fault injection (checks of the checks): called as ``tamper(where, commands, reads,
        #: verify)`` with ``reads`` None before a channel's commands go to the RTL (return
        #: ``(commands, None)``, ``verify(commands)`` lists their violations) and with the RTL's
        #: reads after (return ``(commands, reads)``). None: nothing is touched.
        self.tamper: Callable[..., tuple[list, list | None]] | None = None
        self.player = SchedulePlayer(ChannelParams(rows=rows), waves=waves, timing=self.timing)
        if self.player.params.lanes != device.lanes or self.player.params.banks != device.banks:
            raise ValueError("the RTL channel's organisation differs from the device's")
        _instances += 1
        prefix = name if name is not None else f"rtl-executor{_instances}"
        self.sessions: dict[int, Session] = {}
        self._pool = ThreadPoolExecutor(max_workers=len(self.channels),
                                        thread_name_prefix="rtl-channel")
        try:
            for c in self.channels:
                self.sessions[c] = Session(self.player, f"{prefix}-ch{c}", timeout=timeout)
        except BaseException:
            self.close()
            raise

    # -- checks before anything runs ---------------------------------------------------------

    def _refuse(self, prog: Program) -> None:
        """Raise ``ValueError`` for what the RTL cannot replay (see the module's decisions)."""
        bundled = set(self.channels)
        ops = prog.op.tolist()
        sizes = prog.size.tolist()
        rows = prog.row.tolist()
        masks = prog.channel_mask.tolist()
        channel = prog.channel.tolist()
        inside = sum(1 << (31 - c) for c in bundled)
        lines = None if prog.line is None else prog.line.tolist()
        checked: dict[int, tuple[bool, bool, bool]] = {}
        by_design = hw_isa(self.timing.ext, self.timing.slots).REJECTED
        for i, op_id in enumerate(ops):
            facts = checked.get(op_id)
            if facts is None:
                final = OPCODES[op_id].info.final
                on_bus = final is not None and final not in (Command.SYNC, Command.EOC)
                facts = checked[op_id] = (
                    on_bus and OPCODES[op_id].info.payload is not None,  # writes DRAM data
                    on_bus and final in by_design, on_bus)
            writes, rejected, on_bus = facts
            if not (writes or rejected or on_bus):
                continue
            where = f"instruction {i}" + (f" (line {lines[i]})" if lines and lines[i] else "")
            op = OPCODES[op_id]
            if rejected:
                raise ValueError(f"{where}: {op.value} issues {op.info.final.name}, which this "
                                 "RTL version rejects by design; it cannot run on the RTL")
            if writes and sizes[i] == 0:
                raise ValueError(f"{where}: {op.value} has no data= payload (it would write "
                                 "GPR contents or zeros); the RTL replays explicit payloads "
                                 "only: give it data=")
            if rows[i] != UNSET and rows[i] >= self.rows:
                raise ValueError(f"{where}: {op.value} addresses row {rows[i]}, but the RTL "
                                 f"channel is built with rows={self.rows}")
            if on_bus and self.outside == "error":
                if op in (Opcode.RD_MEM, Opcode.WR_MEM):
                    others = [] if channel[i] in bundled else [channel[i]]
                else:
                    others = ([] if masks[i] == UNSET or not masks[i] & ~inside else
                              [c for c in range(32) if masks[i] >> (31 - c) & 1
                               and c not in bundled])
                if others:
                    raise ValueError(f"{where}: {op.value} addresses channel(s) {others}, "
                                     f"which this executor does not simulate (it bundles "
                                     f"{self.channels}; pass outside='model' to run them on "
                                     "the models only)")

    # -- run ---------------------------------------------------------------------------------

    def run(self, program: Program | Iterable[Instruction]) -> RtlResult:
        """Run ``program`` (EOC appended if missing) on the models and the live RTL channels.

        Raises:
            ValueError: the program cannot be replayed (nothing ran).
            ScoreboardError: ``strict`` and the RTL differs from the models.
            SimulatorError: a simulator died or hung.
        """
        started = time.perf_counter()
        prog = closed(program)
        self._refuse(prog)
        start: DeviceState = self.cycle.state
        timed = self.cycle.run(prog)
        self.stats.programs += 1
        number = self.stats.programs
        assert timed.schedule is not None and timed.cycles is not None
        per_channel: dict[int, list[TimedCommand]] = {c: [] for c in self.channels}
        for cmd in timed.schedule:
            if cmd.channel in per_channel:
                per_channel[cmd.channel].append(cmd)
        self._dropped(prog, per_channel, number)
        expected = self._expected(prog, timed.readouts, per_channel)
        readouts = list(timed.readouts)
        rtl_cycles: dict[int, int] = {}
        sent: dict[int, list[TimedCommand]] = {}
        for c, cmds in per_channel.items():
            if not cmds:
                continue
            if self.tamper is not None:  # fault injection: the schedule as the RTL gets it
                cmds = self.tamper(f"program {number} channel {c}", cmds, None,
                                   lambda cs, c=c: verify_from(start, c, cs, self.device,
                                                               self.timing))[0]
            sent[c] = cmds
        # every channel's simulator replays its segment at the same time
        waiting = time.perf_counter()
        running = {c: self._pool.submit(self.sessions[c].run, cmds) for c, cmds in sent.items()}
        results = {c: job.result() for c, job in running.items()}
        waited = time.perf_counter() - waiting
        for c, cmds in sent.items():
            got = results[c]
            last = per_channel[c][-1].cycle  # the cycle model's last command on the channel
            if got.cycles != last + DRAIN or last >= timed.cycles:
                self.scoreboard.record(Discrepancy(
                    "cycles", number, c, last, f"the program's {len(per_channel[c])} commands",
                    f"the segment to end at the last command's cycle {last} + drain {DRAIN} "
                    f"(the program takes {timed.cycles})", f"{got.cycles} cycles"))
            if self.tamper is not None:  # fault injection: the reads as the RTL returned them
                got = dataclasses.replace(got, reads=self.tamper(
                    f"program {number} channel {c}", cmds, got.reads, None)[1])
            self.stats.commands += len(cmds)
            rtl_cycles[c] = got.cycles
            reads = expected[c]
            paired = self.scoreboard.compare([(cmd, want, op) for cmd, want, op, _ in reads],
                                             got.reads, number, c)
            for (_, _, _, slot), i in zip(reads, paired):
                if i >= 0:
                    old = readouts[slot]
                    readouts[slot] = Readout(old.channel, old.opcode, got.reads[i].data,
                                             old.index)
            self.scoreboard.check(cmds, got, verify_from(start, c, cmds, self.device, self.timing),
                                  number, c)
        self.stats.model_reads += sum(r.channel is not None and r.channel not in per_channel
                                      for r in readouts)
        self.stats.model_cycles += timed.cycles
        self.stats.rtl_cycles += max(rtl_cycles.values(), default=0)
        self.stats.rtl_seconds += waited
        self.stats.seconds += time.perf_counter() - started
        return RtlResult(readouts, timed.cycles, timed.schedule, timed.command_counts,
                         timed.bank_state_cycles, timed.energy, start,
                         self.scoreboard.settle(), max(rtl_cycles.values(), default=0),
                         rtl_cycles)

    def _dropped(self, prog: Program, per_channel: dict[int, list[TimedCommand]],
                 number: int) -> None:
        """Record every instruction whose commands the schedule does not (fully) carry.

        The cycle model ends a program when EOC retires, which does not wait for writes still
        in a controller's buffer (as the public simulator): such a write is not in the
        schedule, and the state the next program starts from does not hold it either. The
        functional model executed it, the RTL never receives it: a ``"dropped"`` discrepancy.
        """
        issued: dict[tuple[int, int, Command], int] = {}
        for c, cmds in per_channel.items():
            for cmd in cmds:
                key = (cmd.source, c, cmd.command)
                issued[key] = issued.get(key, 0) + 1
        finals: dict[int, Command | None] = {}
        instructions: list[Instruction] | None = None
        for i, op_id in enumerate(prog.op.tolist()):
            final = finals.get(op_id, Command.EOC)
            if final is Command.EOC:
                final = finals[op_id] = OPCODES[op_id].info.final
            if final is None or final in (Command.SYNC, Command.EOC):
                continue
            if instructions is None:  # expanded once (indexing a Program copies)
                instructions = prog.to_instructions()
            ins = instructions[i]
            for c in ins.channels():
                if c not in per_channel:
                    continue
                got = issued.get((i, c, final), 0)
                if got < ins.columns:
                    self.scoreboard.dropped += ins.columns - got
                    self.scoreboard.record(Discrepancy(
                        "dropped", number, c, -1, f"instruction {i} {ins.opcode.value}",
                        f"{ins.columns} {final.name}", f"{got} issued before EOC retired "
                        "(the cycle model ends a program at EOC; writes still buffered then "
                        "never issue, while the functional model executes them)"))

    def _expected(self, prog: Program, readouts: Sequence[Readout],
                  per_channel: dict[int, list[TimedCommand]],
                  ) -> dict[int, list[tuple[TimedCommand, np.ndarray, str, int]]]:
        """Pair every read command of a bundled channel with its functional read-out.

        Returns ``channel -> [(command, expected data, opcode name, read-out position)]``.
        The ``k``-th read-out of instruction ``i`` on channel ``c`` is the ``k``-th read of
        ``c`` that instruction issued, in column order (columns outer, as the canonical order).
        """
        slots: dict[tuple[int, int], list[int]] = {}
        for pos, r in enumerate(readouts):
            if r.channel is not None:
                slots.setdefault((r.index, r.channel), []).append(pos)
        out: dict[int, list[tuple[TimedCommand, np.ndarray, str, int]]] = {}
        for c, cmds in per_channel.items():
            reads = [cmd for cmd in cmds if cmd.command in _READS]
            by_source: dict[int, list[TimedCommand]] = {}
            for cmd in reads:
                by_source.setdefault(cmd.source, []).append(cmd)
            pairs = []
            for source, group in by_source.items():
                group.sort(key=lambda cmd: (cmd.col, cmd.cycle))
                where = slots.get((source, c), [])
                if source < 0 or len(where) != len(group):
                    raise RuntimeError(f"channel {c}: instruction {source} issued {len(group)} "
                                       f"read(s) but the functional model read {len(where)} "
                                       "(please report this program)")
                op = OPCODES[int(prog.op[source])].value
                pairs.extend((cmd, readouts[pos].data, op, pos) for cmd, pos in zip(group, where))
            pairs.sort(key=lambda p: p[0].cycle)
            out[c] = pairs
        return out

    # -- the live RTL --------------------------------------------------------------------------

    def mats(self, channel: int) -> dict[tuple[int, int, int], np.ndarray]:
        """Read back ``channel``'s mat contents from its live RTL, now: every word that differs
        from its power-up contents (zero; the default table in a LUT row), by (bank, row,
        column)."""
        return self.sessions[channel].mats()

    def check_mats(self) -> int:
        """Compare every bundled channel's RTL mats with the functional model's, word by word,
        LUT rows included (scoreboard counters; raises when ``strict``); return the words
        compared."""
        before = self.scoreboard.mat_words
        for c in self.channels:
            want = changed_words(self.model.channels[c].mats, self.device)
            self.scoreboard.mats(want, self.mats(c), self.stats.programs, c, self.device)
        self.scoreboard.settle()
        return self.scoreboard.mat_words - before

    def readers(self) -> list[tuple[str, Peek]]:
        """The RTL's mats (each channel dumped when first read) and the functional model's."""
        dev = self.device
        dense: dict[int, np.ndarray] = {}

        def peek(ch: int, bank: int, row: int) -> np.ndarray:
            mats = dense.get(ch)
            if mats is None:  # the normal rows, then the LUT rows at their power-up contents
                mats = np.zeros((dev.banks, self.rows + LUT_ROWS, dev.columns, dev.lanes),
                                np.uint16)
                for k in range(LUT_ROWS):
                    mats[:, self.rows + k] = af_lut(k).reshape(dev.columns, dev.lanes)
                for (b, r, col), word in self.mats(ch).items():
                    mats[b, _dense_row(r, self.rows), col] = word
                dense[ch] = mats
            return mats[bank, _dense_row(row, self.rows)]

        return [("the RTL's mats", peek), ("the functional model's mats", self.model.peek)]

    def simulated(self) -> Simulated:
        """What the channel simulators ran so far."""
        return Simulated(self.stats.rtl_seconds, self.stats.rtl_cycles,
                         sum(s.cycles for s in self.sessions.values()))

    def compare_mats(self) -> tuple[int, int]:
        """Compare every bundled channel's RTL mats with the functional model's; return
        (words compared, words that differ)."""
        before = self.scoreboard.mat_mismatches
        words = self.check_mats()
        return words, self.scoreboard.mat_mismatches - before

    def close(self) -> None:
        """End every channel's simulator (waveforms are written now)."""
        for session in self.sessions.values():
            session.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> RtlExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
