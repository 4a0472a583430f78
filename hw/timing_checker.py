"""Timing checker: flags every command issued before the timing table allows.

The rules are generated from a timing profile's table (``timing.before``, the default profile
``aimsim-0f28a07`` unless one is named; :mod:`patton.sim.timing`), never copied by hand, so a
checker built for ``aimsim-2eb1ee0`` flags exactly what ``verify(..., timing="aimsim-2eb1ee0")``
lists. Rule ids are slots, below the table's ``slots`` (``hw.isa.RULES`` in every profile; a
device extension appends slots: ``aim+wr16``'s rule 104), and bit ``i`` of ``rules`` is slot
``i`` (a slot the profile leaves empty is never set). The commands checked are those the RTL
implements on the table's extension set (:func:`patton.hw.isa.hw_isa`). They are applied as
the controller and :func:`patton.sim.check.verify` apply them: channel rules to every command;
bank-group and bank rules to single-bank commands, at the command's bank group and bank; only
the last issue of each preceding command counts.

Time is the channel clock. Instead of storing the cycle of the last issue of each preceding
command and subtracting it from a free-running counter, each (node, preceding command) pair
keeps the number of cycles since that issue, saturating at the largest gap any rule asks for.
That is the same difference without a wrap-around, and it starts saturated (never issued).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.isa import BANK_BITS, HwIsa, hw_isa
from patton.hw.params import ChannelParams
from patton.sim.isa import Command, Scope
from patton.sim.timing import DEFAULT_PROFILE, LEVELS, Timing, TimingTable, timing_table

__all__ = ["TimingChecker", "checked_rules"]


def checked_rules(timing: Timing = DEFAULT_PROFILE) -> dict[Scope, dict[Command, tuple]]:
    """Return the checks the RTL makes: ``[level][following] -> ((rule, preceding, gap), ...)``.

    Only implemented commands (of the table's extension set) are checked, only implemented
    commands start a wait, and gaps of at most one cycle are left out (one command per cycle
    meets them by construction). Bank-group and bank rules are kept only for single-bank
    commands.
    """
    timing = timing_table(timing)
    isa = _isa(timing)
    out: dict[Scope, dict[Command, tuple]] = {}
    for level in LEVELS:
        table: dict[Command, tuple] = {}
        for following in sorted(isa.IMPLEMENTED):
            if level != Scope.CHANNEL and following not in isa.BANKED:
                continue
            checks = tuple((rule, prev, gap) for rule, prev, gap in timing.before[level][following]
                           if prev in isa.IMPLEMENTED and gap > 1
                           and (level == Scope.CHANNEL or prev in isa.BANKED))
            if checks:
                table[following] = checks
        out[level] = table
    return out


def _isa(timing: TimingTable) -> HwIsa:
    """The RTL's ISA on ``timing``'s extension set, its rule mask as wide as the table's."""
    return hw_isa(timing.ext, timing.slots)


class TimingChecker(wiring.Component):
    """Timing checker of one channel.

    Parameters
    ----------
    params : ChannelParams
        Organisation (banks, bank groups).
    timing : str or TimingTable
        The timing profile (name or table; default ``aimsim-0f28a07``).

    Members
    -------
    valid, command, bank : In
        The command on the bus this cycle (``bank`` is ignored for channel-scope commands).
    violated : Out
        Combinational: the command breaks at least one rule.
    rule : Out
        Combinational: the lowest id among the broken rules.
    rules : Out
        Combinational: bit ``i`` set when rule ``i`` is broken.

    The registers that hold the time are :attr:`ages` (made when the checker is built, so
    that a formal harness can state an invariant over them; ``hw/formal/timing.py``).
    """

    def __init__(self, params: ChannelParams, timing: Timing = DEFAULT_PROFILE) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        if not isinstance(timing, (str, TimingTable)):
            raise TypeError(f"timing must be a TimingTable, not {timing!r}")
        timing = timing_table(timing)
        self._isa = isa = _isa(timing)
        wide = [r.id for r in timing.rules if r.id >= isa.RULES]
        if wide:
            raise ValueError(f"timing {timing.name!r}: rule ids {wide} do not fit the "
                             f"{isa.RULES}-bit rule mask (hw.isa.RULES)")
        self._params = params
        self._timing = timing
        self._checks = checked_rules(timing)
        gaps = [gap for table in self._checks.values() for checks in table.values()
                for _, _, gap in checks]
        self._saturate = saturate = max(gaps, default=1)
        nodes = {Scope.CHANNEL: 1, Scope.BANKGROUP: params.bankgroups, Scope.BANK: params.banks}
        self._ages = {
            (level, n, prev): Signal(range(saturate + 1), init=saturate,
                                     name=f"age_{level.name.lower()}{n}_{prev.name}")
            for level, table in self._checks.items()
            for prev in sorted({prev for checks in table.values() for _, prev, _ in checks})
            for n in range(nodes[level])}
        super().__init__({
            "valid": In(1), "command": In(isa.Opcode), "bank": In(BANK_BITS),
            "violated": Out(1), "rule": Out(isa.RULE_BITS), "rules": Out(isa.RULES),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the checker is built for."""
        return self._params

    @property
    def timing(self) -> TimingTable:
        """Table the checks come from."""
        return self._timing

    @property
    def isa(self) -> HwIsa:
        """The ISA of the table's extension set (its port enum and rule-mask width)."""
        return self._isa

    @property
    def checks(self) -> dict[Scope, dict[Command, tuple]]:
        """The checks made, as :func:`checked_rules` returns them."""
        return self._checks

    @property
    def saturate(self) -> int:
        """The value every age register starts at and stops at: the largest gap checked."""
        return self._saturate

    @property
    def ages(self) -> dict[tuple[Scope, int, Command], Signal]:
        """The age registers by (level, node, preceding command): cycles since the last issue
        of that command at that node, saturating at :attr:`saturate` (which also means never
        issued). Node ``n`` is the channel (0), bank group ``n`` or bank ``n``."""
        return dict(self._ages)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        isa = self._isa
        saturate = self._saturate
        nodes = {Scope.CHANNEL: 1, Scope.BANKGROUP: p.bankgroups, Scope.BANK: p.banks}
        # Every quantity used more than once is a signal: Amaranth lowers an expression once
        # per use, and a simulator evaluates each copy every cycle.
        in_range = Signal()
        group = Signal(range(p.bankgroups), name="bank_group")
        m.d.comb += [in_range.eq(self.bank < p.banks), group.eq(self.bank // p.banks_per_group)]
        index = {Scope.CHANNEL: 0, Scope.BANKGROUP: group, Scope.BANK: self.bank}
        issued = {c: Signal(name=f"issued_{c.name}") for c in isa.IMPLEMENTED}
        for c, sig in issued.items():
            m.d.comb += sig.eq(self.valid & (self.command == isa.Opcode[c.name]))
        # A single-bank command (in range) issued: what bank-group and bank rules look at.
        banked = {c: Signal(name=f"banked_{c.name}") for c in isa.IMPLEMENTED}
        for c, sig in banked.items():
            m.d.comb += sig.eq(issued[c] & in_range)
        at = {level: [Signal(name=f"at_{level.name.lower()}{n}") for n in range(nodes[level])]
              for level in (Scope.BANKGROUP, Scope.BANK)}
        for level, flags in at.items():
            for n, flag in enumerate(flags):
                m.d.comb += flag.eq(index[level] == n)

        # Cycles since the last issue of each preceding command, per node; ``ages`` holds the
        # one of the command's own node (the channel, its bank group, its bank).
        ages: dict[tuple[Scope, Command], Signal] = {}
        for level, table in self._checks.items():
            for prev in sorted({prev for checks in table.values() for _, prev, _ in checks}):
                regs = [self._ages[level, n, prev] for n in range(nodes[level])]
                for n, reg in enumerate(regs):
                    hit = issued[prev] if level == Scope.CHANNEL else banked[prev] & at[level][n]
                    with m.If(hit):
                        m.d.sync += reg.eq(1)
                    with m.Elif(reg < saturate):
                        m.d.sync += reg.eq(reg + 1)
                if level == Scope.CHANNEL:
                    ages[level, prev] = regs[0]
                else:
                    here = Signal(range(saturate + 1),
                                  name=f"age_{level.name.lower()}_{prev.name}")
                    m.d.comb += here.eq(Array(regs)[index[level]])
                    ages[level, prev] = here

        soon: dict[tuple[Scope, Command, int], Signal] = {}

        def early(level: Scope, prev: Command, gap: int) -> Signal:
            """Fewer than ``gap`` cycles since ``prev`` at the command's node (one signal for
            every rule that asks)."""
            if (level, prev, gap) not in soon:
                flag = Signal(name=f"soon_{level.name.lower()}_{prev.name}_{gap}")
                m.d.comb += flag.eq(ages[level, prev] < gap)
                soon[level, prev, gap] = flag
            return soon[level, prev, gap]

        broken = [Signal(name=f"rule{i}") for i in range(isa.RULES)]
        terms: dict[int, list] = {}
        for level, table in self._checks.items():
            for following, checks in table.items():
                for rule, prev, gap in checks:
                    after = issued[following] if level == Scope.CHANNEL else banked[following]
                    terms.setdefault(rule, []).append(after & early(level, prev, gap))
        for rule, conds in terms.items():
            any_cond = conds[0]
            for cond in conds[1:]:
                any_cond = any_cond | cond
            m.d.comb += broken[rule].eq(any_cond)
        for i, sig in enumerate(broken):
            m.d.comb += self.rules[i].eq(sig)
        m.d.comb += self.violated.eq(self.rules.any())
        for i in reversed(range(isa.RULES)):
            if i in terms:
                with m.If(broken[i]):
                    m.d.comb += self.rule.eq(i)
        return m
