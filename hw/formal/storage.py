"""Formal harnesses: a write then a read of the same address returns the written word.

Two storage blocks of the channel, each driven by free inputs on every port in every cycle:

:class:`GlobalBufferProperty`
    :class:`~patton.hw.global_buffer.GlobalBuffer`: lane-masked writes to any column, a read of
    any column.
:class:`RowBufferProperty`
    :class:`~patton.hw.bank.Bank` (open-row register plus its mat, the Amaranth stand-in): ACT,
    PRE, lane-masked writes to any (row, column), a read of any column of the open row, which
    is the row buffer (``docs/hw.md`` decision 3).

A watched address is chosen freely once (``AnyConst``); a shadow word follows every write to it
lane by lane (``mask`` bit ``i`` replaces lane ``i``). Asserted in every cycle: a read of the
watched address returns the expected word in the next cycle, including a write to it at the same
clock edge (write-first). So the last word written is read back, lane by lane, whatever was
written elsewhere in between. A lane never written holds the word's power-up contents: zero in
the global buffer; in a mat, where the watched address may be any normal row or LUT row (behind
the normal rows), what the first read of the word returned, and :class:`MatInitProperty`
proves what that is: zero in the normal rows, the default tables of ``sim.datapath.af_lut``
in the LUT rows. A read is a cycle with ``rd_en`` (free too); in a cycle after one without it,
the read data must be what it was. The row-buffer harness also asserts the open-row register:
after ACT the bank is open on ``act_row`` (a LUT row when ``act_lut``), after PRE alone it is
closed, otherwise it keeps its state.
"""

from __future__ import annotations

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import (
    Assert,
    Assume,
    Cat,
    Elaboratable,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import memory
from patton.hw.bank import Bank
from patton.hw.global_buffer import GlobalBuffer
from patton.hw.mat import Mat
from patton.hw.params import ChannelParams
from patton.sim.datapath import AF_WORDS, af_lut

__all__ = ["GlobalBufferProperty", "MatProperty", "MatInitProperty", "RowBufferProperty"]


def _free(m: Module, dut, names) -> None:
    for name in names:
        port = getattr(dut, name)
        m.d.comb += port.eq(AnySeq(len(port)))


def _reads(reads: str) -> str:
    if reads not in ("any", "watched"):
        raise ValueError(f"reads must be 'any' or 'watched', not {reads!r}")
    return reads


def _watched(m: Module, p: ChannelParams) -> tuple[Signal, Signal]:
    """Return a watched (mat row, column) of a mat, chosen freely once: a normal row or a LUT
    row."""
    row = Signal(p.mat_row_bits, name="watched_row")
    col = Signal(p.col_bits, name="watched_col")
    m.d.comb += [row.eq(AnyConst(p.mat_row_bits)), col.eq(AnyConst(p.col_bits)),
                 Assume(row < p.mat_rows)]
    return row, col


def _reads_return_writes(m: Module, p: ChannelParams, dut, written, read, what: str,
                         initial=0) -> None:
    """Assert that a read of the watched word (``read``: it is addressed this cycle, its data
    comes next cycle) returns it as the writes to it so far (``written``) made it, lane by
    lane; a lane never written holds ``initial``'s, as the memory starts.

    ``initial=None``: a lane never written holds what the first read of the word returned
    (its power-up contents, which :class:`MatInitProperty` proves separately: a symbolic
    address into a table of power-up words makes these proofs two orders of magnitude
    slower)."""
    shadow = Signal(p.width, name="shadow")
    seen = Signal(p.lanes, name="written_lanes")  # lanes written so far
    with m.If(written):
        m.d.sync += [shadow.eq(_merge(shadow, dut.wr_data, dut.wr_mask, p.lanes)),
                     seen.eq(seen | dut.wr_mask)]
    was_read = Signal()
    m.d.sync += was_read.eq(read)
    observed = Signal()  # the word has been read (and ``initial`` captured)
    if initial is None:
        initial = Signal(p.width, name="first_read")
        with m.If(was_read & ~observed):
            m.d.sync += [initial.eq(dut.rd_data), observed.eq(1)]
    else:
        m.d.comb += observed.eq(1)
    expected = _merge(initial, shadow, seen, p.lanes)
    m.d.comb += Assert(~was_read | ~observed | (dut.rd_data == expected), what)
    # Without a read enabled the read data holds (the channel reads only what it uses).
    enabled, started = Signal(), Signal()
    before = Signal(p.width, name="rd_data_before")
    m.d.sync += [enabled.eq(dut.rd_en), started.eq(1), before.eq(dut.rd_data)]
    m.d.comb += Assert(~started | enabled | (dut.rd_data == before),
                       "without rd_en the read data holds")


def _merge(old, data, mask, lanes: int):
    """Return ``old`` with the lanes ``mask`` enables replaced by ``data``'s."""
    bits = Cat(*(mask[i].replicate(16) for i in range(lanes)))
    return (bits & data) | (~bits & old)


class GlobalBufferProperty(Elaboratable):
    """Write-then-read of the global buffer.

    Parameters
    ----------
    params : ChannelParams
        Organisation (``gb_columns``, ``lanes``).

    Members
    -------
    buffer : GlobalBuffer
        The design under test.
    """

    def __init__(self, params: ChannelParams, *, reads: str = "any") -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._reads = _reads(reads)
        self.buffer = GlobalBuffer(params)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.buffer = dut = self.buffer
        m.d.comb += Assume(~ResetSignal())
        _free(m, dut, ("rd_en", "rd_col", "wr_en", "wr_col", "wr_data", "wr_mask"))

        watched = Signal(p.gb_col_bits)
        m.d.comb += watched.eq(AnyConst(p.gb_col_bits))
        if self._reads == "watched":  # read in every cycle: the induction needs each step
            m.d.comb += Assume(dut.rd_en & (dut.rd_col == watched))
        _reads_return_writes(m, p, dut, dut.wr_en & (dut.wr_col == watched),
                             dut.rd_en & (dut.rd_col == watched),
                             "a read returns the last word written to the column")
        return m


class MatProperty(Elaboratable):
    """Write-then-read of one DRAM mat (the Amaranth stand-in).

    Parameters
    ----------
    params : ChannelParams
        Organisation (``rows``, ``columns``, ``lanes``).
    reads : str
        ``"any"``: the read enable and address are free; ``"watched"``: the mat reads the
        watched word in every cycle.

    Members
    -------
    mat : Mat
        The design under test.
    """

    def __init__(self, params: ChannelParams, *, reads: str = "any") -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._reads = _reads(reads)
        self.mat = Mat(params, blackbox=False)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.mat = dut = self.mat
        m.d.comb += Assume(~ResetSignal())
        _free(m, dut, ("rd_en", "rd_row", "rd_col", "wr_en", "wr_row", "wr_col", "wr_data",
                       "wr_mask"))
        m.d.comb += Assume((dut.rd_row < p.mat_rows) & (dut.wr_row < p.mat_rows))
        row, col = _watched(m, p)
        if self._reads == "watched":  # read in every cycle: the induction needs each step
            m.d.comb += Assume(dut.rd_en & (dut.rd_row == row) & (dut.rd_col == col))
        _reads_return_writes(m, p, dut, dut.wr_en & (dut.wr_row == row) & (dut.wr_col == col),
                             dut.rd_en & (dut.rd_row == row) & (dut.rd_col == col),
                             "a read returns the last word written to the address", None)
        return m


class MatInitProperty(Elaboratable):
    """Power-up contents of one DRAM mat (the Amaranth stand-in): with no write, a read of any
    word returns zero in a normal row and, in LUT row ``k``, word ``w`` of the default table
    of AFM ``k`` (``sim.datapath.af_lut``, the specification; word ``w`` at column ``w // lanes``,
    lane ``w % lanes``).

    Parameters
    ----------
    params : ChannelParams
        Organisation (``rows``, ``columns``, ``lanes``; a row must hold the 1024-word table).

    Members
    -------
    mat : Mat
        The design under test.
    """

    def __init__(self, params: ChannelParams) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        if params.columns * params.lanes != AF_WORDS:
            raise ValueError(f"a row of {params.columns} x {params.lanes} words cannot hold the "
                             f"{AF_WORDS}-word tables")
        self._params = params
        self.mat = Mat(params, blackbox=False)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.mat = dut = self.mat
        m.d.comb += Assume(~ResetSignal())
        _free(m, dut, ("rd_row", "rd_col", "wr_en", "wr_row", "wr_col", "wr_data", "wr_mask"))
        m.d.comb += [Assume(~dut.wr_en), Assume(dut.rd_row < p.mat_rows), dut.rd_en.eq(1)]
        # The tables, from the specification: (LUT row, column) -> word.
        words = [sum(int(w) << (16 * i) for i, w in enumerate(chunk))
                 for k in range(p.lut_rows)
                 for chunk in af_lut(k).reshape(p.columns, p.lanes)]
        m.submodules.table = table = memory.Memory(shape=p.width, depth=len(words), init=words)
        entry = table.read_port(domain="comb")
        row, col = Signal.like(dut.rd_row), Signal.like(dut.rd_col)
        m.d.sync += [row.eq(dut.rd_row), col.eq(dut.rd_col)]
        lut = (row - p.rows)[:max(1, (p.lut_rows - 1).bit_length())]
        was_read = Signal()
        m.d.sync += was_read.eq(1)
        m.d.comb += [
            entry.addr.eq(lut * p.columns + col),
            Assert(~was_read | (dut.rd_data == Mux(row >= p.rows, entry.data, 0)),
                   "an unwritten word reads as its power-up contents"),
        ]
        return m


class RowBufferProperty(Elaboratable):
    """Write-then-read of one bank through its open row, and the open-row register.

    Parameters
    ----------
    params : ChannelParams
        Organisation (``rows``, ``columns``, ``lanes``).

    Members
    -------
    bank : Bank
        The design under test (its mat the Amaranth stand-in).
    """

    def __init__(self, params: ChannelParams) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self.bank = Bank(params, blackbox=False)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.bank = dut = self.bank
        m.d.comb += Assume(~ResetSignal())
        _free(m, dut, ("act", "act_lut", "act_row", "pre", "rd_en", "rd_col", "wr_en", "wr_row",
                       "wr_col", "wr_data", "wr_mask"))
        # Addresses the mat has (the channel's decoder refuses the others).
        m.d.comb += Assume(Mux(dut.act_lut, dut.act_row < p.lut_rows, dut.act_row < p.rows)
                           & (dut.wr_row < p.mat_rows))

        row, col = _watched(m, p)
        _reads_return_writes(m, p, dut, dut.wr_en & (dut.wr_row == row) & (dut.wr_col == col),
                             dut.rd_en & (dut.mat_row == row) & (dut.rd_col == col),
                             "a read of the open row returns the last word written there", None)

        # The open-row register.
        was_act, was_pre, act_lut = Signal(), Signal(), Signal()
        act_row = Signal(p.open_row_bits)
        was_open, was_lut, was_row = Signal(), Signal(), Signal(p.open_row_bits)
        m.d.sync += [was_act.eq(dut.act), was_pre.eq(dut.pre), act_lut.eq(dut.act_lut),
                     act_row.eq(dut.act_row), was_open.eq(dut.open), was_lut.eq(dut.lut),
                     was_row.eq(dut.row)]
        m.d.comb += [
            Assert(~was_act | (dut.open & (dut.lut == act_lut) & (dut.row == act_row)),
                   "ACT opens act_row"),
            Assert(was_act | ~was_pre | ~dut.open, "PRE closes the bank"),
            Assert(was_act | was_pre | ((dut.open == was_open) & (dut.lut == was_lut)
                                        & (dut.row == was_row)),
                   "without ACT or PRE the bank keeps its row state"),
            Assert(dut.mat_row == Mux(dut.lut, p.rows + dut.row, dut.row),
                   "LUT row k is mat row rows + k"),
        ]
        return m
