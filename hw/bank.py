"""One AiM bank: open-row state and the DRAM mat behind it."""

from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.mat import Mat
from patton.hw.params import ChannelParams

__all__ = ["Bank"]


class Bank(wiring.Component):
    """Open-row state of one bank plus its mat.

    Row-buffer semantics: the row buffer is not a separate copy. ACT and PRE change only the
    open-row state; column reads and writes go to the mat at (open row, column). This equals a
    write-through row buffer, which is all the functional model can observe.

    The open row is a normal row (``lut`` = 0) or an activation-function LUT row (``lut`` = 1,
    ``row`` = its index ``k``); the mat holds the LUT rows behind the normal ones, LUT row
    ``k`` at mat row ``rows + k`` (``mat_row``).

    Parameters
    ----------
    params : ChannelParams
        Organisation.
    blackbox : bool
        Use the Verilog mat macro instead of the Amaranth stand-in.

    Members
    -------
    act, act_lut, act_row : In
        Open ``act_row`` (a LUT row when ``act_lut``) at the clock edge (the decoder has
        checked that this is legal).
    pre : In
        Close the bank at the clock edge (``act`` wins if both are set).
    open, lut, row : Out
        Whether a row is open, whether it is a LUT row, and which.
    mat_row : Out
        The open row's row address in the mat.
    rd_en, rd_col : In
        Read column ``rd_col`` of the open row this cycle; data on ``rd_data`` in the next
        cycle, held until the next read.
    rd_data : Out
        Read data.
    wr_en, wr_row, wr_col, wr_data, wr_mask : In
        Mat write (``wr_row`` a mat row address, given since the bank may have closed
        meanwhile).
    """

    def __init__(self, params: ChannelParams, *, blackbox: bool = False) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._blackbox = bool(blackbox)
        super().__init__({
            "act": In(1), "act_lut": In(1), "act_row": In(params.open_row_bits), "pre": In(1),
            "open": Out(1), "lut": Out(1), "row": Out(params.open_row_bits),
            "mat_row": Out(params.mat_row_bits),
            "rd_en": In(1), "rd_col": In(params.col_bits), "rd_data": Out(params.width),
            "wr_en": In(1), "wr_row": In(params.mat_row_bits), "wr_col": In(params.col_bits),
            "wr_data": In(params.width), "wr_mask": In(params.lanes),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the bank is built for."""
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.mat = mat = Mat(p, blackbox=self._blackbox)
        with m.If(self.act):
            m.d.sync += [self.open.eq(1), self.lut.eq(self.act_lut), self.row.eq(self.act_row)]
        with m.Elif(self.pre):
            m.d.sync += self.open.eq(0)
        m.d.comb += [
            self.mat_row.eq(Mux(self.lut, p.rows + self.row, self.row)),
            mat.rd_en.eq(self.rd_en), mat.rd_row.eq(self.mat_row), mat.rd_col.eq(self.rd_col),
            self.rd_data.eq(mat.rd_data),
            mat.wr_en.eq(self.wr_en), mat.wr_row.eq(self.wr_row), mat.wr_col.eq(self.wr_col),
            mat.wr_data.eq(self.wr_data), mat.wr_mask.eq(self.wr_mask),
        ]
        return m
