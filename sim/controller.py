"""One AiM channel controller and the DRAM state it drives, cycle by cycle.

This is the public AiM simulator's controller (Ramulator 2 with the AiM extensions) restated:

* four request buffers of 33 entries: AiM (served strictly in order, head only), read and write
  (FR-FCFS, with a write mode between watermarks 0.2 and 0.8), and the *active* buffer of
  conventional requests whose row has been opened (served first);
* AiM and conventional requests never share the controller: a send of one kind is refused
  while the other kind is buffered;
* each request's next command is its *prerequisite* (PRE/ACT for a single bank, PREA/ACT16 for
  all banks) until its own final command can issue;
* a request that needs the other register mode issues a TMOD instead of its command, at the
  cycle that command would be ready;
* at most one command per cycle; a command issues when every timing rule of the table allows it
  at each node it touches (channel; plus bank group and bank for single-bank commands);
* completed reads (and blocking AiM requests, SYNC and EOC) call back through a FIFO that is
  served one entry per cycle; EOC and SYNC wait there until no write is pending.

A :class:`ChannelController` may stand for several identical channels at once (``members``):
channels that receive the same requests in the same cycles evolve identically, so the cycle
model simulates them once. Nothing here depends on how many channels it stands for.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from patton.sim.device import Device
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    COMMAND_META,
    COMMAND_SCOPE,
    Command,
    Instruction,
    Scope,
)
from patton.sim.timing import Timing, timing_table

__all__ = ["Kind", "Request", "Issue", "ChannelController", "BUFFER_CAPACITY", "NEVER"]

#: A request buffer accepts a request while it holds at most this many (Ramulator's ``<= 32``).
BUFFER_CAPACITY = 32
#: ``next_event`` of a controller that has nothing left to do.
NEVER = 1 << 62
_WR_HIGH = 0.8 * BUFFER_CAPACITY
_WR_LOW = 0.2 * BUFFER_CAPACITY

_N = len(Command)
_ACT, _PRE, _PREA, _ACT16, _TMOD = (int(Command.ACT), int(Command.PRE), int(Command.PREA),
                                    int(Command.ACT16), int(Command.TMOD))
_WRA16 = int(Command.WRA16)
_BANK_PREQ = frozenset(int(c) for c in BANK_ROW_COMMANDS)
_ALL_ROWS_PREQ = frozenset(int(c) for c in ALL_ROWS_COMMANDS)
_CLOSING = tuple(COMMAND_META[Command(c)].closing for c in range(_N))
_OPENING = tuple(COMMAND_META[Command(c)].opening for c in range(_N))
_CHANNEL_SCOPED = tuple(COMMAND_SCOPE[Command(c)] == Scope.CHANNEL for c in range(_N))


class Kind(IntEnum):
    """Which buffer a request belongs to."""

    AIM = 0
    READ = 1
    WRITE = 2


class Request:
    """One per-column, per-channel request, as the AiM DMA sends it to a controller.

    ``bank`` is -1 for all-bank requests; ``command`` is the command it will issue next.
    """

    __slots__ = ("kind", "final", "bank", "bg", "row", "col", "command", "arrive", "depart",
                 "reg_mode", "callback", "reader", "sync", "ins", "index", "cfr", "pos")

    def __init__(self, kind: Kind, final: int, bank: int, row: int, col: int,
                 reg_mode: bool, callback: bool, reader: bool, ins: Instruction,
                 index: int, bankgroups_of: int, cfr: tuple[int, ...] = (),
                 pos: int = -1) -> None:
        self.kind = kind  # buffer class
        self.final = final  # the DRAM command that completes the request
        self.bank = bank  # bank index, -1 for channel-scope requests
        self.bg = bank // bankgroups_of if bank >= 0 else -1  # bank group of ``bank``
        self.row = row  # row address (-1 if none)
        self.col = col  # column address (-1 if none)
        self.command = -1  # next command to issue
        self.arrive = -1  # controller clock at which it was buffered
        self.depart = -1  # clock at which it completes
        self.reg_mode = reg_mode  # needs the register read/write mode
        self.callback = callback  # the AiM DMA waits for its completion
        self.reader = reader  # completes through the read-return FIFO
        self.sync = final in (int(Command.EOC), int(Command.SYNC))  # EOC or SYNC
        self.ins = ins  # the host instruction it came from
        self.index = index  # which of that instruction's columns
        self.cfr = cfr  # CFR values (by Cfr id) when it was decoded; timing ignores them
        self.pos = pos  # position of ``ins`` in the program, -1 if unknown

    def clone(self) -> Request:
        """Return an independent copy (for splitting a group of channels)."""
        return copy.copy(self)


@dataclass(slots=True)
class Issue:
    """One command issued by a controller (for every channel it stands for)."""

    cycle: int  # controller clock at issue
    command: Command  # what was issued
    bank: int  # bank, -1 for channel-scope commands
    row: int  # row, -1 if none
    col: int  # column, -1 if none
    request: Request | None = field(default=None, repr=False)  # whose command it was


class ChannelController:
    """State and per-cycle behaviour of one channel (or of a group of identical channels).

    Args:
        members: channel indices this controller stands for.
        device: organisation (banks, bank groups).
        timing: the timing profile (name or table, :mod:`patton.sim.timing`).
        record: keep the issued commands in ``log``.
    """

    def __init__(self, members: list[int], device: Device, timing: Timing,
                 record: bool) -> None:
        timing = timing_table(timing)
        self.members = members
        self._banks = device.banks
        self._per_group = device.banks_per_group
        self._full_mask = (1 << device.banks) - 1
        self._after = [timing.after[lv] for lv in (Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK)]
        self._latency = [timing.latency.get(Command(c), -1) for c in range(_N)]
        self.ch_ready = [-1] * _N
        self.bg_ready = [[-1] * _N for _ in range(device.bankgroups)]
        self.bank_ready = [[-1] * _N for _ in range(device.banks)]
        self.open_row = [-1] * device.banks
        self.open_mask = 0
        # The public simulator's "any bank open" flag for its statistics indexes banks by their
        # number *within* the bank group (so banks 0, 4, 8, 12 share a bit). Reproduced here so
        # that active/precharged cycles (and the energy built on them) agree; the row state
        # itself uses ``open_row``/``open_mask``. See docs/cycle-model.md.
        self.reported_open = 0
        self.reg_mode = False
        self.write_mode = False
        self.aim: deque[Request] = deque()
        self.reads: list[Request] = []
        self.writes: list[Request] = []
        self.active: list[Request] = []
        self.pending_reads: deque[Request] = deque()
        self.pending_writes: list[Request] = []
        self.remaining: deque[Request] = deque()  # sends the DMA must retry
        self.counts = [0] * _N
        self.active_cycles = 0
        self.precharged_cycles = 0
        self.idle_cycles = 0
        self.clk = 0  # last clock accounted in the statistics
        self.changes = 0  # ticks that changed state (a refused send can only pass after one)
        self.refused_at = -1  # ``changes`` when the DMA's last send was refused
        self.next_event = 1  # earliest clock at which ticking may change something
        self.record = record
        self.log: list[Issue] = []

    def resume(self, open_row: list[int], reg_mode: bool) -> None:
        """Start from banks open on ``open_row`` (-1 closed) in register mode ``reg_mode``.

        Only row and mode state carry over from an earlier program; its timing windows are
        taken as elapsed (see :class:`patton.sim.cycle_model.DeviceState`).
        """
        self.open_row = list(open_row)
        self.open_mask = sum(1 << b for b, r in enumerate(open_row) if r >= 0)
        self.reported_open = 0
        for b, r in enumerate(open_row):
            if r >= 0:
                self.reported_open |= 1 << b % self._per_group
        self.reg_mode = reg_mode

    @property
    def holding(self) -> bool:
        """True while a request is buffered, active or pending completion."""
        return bool(self.aim or self.reads or self.writes or self.active or self.pending_reads
                    or self.pending_writes)

    # -- splitting -------------------------------------------------------------------------

    def split(self, members: list[int]) -> ChannelController:
        """Move ``members`` into a new, identical controller and return it."""
        other = copy.copy(self)
        self.members = [m for m in self.members if m not in members]
        other.members = list(members)
        other.ch_ready = list(self.ch_ready)
        other.bg_ready = [list(x) for x in self.bg_ready]
        other.bank_ready = [list(x) for x in self.bank_ready]
        other.open_row = list(self.open_row)
        other.counts = list(self.counts)
        other.log = list(self.log)
        mapping: dict[int, Request] = {}

        def cloned(reqs):
            out = []
            for r in reqs:
                if id(r) not in mapping:
                    mapping[id(r)] = r.clone()
                out.append(mapping[id(r)])
            return out

        other.aim = deque(cloned(self.aim))
        other.reads = cloned(self.reads)
        other.writes = cloned(self.writes)
        other.active = cloned(self.active)
        other.pending_reads = deque(cloned(self.pending_reads))
        other.pending_writes = cloned(self.pending_writes)
        other.remaining = deque(cloned(self.remaining))
        return other

    # -- DRAM state --------------------------------------------------------------------------

    def ready_at(self, command: int, req: Request) -> int:
        """Return the earliest clock at which ``command`` for ``req`` meets every timing rule."""
        t = self.ch_ready[command]
        if req.bank >= 0 and not _CHANNEL_SCOPED[command]:
            b = self.bg_ready[req.bg][command]
            if b > t:
                t = b
            b = self.bank_ready[req.bank][command]
            if b > t:
                t = b
        return t

    def preq(self, req: Request) -> int:
        """Return the command ``req`` needs next, given the open rows (prerequisite logic)."""
        final = req.final
        if final in _BANK_PREQ:
            row = self.open_row[req.bank]
            if row < 0:
                return _ACT
            return final if row == req.row else _PRE
        if final in _ALL_ROWS_PREQ:
            mask = self.open_mask
            if mask:
                row = req.row
                for open_row in self.open_row:
                    if open_row >= 0 and open_row != row:
                        return _PREA
                if mask != self._full_mask:
                    return _ACT16
                return final
            return _ACT16
        return final

    def _issue(self, command: int, req: Request, clk: int) -> None:
        ready = self.ch_ready
        for f, gap in self._after[0][command]:
            if ready[f] < clk + gap:
                ready[f] = clk + gap
        if req.bank >= 0:
            ready = self.bg_ready[req.bg]
            for f, gap in self._after[1][command]:
                if ready[f] < clk + gap:
                    ready[f] = clk + gap
            ready = self.bank_ready[req.bank]
            for f, gap in self._after[2][command]:
                if ready[f] < clk + gap:
                    ready[f] = clk + gap
        if command == _ACT:
            self.open_row[req.bank] = req.row
            self.open_mask |= 1 << req.bank
            self.reported_open |= 1 << req.bank % self._per_group
        elif command == _PRE:
            self.open_row[req.bank] = -1
            self.open_mask &= ~(1 << req.bank)
            self.reported_open &= ~(1 << req.bank % self._per_group)
        elif command == _ACT16:
            self.open_row = [req.row] * self._banks
            self.open_mask = self.reported_open = self._full_mask
        elif command == _PREA or command == _WRA16:
            self.open_row = [-1] * self._banks
            self.open_mask = self.reported_open = 0
        self.counts[command] += 1
        if self.record:
            final = command == req.final
            self.log.append(Issue(
                clk, Command(command), -1 if _CHANNEL_SCOPED[command] else req.bank,
                req.row if final or _OPENING[command] else -1, req.col if final else -1, req))

    # -- host side ---------------------------------------------------------------------------

    def send(self, req: Request, clk: int) -> bool:
        """Offer a request (at the DMA's clock ``clk``); return False when it is refused."""
        self._account(clk)  # the quiet cycles so far saw the buffers as they were
        if req.kind == Kind.AIM:
            if self.writes or self.reads:
                return False
        else:
            if self.aim:
                return False
            if req.kind == Kind.READ and self.writes:
                # Forwarded from a buffered write (the public model matches every write).
                req.depart = clk + 1
                self.pending_reads.append(req)
                return True
        buffer = self.aim if req.kind == Kind.AIM else (
            self.reads if req.kind == Kind.READ else self.writes)
        if len(buffer) > BUFFER_CAPACITY:
            return False
        req.arrive = clk
        buffer.append(req)
        return True

    # -- one cycle -------------------------------------------------------------------------

    def _best(self, buffer: list[Request], clk: int) -> tuple[Request | None, bool]:
        best: Request | None = None
        best_ready = False
        for req in buffer:
            req.command = self.preq(req)
        for req in buffer:
            ready = clk >= self.ready_at(req.command, req)
            if best is None:
                best, best_ready = req, ready
            elif ready != best_ready:
                if ready:
                    best, best_ready = req, ready
            elif best.arrive > req.arrive:
                best, best_ready = req, ready
        return best, best_ready

    def _set_write_mode(self) -> None:
        if not self.write_mode:
            if len(self.writes) > _WR_HIGH or not self.reads:
                self.write_mode = True
        elif len(self.writes) < _WR_LOW and self.reads:
            self.write_mode = False

    def _account(self, upto: int) -> None:
        """Add the statistics of the quiet cycles ``self.clk + 1 .. upto``."""
        n = upto - self.clk
        if n <= 0:
            return
        if self.reported_open:
            self.active_cycles += n
        else:
            self.precharged_cycles += n
        if not (self.reads or self.writes or self.aim or self.pending_reads
                or self.pending_writes):
            self.idle_cycles += n
        self.clk = upto

    def tick(self, clk: int, receive: Callable[[Request, int], None]) -> bool:
        """Run cycle ``clk``; call ``receive(req, n)`` for completions. Return True if busy."""
        self._account(clk - 1)
        changed = False
        # 1. Serve completed reads (one per cycle) and retire finished writes.
        if self.pending_reads:
            req = self.pending_reads[0]
            if req.depart <= clk and (not req.sync or not self.pending_writes):
                if req.callback:
                    receive(req, len(self.members))
                self.pending_reads.popleft()
                changed = True
        if self.pending_writes:
            kept = [r for r in self.pending_writes if r.depart > clk]
            if len(kept) != len(self.pending_writes):
                self.pending_writes = kept
                changed = True
        # 2. Find a request to serve.
        found = False
        buffer: list[Request] | deque[Request] | None = None
        req = None
        if self.active:
            req, found = self._best(self.active, clk)
            buffer = self.active
        if not found:
            if self.aim:
                req = self.aim[0]
                buffer = self.aim
                if req.sync:
                    req.depart = clk
                    self.pending_reads.append(req)
                    self.aim.popleft()
                    self._count_cycle(clk, True)
                    self.changes += 1
                    return True
                req.command = self.preq(req)
                found = clk >= self.ready_at(req.command, req)
            else:
                self._set_write_mode()
                buffer = self.writes if self.write_mode else self.reads
                if buffer:
                    req, found = self._best(buffer, clk)
        if found and _CLOSING[req.command]:
            for other in self.active:
                if other.bank == req.bank and other.bg == req.bg:
                    found = False
                    break
        # 3. Issue.
        if found:
            changed = True
            if (req.kind == Kind.AIM and req.reg_mode) != self.reg_mode:
                req.command = _TMOD
                self.reg_mode = not self.reg_mode
            command = req.command
            self._issue(command, req, clk)
            if command == req.final:
                req.depart = clk + self._latency[command]
                if req.reader:
                    self.pending_reads.append(req)
                else:
                    self.pending_writes.append(req)
                if buffer is self.aim:
                    self.aim.popleft()
                else:
                    buffer.remove(req)
            elif req.kind != Kind.AIM and _OPENING[command]:
                self.active.append(req)
                buffer.remove(req)
        self._count_cycle(clk, found)
        if changed:
            self.changes += 1
        return changed

    def _count_cycle(self, clk: int, found: bool) -> None:
        if not found and not (self.reads or self.writes or self.aim or self.pending_reads
                              or self.pending_writes):
            self.idle_cycles += 1
        if self.reported_open:
            self.active_cycles += 1
        else:
            self.precharged_cycles += 1
        self.clk = clk

    def plan(self, clk: int, busy: bool) -> None:
        """Set ``next_event``: the first clock after ``clk`` at which a tick may change state.

        That is the earliest of: a due completion, and the cycle at which a candidate command
        (active-buffer requests, the AiM head, or the read and write buffers) meets its timing
        rules. A candidate that is already ready but did not issue was either beaten by the
        command that issued (``busy``: it may go next cycle) or is held back by an open-row
        conflict that only another event can lift.
        """
        nxt = NEVER
        if self.pending_reads:
            head = self.pending_reads[0]
            if head.depart > clk:
                nxt = head.depart
            elif not head.sync or not self.pending_writes:
                nxt = clk + 1
        # A retiring write matters only to the idle statistics (all buffers empty) and to a
        # waiting EOC/SYNC; otherwise the next tick retires it just the same.
        if not (self.aim or self.reads or self.writes) or (
                self.pending_reads and self.pending_reads[0].sync):
            for r in self.pending_writes:
                if r.depart < nxt:
                    nxt = r.depart
        candidates: list[Request] = list(self.active)
        if self.aim:
            head = self.aim[0]
            if head.sync:
                nxt = clk + 1
            else:
                candidates.append(head)
        else:
            candidates.extend(self.reads)
            candidates.extend(self.writes)
        for req in candidates:
            t = self.ready_at(self.preq(req), req)
            if t <= clk:
                if busy:
                    nxt = clk + 1
                    break
            elif t < nxt:
                nxt = t
        self.next_event = nxt
