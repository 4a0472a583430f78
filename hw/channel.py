"""One AiM channel: decoder, 16 banks with MAC PUs, global buffer, read path, timing checker.

Pipeline (one command per cycle, issued in cycle ``t``):

* cycle ``t``: the decoder and the timing checker judge the command (combinational, reported on
  ``violation`` in the same cycle); a legal command updates the open-row state and the register
  mode at the end of the cycle and addresses the synchronous read ports (bank mats at their
  open row, global buffer);
* cycle ``t + 1``: its writes happen (mats, global buffer, accumulators) and its read data
  enters the return pipeline. Every write happens one cycle after issue and every read port is
  write-first, so commands observe each other strictly in issue order. A MAC or MAC16 copies
  its operands into the MAC units' input registers in the middle of this cycle, on a gated
  clock, and its result reaches the accumulators at the cycle's end;
* cycle ``t + latency``: read data is on its return port (``TIMING.latency``): ``rdata``
  52 cycles after an RD, ``rdata_mac`` 2 cycles after an RDMAC16. The timing table lets an RD
  at ``t`` and an RDMAC16 at ``t + 50`` return in the same cycle; each has its own port, so
  both arrive.

A MAC or MAC16 takes its vector from the global buffer, or, when the command carries CFR
BROADCAST = 1, from the partner bank ``b ^ 1`` (same open row and column); a MAC16 under
BROADCAST = 1 updates the even banks only (``sim/functional.py``).

A command with a protocol error is not executed; a command that breaks only timing rules is
flagged and executed.
"""

from __future__ import annotations

import importlib

from amaranth.hdl import (
    Array,
    Cat,
    ClockDomain,
    ClockSignal,
    Const,
    Module,
    Mux,
    Signal,
)
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bank import Bank
from patton.hw.decoder import Decoder
from patton.hw.global_buffer import GlobalBuffer
from patton.hw.isa import (
    COL_BITS,
    Opcode,
    ProtocolCode,
    command_layout,
    read_layout,
    violation_layout,
)
from patton.hw.params import ChannelParams
from patton.hw.timing_checker import TimingChecker
from patton.sim.isa import Command
from patton.sim.timing import TIMING, TimingTable

__all__ = ["Channel", "RETURNING"]

#: Commands that return data, each on its own port (``rdata``, ``rdata_mac``).
RETURNING = (Command.RD, Command.RDMAC16)
#: Width of the sticky violation counter.
COUNTER_BITS = 16


class Channel(wiring.Component):
    """One AiM channel.

    Parameters
    ----------
    params : ChannelParams
        Organisation (use few rows with the stand-in mats).
    blackbox : bool
        Instantiate the Verilog mat macro (generated Verilog) instead of the Amaranth stand-in.
    timing : TimingTable
        Timing rules and latencies.
    mac : module-like, optional
        Provider of ``MacUnit``, ``Bf16Readout`` and ``BiasLoad`` (default:
        :mod:`patton.hw.mac`).

    Members
    -------
    cmd : In
        One command per cycle (:func:`patton.hw.isa.command_layout`); ``valid`` low = no command.
    rdata : Out
        RD data (:func:`patton.hw.isa.read_layout`), valid in the cycle it returns.
    rdata_mac : Out
        RDMAC16 data (same layout), valid in the cycle it returns; may coincide with ``rdata``.
    violation : Out
        Combinational verdict on this cycle's command (:func:`patton.hw.isa.violation_layout`).
    violations : Out
        Sticky, saturating count of commands with a violation.
    cycle : Out
        Free-running cycle counter (the cycle the current command is issued in).
    reg_mode : Out
        Register mode (TMOD toggles it).
    """

    def __init__(self, params: ChannelParams, *, blackbox: bool = False,
                 timing: TimingTable = TIMING, mac=None) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        if not isinstance(timing, TimingTable):
            raise TypeError(f"timing must be a TimingTable, not {timing!r}")
        for c in RETURNING:
            if timing.latency[c] < 2:
                raise ValueError(f"{c.name} latency {timing.latency[c]!r} is below 2 cycles "
                                 "(data enters the return pipeline one cycle after issue)")
        if mac is None:
            mac = importlib.import_module(f"{__package__}.mac")
        for name in ("MacUnit", "Bf16Readout", "BiasLoad"):
            if not hasattr(mac, name):
                raise TypeError(f"mac must provide {name}, got {mac!r}")
        self._params = params
        self._blackbox = bool(blackbox)
        self._timing = timing
        self._mac = mac
        super().__init__({
            "cmd": In(command_layout(params)),
            "rdata": Out(read_layout(params)),
            "rdata_mac": Out(read_layout(params)),
            "violation": Out(violation_layout()),
            "violations": Out(COUNTER_BITS),
            "cycle": Out(32),
            "reg_mode": Out(1),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the channel is built for."""
        return self._params

    @property
    def blackbox(self) -> bool:
        """Whether the mats are the Verilog macro."""
        return self._blackbox

    @property
    def timing(self) -> TimingTable:
        """Timing rules and latencies the channel checks and applies."""
        return self._timing

    @property
    def mac(self):
        """Provider of the MAC, readout and bias units."""
        return self._mac

    def latency(self, command: Command) -> int:
        """Return the cycles from issuing ``command`` to its data on its return port."""
        return self._timing.latency[command]

    def elaborate(self, platform):
        m = Module()
        p = self._params
        cmd = self.cmd
        nb = p.banks
        bank_bits = max(1, (nb - 1).bit_length())

        m.submodules.decoder = dec = Decoder(p)
        m.submodules.checker = checker = TimingChecker(p, self._timing)
        m.submodules.gb = gb = GlobalBuffer(p)
        banks = []
        for b in range(nb):
            m.submodules[f"bank{b}"] = bank = Bank(p, blackbox=self._blackbox)
            banks.append(bank)
        macs, readouts, biases = [], [], []
        for b in range(nb):
            m.submodules[f"mac{b}"] = unit = self._mac.MacUnit()
            m.submodules[f"readout{b}"] = readout = self._mac.Bf16Readout()
            m.submodules[f"bias{b}"] = bias = self._mac.BiasLoad()
            macs.append(unit)
            readouts.append(readout)
            biases.append(bias)
        acc = [Signal(32, name=f"acc{b}") for b in range(nb)]

        # --- stage 0: judge the command, update row state, address the read ports ----------
        m.d.comb += [
            dec.cmd.eq(cmd),
            checker.valid.eq(cmd.valid), checker.command.eq(cmd.command),
            checker.bank.eq(cmd.bank),
            self.reg_mode.eq(dec.reg_mode),
        ]
        for b, bank in enumerate(banks):
            m.d.comb += [dec.open[b].eq(bank.open), dec.rows[b].eq(bank.row)]
        exe = dec.execute

        def is_(*commands):
            result = Const(0)
            for c in commands:
                result = result | (cmd.command == Opcode[c.name])
            return result

        sel = cmd.bank[:bank_bits]
        for b, bank in enumerate(banks):
            here = sel == b
            m.d.comb += [
                bank.act.eq(exe & ((is_(Command.ACT) & here) | is_(Command.ACT16))),
                bank.act_row.eq(cmd.row),
                bank.pre.eq(exe & ((is_(Command.PRE) & here)
                                   | is_(Command.PREA, Command.WRA16))),
                bank.rd_col.eq(cmd.col),
            ]
        m.d.comb += gb.rd_col.eq(cmd.col)

        # --- stage 1: writes and read returns of the command issued one cycle earlier ------
        s1_valid = Signal()
        s1_command = Signal(Opcode)
        s1_bank = Signal(bank_bits)
        s1_row = Signal(p.row_bits)
        s1_col = Signal(COL_BITS)
        s1_data = Signal(p.width)
        s1_mask = Signal(p.lanes)
        s1_broadcast = Signal()
        open_row = Array(bank.row for bank in banks)[sel]
        m.d.sync += [
            s1_valid.eq(exe), s1_command.eq(cmd.command), s1_bank.eq(sel),
            s1_row.eq(Mux(is_(Command.MAC16, Command.WRA16), banks[0].row, open_row)),
            s1_col.eq(cmd.col), s1_data.eq(cmd.data), s1_mask.eq(cmd.mask),
            s1_broadcast.eq(cmd.broadcast),
        ]

        def was(*commands):
            result = Const(0)
            for c in commands:
                result = result | (s1_command == Opcode[c.name])
            return s1_valid & result

        all_lanes = Const((1 << p.lanes) - 1, p.lanes)
        word = [s1_data[16 * b:16 * b + 16] for b in range(p.lanes)]
        for b, bank in enumerate(banks):
            here = s1_bank == b
            m.d.comb += [bank.wr_row.eq(s1_row), bank.wr_col.eq(s1_col)]
            with m.If(was(Command.WR) & here):
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(s1_data),
                             bank.wr_mask.eq(s1_mask)]
            with m.Elif(was(Command.WRCP) & here):
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(gb.rd_data),
                             bank.wr_mask.eq(all_lanes)]
            with m.Elif(was(Command.WRA16)):
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(word[b].replicate(p.lanes)),
                             bank.wr_mask.eq(s1_mask)]

        bank_data = Array(bank.rd_data for bank in banks)[s1_bank]
        m.d.comb += gb.wr_col.eq(s1_col)
        with m.If(was(Command.WRGB)):
            m.d.comb += [gb.wr_en.eq(1), gb.wr_data.eq(s1_data), gb.wr_mask.eq(s1_mask)]
        with m.Elif(was(Command.RDCP)):
            m.d.comb += [gb.wr_en.eq(1), gb.wr_data.eq(bank_data), gb.wr_mask.eq(all_lanes)]

        # MAC operands: copied in the middle of a cycle that executes a MAC or MAC16, on the
        # rising edge of the gated clock ``~clk & mac_now`` (mac_now is a register output, so
        # it is stable while clk is low). The MAC units only see these copies, so an
        # event-driven simulator (Verilator) evaluates their logic only after such an edge,
        # not every cycle; the result still reaches the accumulators at the cycle's end.
        # The vector source (CFR BROADCAST) is copied on the same edge, so that the operand
        # multiplexers, too, depend on gated-clock registers only.
        m.domains.mac = ClockDomain("mac", local=True, reset_less=True)
        mac_now = Signal()
        m.d.comb += [
            mac_now.eq(was(Command.MAC16, Command.MAC)),
            ClockSignal("mac").eq(~ClockSignal("sync") & mac_now),
        ]
        vector = Signal(p.width)
        neighbour = Signal()  # BROADCAST = 1: bank b's vector is bank b ^ 1's word
        m.d.mac += [vector.eq(gb.rd_data), neighbour.eq(s1_broadcast)]
        operands = [Signal(p.width, name=f"operand{b}") for b in range(nb)]
        for b in range(nb):
            partial = Signal(32, name=f"partial{b}")
            m.d.mac += [operands[b].eq(banks[b].rd_data), partial.eq(acc[b])]
            partner = operands[b ^ 1] if b ^ 1 < nb else vector
            m.d.comb += [
                macs[b].a.eq(operands[b]), macs[b].b.eq(Mux(neighbour, partner, vector)),
                macs[b].acc.eq(partial),
                readouts[b].acc.eq(acc[b]),
                biases[b].bias.eq(word[b]),
            ]
            # MAC16 under BROADCAST = 1 updates only the even banks (each with its odd
            # partner's word); the odd accumulators stay.
            mac16 = was(Command.MAC16)
            if b % 2 or b + 1 >= nb:
                mac16 = mac16 & ~s1_broadcast
            with m.If(mac16 | (was(Command.MAC) & (s1_bank == b))):
                m.d.sync += acc[b].eq(macs[b].result)
            with m.Elif(was(Command.WRMAC16) & s1_mask[b]):
                m.d.sync += acc[b].eq(biases[b].acc)

        # --- read returns: one pipeline and port per returning command, so that returns in
        # the same cycle (an RD at t, an RDMAC16 at t + 50) both arrive. Data enters at the
        # end of stage 1 (cycle t + 1) at depth latency - 2 and moves down one stage per cycle;
        # stage 0 is the port.
        ports = {Command.RD: (self.rdata, bank_data, "rd"),
                 Command.RDMAC16: (self.rdata_mac, Cat(r.value for r in readouts), "rdmac")}
        assert set(ports) == set(RETURNING)
        for c, (port, payload, name) in ports.items():
            depth = self.latency(c) - 1
            stages = [Signal(port.shape(), name=f"{name}_ret{k}") for k in range(depth)]
            for k in range(depth - 1):
                m.d.sync += stages[k].eq(stages[k + 1])
            m.d.sync += stages[-1].eq(0)
            with m.If(was(c)):
                m.d.sync += [stages[-1].valid.eq(1), stages[-1].command.eq(Opcode[c.name]),
                             stages[-1].data.eq(payload)]
            m.d.comb += port.eq(stages[0])

        # --- verdict, counters --------------------------------------------------------------
        v = self.violation
        m.d.comb += [
            v.timing.eq(checker.violated),
            v.protocol.eq(dec.error),
            v.valid.eq(checker.violated | (dec.error != ProtocolCode.NONE)),
            v.command.eq(cmd.command),
            v.rule.eq(checker.rule),
            v.rules.eq(checker.rules),
        ]
        with m.If(v.valid & (self.violations != (1 << COUNTER_BITS) - 1)):
            m.d.sync += self.violations.eq(self.violations + 1)
        m.d.sync += self.cycle.eq(self.cycle + 1)
        return m
