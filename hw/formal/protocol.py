# amaranth: UnusedElaboratable=no
"""Formal harness: the channel's decoder follows the protocol table, and a refused command
changes nothing.

:class:`ProtocolProperty` drives a :class:`~patton.hw.channel.Channel` (its MAC units with
free outputs, :mod:`patton.hw.formal.free_mac`) with a free command in every cycle: any ISA
command id, bank, row, column, BROADCAST flag, data and mask. The expected protocol code and
the expected next row and mode state are generated from the one protocol definition,
:data:`patton.sim.protocol.RULES`, in the order :meth:`patton.sim.protocol.State.check` applies
it (register mode, operand ranges, row state, the BROADCAST partner), with each failed
condition named by the code the RTL reports (:class:`patton.hw.isa.ProtocolCode`):

==========================================  =========================================
condition of ``RULES[command]``              code
==========================================  =========================================
command outside the ISA's ``IMPLEMENTED``     ``REJECTED``
``mode`` not the register mode                ``MODE``
bank, row to open or column out of range      ``RANGE`` (:func:`~patton.sim.protocol.column_limit`)
``FREE`` on one bank: open on another row     ``BANK_OPEN``
``FREE`` on all banks: one open on another    ``ROW_CONFLICT``
``OPEN`` on one bank: closed / another row    ``BANK_CLOSED`` / ``WRONG_ROW``
``OPEN`` on all banks: not one row / another  ``NOT_ALL_OPEN`` / ``WRONG_ROW``
``partner`` under BROADCAST = 1               ``PARTNER``
``lut``: the open row is not a LUT row        ``LUT_ROW``
==========================================  =========================================

A row is a normal row (``0 .. rows - 1``) or a LUT row ``AF_ROW_BASE + k`` (``k`` below
:data:`~patton.sim.protocol.LUT_ROWS`); the port names the latter ``lut = 1, row = k``, and two
rows are the same when both fields are.

Asserted in every cycle:

* the channel's ``violation.protocol`` is the expected code (so every illegal command raises
  its error, and a legal one none);
* after a refused command: every bank's open/row state and the register mode are unchanged, no
  mat is written and the global buffer is not written (writes happen one cycle after issue;
  the same holds after a cycle without a command);
* after a legal command: the row and mode state are what the rule's action makes them
  (``OPEN`` its target banks on the row, ``CLOSE`` them, ``TOGGLE`` the mode).

The properties relate the state before and after one command and nothing else, so they are
inductive: ``prove`` mode proves them for every reachable state.

The channel is built on a device extension set (its timing table's; default ``aim``), and the
free command is any command of that set (:func:`patton.hw.isa.hw_isa`): under ``aim+wr16``
WR16 is one, checked like every all-bank command and expected to leave the row state as it
found it (its rule has no action).
"""

from __future__ import annotations

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
from patton.hw.channel import Channel
from patton.hw.decoder import all_of, any_of
from patton.hw.formal import free_mac
from patton.hw.isa import HwIsa, ProtocolCode
from patton.hw.params import ChannelParams
from patton.sim.protocol import (
    LUT_ROWS,
    RULES,
    Action,
    Need,
    Operand,
    RegisterMode,
    Targets,
    column_limit,
)
from patton.sim.timing import DEFAULT_PROFILE, Timing, timing_table

__all__ = ["ProtocolProperty"]


class ProtocolProperty(Elaboratable):
    """The channel's protocol checks and row state against :data:`patton.sim.protocol.RULES`.

    Parameters
    ----------
    params : ChannelParams
        Organisation; its ``rows`` must equal its device's (the protocol's row range).
    rules : dict, optional
        The protocol table the expectation is generated from (default
        :data:`patton.sim.protocol.RULES`; a test passes a wrong one to see the proof fail).
    timing : str or TimingTable
        The channel's timing table (default ``aimsim-0f28a07``); only its extension set
        matters here: the commands the channel decodes.

    Members
    -------
    channel : Channel
        The design under test (MAC units with free outputs).
    """

    def __init__(self, params: ChannelParams, rules: dict | None = None,
                 timing: Timing = DEFAULT_PROFILE) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        if params.rows != params.device.rows:
            raise ValueError(f"params.rows ({params.rows!r}) must equal the device's "
                             f"({params.device.rows!r}): the protocol checks the device's rows")
        self._params = params
        self._rules = RULES if rules is None else rules
        self.channel = Channel(params, mac=free_mac, timing=timing_table(timing))

    @property
    def isa(self) -> HwIsa:
        """The ISA of the channel's extension set (the commands the harness draws)."""
        return self.channel.isa

    def elaborate(self, platform):
        m = Module()
        p = self._params
        dev = p.device
        chan = self.channel
        isa = chan.isa
        Opcode = isa.Opcode  # noqa: N806 - the port's enum, named as in hw.isa
        # Elaborated here, not added as a submodule, to reach its banks and global buffer
        # (the file's first line tells Amaranth that the Channel object itself stays unused).
        body = chan.elaborate(platform)
        m.submodules.channel = body
        banks = [body.submodules[f"bank{b}"] for b in range(p.banks)]
        gb = body.submodules["gb"]
        m.d.comb += Assume(~ResetSignal())

        cmd = Signal(isa.command_layout(p))
        m.d.comb += cmd.as_value().eq(AnySeq(len(cmd.as_value())))
        m.d.comb += Assume(cmd.command.as_value() < len(isa.commands))  # a command of the set
        m.d.comb += chan.cmd.eq(cmd)

        opened = [bank.open for bank in banks]
        luts = [bank.lut for bank in banks]
        rows = [bank.row for bank in banks]
        mode = chan.reg_mode
        bank_bits = max(1, (p.banks - 1).bit_length())
        sel = cmd.bank[:bank_bits]
        in_range = cmd.bank < p.banks
        sel_open = Array(opened)[sel]
        # the command names bank b's open row: the same kind of row and the same number
        names = [(luts[b] == cmd.lut) & (rows[b] == cmd.row) for b in range(p.banks)]
        sel_names = Array(names)[sel]
        partner = [b ^ 1 for b in range(p.banks)]
        partner_ok = Array((opened[q] & (rows[q] == rows[b]) & (luts[q] == luts[b]))
                           if q < p.banks else 0 for b, q in enumerate(partner))[sel]

        # --- the expected code, from RULES ----------------------------------------------
        expected = Signal(ProtocolCode)
        m.d.comb += expected.eq(ProtocolCode.NONE)
        with m.If(cmd.valid), m.Switch(cmd.command):
            for command in isa.commands:
                with m.Case(Opcode[command.name]):
                    checks = _checks(self._rules, isa, command, cmd, dev, mode, opened, luts,
                                     rows, names, sel_open, sel_names, in_range, partner_ok)
                    for k, (cond, code) in enumerate(checks):
                        with (m.If if k == 0 else m.Elif)(cond):
                            m.d.comb += expected.eq(code)
        m.d.comb += Assert(chan.violation.protocol == expected, "protocol code")

        # --- the expected next state ---------------------------------------------------
        legal = cmd.valid & (expected == ProtocolCode.NONE)
        next_open = [Signal(name=f"next_open{b}") for b in range(p.banks)]
        next_lut = [Signal(name=f"next_lut{b}") for b in range(p.banks)]
        next_row = [Signal(p.open_row_bits, name=f"next_row{b}") for b in range(p.banks)]
        next_mode = Signal()
        m.d.comb += [o.eq(opened[b]) for b, o in enumerate(next_open)]
        m.d.comb += [x.eq(luts[b]) for b, x in enumerate(next_lut)]
        m.d.comb += [r.eq(rows[b]) for b, r in enumerate(next_row)]
        m.d.comb += next_mode.eq(mode)
        with m.If(legal), m.Switch(cmd.command):
            for command in sorted(isa.IMPLEMENTED):
                rule = self._rules[command]
                with m.Case(Opcode[command.name]):
                    if rule.action is Action.TOGGLE:
                        m.d.comb += next_mode.eq(~mode)
                    elif rule.action in (Action.OPEN, Action.CLOSE):
                        for b in _targets(rule, p):
                            hit = (sel == b) if rule.targets is Targets.BANK else 1
                            with m.If(hit):
                                if rule.action is Action.OPEN:
                                    m.d.comb += [next_open[b].eq(1), next_lut[b].eq(cmd.lut),
                                                 next_row[b].eq(cmd.row)]
                                else:
                                    m.d.comb += next_open[b].eq(0)

        # --- one cycle later ---------------------------------------------------------------
        was_refused, was_quiet, was_legal = Signal(), Signal(), Signal()
        then_open = [Signal(name=f"then_open{b}") for b in range(p.banks)]
        then_lut = [Signal(name=f"then_lut{b}") for b in range(p.banks)]
        then_row = [Signal(p.open_row_bits, name=f"then_row{b}") for b in range(p.banks)]
        then_mode = Signal()
        m.d.sync += [was_refused.eq(cmd.valid & (expected != ProtocolCode.NONE)),
                     was_quiet.eq(~legal), was_legal.eq(legal), then_mode.eq(next_mode)]
        m.d.sync += [t.eq(n) for t, n in zip(then_open + then_lut + then_row,
                                             next_open + next_lut + next_row)]

        same = all_of((opened[b] == then_open[b])
                      & (~then_open[b] | ((rows[b] == then_row[b]) & (luts[b] == then_lut[b])))
                      for b in range(p.banks))
        m.d.comb += [
            Assert(~was_refused | same, "a refused command changes no bank state"),
            Assert(~was_refused | (mode == then_mode), "a refused command keeps the mode"),
            Assert(~was_quiet | ~any_of(bank.wr_en for bank in banks),
                   "a refused command (or none) writes no mat"),
            Assert(~was_quiet | ~gb.wr_en, "a refused command (or none) writes no GB column"),
            Assert(~was_legal | same, "a legal command makes the rule's row state"),
            Assert(~was_legal | (mode == then_mode), "a legal command makes the rule's mode"),
        ]
        return m


def _targets(rule, p: ChannelParams) -> range:
    if rule.targets in (Targets.BANK, Targets.ALL):
        return range(p.banks)
    raise NotImplementedError(f"no RTL command targets {rule.targets}")


def _checks(rules, isa: HwIsa, command, cmd, dev, mode, opened, luts, rows, names, sel_open,
            sel_names, in_range, partner_ok) -> list[tuple[object, ProtocolCode]]:
    """Return ``rules[command]``'s conditions, in checking order, with the code of each."""
    if command not in isa.IMPLEMENTED:
        return [(1, ProtocolCode.REJECTED)]
    rule = rules[command]
    out: list[tuple[object, ProtocolCode]] = []
    if rule.mode is RegisterMode.NORMAL:
        out.append((mode, ProtocolCode.MODE))
    elif rule.mode is RegisterMode.REGISTER:
        out.append((~mode, ProtocolCode.MODE))
    bad = 0
    if rule.bank:
        bad = bad | ~in_range
    if rule.row is Operand.REQUIRED:  # a normal row of the device, or a LUT row
        bad = bad | Mux(cmd.lut, cmd.row >= LUT_ROWS, cmd.row >= dev.rows)
    if rule.columns is not None:
        bad = bad | (cmd.col >= column_limit(dev, command))
    out.append((bad, ProtocolCode.RANGE))
    t, need = rule.targets, rule.need
    if need is Need.FREE and t is Targets.BANK:
        out.append((sel_open & ~sel_names, ProtocolCode.BANK_OPEN))
    elif need is Need.FREE and t is Targets.ALL:
        out.append((any_of(o & ~n for o, n in zip(opened, names)), ProtocolCode.ROW_CONFLICT))
    elif need is Need.OPEN and t is Targets.BANK:
        out.append((~sel_open, ProtocolCode.BANK_CLOSED))
        out.append((~sel_names, ProtocolCode.WRONG_ROW))
        if rule.partner:
            out.append((cmd.broadcast & ~partner_ok, ProtocolCode.PARTNER))
    elif need is Need.OPEN and t is Targets.ALL:
        one_row = all_of(opened) & all_of((r == rows[0]) & (x == luts[0])
                                          for r, x in zip(rows, luts))
        out.append((~one_row, ProtocolCode.NOT_ALL_OPEN))
        out.append((~names[0], ProtocolCode.WRONG_ROW))
        if rule.lut:
            out.append((~luts[0], ProtocolCode.LUT_ROW))
    elif need is not Need.ANY or rule.partner or rule.lut or t is Targets.GROUP:
        raise NotImplementedError(f"{command.name}: the RTL implements no {t}/{need} rule")
    return out
