"""Functional coverage of the RTL channel: cover groups sampled on every command it executed.

The cover groups are `cocotb-coverage <https://github.com/mciepluc/cocotb-coverage>`_ items
(``CoverPoint``/``CoverCross`` in its coverage trie, exportable as XML or YAML).
:class:`CoverageMonitor` is the monitor's coverage side: it takes each replayed segment, the
commands the driver sent and what :class:`~patton.tb.monitor.Monitor` parsed back (the RTL's
checker flags, protocol codes and returned reads), and samples every command with the RTL's
verdict on it. A shadow :class:`~patton.sim.check.Checker` gives the state each command met
(open rows, register mode) and the gaps it was measured against, and the verdict the models
expect, for the scoreboard (:mod:`patton.tb.closure` runs both).

Groups (under ``rtl.``):

``timing.boundary``
    one bin per rule that applies to the implemented commands (:func:`applicable`): a command
    came exactly the rule's minimum gap after the preceding command the rule names, at the
    rule's node, the RTL did not flag that rule and executed the command (another rule may be
    broken: see ``timing.legal``).
``timing.legal``
    the same, by a command the RTL flagged for nothing at all. A rule whose every pair has a
    larger gap at the same or an enclosing node (:func:`dominated`) cannot be met exactly by a
    legal command: its bin is unreachable.
``timing.violation``
    the same rules: a command came one cycle short of the minimum gap and the RTL flagged that
    rule.
``command.state``
    ``(command, bank state, register mode)`` for each implemented command. The state is the
    target banks' row state before the command (:func:`bank_state`).
``command.rejected``
    each command this RTL version does not implement, sent (the RTL must refuse it).
``protocol.error``
    each :class:`~patton.hw.isa.ProtocolCode` the RTL raised.
``mac.cross``
    executed ``MAC``/``MAC16`` crossed with CFR BROADCAST 0/1 (``mac.command`` and
    ``mac.broadcast`` are its two points).
``ewmul.bg``
    executed ``EWMUL16`` under CFR EWMUL_BG 0 (bank group 0 only) and 1 (every group).
``af.lut``
    executed ``AF16`` on each LUT row ``AF_ROW_BASE + k`` (the default table of AFM ``k``, or
    what writes left there), and on a LUT row that an executed write (WR, WRCP, WRA16,
    EWMUL16) had changed.
``reads.return``
    per cycle with returned data: RD alone, RDMAC16 alone, RDAF16 alone, RD with RDMAC16, RD
    with RDAF16 in one cycle (RD returns on ``rdata``, the register reads on ``rdata_mac``).
``ext.boundary``, ``ext.violation``
    only on a device extension set (``aim+wr16``): one bin per ``(rule, P, F)`` pair of an
    applicable rule in which ``P`` or ``F`` is a command the extension adds (WR16), hit as
    ``timing.boundary`` and ``timing.violation`` are but by that pair (a rule's bins are hit
    by any of its pairs, so they cannot show that the added command's were checked).

The command sets (implemented, rejected, the writes) are those of the timing table's device
extension set (:func:`patton.hw.isa.hw_isa`): on ``aim``, the default, the bins are what they
always were; under ``aim+wr16`` WR16 is implemented and a write (it writes every bank's column,
as WRA16 does).

A bin nothing can reach is listed in :attr:`CoverageMonitor.unreachable` with the reason (a
violation one cycle short of a gap of 1 would be two commands in one cycle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cocotb_coverage import coverage as cc
from patton.hw.isa import IMPLEMENTED, HwIsa, ProtocolCode, hw_isa
from patton.sim.check import Checker, Violation
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.isa import CFR_RESET, COMMAND_SCOPE, Cfr, Command, Scope
from patton.sim.protocol import CLOSED, LUT_ROWS, RULES, Operand, State, Targets
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, TimingTable, timing_table
from patton.tb.monitor import PlayResult

__all__ = ["applicable", "dominated", "bank_state", "STATES", "CoverageMonitor", "Group",
           "COUNTED", "EXTENSION_GROUPS", "extension_pairs"]

#: Row states a command can meet, by the kind of command (see :func:`bank_state`).
STATES: dict[str, tuple[str, ...]] = {
    "none": ("-",),  # no bank (global buffer, accumulators, mode)
    "bank": ("closed", "open"),  # one bank, no row operand (PRE)
    "bank_row": ("closed", "same", "other"),  # one bank and a row (ACT, RD, WR, MAC, ...)
    "all": ("closed", "open"),  # every bank, no row operand (PREA)
    "all_row": ("closed", "same", "other", "partial", "mixed"),  # every bank and a row
}
_MODES = ("normal", "register")
_READS = ("RD", "RDMAC16", "RDAF16", "RD+RDMAC16", "RD+RDAF16")
#: The bins of ``af.lut``: the LUT row AF16 ran on, and "written" (a LUT row a write changed).
_AF_BINS = tuple(range(LUT_ROWS)) + ("written",)
#: Commands that write a mat (what can change a LUT row) on ``aim``; WR16 too where it exists.
_WRITES = frozenset({Command.WR, Command.WRCP, Command.WRA16, Command.EWMUL16})
#: The groups whose bins the figures count (``mac.command``/``mac.broadcast`` are the cross's
#: points, not counted again).
COUNTED = ("timing.boundary", "timing.legal", "timing.violation", "command.state",
           "command.rejected", "protocol.error", "mac.cross", "ewmul.bg", "af.lut",
           "reads.return")
#: The groups counted too on a device extension set (after :data:`COUNTED`).
EXTENSION_GROUPS = ("ext.boundary", "ext.violation")


def _kind(command: Command) -> str:
    rule = RULES[command]
    if rule.targets is Targets.NONE:
        return "none"
    base = "all" if rule.targets is Targets.ALL else "bank"
    return base + ("_row" if rule.row is not Operand.NO else "")


def bank_state(state: State, cmd: TimedCommand) -> str:
    """Return the row state ``cmd`` meets (one of ``STATES`` for its kind; ``""`` when its
    bank does not exist).

    One bank: ``closed``; ``same`` (open on the command's row), ``other`` (another row), or
    ``open`` for a command without a row. Every bank: ``closed`` (all), ``same``/``other``
    (all open on the command's row / on one other row), ``partial`` (some open on the
    command's row, the rest closed), ``mixed`` (anything else), or ``open`` (some bank open)
    for a command without a row.
    """
    kind = _kind(cmd.command)
    rows = state.open_rows
    if kind == "none":
        return "-"
    if kind.startswith("bank"):
        if not 0 <= cmd.bank < len(rows):
            return ""
        rows = rows[state.targets(cmd.command, cmd.bank)]
    values = set(rows.tolist())
    if values == {CLOSED}:
        return "closed"
    if kind in ("bank", "all"):
        return "open"
    if values == {cmd.row}:
        return "same"
    if len(values) == 1:
        return "other"
    return "partial" if values == {CLOSED, cmd.row} else "mixed"


def _pairs(rule, implemented: frozenset[Command] = IMPLEMENTED  # noqa: ANN001 - a TimingRule
           ) -> list[tuple[Command, Command]]:
    """The rule's (preceding, following) pairs of implemented commands checked at its level
    (bank-group and bank rules only bind single-bank commands)."""
    def at_level(c: Command) -> bool:
        return c in implemented and (rule.level is Scope.CHANNEL
                                     or COMMAND_SCOPE[c] is not Scope.CHANNEL)
    return [(p, f) for p in sorted(rule.preceding) if at_level(p)
            for f in sorted(rule.following) if at_level(f)]


def _isa(timing: TimingTable) -> HwIsa:
    """The RTL's ISA on the table's device extension set."""
    return hw_isa(timing.ext, timing.slots)


def applicable(timing: TimingTable) -> dict[int, str]:
    """Return the rules that apply to the implemented commands (of the table's device
    extension set), ``{rule id: expression}``: those with a positive gap and a pair of
    implemented commands checked at their level."""
    implemented = _isa(timing).IMPLEMENTED
    return {rule.id: rule.expression for rule in timing.rules
            if rule.cycles > 0 and _pairs(rule, implemented)}


def extension_pairs(timing: TimingTable) -> list[tuple[int, Command, Command]]:
    """Return the ``(rule, P, F)`` pairs of the applicable rules in which ``P`` or ``F`` is a
    command the table's device extension set adds to ``aim`` (none on ``aim``), by rule."""
    isa = _isa(timing)
    added = frozenset(isa.commands) - frozenset(hw_isa().commands)
    rules = applicable(timing)
    return [(rule.id, p, f) for rule in timing.rules if rule.id in rules
            for p, f in _pairs(rule, isa.IMPLEMENTED) if p in added or f in added]


#: Levels whose nodes hold a node of each level (a channel holds its bank groups and banks).
_ENCLOSING = {Scope.CHANNEL: {Scope.CHANNEL}, Scope.BANKGROUP: {Scope.CHANNEL, Scope.BANKGROUP},
              Scope.BANK: {Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK}}


def dominated(timing: TimingTable) -> dict[int, list[int]]:
    """Return the applicable rules that no legal command can meet exactly, with the rules that
    prevent it: for each of its implemented pairs, a rule of the same pair at an enclosing
    level (whose last issue of the preceding command is at least as recent) with a larger gap.
    """
    rules = applicable(timing)
    implemented = _isa(timing).IMPLEMENTED
    out: dict[int, list[int]] = {}
    for rule in timing.rules:
        if rule.id not in rules:
            continue
        by: set[int] = set()
        for p, f in _pairs(rule, implemented):
            larger = {o.id for o in timing.rules if o.cycles > rule.cycles and p in o.preceding
                      and f in o.following and o.level in _ENCLOSING[rule.level]}
            if not larger:
                break
            by |= larger
        else:
            out[rule.id] = sorted(by)
    return out


@dataclass(frozen=True, slots=True)
class Group:
    """One counted cover group's figures."""

    name: str  # e.g. "timing.boundary"
    bins: dict[str, int]  # bin label -> hits
    unreachable: dict[str, str]  # bin label -> why no stimulus can hit it

    @property
    def hit(self) -> int:
        """Bins hit at least once."""
        return sum(n > 0 for n in self.bins.values())

    @property
    def reachable(self) -> int:
        """Bins some stimulus can hit."""
        return len(self.bins) - len(self.unreachable)


def _label(value: object) -> str:
    if isinstance(value, tuple):
        return " ".join(_label(v) for v in value)
    return value.name if isinstance(value, (Command, ProtocolCode)) else str(value)


class CoverageMonitor:
    """Samples the cover groups on every command of every replayed segment.

    Args:
        device: organisation (banks and ranges of the shadow checker).
        timing: timing profile of the RTL's checker (which rules exist, their gaps).
        name: top of the cover items in cocotb-coverage's (process-wide) trie; a new
            monitor of the same name replaces the old one's items.

    Attributes:
        isa: the RTL's ISA on the table's device extension set (which commands are
            implemented, rejected).
        counted: the groups counted (:data:`COUNTED`, then :data:`EXTENSION_GROUPS` on an
            extension set).
        pairs: the ``ext.*`` groups' pairs (:func:`extension_pairs`; none on ``aim``).
        rules: the rules the timing groups cover (:func:`applicable`).
        unreachable: ``{(group, bin label): reason}``.
        dominated: the rules no legal command can meet exactly (:func:`dominated`).
        commands: commands sampled; ``segments``: segments sampled.
    """

    def __init__(self, device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE,
                 name: str = "rtl") -> None:
        self.device = device
        self.timing = timing_table(timing)
        self.name = name
        self.checker = Checker(device, self.timing)
        self.isa = isa = _isa(self.timing)
        added = frozenset(isa.commands) - frozenset(hw_isa().commands)
        # what can change a LUT row: WR16 too, on an extension set that has it
        self._writes = (_WRITES | {Command.WR16} if Command.WR16 in isa.IMPLEMENTED
                        else _WRITES)
        self.pairs = extension_pairs(self.timing)
        self.counted = COUNTED + (EXTENSION_GROUPS if added else ())
        self.rules = applicable(self.timing)
        self.required = {r.id: r.cycles for r in self.timing.rules}
        for key in [k for k in cc.coverage_db if k == name or k.startswith(name + ".")]:
            del cc.coverage_db[key]
        rule_ids = sorted(self.rules)
        rule_labels = [f"{i} {self.rules[i]} = {self.required[i]}" for i in rule_ids]
        states = [(c, s, m) for c in sorted(isa.IMPLEMENTED) for s in STATES[_kind(c)]
                  for m in _MODES]
        codes = [c for c in ProtocolCode if c is not ProtocolCode.NONE]
        self._boundary = self._point("timing.boundary", rule_ids, rule_labels)
        self._legal = self._point("timing.legal", rule_ids, rule_labels)
        self._violation = self._point("timing.violation", rule_ids, rule_labels)
        self._state = self._point("command.state", states)
        self._rejected = self._point("command.rejected", sorted(isa.REJECTED))
        self._protocol = self._point("protocol.error", codes)
        self._reads = self._point("reads.return", list(_READS))
        self._ewmul = self._point("ewmul.bg", [0, 1], ["EWMUL_BG=0", "EWMUL_BG=1"])
        self._af = self._point("af.lut", list(_AF_BINS),
                               [f"LUT row {k}" for k in range(LUT_ROWS)] + ["written LUT row"])
        self.written: set[int] = set()  # LUT rows (k) an executed write changed
        self._mac = self._cross()
        pair_labels = [_pair_label(pair, self.required) for pair in self.pairs]
        self._pair_ids = {pair: i for i, pair in enumerate(self.pairs)}
        if added:
            self._ext_boundary = self._point("ext.boundary", list(range(len(self.pairs))),
                                             pair_labels)
            self._ext_violation = self._point("ext.violation", list(range(len(self.pairs))),
                                              pair_labels)
        self.unreachable: dict[tuple[str, str], str] = {}
        self.dominated = dominated(self.timing)
        for i, label in zip(rule_ids, rule_labels):
            if i in self.dominated:
                by = ", ".join(f"{o} {self.timing.rule(o).expression} = {self.required[o]}"
                               for o in self.dominated[i])
                self.unreachable["timing.legal", label] = (
                    f"every pair it binds has a larger gap at the same or an enclosing node "
                    f"({by}): meeting it exactly breaks that one")
            if self.required[i] < 2:
                self.unreachable["timing.violation", label] = (
                    "one cycle short of a 1-cycle gap is two commands in one cycle; the "
                    "command bus carries one")
        for pair, label in zip(self.pairs, pair_labels):
            if self.required[pair[0]] < 2:
                self.unreachable["ext.violation", label] = (
                    "one cycle short of a 1-cycle gap is two commands in one cycle; the "
                    "command bus carries one")
        self.commands = 0
        self.segments = 0

    # -- cover items -----------------------------------------------------------------------

    def _point(self, group: str, bins: list, labels: list[str] | None = None
               ) -> Callable[[object], None]:
        labels = labels if labels is not None else [_label(b) for b in bins]
        item = cc.CoverPoint(f"{self.name}.{group}", bins=bins, bins_labels=labels)
        return item(_sampled)

    def _cross(self) -> Callable[[Command, int], None]:
        top = f"{self.name}.mac"
        points = (f"{top}.command", f"{top}.broadcast")
        command = cc.CoverPoint(points[0], xf=lambda c, b: c, bins=[Command.MAC, Command.MAC16],
                                bins_labels=["MAC", "MAC16"])
        broadcast = cc.CoverPoint(points[1], xf=lambda c, b: b, bins=[0, 1],
                                  bins_labels=["BROADCAST=0", "BROADCAST=1"])
        cross = cc.CoverCross(f"{top}.cross", items=list(points))
        return command(broadcast(cross(_sampled2)))

    # -- sampling ----------------------------------------------------------------------------

    def sample(self, schedule: Sequence[TimedCommand], result: PlayResult) -> list[Violation]:
        """Sample one segment (``schedule`` as driven, ``result`` as the monitor parsed it,
        both in the schedule's cycles; the segment follows the previous one after a quiet
        gap). Return the models' violations of its implemented commands, for a scoreboard."""
        self.segments += 1
        self.checker.forget()
        rtl = {v.cycle: v for v in result.violations}
        found: list[Violation] = []
        for cmd in schedule:
            self.commands += 1
            got = rtl.get(cmd.cycle)
            rules = got.rules if got is not None else frozenset()
            code = ProtocolCode(got.protocol) if got is not None else ProtocolCode.NONE
            if code is not ProtocolCode.NONE:
                self._protocol(code)
            if cmd.command in self.isa.REJECTED:
                self._rejected(cmd.command)
                continue  # the RTL's checker does not count it as an issue
            state = bank_state(self.checker.state, cmd)
            if state:
                self._state((cmd.command, state, _MODES[self.checker.state.reg_mode]))
            found += self.checker.step(cmd)
            executed = code is ProtocolCode.NONE
            for rule, prev, when, required in self.checker.gaps:
                if rule not in self.rules:
                    continue
                actual = cmd.cycle - when
                pair = self._pair_ids.get((rule, prev, cmd.command))
                if actual == required and rule not in rules and executed:
                    self._boundary(rule)
                    if not rules:
                        self._legal(rule)
                    if pair is not None:
                        self._ext_boundary(pair)
                elif actual == required - 1 and rule in rules:
                    self._violation(rule)
                    if pair is not None:
                        self._ext_violation(pair)
            if executed and cmd.command in (Command.MAC, Command.MAC16):
                self._mac(cmd.command, _broadcast(cmd))
            if executed and cmd.command is Command.EWMUL16:
                self._ewmul(_cfr(cmd, Cfr.EWMUL_BG))
            lut = cmd.row - AF_ROW_BASE  # the row was checked: the open LUT row, if it is one
            if executed and cmd.command is Command.AF16:
                self._af(lut)
                if lut in self.written:
                    self._af("written")
            if executed and cmd.command in self._writes and cmd.row >= AF_ROW_BASE:
                self.written.add(lut)
        cycles: dict[int, set[Command]] = {}
        for read in result.reads:
            cycles.setdefault(read.cycle, set()).add(read.command)
        for kinds in cycles.values():
            self._reads("+".join(c.name for c in sorted(kinds)))
        return found

    # -- figures -----------------------------------------------------------------------------

    def groups(self) -> list[Group]:
        """The counted groups (:attr:`counted`), bins by label with their hits."""
        out = []
        for group in self.counted:
            item = cc.coverage_db[f"{self.name}.{group}"]
            hits = {_label(k): v for k, v in item.detailed_coverage.items()}
            out.append(Group(group, hits, {label: why for (g, label), why
                                           in self.unreachable.items() if g == group}))
        return out

    def holes(self) -> dict[str, list[str]]:
        """Reachable bins not hit yet, by group."""
        out = {}
        for g in self.groups():
            missing = [b for b, n in g.bins.items() if n == 0 and b not in g.unreachable]
            if missing:
                out[g.name] = missing
        return out

    def figures(self) -> dict[str, int]:
        """The summary figures (the JSON of ``patton rtl coverage``)."""
        groups = {g.name: g for g in self.groups()}
        counted = groups.values()
        return {"rules_total": len(self.rules),
                "rules_boundary_hit": groups["timing.boundary"].hit,
                "rules_legal_boundary_hit": groups["timing.legal"].hit,
                "rules_dominated": len(self.dominated),
                "rules_violation_hit": groups["timing.violation"].hit,
                "bins_total": sum(len(g.bins) for g in counted),
                "bins_hit": sum(g.hit for g in counted),
                "bins_unreachable": sum(len(g.unreachable) for g in counted),
                "commands": self.commands, "segments": self.segments}

    def closed(self) -> bool:
        """True when every reachable bin is hit."""
        return not self.holes()

    def export(self, path: str) -> None:
        """Write cocotb-coverage's XML export of its (process-wide) coverage trie to ``path``."""
        cc.coverage_db.export_to_xml(filename=path)


def _pair_label(pair: tuple[int, Command, Command], required: dict[int, int]) -> str:
    """An ``ext.*`` bin's label: ``"<rule> <P> -> <F> = <gap>"``."""
    rule, p, f = pair
    return f"{rule} {p.name} -> {f.name} = {required[rule]}"


def _cfr(cmd: TimedCommand, cfr: Cfr) -> int:
    """The value of ``cfr`` the command was issued under (an empty ``cfr``: the reset ones)."""
    return cmd.cfr[cfr] if len(cmd.cfr) > cfr else CFR_RESET[cfr]


def _broadcast(cmd: TimedCommand) -> int:
    return _cfr(cmd, Cfr.BROADCAST)


def _sampled(value: object) -> None:
    """The function the cover points wrap: sampling is all the call does."""


def _sampled2(command: Command, broadcast: int) -> None:
    """The function the MAC cross wraps."""
