"""The channel's global buffer (GB): ``gb_columns`` columns of 16 bfloat16 lanes."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.params import ChannelParams

__all__ = ["GlobalBuffer"]


class GlobalBuffer(wiring.Component):
    """Global buffer: one synchronous, write-first read port with an enable and one lane-masked
    write port.

    Parameters
    ----------
    params : ChannelParams
        Organisation (``gb_columns``, ``lanes``).

    Members
    -------
    rd_en, rd_col : In
        Read column ``rd_col`` this cycle; data on ``rd_data`` in the next cycle (a write at
        the same edge is visible), held until the next read.
    rd_data : Out
        Read data.
    wr_en, wr_col, wr_data, wr_mask : In
        Write the enabled lanes of ``wr_col`` at the clock edge.
    """

    def __init__(self, params: ChannelParams) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        super().__init__({
            "rd_en": In(1), "rd_col": In(params.gb_col_bits), "rd_data": Out(params.width),
            "wr_en": In(1), "wr_col": In(params.gb_col_bits), "wr_data": In(params.width),
            "wr_mask": In(params.lanes),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the buffer is built for."""
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.array = array = memory.Memory(
            shape=unsigned(p.width), depth=p.gb_columns, init=[])
        wp = array.write_port(granularity=16)
        rp = array.read_port(transparent_for=(wp,))
        m.d.comb += [
            wp.addr.eq(self.wr_col), wp.data.eq(self.wr_data),
            wp.en.eq(Mux(self.wr_en, self.wr_mask, 0)),
            rp.en.eq(self.rd_en), rp.addr.eq(self.rd_col), self.rd_data.eq(rp.data),
        ]
        return m
