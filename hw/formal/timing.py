"""Formal harness: the timing checker flags a command iff the timing table forbids it.

:class:`TimingProperty` drives a :class:`~patton.hw.timing_checker.TimingChecker` with free
inputs (any ``valid``, any 5-bit command id, any bank number, in every cycle) and asserts, in
every cycle, that its ``rules`` mask (104 bits; one per slot of the table, 105 under
``aim+wr16``) equals a reference generated from the *specification* table, that ``violated``
is the OR of the reference and ``rule`` its lowest set bit.

The reference is :func:`patton.sim.check.verify`'s algorithm, generated from the table's rules
(``TimingTable.before``), not from the checker's own selection
(:func:`~patton.hw.timing_checker.checked_rules`). ``verify`` remembers, per node (the channel,
each bank group, each bank) and command ``P``, the cycle ``last`` of ``P``'s last issue there,
and rule ``r`` is broken by command ``F`` at cycle ``t`` iff ``t - last < r.cycles`` for one of
``r``'s preceding commands at ``F``'s node of ``r``'s level. The reference holds that memory
as ``min(cap, t - last)`` (``cap`` when never issued), where ``cap`` is the largest gap of any
rule, so ``t - last < gap`` iff the held value is below ``gap``. Channel rules apply to every
command; bank-group and bank rules only to commands whose scope
(:data:`patton.sim.isa.COMMAND_SCOPE`) is not the channel and whose bank exists, at that
bank's group and bank, which is also where such a command is remembered. Both commands of a
pair must be ones the RTL executes on the table's device extension set (``IMPLEMENTED`` of
:func:`patton.hw.isa.hw_isa`: the others are refused and start no wait).

The harness also asserts that each of the checker's age registers
(:attr:`~patton.hw.timing_checker.TimingChecker.ages`) holds the reference's value for its
node and command. With that invariant the property is inductive: SymbiYosys' ``prove`` mode
(a base case from reset plus k-induction) then proves it for every cycle of every command
sequence, not only up to a bound.

``checker_timing`` builds the checker from another table than the specification; with
:func:`off_by_one` that is a deliberately broken checker, whose proof must fail.
"""

from __future__ import annotations

import dataclasses

from amaranth.asserts import AnySeq
from amaranth.hdl import (
    Array,
    Assert,
    Assume,
    Elaboratable,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from patton.hw.decoder import any_of
from patton.hw.isa import BANK_BITS, hw_isa
from patton.hw.params import ChannelParams
from patton.hw.timing_checker import TimingChecker
from patton.sim.isa import COMMAND_SCOPE, Command, Scope
from patton.sim.timing import DEFAULT_PROFILE, LEVELS, Timing, TimingTable, timing_table

__all__ = ["TimingProperty", "off_by_one", "pairs"]


def pairs(timing: Timing = DEFAULT_PROFILE) -> dict[Scope, list[tuple[int, Command, Command,
                                                                      int]]]:
    """Return the specification's pairs, ``[level] -> [(rule, P, F, gap), ...]``.

    Every ``(rule, preceding P, following F, gap)`` of the table whose commands the RTL
    executes (on the table's extension set), whose gap can be broken with one command per cycle
    (over one cycle) and, below the channel level, whose commands have a bank (their scope is
    not the channel).
    """
    table = timing_table(timing)
    implemented = hw_isa(table.ext, table.slots).IMPLEMENTED
    out: dict[Scope, list] = {}
    for level in LEVELS:
        rows = []
        for value, checks in enumerate(table.before[level]):
            following = Command(value)
            for rule, prev, gap in checks:
                if following in implemented and prev in implemented and gap > 1 and (
                        level == Scope.CHANNEL or (_banked(following) and _banked(prev))):
                    rows.append((rule, prev, following, gap))
        out[level] = rows
    return out


def off_by_one(timing: Timing, rule: int, delta: int = -1) -> TimingTable:
    """Return a copy of ``timing`` whose rule ``rule`` has its gap changed by ``delta``.

    The table a deliberately broken checker is built from (the specification stays the
    original).

    Raises
    ------
    ValueError
        If the table has no rule ``rule``.
    """
    table = timing_table(timing)
    if all(r.id != rule for r in table.rules):
        raise ValueError(f"timing {table.name!r} has no rule {rule!r}")
    rules = [dataclasses.replace(r, cycles=r.cycles + delta) if r.id == rule else r
             for r in table.rules]
    return TimingTable(rules, table.params, name=f"{table.name}-rule{rule}{delta:+d}",
                       ext=table.ext)


def _banked(command: Command) -> bool:
    return COMMAND_SCOPE[command] != Scope.CHANNEL


class TimingProperty(Elaboratable):
    """The checker against the table, on free inputs.

    Parameters
    ----------
    params : ChannelParams
        Organisation of the checker (banks, bank groups).
    timing : str or TimingTable
        The specification (default ``aimsim-0f28a07``), on its device extension set (the
        commands drawn and the rule-mask width are that set's).
    checker_timing : str or TimingTable, optional
        The table the checker is built from (default: the specification).

    Members
    -------
    checker : TimingChecker
        The design under test.
    mismatch : Signal
        Bit ``i`` set in a cycle where the checker's rule ``i`` differs from the
        specification's (named in the counterexample trace).
    """

    def __init__(self, params: ChannelParams, timing: Timing = DEFAULT_PROFILE,
                 checker_timing: Timing | None = None) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._spec = timing_table(timing)
        self._isa = hw_isa(self._spec.ext, self._spec.slots)
        built = timing_table(self._spec if checker_timing is None else checker_timing)
        if hw_isa(built.ext, built.slots) is not self._isa:
            raise ValueError(f"the checker's table ({built!r}) is for another device or rule "
                             f"mask than the specification ({self._spec!r})")
        self.checker = TimingChecker(params, built)
        self.mismatch = Signal(self._isa.RULES, name="mismatch")

    @property
    def spec(self) -> TimingTable:
        """The table the property is generated from."""
        return self._spec

    def elaborate(self, platform):
        m = Module()
        p = self._params
        isa = self._isa
        Opcode = isa.Opcode  # noqa: N806 - the port's enum, named as in hw.isa
        m.submodules.checker = dut = self.checker
        m.d.comb += Assume(~ResetSignal())

        valid, command, bank = Signal(), Signal(Opcode), Signal(BANK_BITS)
        m.d.comb += [valid.eq(AnySeq(1)), command.as_value().eq(AnySeq(5)),
                     bank.eq(AnySeq(BANK_BITS))]
        m.d.comb += [dut.valid.eq(valid), dut.command.eq(command), dut.bank.eq(bank)]

        issued = {c: Signal(name=f"spec_{c.name}") for c in sorted(isa.IMPLEMENTED)}
        for c, sig in issued.items():
            m.d.comb += sig.eq(valid & (command == Opcode[c.name]))
        banked = Signal()  # remembered and checked at its bank group and bank
        m.d.comb += banked.eq(any_of(issued[c] for c in issued if _banked(c)) & (bank < p.banks))

        spec = pairs(self._spec)
        cap = max((gap for rows in spec.values() for *_, gap in rows), default=1)
        nodes = {Scope.CHANNEL: 1, Scope.BANKGROUP: p.bankgroups, Scope.BANK: p.banks}
        here = {Scope.CHANNEL: 0, Scope.BANKGROUP: bank // p.banks_per_group, Scope.BANK: bank}

        # verify's memory: min(cap, cycles since the last issue) per (level, node, command).
        since: dict[tuple[Scope, int, Command], Signal] = {}
        for level in LEVELS:
            for c, now in issued.items():
                if level != Scope.CHANNEL and not _banked(c):
                    continue  # never remembered below the channel
                for n in range(nodes[level]):
                    age = Signal(range(cap + 1), init=cap,
                                 name=f"since_{level.name.lower()}{n}_{c.name}")
                    hit = now
                    if level != Scope.CHANNEL:
                        hit = hit & banked & (here[level] == n)
                    m.d.sync += age.eq(Mux(hit, 1, Mux(age == cap, cap, age + 1)))
                    since[level, n, c] = age

        expected = Signal(isa.RULES)
        terms: dict[int, list] = {}
        for level, rows in spec.items():
            for rule, prev, following, gap in rows:
                age = Array(since[level, n, prev] for n in range(nodes[level]))[here[level]]
                cond = issued[following] & (age < gap)
                if level != Scope.CHANNEL:
                    cond = cond & banked
                terms.setdefault(rule, []).append(cond)
        for rule, conds in terms.items():
            m.d.comb += expected[rule].eq(any_of(conds))
        lowest = Signal(range(isa.RULES))
        for i in sorted(terms, reverse=True):
            with m.If(expected[i]):
                m.d.comb += lowest.eq(i)

        m.d.comb += self.mismatch.eq(dut.rules ^ expected)
        for i in range(isa.RULES):
            m.d.comb += Assert(~self.mismatch[i], f"rule {i}")
        m.d.comb += [
            Assert(dut.violated == expected.any(), "violated"),
            Assert(~expected.any() | (dut.rule == lowest), "lowest rule"),
        ]
        # The invariant: each age register of the checker holds the reference's memory.
        for (level, n, prev), reg in dut.ages.items():
            ref = since.get((level, n, prev))
            if ref is None:
                m.d.comb += Assert(0, f"the checker remembers {prev.name} at {level.name} "
                                      "although no rule of the table needs it")
                continue
            m.d.comb += Assert(Mux(reg >= cap, cap, reg) == ref,
                               f"age {level.name.lower()}{n} {prev.name}")
        return m
