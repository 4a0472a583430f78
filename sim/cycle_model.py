"""The AiM memory system: host instruction decode (the "AiM DMA") over 32 channel controllers.

Cycle semantics are the public Ramulator2-based AiM simulator's (``test/example.yaml``), which
the PATTON paper used; its GDDR6 timing rules are a profile (:mod:`patton.sim.timing`): the
head, 0f28a07, by default, or 2eb1ee0, the commit CENT pins. Everything below is the same in
both:

* every memory-system cycle ``k`` first retries the sends that controllers refused earlier,
  then decodes at most one host instruction (if no blocking instruction is outstanding), then
  ticks every controller at clock ``k + 1``;
* a decoded instruction sends one request per column per channel, channel 31 first; a refused
  send is retried every cycle, and the instruction retires when all its sends went through (and,
  for RD_MAC, RD_AF, SYNC and EOC, when every channel has called back);
* the run ends in the cycle in which the last channel calls back for EOC; that clock is
  ``cycles`` (the simulator's ``memory_system_cycles``).

By default a run goes to the compiled kernel (:mod:`patton.sim.native`, ``native``): the
same semantics over flat arrays in C, every controller that holds work ticked every cycle and
identical channels simulated once. The Python model below is the reference it is tested
against, and it has two exact shortcuts of its own, both switchable so tests can compare them
with plain cycle-by-cycle simulation:

``skip``
    A controller is ticked only when something can change: a request was sent to it, a
    pending completion is due, or the earliest timing-ready cycle of one of its candidate
    commands has come. Quiet cycles are accounted in bulk.
``group``
    Channels that receive the same requests in the same cycles are simulated once; a group is
    split the first time an instruction targets only part of it.

The front end above (``frontend="shared"``, the default) is the public simulator's. The opt-in
``frontend="per_channel"`` gives every channel a decoder of its own (:class:`CycleModel`).
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np
from patton.sim import native
from patton.sim.controller import NEVER, ChannelController, Issue, Kind, Request
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.extensions import device_ext
from patton.sim.isa import CFR_RESET, Cfr, Command, Instruction, Opcode
from patton.sim.program import OP_ID, Program
from patton.sim.protocol import column_limits
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, TimingTable, timing_table

__all__ = ["CycleModel", "DeviceState", "RunResult", "run", "FRONTENDS"]

#: The front ends a :class:`CycleModel` can decode the program with.
FRONTENDS = native.FRONTENDS
_Memo = native.Memo  # (CycleModel's ``native`` argument hides the module there)


@dataclass(frozen=True, slots=True)
class DeviceState:
    """The row, register-mode and CFR state a program leaves behind, to start the next from.

    A run that starts from a state begins with these banks open, these channels in register
    mode and these CFR values, and with every timing window of the earlier program elapsed
    (an executor that keeps a device alive across programs leaves at least
    :attr:`patton.sim.timing.TimingTable.quiet` idle cycles between them). The reset state
    (:meth:`reset`) is the public simulator's start: all banks closed, normal mode, CFRs at
    their reset values.
    """

    open_rows: tuple[tuple[int, ...], ...]  # per channel, per bank: open row or -1
    reg_mode: tuple[bool, ...]  # per channel: register read/write mode
    cfr: tuple[int, ...]  # the DMA's CFR values, by Cfr id

    @classmethod
    def reset(cls, device: Device = DEVICE) -> DeviceState:
        """Return the power-up state."""
        return cls(tuple((-1,) * device.banks for _ in range(device.channels)),
                   (False,) * device.channels, tuple(CFR_RESET[c] for c in Cfr))


@dataclass(slots=True)
class RunResult:
    """What a cycle-model run reports.

    ``command_counts[channel][command]`` omits zero counts and channels that issued nothing;
    ``bank_state_cycles[channel]`` holds ``active`` (some bank open), ``precharged`` (all banks
    closed) and ``idle`` (nothing buffered or pending) cycles for every channel.
    """

    cycles: int  # memory-system cycles (0.5 ns each)
    command_counts: dict[int, dict[str, int]]  # per channel, per command name
    bank_state_cycles: dict[int, dict[str, int]]  # per channel: active, precharged, idle
    schedule: list[TimedCommand] | None = field(default=None, repr=False)  # if recorded
    state: DeviceState | None = field(default=None, repr=False)  # what the run left behind
    trace: native.Trace | None = field(default=None, repr=False)  # if asked for (run_decoded)

    @property
    def commands(self) -> int:
        """Total DRAM commands issued (TMOD included)."""
        return sum(sum(c.values()) for c in self.command_counts.values())


class CycleModel:
    """Cycle-exact model of an AiM device driven by host instructions.

    Args:
        device: organisation.
        timing: timing profile name (:data:`patton.sim.timing.PROFILES`) or table; the
            default, ``aimsim-0f28a07``, is the profile every exactness test pins.
        record: keep the timed command schedule (``RunResult.schedule``).
        progress: called about once a second of wall time with (instructions retired,
            instructions in the program, current cycle), for long runs.
        skip: skip quiet cycles (exact; off = tick every controller every cycle).
        group: simulate identical channels once (exact; off = one controller per channel).
        drain: run on after EOC until every request of the program has issued and completed.
            The public simulator ends at EOC even while conventional writes are still
            buffered (they never issue); off (the default) reproduces that exactly, on makes
            the schedule hold every command of the program (what an executor that keeps the
            device alive needs: the next program must find those writes done).
        native: run on the compiled kernel (:mod:`patton.sim.native`; exact, honours
            ``group``; ``skip`` does not apply, the kernel ticks every busy controller each
            cycle). Off runs the Python model, with ``skip`` and ``group``.
        memo: on the kernel, let runs take the segments of earlier runs they meet again
            instead of simulating them (:class:`patton.sim.native.Memo`; exact). ``True`` gives
            the model its own memo; a ``Memo`` may be shared by models of one setting. Runs
            that record, and traced or following runs, do not use it.
        frontend: how host instructions are decoded (:data:`FRONTENDS`).

            ``"shared"`` (the default) is the public simulator's AiM DMA, exact against it: one
            decoder for all channels, one instruction per cycle, held while any send of it is
            refused or a blocking instruction is outstanding (module docstring).

            ``"per_channel"`` (opt-in; not the public simulator) gives every channel its own
            decoder. In each cycle each channel takes the next instruction of the program, in
            program order, that addresses it, under the shared decoder's rules applied to
            that channel alone: one instruction per cycle; a send its controller refuses is
            retried every cycle and the channel takes nothing else until it passes (the
            instruction retires in the cycle the retry passes, and the next is taken the
            cycle after). An instruction addresses the channels of its mask (``R/W MEM``: its
            channel); a multicast one is taken by each of them independently, each when it is
            ready. Lines with no DRAM work (``W CFR``, GPR lines, EWADD) and instructions
            whose mask selects no channel of the device address every channel and cost each
            one decode cycle, as they cost the shared decoder one. ``W CFR`` values apply in
            program order (each instruction is decoded under the CFRs the lines before it
            set), as they do under the shared decoder.

            The instructions the shared decoder waits at (for their callbacks) order the
            channels for the program's sake and stay barriers: taken by every channel of the
            device, and no channel takes anything after one until it falls. SYNC and EOC:
            each channel sends its request when it takes them; the barrier falls when every
            channel has called back (the run ends in the cycle of the last EOC callback).
            RD_MAC and RD_AF (which fill host GPRs that later instructions, for any channel,
            may read): the read is sent, by its channels, in the cycle the last channel takes
            it, i.e. once every instruction before it has gone out everywhere, as the shared
            DMA sends it; the barrier falls when all its callbacks came. So a program whose
            DRAM instructions all address the same one channel, or (from a start state alike
            on every channel) all address every channel, runs exactly as under ``"shared"``.
    """

    def __init__(self, device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE, *,
                 record: bool = False, skip: bool = True, group: bool = True,
                 drain: bool = False, native: bool = True, frontend: str = "shared",
                 progress: Callable[[int, int, int], None] | None = None,
                 memo: bool | _Memo = False) -> None:
        if frontend not in FRONTENDS:
            raise ValueError(f"unknown front end {frontend!r} (choices: "
                             f"{', '.join(FRONTENDS)})")
        self.frontend = frontend
        self.device = device
        self.timing = timing_table(timing)  # the compiled table (an unknown name raises here)
        self.record = record
        self.skip = skip
        self.group = group
        self.drain = drain
        self.native = native
        self.progress = progress  # called about once a second: (done, instructions, cycle)
        if memo is True:
            memo = _Memo()
        elif memo is not False and not isinstance(memo, _Memo):
            raise ValueError(f"memo is True, False or a Memo, not {memo!r}")
        self.memo: _Memo | None = memo or None

    def run(self, program: Program | Iterable[Instruction],
            state: DeviceState | None = None) -> RunResult:
        """Simulate a program that ends with EOC and return cycles, counts and schedule.

        ``state`` (default: :meth:`DeviceState.reset`) is the row, mode and CFR state to start
        from; the result's ``state`` is the one the program leaves.
        """
        columnar = program if isinstance(program, Program) else None
        listed = None if columnar is not None else list(program)
        _check_closed(np.asarray(columnar.op) if columnar is not None else
                      np.array([OP_ID[ins.opcode] for ins in listed], dtype=np.int64),
                      self.timing)
        state = DeviceState.reset(self.device) if state is None else state
        if len(state.open_rows) != self.device.channels or \
                len(state.reg_mode) != self.device.channels:
            raise ValueError(f"a state of {len(state.open_rows)} channels for a device of "
                             f"{self.device.channels}")
        if self.native:
            return _native(self, columnar if columnar is not None else Program.of(listed),
                           listed, state)
        return _Run(self, listed if listed is not None else columnar.to_instructions(),
                    state).result()

    def run_decoded(self, program: Program, decoded: native.Decoded,
                    state: DeviceState, *, trace: bool = False,
                    follow: native.Trace | None = None) -> RunResult:
        """Like :meth:`run` on the kernel, for a caller that decoded ``program`` already (with
        ``state``'s CFRs and this device's channels): :class:`patton.sim.cost_cache.CostCache`.

        ``trace`` returns the run's checkpoints in the result's ``trace``; ``follow`` (such a
        trace of the same program) lets the run stop where it meets them and take the rest
        from the traced run (:class:`patton.sim.native.Trace`: the result is the same).
        """
        _check_closed(np.asarray(program.op), self.timing)
        return _native(self, program, None, state, decoded, trace=trace, follow=follow)

    def cost_decoded(self, program: Program, decoded: native.Decoded, state: DeviceState
                     ) -> tuple[int, np.ndarray, np.ndarray, DeviceState]:
        """:meth:`run_decoded`'s figures as arrays, for a caller that wants the cost only
        (:meth:`patton.sim.cost_cache.CostCache.cost`): cycles, per-channel command counts
        ``(channels, commands)`` in command id order, per-channel active, precharged and idle
        cycles ``(channels, 3)``, and the end state. No schedule is kept."""
        _check_closed(np.asarray(program.op), self.timing)
        dev = self.device
        if not self.native:  # the Python model's result, as arrays
            r = self.run(program, state)
            counts = np.zeros((dev.channels, len(Command)), dtype=np.int64)
            stats = np.zeros((dev.channels, 3), dtype=np.int64)
            for ch, named in r.command_counts.items():
                for name, n in named.items():
                    counts[ch, Command[name]] = n
            for ch, st in r.bank_state_cycles.items():
                stats[ch] = (st["active"], st["precharged"], st["idle"])
            assert r.state is not None
            return r.cycles, counts, stats, r.state
        out = native.run(decoded, dev, self.timing, _groups(_starts(state), self.group),
                         state.open_rows, state.reg_mode, record=False, drain=self.drain,
                         frontend=self.frontend, memo=self.memo)
        where = np.zeros(dev.channels, dtype=np.intp)
        for i, bits in enumerate(out.members):
            where[_bits(bits)] = i
        rows = out.open_row[where]
        end = DeviceState(tuple(map(tuple, rows.tolist())),
                          tuple(bool(m) for m in out.reg_mode[where].tolist()), decoded.end_cfr)
        return out.cycles, out.counts[where], out.stats[where], end


def run(program: Iterable[Instruction], **options) -> RunResult:
    """Simulate ``program`` with a default :class:`CycleModel` (see its options)."""
    return CycleModel(**options).run(program)


def _check_closed(ops: np.ndarray, timing: TimingTable) -> None:
    """Refuse a program (its op ids) that does not end with its one EOC, or that uses an
    instruction of a device extension ``timing``'s device lacks."""
    eoc = ops == OP_ID[Opcode.EOC]
    if not len(ops) or not eoc[-1]:
        raise ValueError("a program must end with AiM EOC")
    if eoc[:-1].any():
        raise ValueError("AiM EOC may appear only at the end of a program")
    for op in device_ext(timing.ext).lacking:
        if (ops == OP_ID[op]).any():
            timing.device.refuse(op)


def _starts(state: DeviceState) -> list[tuple[tuple[int, ...], bool]]:
    return [(state.open_rows[c], state.reg_mode[c]) for c in range(len(state.open_rows))]


def _groups(starts: list[tuple[tuple[int, ...], bool]], group: bool) -> list[list[int]]:
    """The channels simulated together at the start: alike ones if ``group``, else each."""
    if not group:
        return [[c] for c in range(len(starts))]
    alike: dict[tuple, list[int]] = {}
    for c, start in enumerate(starts):
        alike.setdefault(start, []).append(c)
    return list(alike.values())


class _Run:
    """One simulation: the DMA's state plus the controllers."""

    def __init__(self, model: CycleModel, program: list[Instruction],
                 state: DeviceState) -> None:
        self.model = model
        dev = model.device
        self.queue = deque(program)
        self.total = len(program)  # the queue's head is at position total - len(queue)
        self.stalled = 0
        self.finished = False
        self.progress = False
        self.cfr = {c: state.cfr[c] for c in Cfr}
        self.col_limit = column_limits(dev)  # a request's column wraps at its command's
        starts = _starts(state)
        self.controllers = []
        for m in _groups(starts, model.group):
            ctl = ChannelController(m, dev, model.timing, model.record)
            ctl.resume(list(starts[m[0]][0]), starts[m[0]][1])
            self.controllers.append(ctl)
        self.per_channel = model.frontend == "per_channel"
        self._ticking: ChannelController | None = None  # the controller being ticked
        if self.per_channel:
            self._front_end(program)
        self.cycles = self._simulate()

    def _front_end(self, program: list[Instruction]) -> None:
        """Set up the per-channel decoders: one per controller, and what each line addresses.

        ``targets[pos]`` is the channel bit set instruction ``pos`` sends DRAM requests to, 0
        for a line that addresses every channel (no DRAM work, SYNC, EOC, an empty target
        set); ``ordered[pos]`` marks the blocking reads (RD_MAC, RD_AF) with targets, where
        every channel synchronises; ``cfr_at[pos]`` holds the CFRs it is decoded under
        (program order).
        """
        self.program = program
        self.fronts: dict[ChannelController, _Front] = {
            ctl: _Front(sum(1 << m for m in ctl.members)) for ctl in self.controllers}
        everything = (1 << self.model.device.channels) - 1
        self.targets: list[int] = []
        self.ordered: list[bool] = []
        self.cfr_at: list[tuple[int, ...]] = []
        for ins in program:
            self.cfr_at.append(tuple(self.cfr[c] for c in Cfr))
            if ins.opcode == Opcode.WR_CFR:
                self.cfr[Cfr(ins.cfr)] = ins.value
            bits = 0
            if ins.opcode.info.final is not None and ins.opcode not in (Opcode.SYNC,
                                                                        Opcode.EOC):
                for c in ins.channels():
                    bits |= 1 << c
            self.targets.append(bits & everything)
            self.ordered.append(bool(bits & everything) and ins.opcode.info.blocking)
        self.arrived = 0  # channels at the barrier: taken (a read) or called back (SYNC, EOC)
        self.callbacks = 0  # callbacks the barrier at a blocking read still waits for
        self.due = -1  # a blocking read every channel took in this cycle, to send

    # -- decode ------------------------------------------------------------------------------

    def _receive(self, req: Request, n: int) -> None:
        if self.per_channel:
            self._receive_each(req, n)
            return
        self.stalled -= n
        if self.stalled == 0:
            head = self.queue.popleft()
            self.progress = True
            if head.opcode == Opcode.EOC:
                self.finished = True

    def _receive_each(self, req: Request, n: int) -> None:
        """A callback under the per-channel front end: ``n`` channels answered for the SYNC or
        EOC, or for the blocking read, every decoder waits at."""
        if req.sync:
            self.arrived += n
            if self.arrived == self.model.device.channels:
                self._release(req.final == int(Command.EOC))
            return
        self.callbacks -= n
        if self.callbacks == 0:
            self._release(False)

    def _release(self, end: bool) -> None:
        """Let every decoder past the barrier it waits at (``end``: the EOC)."""
        self.arrived = 0
        for front in self.fronts.values():
            front.head += 1
            front.waiting = False
        self.progress = True
        if end:
            self.finished = True

    def _targets(self, channels: list[int]) -> list[ChannelController]:
        """Return the controllers for ``channels``, splitting groups that are partly targeted."""
        wanted = set(channels)
        out = []
        for ctl in list(self.controllers):
            inside = [m for m in ctl.members if m in wanted]
            if not inside:
                continue
            if len(inside) != len(ctl.members):
                part = ctl.split(inside)
                self.controllers.append(part)
                ctl = part
            out.append(ctl)
        self.controllers.sort(key=lambda c: c.members[0])
        return out

    def _send(self, ctl: ChannelController, req: Request, k: int) -> bool:
        if not ctl.remaining and ctl.send(req, k):
            self._wake(ctl, req, k)
            return True
        if not ctl.remaining:
            ctl.refused_at = ctl.changes
        ctl.remaining.append(req)
        return False

    @staticmethod
    def _wake(ctl: ChannelController, req: Request, k: int) -> None:
        """Make ``ctl`` tick this cycle unless ``req`` only queued behind an AiM head."""
        if (req.kind != Kind.AIM or ctl.aim[0] is req) and ctl.next_event > k + 1:
            ctl.next_event = k + 1

    def _decode(self, ins: Instruction, k: int) -> bool:
        """Send one instruction's requests; return True if all were accepted."""
        op = ins.opcode
        info = op.info
        banks_per_group = self.model.device.banks_per_group
        pos = self.total - len(self.queue)  # ``ins`` is the queue's head
        if op == Opcode.WR_CFR:
            self.cfr[Cfr(ins.cfr)] = ins.value
            return True
        if info.final is None:  # EWADD, GPR lines: no DRAM work
            return True
        if op in (Opcode.SYNC, Opcode.EOC):
            ok = True
            for ctl in self.controllers:
                req = Request(Kind.AIM, int(info.final), -1, -1, -1, False, True, True, ins, 0,
                              banks_per_group, pos=pos)
                ok &= self._send(ctl, req, k)
                self.stalled += len(ctl.members)
            return ok
        cfr = tuple(self.cfr[c] for c in Cfr)
        kind, bank, row, first_col, reader = _fields(ins, cfr)
        ok = True
        targets = self._targets(ins.channels())
        final = int(info.final)
        wrap = self.col_limit[final]
        for i in range(ins.columns):
            col = -1 if first_col < 0 else (first_col + i) % wrap if wrap else first_col + i
            for ctl in targets:
                req = Request(kind, final, bank, row, col, info.reg_mode, info.blocking,
                              reader, ins, i, banks_per_group, cfr, pos)
                ok &= self._send(ctl, req, k)
                if info.blocking:
                    self.stalled += len(ctl.members)
        return ok

    def _decode_each(self, ctl: ChannelController, pos: int, k: int) -> bool:
        """Send instruction ``pos``'s requests to ``ctl`` alone (per-channel front end); return
        True if all were accepted."""
        ins = self.program[pos]
        op = ins.opcode
        info = op.info
        banks_per_group = self.model.device.banks_per_group
        if info.final is None:  # W CFR (applied in program order), EWADD, GPR lines
            return True
        if op in (Opcode.SYNC, Opcode.EOC):
            req = Request(Kind.AIM, int(info.final), -1, -1, -1, False, True, True, ins, 0,
                          banks_per_group, pos=pos)
            return self._send(ctl, req, k)
        if not self.targets[pos] & self.fronts[ctl].bits:  # an instruction for no channel
            return True
        cfr = self.cfr_at[pos]
        kind, bank, row, first_col, reader = _fields(ins, cfr)
        final = int(info.final)
        wrap = self.col_limit[final]
        ok = True
        for i in range(ins.columns):
            col = -1 if first_col < 0 else (first_col + i) % wrap if wrap else first_col + i
            req = Request(kind, final, bank, row, col, info.reg_mode, info.blocking, reader,
                          ins, i, banks_per_group, cfr, pos)
            ok &= self._send(ctl, req, k)
        return ok

    def _dma(self, k: int) -> None:
        """Run the DMA part of memory-system cycle ``k``."""
        was_remaining = False
        still_remaining = False
        for ctl in self.controllers:
            if ctl.remaining and ctl.refused_at == ctl.changes:
                # Refused before and nothing changed since: it would be refused again.
                was_remaining = still_remaining = True
                continue
            while ctl.remaining:
                was_remaining = True
                if not ctl.send(ctl.remaining[0], k):
                    ctl.refused_at = ctl.changes
                    still_remaining = True
                    break
                self._wake(ctl, ctl.remaining.popleft(), k)
                self.progress = True
        if self.stalled:
            return
        if was_remaining:
            if not still_remaining:
                self.queue.popleft()
                self.progress = True
        elif self.queue:
            self.progress = True
            if self._decode(self.queue[0], k) and self.stalled == 0:
                self.queue.popleft()

    def _dma_each(self, k: int) -> None:
        """Run the per-channel front end's part of memory-system cycle ``k``: each controller
        retries its refused sends, else takes its next instruction (splitting itself when that
        addresses only some of its channels: the others skip it and take their next one, or,
        at a barrier, wait at it too). A blocking read is sent, by its channels, in the cycle
        the last channel takes it."""
        ctls = self.controllers
        targets, ordered, total = self.targets, self.ordered, self.total
        split = False
        i = 0
        while i < len(ctls):  # parts split off in this cycle get their turn in it
            ctl = ctls[i]
            i += 1
            front = self.fronts[ctl]
            retried = False
            if ctl.remaining:
                if ctl.refused_at == ctl.changes:
                    continue  # refused before and nothing changed since
                retried = True
                while ctl.remaining:
                    if not ctl.send(ctl.remaining[0], k):
                        ctl.refused_at = ctl.changes
                        break
                    self._wake(ctl, ctl.remaining.popleft(), k)
                    self.progress = True
            if front.waiting:
                continue
            if retried:
                if not ctl.remaining:
                    front.head += 1
                    self.progress = True
                continue
            pos, bits = front.head, front.bits
            while pos < total and targets[pos] and not ordered[pos] and not targets[pos] & bits:
                pos += 1
            front.head = pos
            if pos == total:
                continue
            wanted = targets[pos]
            if wanted & bits and wanted & bits != bits:
                part = ctl.split([m for m in ctl.members if not wanted >> m & 1])
                ctls.append(part)
                self.fronts[part] = _Front(bits & ~wanted, pos if ordered[pos] else pos + 1)
                front.bits = bits & wanted
                split = True
            self.progress = True
            if ordered[pos]:  # the shared DMA's ordering: every channel takes it first
                front.waiting = True
                self.arrived += len(ctl.members)
                if self.arrived == self.model.device.channels:
                    self.due = pos
            elif self.program[pos].opcode in (Opcode.SYNC, Opcode.EOC):
                front.waiting = True  # held until every channel called back
                self._decode_each(ctl, pos, k)
            elif self._decode_each(ctl, pos, k):
                front.head = pos + 1
        if self.due >= 0:
            pos, self.due, self.arrived = self.due, -1, 0
            for ctl in ctls:
                if self.fronts[ctl].bits & targets[pos]:
                    self._decode_each(ctl, pos, k)
                    self.callbacks += self.program[pos].columns * len(ctl.members)
        if split:
            ctls.sort(key=lambda c: c.members[0])

    def _retired(self) -> int:
        """Instructions every channel is past (for progress reports)."""
        if self.per_channel:
            return min(front.head for front in self.fronts.values())
        return self.total - len(self.queue)

    def _retrying(self) -> bool:
        """Return True if the DMA holds refused sends (any controller change may admit them)."""
        return any(ctl.remaining for ctl in self.controllers)

    # -- main loop -------------------------------------------------------------------------

    def _simulate(self) -> int:
        skip = self.model.skip
        receive = self._receive
        progress = self.model.progress
        dma = self._dma_each if self.per_channel else self._dma
        total = len(self.queue)
        next_report = time.perf_counter() + 1.0
        k = 0
        loops = 0
        while True:
            loops += 1
            if progress is not None and loops & 0xFFF == 0 and time.perf_counter() > next_report:
                progress(self._retired(), total, k)
                next_report = time.perf_counter() + 1.0
            self.progress = False
            dma(k)
            clk = k + 1
            changed = False
            for ctl in self.controllers:
                if not skip or ctl.next_event <= clk:
                    self._ticking = ctl
                    busy = ctl.tick(clk, receive)
                    ctl.plan(clk, busy)
                    changed |= busy
            if self.finished and not (self.model.drain
                                      and any(ctl.holding for ctl in self.controllers)):
                break
            k += 1
            if skip and not self.progress and not (changed and self._retrying()):
                nxt = min(ctl.next_event for ctl in self.controllers)
                if nxt >= NEVER:
                    raise RuntimeError(f"cycle model stalled at cycle {clk}: no controller can "
                                       "make progress (please report this program)")
                k = max(k, nxt - 1)
        for ctl in self.controllers:
            ctl._account(clk)
        return clk

    # -- results ---------------------------------------------------------------------------

    def result(self) -> RunResult:
        counts: dict[int, dict[str, int]] = {}
        states: dict[int, dict[str, int]] = {}
        for ctl in self.controllers:
            named = {Command(c).name: n for c, n in enumerate(ctl.counts) if n}
            for m in ctl.members:
                if named:
                    counts[m] = dict(named)
                states[m] = {"active": ctl.active_cycles, "precharged": ctl.precharged_cycles,
                             "idle": ctl.idle_cycles}
        schedule = _schedule(self.controllers) if self.model.record else None
        dev = self.model.device
        rows: list[tuple[int, ...]] = [()] * dev.channels
        modes: list[bool] = [False] * dev.channels
        for ctl in self.controllers:
            for m in ctl.members:
                rows[m], modes[m] = tuple(ctl.open_row), ctl.reg_mode
        end = DeviceState(tuple(rows), tuple(modes), tuple(self.cfr[c] for c in Cfr))
        return RunResult(self.cycles, dict(sorted(counts.items())), dict(sorted(states.items())),
                         schedule, end)


class _Front:
    """One controller's decoder under the per-channel front end."""

    __slots__ = ("bits", "head", "waiting")

    def __init__(self, bits: int, head: int = 0) -> None:
        self.bits = bits  # the controller's channels, as a bit set
        self.head = head  # the next instruction it may take (it skips those not for it)
        self.waiting = False  # at a barrier (SYNC, EOC, a blocking read) until it falls


def _fields(ins: Instruction, cfr: tuple[int, ...]) -> tuple[Kind, int, int, int, bool]:
    """Buffer kind, bank, row, first column and reader flag of a DRAM instruction's requests,
    decoded under the CFR values ``cfr`` (AF reads the LUT row of its mode)."""
    op = ins.opcode
    info = op.info
    if info.conventional:
        kind = Kind.READ if info.final == Command.RD else Kind.WRITE
    else:
        kind = Kind.AIM
    bank = ins.bank if ins.bank is not None else -1
    row = ins.row if ins.row is not None else -1
    if op == Opcode.AF:
        row = AF_ROW_BASE + cfr[Cfr.AFM]
    if op in (Opcode.RD_MEM, Opcode.WR_MEM):
        first_col = ins.col if ins.col is not None else -1
    else:
        first_col = ins.start_col
    return kind, bank, row, first_col, kind == Kind.READ or info.blocking


def _schedule(controllers: list[ChannelController]) -> list[TimedCommand]:
    """Return every controller's issues on each of its channels, in (cycle, channel) order.

    A channel belongs to one controller, which issues at most one command per cycle, so the
    order is total. Issues are ordered, not commands (a group of 32 channels has 32 commands
    per issue).
    """
    groups = [sorted(ctl.members) for ctl in controllers]
    issues = sorted(((issue, groups[i]) for i, ctl in enumerate(controllers)
                     for issue in ctl.log), key=lambda pair: pair[0].cycle)
    return _entries(issues)


def _entries(issues: list[tuple[Issue, list[int]]]) -> list[TimedCommand]:
    """Schedule entries of ``issues`` (each with its channels, in cycle order), one per
    channel, in (cycle, channel) order: issues of one cycle are interleaved by channel.

    The cyclic garbage collector is paused meanwhile, as the millions of new entries would
    otherwise make it rescan them over and over.
    """
    each, of = TimedCommand.each, TimedCommand.of
    out: list[TimedCommand] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        n, start = len(issues), 0
        while start < n:
            cycle = issues[start][0].cycle
            end = start + 1
            while end < n and issues[end][0].cycle == cycle:
                end += 1
            if end == start + 1:
                out.extend(each(*issues[start]))
            else:  # controllers issuing in the same cycle: interleave their channels
                pairs = sorted(((ch, issue) for issue, chans in issues[start:end]
                                for ch in chans), key=itemgetter(0))
                out.extend(of(issue, ch) for ch, issue in pairs)
            start = end
        return out
    finally:
        if enabled:
            gc.enable()


# -- the compiled kernel ---------------------------------------------------------------------

class _Served:
    """The part of a request a schedule entry carries (what :class:`Issue` readers use)."""

    __slots__ = ("final", "ins", "index", "cfr", "pos")

    def __init__(self, final: int, ins: Instruction, index: int, cfr: tuple[int, ...],
                 pos: int) -> None:
        self.final, self.ins, self.index, self.cfr, self.pos = final, ins, index, cfr, pos


def _native(model: CycleModel, program: Program, listed: list[Instruction] | None,
            state: DeviceState, decoded: native.Decoded | None = None, *, trace: bool = False,
            follow: native.Trace | None = None) -> RunResult:
    """Run ``program`` on the compiled kernel and build the Python model's result from it.

    ``listed`` is the program as instructions if it came so (the schedule's entries refer to
    them), else None.
    """
    dev = model.device
    total = len(program)
    report = None
    if model.progress is not None:
        user = model.progress
        next_report = [time.perf_counter() + 1.0]

        def report(retired: int, cycle: int) -> None:
            if time.perf_counter() > next_report[0]:
                user(retired, total, cycle)
                next_report[0] = time.perf_counter() + 1.0

    starts = _starts(state)
    if decoded is None:
        decoded = native.Decoded(program, {c: state.cfr[c] for c in Cfr}, dev.channels)
    out = native.run(decoded, dev, model.timing, _groups(starts, model.group),
                     state.open_rows, state.reg_mode, record=model.record, drain=model.drain,
                     frontend=model.frontend, progress=report, trace=trace, follow=follow,
                     memo=model.memo)
    counts: dict[int, dict[str, int]] = {}
    states: dict[int, dict[str, int]] = {}
    rows: list[tuple[int, ...]] = [()] * dev.channels
    modes: list[bool] = [False] * dev.channels
    names = _COMMAND_NAMES
    all_counts, all_stats = out.counts.tolist(), out.stats.tolist()
    all_rows, all_modes = out.open_row.tolist(), out.reg_mode.tolist()
    for i, bits in enumerate(out.members):
        named = {names[c]: n for c, n in enumerate(all_counts[i]) if n}
        active, precharged, idle = all_stats[i]
        row, mode = tuple(all_rows[i]), bool(all_modes[i])
        for m in _bits(bits):
            if named:
                counts[m] = dict(named)
            states[m] = {"active": active, "precharged": precharged, "idle": idle}
            rows[m], modes[m] = row, mode
    schedule = None
    if model.record:
        instructions = listed if listed is not None else program.to_instructions()
        schedule = _native_schedule(out, decoded, instructions, dev.channels)
    end = DeviceState(tuple(rows), tuple(modes), decoded.end_cfr)
    return RunResult(out.cycles, dict(sorted(counts.items())), dict(sorted(states.items())),
                     schedule, end, out.trace)


_COMMAND_NAMES = [c.name for c in Command]


def _bits(mask: int) -> list[int]:
    return [c for c in range(mask.bit_length()) if mask >> c & 1]


def _native_schedule(out: native.KernelRun, decoded: native.Decoded,
                     program: list[Instruction], channels: int) -> list[TimedCommand]:
    """The kernel's issue records as schedule entries (:func:`_entries`).

    Records come in cycle order, one per controller and cycle, each for the channels its
    controller stood for at the time.
    """
    rec = out.records
    if rec is None or not len(rec):
        return []
    commands = list(Command)
    cfrs: dict[int, tuple[int, ...]] = {}
    members: dict[int, list[int]] = {}
    issues: list[tuple[Issue, list[int]]] = []
    for cycle, bits, command, bank, row, col, pos, index, final in rec.tolist():
        cfr = cfrs.get(pos)
        if cfr is None:
            cfr = cfrs[pos] = decoded.cfr_at(pos)
        req = _Served(command if final else -1, program[pos], index, cfr, pos)
        chans = members.get(bits)
        if chans is None:
            chans = members[bits] = _bits(bits)
        issue = Issue(cycle, commands[command], bank, row, col, req)  # type: ignore[arg-type]
        issues.append((issue, chans))
    return _entries(issues)
