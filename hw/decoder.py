"""Command decoder: legality of each command (protocol checks) and the register mode."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.isa import REG_MODE, HwIsa, ProtocolCode, hw_isa
from patton.hw.params import ChannelParams
from patton.sim.isa import Command
from patton.sim.protocol import RULES, Columns

__all__ = ["Decoder"]

#: Commands whose open row must be an activation-function LUT row (AF16).
LUT = frozenset(c for c in hw_isa().IMPLEMENTED if RULES[c].lut)


def _is(cmd, commands, opcode) -> object:
    """Return a 1-bit value: ``cmd.command`` is one of ``commands`` (``opcode``: the port's
    enum)."""
    result = 0
    for c in sorted(commands):
        result = (cmd.command == opcode[c.name]) | result
    return result


class Decoder(wiring.Component):
    """Protocol checker of one channel, and the register-mode flag that TMOD toggles.

    The checks are the rules of :data:`patton.sim.protocol.RULES` (which
    :func:`patton.sim.check.verify` and the functional model apply) for the commands this
    version implements, plus the rejection of all others, in this priority: rejected command,
    wrong register mode, address out of range (a column beyond the command's column range of
    ``RULES``, a row to open beyond the normal rows or, with ``cmd.lut``, the LUT rows), then
    the row-state checks (ACT to a bank open on another row, ACT16 against another open row,
    column command to a closed bank or another row, all-bank command without one row open in
    every bank), and last the partner check of a MAC under CFR BROADCAST = 1
    (``cmd.broadcast``): it takes its vector from bank ``b ^ 1``, which must be open on the
    same row; and AF16's: the row open in every bank must be a LUT row. ACT/ACT16 to a bank
    already open on the command's row is legal and changes nothing. The row and column fields
    are always compared (a row is the pair ``(lut, row)``): a schedule entry without them
    reaches the port as 0.

    Parameters
    ----------
    params : ChannelParams
        Organisation.
    isa : HwIsa, optional
        The ISA of the device extension set (default ``hw_isa("aim")``): which commands are
        implemented, rejected and checked how. An extension's all-bank command (WR16) needs no
        check of its own: it is one of ``isa.ALL_ROWS`` and takes its column range from
        ``RULES``.

    Members
    -------
    cmd : In
        The command on the bus (see :func:`patton.hw.isa.command_layout`).
    open, luts, rows : In
        Open-row state of every bank (open, a LUT row, which row).
    error : Out
        Combinational: why the command is refused (``NONE`` if it is legal or absent).
    execute : Out
        Combinational: a command is present and legal.
    reg_mode : Out
        The register mode (reset: normal mode, 0).
    """

    def __init__(self, params: ChannelParams, isa: HwIsa | None = None) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._isa = hw_isa() if isa is None else isa
        super().__init__({
            "cmd": In(self._isa.command_layout(params)),
            "open": In(params.banks), "luts": In(params.banks),
            "rows": In(data.ArrayLayout(params.open_row_bits, params.banks)),
            "error": Out(ProtocolCode), "execute": Out(1), "reg_mode": Out(1),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the decoder is built for."""
        return self._params

    @property
    def isa(self) -> HwIsa:
        """The ISA the decoder is built for."""
        return self._isa

    def elaborate(self, platform):
        m = Module()
        p = self._params
        isa = self._isa
        Opcode = isa.Opcode  # noqa: N806 - the port's enum, named as in hw.isa
        cmd = self.cmd

        def is_(commands) -> object:
            """``cmd.command`` is one of ``commands``."""
            return _is(cmd, commands, Opcode)

        banks = range(p.banks)
        bank = cmd.bank[:max(1, (p.banks - 1).bit_length())]
        # A row is (lut, row): rows[b] is bank b's normal row or LUT row index.
        row_of = [Cat(self.rows[b], self.luts[b]) for b in banks]
        cmd_row = Signal(p.open_row_bits + 1)  # the command's row; out-of-range rows differ
        m.d.comb += cmd_row.eq(Cat(cmd.row[:p.open_row_bits], cmd.lut))
        high = Signal()  # row bits above the open-row register: no open row matches
        m.d.comb += high.eq(cmd.row[p.open_row_bits:].any())

        # Bank b's open row is the command's row (a signal each: it has four uses).
        names = [Signal(name=f"named{b}") for b in banks]
        for b in banks:
            m.d.comb += names[b].eq((row_of[b] == cmd_row) & ~high)

        def named(b):
            """Bank ``b``'s open row is the command's row."""
            return names[b]

        bank_open = Array(self.open[b] for b in banks)[bank]
        bank_named = Array(named(b) for b in banks)[bank]
        # Partner bank b ^ 1 (an odd bank count leaves the last bank without one: closed).
        partner_open = Array(self.open[b ^ 1] if b ^ 1 < p.banks else 0 for b in banks)[bank]
        partner_named = Array(named(b ^ 1) if b ^ 1 < p.banks else 0 for b in banks)[bank]

        same_row = Signal()  # every bank open, all on the command's row
        conflict = Signal()  # some bank open on a row other than the command's
        m.d.comb += [
            same_row.eq(self.open.all() & all_of(named(b) for b in banks)),
            conflict.eq(any_of(self.open[b] & ~named(b) for b in banks)),
        ]
        all_same = Signal()  # every bank open on one row (whichever)
        m.d.comb += all_same.eq(self.open.all()
                                & all_of(row_of[b] == row_of[0] for b in banks))

        # Column ranges from the protocol table; rows to open: the normal rows, or the LUT rows.
        limits = {Columns.ROW: p.columns, Columns.GB: p.gb_columns,
                  Columns.BOTH: min(p.columns, p.gb_columns)}
        bad_col = 0
        for kind, limit in limits.items():
            takes = {c for c in isa.IMPLEMENTED if RULES[c].columns is kind}
            bad_col = bad_col | (is_(takes) & (cmd.col >= limit))
        bad_row = Mux(cmd.lut, cmd.row >= p.lut_rows, cmd.row >= p.rows)
        bad_range = Signal()
        m.d.comb += bad_range.eq(
            (is_(isa.BANKED) & (cmd.bank >= p.banks))
            | (is_({Command.ACT, Command.ACT16}) & bad_row)
            | bad_col)

        error = Signal(ProtocolCode)
        with m.If(~cmd.valid | (cmd.command == Opcode.TMOD)):
            m.d.comb += error.eq(ProtocolCode.NONE)
        with m.Elif(is_(isa.REJECTED)):
            m.d.comb += error.eq(ProtocolCode.REJECTED)
        with m.Elif(is_(REG_MODE) != self.reg_mode):
            m.d.comb += error.eq(ProtocolCode.MODE)
        with m.Elif(bad_range):
            m.d.comb += error.eq(ProtocolCode.RANGE)
        with m.Elif((cmd.command == Opcode.ACT) & bank_open & ~bank_named):
            m.d.comb += error.eq(ProtocolCode.BANK_OPEN)
        with m.Elif((cmd.command == Opcode.ACT16) & conflict):
            m.d.comb += error.eq(ProtocolCode.ROW_CONFLICT)
        with m.Elif(is_(isa.BANK_ROW) & ~bank_open):
            m.d.comb += error.eq(ProtocolCode.BANK_CLOSED)
        with m.Elif(is_(isa.BANK_ROW) & ~bank_named):
            m.d.comb += error.eq(ProtocolCode.WRONG_ROW)
        with m.Elif(is_(isa.ALL_ROWS) & ~all_same):
            m.d.comb += error.eq(ProtocolCode.NOT_ALL_OPEN)
        with m.Elif(is_(isa.ALL_ROWS) & ~same_row):
            m.d.comb += error.eq(ProtocolCode.WRONG_ROW)
        with m.Elif((cmd.command == Opcode.MAC) & cmd.broadcast
                    & (~partner_open | ~partner_named)):
            m.d.comb += error.eq(ProtocolCode.PARTNER)
        with m.Elif(is_(LUT) & ~self.luts[0]):
            m.d.comb += error.eq(ProtocolCode.LUT_ROW)
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
