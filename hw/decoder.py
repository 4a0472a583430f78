"""Command decoder: legality of each command (protocol checks) and the register mode."""

from __future__ import annotations

from amaranth.hdl import Array, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.isa import (
    ALL_ROWS,
    BANK_ROW,
    BANKED,
    REG_MODE,
    REJECTED,
    Opcode,
    ProtocolCode,
    command_layout,
)
from patton.hw.params import ChannelParams
from patton.sim.isa import Command

__all__ = ["Decoder"]


def _is(cmd, commands) -> object:
    """Return a 1-bit value: ``cmd.command`` is one of ``commands``."""
    result = 0
    for c in sorted(commands):
        result = (cmd.command == Opcode[c.name]) | result
    return result


class Decoder(wiring.Component):
    """Protocol checker of one channel, and the register-mode flag that TMOD toggles.

    The checks are the rules of :data:`patton.sim.protocol.RULES` (which
    :func:`patton.sim.check.verify` and the functional model apply) for the commands this
    version implements, plus the rejection of all others, in this priority: rejected command,
    wrong register mode, address out of range, then the row-state checks (ACT to a bank open on
    another row, ACT16 against another open row, column command to a closed bank or another
    row, all-bank command without one row open in every bank), and last the partner check of a
    MAC under CFR BROADCAST = 1 (``cmd.broadcast``): it takes its vector from bank ``b ^ 1``,
    which must be open on the same row. ACT/ACT16 to a bank already open on the command's row
    is legal and changes nothing. The row and column fields are always compared: a schedule
    entry without them reaches the port as 0.

    Parameters
    ----------
    params : ChannelParams
        Organisation.

    Members
    -------
    cmd : In
        The command on the bus (see :func:`patton.hw.isa.command_layout`).
    open, rows : In
        Open-row state of every bank.
    error : Out
        Combinational: why the command is refused (``NONE`` if it is legal or absent).
    execute : Out
        Combinational: a command is present and legal.
    reg_mode : Out
        The register mode (reset: normal mode, 0).
    """

    def __init__(self, params: ChannelParams) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        super().__init__({
            "cmd": In(command_layout(params)),
            "open": In(params.banks),
            "rows": In(data.ArrayLayout(params.row_bits, params.banks)),
            "error": Out(ProtocolCode), "execute": Out(1), "reg_mode": Out(1),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the decoder is built for."""
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        cmd = self.cmd
        banks = range(p.banks)
        bank = cmd.bank[:max(1, (p.banks - 1).bit_length())]
        bank_open = Array(self.open[b] for b in banks)[bank]
        bank_row = Array(self.rows[b] for b in banks)[bank]
        # Partner bank b ^ 1 (an odd bank count leaves the last bank without one: closed).
        partner_open = Array(self.open[b ^ 1] if b ^ 1 < p.banks else 0 for b in banks)[bank]
        partner_row = Array(self.rows[b ^ 1] if b ^ 1 < p.banks else 0 for b in banks)[bank]

        same_row = Signal()  # every bank open, all on cmd.row
        conflict = Signal()  # some bank open on a row other than cmd.row
        m.d.comb += [
            same_row.eq(self.open.all()
                        & all_of(self.rows[b] == cmd.row for b in banks)),
            conflict.eq(any_of(self.open[b] & (self.rows[b] != cmd.row) for b in banks)),
        ]
        all_same = Signal()  # every bank open on one row (whichever)
        m.d.comb += all_same.eq(self.open.all()
                                & all_of(self.rows[b] == self.rows[0] for b in banks))

        gb_cols = min(p.columns, p.gb_columns)
        bad_range = Signal()
        m.d.comb += bad_range.eq(
            (_is(cmd, BANKED) & (cmd.bank >= p.banks))
            | (_is(cmd, {Command.ACT, Command.ACT16}) & (cmd.row >= p.rows))
            | (_is(cmd, {Command.RD, Command.WR, Command.WRA16}) & (cmd.col >= p.columns))
            | (_is(cmd, {Command.MAC, Command.MAC16, Command.RDCP, Command.WRCP})
               & (cmd.col >= gb_cols))
            | (_is(cmd, {Command.WRGB}) & (cmd.col >= p.gb_columns)))

        error = Signal(ProtocolCode)
        with m.If(~cmd.valid | (cmd.command == Opcode.TMOD)):
            m.d.comb += error.eq(ProtocolCode.NONE)
        with m.Elif(_is(cmd, REJECTED)):
            m.d.comb += error.eq(ProtocolCode.REJECTED)
        with m.Elif(_is(cmd, REG_MODE) != self.reg_mode):
            m.d.comb += error.eq(ProtocolCode.MODE)
        with m.Elif(bad_range):
            m.d.comb += error.eq(ProtocolCode.RANGE)
        with m.Elif((cmd.command == Opcode.ACT) & bank_open & (bank_row != cmd.row)):
            m.d.comb += error.eq(ProtocolCode.BANK_OPEN)
        with m.Elif((cmd.command == Opcode.ACT16) & conflict):
            m.d.comb += error.eq(ProtocolCode.ROW_CONFLICT)
        with m.Elif(_is(cmd, BANK_ROW) & ~bank_open):
            m.d.comb += error.eq(ProtocolCode.BANK_CLOSED)
        with m.Elif(_is(cmd, BANK_ROW) & (bank_row != cmd.row)):
            m.d.comb += error.eq(ProtocolCode.WRONG_ROW)
        with m.Elif(_is(cmd, ALL_ROWS) & ~all_same):
            m.d.comb += error.eq(ProtocolCode.NOT_ALL_OPEN)
        with m.Elif(_is(cmd, ALL_ROWS) & ~same_row):
            m.d.comb += error.eq(ProtocolCode.WRONG_ROW)
        with m.Elif((cmd.command == Opcode.MAC) & cmd.broadcast
                    & (~partner_open | (partner_row != cmd.row))):
            m.d.comb += error.eq(ProtocolCode.PARTNER)
        m.d.comb += [self.error.eq(error),
                     self.execute.eq(cmd.valid & (error == ProtocolCode.NONE))]
        with m.If(cmd.valid & (cmd.command == Opcode.TMOD)):
            m.d.sync += self.reg_mode.eq(~self.reg_mode)
        return m


def all_of(values) -> object:
    """The AND of Amaranth values (1 for none), for decoders and their proofs."""
    result = 1
    for v in values:
        result = result & v
    return result


def any_of(values) -> object:
    """The OR of Amaranth values (0 for none)."""
    result = 0
    for v in values:
        result = result | v
    return result
