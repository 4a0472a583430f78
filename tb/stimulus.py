"""Constrained-random command schedules for one RTL channel: legal by construction, then mutated.

:class:`Stimulus` walks the channel's state with its own :class:`~patton.sim.check.Checker`
(the models' rules: the protocol table for operands, the timing table for cycles). Each step
draws a command and operands the protocol accepts in the current state (if the command has
none, it issues what leads there: TMOD for the other register mode, ACT/ACT16 to open, PRE/PREA
to close) at the earliest cycle every timing rule allows. A share of the steps is mutated
(:class:`Mix`):

- ``protocol``: operands the protocol refuses (another row, a closed bank, a missing partner
  bank, an address out of range, the other register mode);
- ``rejected``: a command this RTL version does not implement;
- ``boundary``: issued exactly at a chosen rule's minimum gap while a rule with a larger gap
  still runs;
- ``violation``: one cycle short of a chosen rule's minimum gap;
- ``slack``: idle cycles after the earliest legal cycle;
- ``special``: a write whose words are half special values (zeros, infinities, NaNs,
  subnormals, extreme exponents); and a segment whose writes are half of one magnitude class
  in every lane (the smallest normals, the largest, near one), so that a MAC's operands are
  both of it. The MAC and readout special cases (underflow, overflow, rounding up to
  infinity) run.

The legal operands use a few normal rows and, per segment, one activation-function LUT row
(``AF_ROW_BASE + k``), so that ACT/ACT16 open LUT rows, writes change them and AF16 runs on
them; commands whose operand a CFR selects (MAC, MAC16: BROADCAST; EWMUL16: EWMUL_BG) are drawn
under both values.

Given a :class:`~patton.tb.coverage.CoverageMonitor`, ``targeted`` steps aim at its holes: a
rule's boundary (met alone, or with every other rule met) or violation not yet seen (the rule's
following command at that cycle, or its preceding command first), a (command, bank state, mode)
not yet seen, a MAC whose partner bank is not ready, an RD return that an RDMAC16 or RDAF16 can
meet in the same cycle, an EWMUL16 under an EWMUL_BG value, an AF16 on a LUT row not yet seen
or on one a write changed; on a device extension set, an ``ext.*`` pair (the rule's preceding
and following command of that pair). Everything is drawn from one seeded generator: a seed
gives the same schedules.

The commands drawn are those of the timing table's device extension set
(:func:`patton.hw.isa.hw_isa`): on ``aim``, the default, the seeded schedules are what they
always were; under ``aim+wr16`` WR16 is drawn too, and is a write of every bank's column like
WRA16 (a magnitude-class segment multiplies what either wrote).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from patton.hw.isa import hw_isa
from patton.sim.check import Checker
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.isa import CFR_RESET, Cfr, Command, Scope
from patton.sim.protocol import (
    CLOSED,
    LUT_ROWS,
    PAYLOAD,
    RULES,
    Operand,
    RegisterMode,
    Targets,
    column_limit,
)
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, timing_table
from patton.tb.coverage import CoverageMonitor, bank_state

__all__ = ["Mix", "Stimulus"]

_RESET = tuple(CFR_RESET[c] for c in Cfr)
_ROW_LIMIT = 1 << 16  # the command port's row field (hw.isa.ROW_BITS)
_BANK_LIMIT = 1 << 5  # its bank field
_COL_LIMIT = 1 << 8  # its column field
#: The CFR that selects a command's operands (issued under both values).
_SELECTS = {Command.MAC: Cfr.BROADCAST, Command.MAC16: Cfr.BROADCAST,
            Command.EWMUL16: Cfr.EWMUL_BG}
#: Commands that write a mat (what can change a LUT row) on ``aim``; WR16 too where it exists.
_WRITES = frozenset({Command.WR, Command.WRCP, Command.WRA16, Command.EWMUL16})
#: Commands that compute on mat words: half of their columns are ones a segment wrote.
_READERS = frozenset({Command.EWMUL16, Command.MAC16, Command.MAC})
#: bfloat16 patterns at the edges of the datapath (``docs/numerics.md``): signed zeros,
#: infinities, NaNs (quiet, signalling-like, negative), subnormals (flushed to zero), the
#: smallest and largest normals, and exponents far apart (alignment shifts, overflow).
_SPECIAL = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x0001, 0x807F,
                     0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F00, 0x0100, 0x3F80, 0x4B00],
                    dtype=np.uint16)
#: Magnitude classes of a segment's writes, as bfloat16 bit ranges without the sign:
#: the smallest normals (products underflow binary32, EWMUL16's bfloat16), the largest (sums
#: overflow or round up to infinity, EWMUL16 products overflow), near one (exact sums); and
#: ``None``: the special values (in every lane: EWMUL16's NaN and infinity lanes).
_CLASSES = ((0x0080, 0x0100), (0x7F00, 0x7F80), (0x3F70, 0x3F90), None)
#: Chance that a drawn command of the other register mode is redrawn from the current one's
#: (the mode would otherwise flip on most steps).
_STAY = 0.85
#: Share of the steps of a magnitude-class segment that work towards an EWMUL16 of the
#: column its last WRA16 (or WR16) wrote in every bank (both factors of the class, in every
#: lane).
_MULTIPLY = 0.1


@dataclass(frozen=True, slots=True)
class Mix:
    """How often a step departs from the legal schedule (probabilities per step)."""

    protocol: float = 0.08  # operands the protocol refuses
    rejected: float = 0.01  # a command the RTL does not implement
    boundary: float = 0.12  # at a chosen rule's gap while a larger one still runs
    violation: float = 0.12  # one cycle short of a chosen rule's gap
    slack: float = 0.15  # 1-40 idle cycles after the earliest legal cycle
    targeted: float = 0.5  # aimed at a hole of the monitor (when one is given)
    special: float = 0.1  # a write with special words
    magnitude: float = 0.3  # a segment whose writes are half of one magnitude class

    def __post_init__(self) -> None:
        for name in ("protocol", "rejected", "boundary", "violation", "slack", "targeted",
                     "special", "magnitude"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"Mix.{name} = {value} is not a probability")
        if self.protocol + self.rejected > 1.0 or self.boundary + self.violation + self.slack > 1:
            raise ValueError("Mix: the operand shares and the cycle shares must each sum to "
                             "at most 1")

    @classmethod
    def legal(cls) -> Mix:
        """No mutation: every schedule passes ``verify`` (payloads may still be special)."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.15, 0.0)


class Stimulus:
    """Constrained-random schedules of one channel, segment after segment.

    Args:
        seed: seed of the one random generator.
        device: organisation (banks, column ranges).
        timing: timing profile whose rules the cycles are drawn against, on its device
            extension set (whose commands are drawn).
        rows: rows the legal operands use (few, so that rows meet again).
        mix: mutation shares.
        monitor: coverage to aim ``targeted`` steps at (``None``: plain random).

    Each segment starts at cycle 0 after a quiet gap (no rule reaches across); the row and
    mode state carries over, as on a live channel.
    """

    def __init__(self, seed: int = 1, *, device: Device = DEVICE,
                 timing: Timing = DEFAULT_PROFILE, rows: int = 3, mix: Mix = Mix(),
                 monitor: CoverageMonitor | None = None) -> None:
        if not 1 <= rows <= device.rows:
            raise ValueError(f"rows = {rows}: the device has rows 0..{device.rows - 1}")
        self.rng = np.random.default_rng(seed)
        self.device = device
        self.timing = timing_table(timing)
        isa = hw_isa(self.timing.ext, self.timing.slots)
        self._implemented = isa.IMPLEMENTED
        self._rejected_set = isa.REJECTED
        self._commands = tuple(sorted(isa.IMPLEMENTED))
        wr16 = isa.IMPLEMENTED & {Command.WR16}  # the extension's WR16, where the set has it
        # writes of every bank's column (a magnitude-class segment multiplies what they wrote)
        self._scatter = frozenset({Command.WRA16}) | wr16
        self._writes = _WRITES | wr16 if wr16 else _WRITES  # on aim: _WRITES itself
        self.rows = rows
        self.mix = mix
        self.monitor = monitor
        self.checker = Checker(device, self.timing)
        self.now = -1
        self.lut_row = AF_ROW_BASE  # the LUT row the legal operands use in this segment
        self.written: set[int] = set()  # LUT rows a legal write changed
        self._reads: list[int] = []  # return cycles of the RDs of this segment
        self._written: list[int] = []  # columns legal writes of this segment wrote
        # (row, column) of its last legal WRA16 (or WR16: either writes every bank's column)
        self._wra16: tuple[int, int] | None = None
        self._class: tuple[int, int] | None = None  # magnitude class of this segment's writes
        self._classes = 0  # segments of a magnitude class so far (they take the classes in turn)
        self._special = False  # this segment's class is the special values
        self._holes: dict[str, list[str]] = {}
        self._rules = {r.id: r for r in self.timing.rules}
        self._latency = self.timing.latency

    # -- segments ----------------------------------------------------------------------------

    def segment(self, n: int) -> list[TimedCommand]:
        """Return the next ``n`` commands (cycles from 0, strictly rising)."""
        self.checker.forget()
        self.now = -1
        self._reads = []
        self._written = []
        self._wra16 = None
        self._class = None
        self.lut_row = AF_ROW_BASE + int(self.rng.integers(LUT_ROWS))
        self._special = False
        if self.rng.random() < self.mix.magnitude:
            self._class = _CLASSES[self._classes % len(_CLASSES)]
            self._special = self._class is None
            self._classes += 1
        self._holes = self.monitor.holes() if self.monitor is not None else {}
        out = []
        for _ in range(n):
            cmd = self._step()
            out.append(cmd)
            self.now = cmd.cycle
            if cmd.command not in self._rejected_set:
                found = self.checker.step(cmd)
                legal = not any(v.kind == "protocol" for v in found)
                if cmd.command in self._writes and legal:
                    self._written.append(cmd.col)
                    if cmd.command in self._scatter:
                        self._wra16 = (cmd.row, cmd.col)
                    if cmd.row >= AF_ROW_BASE:
                        self.written.add(cmd.row)
            if cmd.command is Command.RD:
                self._reads.append(cmd.cycle + self._latency[Command.RD])
        return out

    def _step(self) -> TimedCommand:
        rng, mix = self.rng, self.mix
        if self._class is not None or self._special:
            if self._wra16 is not None and rng.random() < _MULTIPLY:
                return self._multiply(*self._wra16)
        if self._holes and rng.random() < mix.targeted:
            aimed = self._aim()
            if aimed is not None:
                return aimed
        draw = rng.random()
        if draw < mix.rejected:
            return self._at(self._rejected(), self.now + 1 + int(rng.integers(0, 3)))
        command = self._commands[int(rng.integers(len(self._commands)))]
        if self._other_mode(command) and rng.random() < _STAY:
            same = [c for c in self._commands if not self._other_mode(c)]
            command = same[int(rng.integers(len(same)))]
        if draw < mix.rejected + mix.protocol:
            illegal = self._candidates(command, legal=False) + self._out_of_range(command)
            if illegal:
                return self._timed(illegal[int(rng.integers(len(illegal)))])
        legal = self._candidates(command)
        if not legal:
            legal = self._candidates(self._enabler(command))
        return self._timed(legal[int(rng.integers(len(legal)))])

    # -- operands ----------------------------------------------------------------------------

    def _make(self, command: Command, bank: int = -1, row: int = -1, col: int = -1,
              cfr: tuple[Cfr, int] | None = None) -> TimedCommand:
        payload = None
        if command in PAYLOAD:
            lanes, rng = self.device.lanes, self.rng
            words = rng.standard_normal(lanes).astype(np.float32)
            payload = (words.view(np.uint32) >> 16).astype(np.uint16)
            if self._special and rng.random() < 0.5:  # special values in every lane
                payload = _SPECIAL[rng.integers(len(_SPECIAL), size=lanes)]
            elif self._class is not None and rng.random() < 0.5:
                # a word of the segment's magnitude class in every lane (random signs)
                low, high = self._class
                payload = (rng.integers(low, high, size=lanes)
                           | (rng.integers(0, 2, size=lanes) << 15)).astype(np.uint16)
            elif rng.random() < self.mix.special:  # some words special
                pick = rng.random(lanes) < 0.5
                payload[pick] = _SPECIAL[rng.integers(len(_SPECIAL), size=int(pick.sum()))]
        values = ()
        if cfr is not None and cfr[1] != CFR_RESET[cfr[0]]:
            values = tuple(cfr[1] if c is cfr[0] else _RESET[c] for c in Cfr)
        return TimedCommand(0, 0, command, bank, row, col, payload=payload, cfr=values)

    def _col(self, command: Command) -> int:
        if RULES[command].columns is None:
            return -1
        limit = column_limit(self.device, command)
        written = [c for c in self._written if c < limit]
        if command in _READERS and written and self.rng.random() < 0.5:
            # a column this segment wrote: its data (special words, a magnitude class) meets
            # the datapath
            return written[int(self.rng.integers(len(written)))]
        return int(self.rng.integers(limit))

    def _all(self, command: Command) -> list[TimedCommand]:
        """Every in-range operand choice of ``command`` on the legal rows (the segment's LUT
        row among them; random columns), under both values of the CFR that selects its
        operands."""
        rule = RULES[command]
        rows = [*range(self.rows), self.lut_row] if rule.row is not Operand.NO else (-1,)
        banks = range(self.device.banks) if rule.bank else (-1,)
        selects = _SELECTS.get(command)
        cfrs = [(selects, 0), (selects, 1)] if selects is not None else [None]
        return [self._make(command, b, r, self._col(command), x)
                for b in banks for r in rows for x in cfrs]

    def _candidates(self, command: Command, legal: bool = True) -> list[TimedCommand]:
        """The operand choices the protocol accepts now (``legal=False``: refuses)."""
        state = self.checker.state
        out = []
        for cmd in self._all(command):
            ok = state.check(command, cmd.bank if cmd.bank >= 0 else None,
                             cmd.row if cmd.row >= 0 else None,
                             cmd.col if cmd.col >= 0 else None, _broadcast(cmd)) is None
            if ok == legal:
                out.append(cmd)
        return out

    def _out_of_range(self, command: Command) -> list[TimedCommand]:
        """Choices with a bank, row or column the device does not have (but the port does)."""
        rule, rng, d = RULES[command], self.rng, self.device
        out = []
        if rule.bank:
            out.append(self._make(command, int(rng.integers(d.banks, _BANK_LIMIT)), 0,
                                  self._col(command)))
        if rule.row is Operand.REQUIRED:  # a normal row, or a LUT row, the device lacks
            bank = int(rng.integers(d.banks)) if rule.bank else -1
            out.append(self._make(command, bank, int(rng.integers(d.rows, _ROW_LIMIT)),
                                  self._col(command)))
            out.append(self._make(command, bank,
                                  AF_ROW_BASE + int(rng.integers(LUT_ROWS, _ROW_LIMIT)),
                                  self._col(command)))
        if rule.columns is not None:
            bank = int(rng.integers(d.banks)) if rule.bank else -1
            row = int(rng.integers(self.rows)) if rule.row is not Operand.NO else -1
            out.append(self._make(command, bank, row,
                                  int(rng.integers(column_limit(d, command), _COL_LIMIT))))
        return out

    def _rejected(self) -> TimedCommand:
        choices = sorted(self._rejected_set)
        command = choices[int(self.rng.integers(len(choices)))]
        return self._make(command, int(self.rng.integers(self.device.banks)),
                          int(self.rng.integers(self.rows)), 0)

    def _other_mode(self, command: Command) -> bool:
        """True when ``command`` needs the register mode the channel is not in."""
        mode = RULES[command].mode
        return (mode is not RegisterMode.ANY
                and (mode is RegisterMode.REGISTER) != self.checker.state.reg_mode)

    def _enabler(self, command: Command) -> Command:
        """The command that leads towards a state in which ``command`` is legal."""
        rule = RULES[command]
        if self._other_mode(command):
            return Command.TMOD
        if rule.targets is Targets.ALL:
            return Command.ACT16 if self._candidates(Command.ACT16) else Command.PREA
        if self._candidates(Command.ACT):
            return Command.ACT
        return Command.PRE

    # -- cycles ------------------------------------------------------------------------------

    def _bounds(self, cmd: TimedCommand, prev: Command | None = None
                ) -> tuple[int, list[tuple[int, int]]]:
        """Return the earliest cycle every rule allows and ``(rule, boundary cycle)`` of each
        rule that applies, for ``cmd`` issued next (``prev``: the boundaries measured from
        that preceding command only; the earliest cycle is every rule's)."""
        measured = self.checker.measure(cmd)
        earliest = max([self.now + 1] + [when + required for _, _, when, required in measured])
        gaps = [(rule, when + required) for rule, p, when, required in measured
                if prev is None or p is prev]
        return earliest, gaps

    def _timed(self, cmd: TimedCommand) -> TimedCommand:
        rng, mix, now = self.rng, self.mix, self.now
        earliest, gaps = self._bounds(cmd)
        draw = rng.random()
        early = [b - 1 for _, b in gaps if b - 1 > now]
        if draw < mix.violation and early:
            return self._at(cmd, early[int(rng.integers(len(early)))])
        draw -= mix.violation
        inside = [b for _, b in gaps if now < b < earliest]
        if draw < mix.boundary and inside:
            return self._at(cmd, inside[int(rng.integers(len(inside)))])
        draw -= mix.boundary
        if draw < mix.slack:
            return self._at(cmd, earliest + int(rng.integers(1, 41)))
        return self._at(cmd, earliest)

    @staticmethod
    def _at(cmd: TimedCommand, cycle: int) -> TimedCommand:
        return replace(cmd, cycle=cycle)

    # -- aiming at holes ---------------------------------------------------------------------

    def _aim(self) -> TimedCommand | None:
        """A command that hits a hole now or leads towards one (None: no aim found)."""
        groups = list(self._holes)
        group = groups[int(self.rng.integers(len(groups)))]
        holes = self._holes[group]
        label = holes[int(self.rng.integers(len(holes)))]
        if group.startswith("timing."):
            return self._aim_rule(int(label.split()[0]), group.removeprefix("timing."))
        if group.startswith("ext."):  # "<rule> <P> -> <F> = <gap>"
            rule, p, _, f = label.split()[:4]
            return self._aim_rule(int(rule), group.removeprefix("ext."),
                                  (Command[p], Command[f]))
        if group == "command.state":
            return self._aim_state(label)
        if group == "command.rejected":
            return self._at(self._make(Command[label], 0, 0, 0), self.now + 1)
        if group == "reads.return":
            return self._aim_collision(Command.RDAF16 if "RDAF16" in label else Command.RDMAC16)
        if group == "protocol.error" and label == "PARTNER":
            return self._aim_partner()
        if group == "protocol.error" and label == "LUT_ROW":
            return self._aim_af(None, lut=False)
        if group == "mac.cross":
            command, broadcast = label.split()
            return self._aim_state(f"{command} same normal",
                                   (Cfr.BROADCAST, int(broadcast == "BROADCAST=1")))
        if group == "ewmul.bg":
            return self._aim_state("EWMUL16 same normal", (Cfr.EWMUL_BG, int(label[-1])))
        if group == "af.lut":
            return self._aim_af(None if label.startswith("written")
                                else AF_ROW_BASE + int(label.split()[-1]))
        return None

    def _aim_rule(self, rule_id: int, how: str,
                  pair: tuple[Command, Command] | None = None) -> TimedCommand | None:
        """The rule's following command at its boundary (``how`` = "boundary"), there with
        every other rule met ("legal"), or one cycle short ("violation"); else its preceding
        command, so that a later step can. ``pair``: only its following command, measured from
        its preceding one (an ``ext.*`` bin)."""
        rule = self._rules[rule_id]
        if pair is None:
            following = sorted(rule.following & self._implemented)
        else:
            following = [pair[1]]
        choices = []
        for command in following:
            for cmd in self._candidates(command):
                earliest, gaps = self._bounds(cmd, None if pair is None else pair[0])
                for rid, b in gaps:
                    cycle = b - 1 if how == "violation" else b
                    if rid == rule_id and cycle > self.now and (how != "legal"
                                                                or cycle == earliest):
                        choices.append(self._at(cmd, cycle))
        if choices:
            return choices[int(self.rng.integers(len(choices)))]
        if pair is None:
            preceding = sorted(rule.preceding & self._implemented)
        else:
            preceding = [pair[0]]
        command = preceding[int(self.rng.integers(len(preceding)))]
        legal = self._candidates(command)
        if not legal and self.rng.random() < 0.5:
            # a refused command still starts the rule's wait: WR in register mode is how
            # WR -> RDMAC16 (19 cycles) can be met exactly, the TMOD between them needing 32
            legal = self._candidates(command, legal=False)
        legal = legal or self._candidates(self._enabler(command))
        return self._timed(legal[int(self.rng.integers(len(legal)))]) if legal else None

    def _aim_state(self, label: str, cfr: tuple[Cfr, int] | None = None
                   ) -> TimedCommand | None:
        """A command in the (command, bank state, mode) of ``label``; with ``cfr``, a legal
        one issued under that CFR value."""
        name, state, mode = label.split()
        command = Command[name]
        if (mode == "register") != self.checker.state.reg_mode:
            return self._timed(self._make(Command.TMOD))
        matching = [c for c in self._all(command) if bank_state(self.checker.state, c) == state
                    and (cfr is None or _value(c, cfr[0]) == cfr[1])]
        if cfr is not None:
            matching = [c for c in matching if self.checker.state.check(
                command, c.bank if c.bank >= 0 else None, c.row, c.col, _broadcast(c)) is None]
        if matching:
            return self._timed(matching[int(self.rng.integers(len(matching)))])
        return self._shape(state)

    def _aim_partner(self) -> TimedCommand | None:
        """A MAC under BROADCAST = 1 whose own bank is ready but whose partner bank is not."""
        state = self.checker.state
        if state.reg_mode:
            return self._timed(self._make(Command.TMOD))
        ready = [c for c in self._candidates(Command.MAC, legal=False) if _broadcast(c)
                 and state.check(Command.MAC, c.bank, c.row, c.col, False) is None]
        if ready:
            return self._timed(ready[int(self.rng.integers(len(ready)))])
        if (state.open_rows == CLOSED).all():
            return self._timed(self._candidates(Command.ACT)[0])
        return self._timed(self._make(Command.PREA))

    def _shape(self, state: str) -> TimedCommand | None:
        """A step towards a bank state (open some banks, open all, close all)."""
        rows = self.checker.state.open_rows
        if self.checker.state.reg_mode:
            return self._timed(self._make(Command.TMOD))
        if state == "closed" or (state == "other" and (rows != CLOSED).all()):
            return self._timed(self._make(Command.PREA))
        legal = self._candidates(Command.ACT)
        return self._timed(legal[int(self.rng.integers(len(legal)))]) if legal else \
            self._timed(self._make(Command.PREA))

    def _aim_collision(self, read: Command) -> TimedCommand | None:
        """RD, TMOD within reach of its return, then ``read`` (a register read, RDMAC16 or
        RDAF16) returning in the same cycle."""
        late = self._latency[Command.RD] - self._latency[read]
        pending = [r - self._latency[read] for r in self._reads]
        reachable = [c for c in pending if c > self.now]
        state = self.checker.state
        if state.reg_mode:
            for cycle in reachable:
                cmd = self._make(read)
                earliest, _ = self._bounds(cmd)
                if earliest <= cycle:
                    return self._at(cmd, cycle)
            return self._timed(self._make(Command.TMOD))
        tmod = self._make(Command.TMOD)
        gap = self.timing.gap(Scope.CHANNEL, Command.TMOD, read) or 0
        if any(c - gap > self.now for c in reachable) and late > gap:
            return self._timed(tmod)
        reads = self._candidates(Command.RD)
        if reads:
            return self._timed(reads[int(self.rng.integers(len(reads)))])
        return self._timed(self._candidates(self._enabler(Command.RD))[0])

    def _aim_af(self, row: int | None, lut: bool = True) -> TimedCommand | None:
        """An AF16 on LUT row ``row`` (opening it first); ``None``: on a LUT row a write
        changed (writing the open LUT row first). ``lut=False``: an AF16 on the normal row
        open in every bank (refused: ``LUT_ROW``)."""
        state = self.checker.state
        if state.reg_mode:
            return self._timed(self._make(Command.TMOD))
        rows = state.open_rows
        one = int(rows[0]) if (rows == rows[0]).all() and rows[0] != CLOSED else None
        if not lut:
            if one is not None and one < AF_ROW_BASE:
                return self._timed(self._make(Command.AF16, row=one))
            row = int(self.rng.integers(self.rows))
        elif row is None:
            if one is not None and one >= AF_ROW_BASE:
                if one in self.written:
                    return self._timed(self._make(Command.AF16, row=one))
                writes = [c for w in self._writes for c in self._candidates(w)
                          if c.row == one]
                if writes:
                    return self._timed(writes[int(self.rng.integers(len(writes)))])
            row = self.lut_row
        if one == row:
            return self._timed(self._make(Command.AF16, row=row))
        if ((rows != CLOSED) & (rows != row)).any():
            return self._timed(self._make(Command.PREA))
        return self._timed(self._make(Command.ACT16, row=row))


    def _multiply(self, row: int, col: int) -> TimedCommand:
        """EWMUL16 of column ``col`` of ``row`` (opening the row in every bank first), under a
        random EWMUL_BG."""
        state = self.checker.state
        if state.reg_mode:
            return self._timed(self._make(Command.TMOD))
        rows = state.open_rows
        if (rows == row).all():
            bg = (Cfr.EWMUL_BG, int(self.rng.integers(2)))
            return self._timed(self._make(Command.EWMUL16, row=row, col=col, cfr=bg))
        if ((rows != CLOSED) & (rows != row)).any():
            return self._timed(self._make(Command.PREA))
        return self._timed(self._make(Command.ACT16, row=row))

def _value(cmd: TimedCommand, cfr: Cfr) -> int:
    """The value of ``cfr`` the command is issued under (an empty ``cfr``: the reset ones)."""
    return cmd.cfr[cfr] if len(cmd.cfr) > cfr else CFR_RESET[cfr]


def _broadcast(cmd: TimedCommand) -> int:
    return _value(cmd, Cfr.BROADCAST)
