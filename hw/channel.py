"""One AiM channel: decoder, 16 banks with MAC PUs, global buffer, read path, timing checker.

Pipeline (one command per cycle, issued in cycle ``t``):

* cycle ``t``: the decoder and the timing checker judge the command (combinational, reported on
  ``violation`` in the same cycle); a legal command updates the open-row state and the register
  mode at the end of the cycle and addresses the synchronous read ports (bank mats at their
  open row, global buffer). An AF16 addresses each bank's mat at the LUT column of that bank's
  own accumulator (read out, its segment decoded: the accumulator as the command before it
  leaves it, a MAC's result in stage 1 included);
* cycle ``t + 1``: its writes happen (mats, global buffer, accumulators, AF registers) and its
  read data enters the return pipeline. Every write happens one cycle after issue and every
  read port is write-first, so commands observe each other strictly in issue order. A MAC,
  MAC16 or AF16 copies its operands into the MAC units' input registers in the middle of this
  cycle, on a gated clock, an EWMUL16 into the EWMUL units' on another, and the result reaches
  the accumulators (MAC, MAC16), the AF registers (AF16) or the mats of banks 4g + 2 (EWMUL16)
  at the cycle's end;
* cycle ``t + latency``: read data is on its return port (``TIMING.latency``): ``rdata``
  52 cycles after an RD, ``rdata_mac`` 2 cycles after an RDMAC16 or RDAF16. The timing table
  lets an RD at ``t`` and an RDMAC16 or RDAF16 at ``t + 50`` return in the same cycle; RD has
  its own port, so both arrive. RDMAC16 and RDAF16 share theirs: they have the same latency,
  so two of them never return together.

A MAC or MAC16 takes its vector from the global buffer, or, when the command carries CFR
BROADCAST = 1, from the partner bank ``b ^ 1`` (same open row and column); a MAC16 under
BROADCAST = 1 updates the even banks only (``sim/functional.py``). EWMUL16 multiplies banks
``4g`` and ``4g + 1`` lane by lane in bank group ``g``'s EWMUL unit (``hw/ewmul.py``) for bank
``4g + 2``, in every bank group under CFR EWMUL_BG = 1 and in group 0 only under 0. AF16
evaluates ``v + k (x - base)`` in each bank's MAC unit with two live lanes and rounds it with
the bank's accumulator readout (``hw/af.py``).

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
    unsigned,
)
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.af import SEGMENT_BITS, SEGMENT_OF_ZERO, AfOperands, AfSegment
from patton.hw.bank import Bank
from patton.hw.decoder import Decoder
from patton.hw.ewmul import EwmulUnit
from patton.hw.global_buffer import GlobalBuffer
from patton.hw.isa import COL_BITS, HwIsa, ProtocolCode, hw_isa
from patton.hw.params import ChannelParams
from patton.hw.shared import shared_instance
from patton.hw.timing_checker import TimingChecker
from patton.sim.isa import Command
from patton.sim.timing import TIMING, TimingTable

__all__ = ["Channel", "RETURNING", "REGISTER_READS", "MAC_MODULE"]

#: Verilog module of a MAC unit in generated Verilog (``Channel(blackbox=True)``).
MAC_MODULE = "patton_mac"

#: Commands that return data: RD on ``rdata``, the register reads on ``rdata_mac``.
RETURNING = (Command.RD, Command.RDMAC16, Command.RDAF16)
#: The register reads, which share ``rdata_mac`` (they must have the same latency).
REGISTER_READS = (Command.RDMAC16, Command.RDAF16)
#: Width of the sticky violation counter.
COUNTER_BITS = 16


class Channel(wiring.Component):
    """One AiM channel.

    Parameters
    ----------
    params : ChannelParams
        Organisation (use few rows with the stand-in mats).
    blackbox : bool
        For generated Verilog: instantiate the Verilog mat macro instead of the Amaranth
        stand-in, and the MAC units as instances of one module (:data:`MAC_MODULE`, made by
        :func:`patton.hw.shared.shared_instance`) instead of submodules; ``hw/generate.py``
        writes both.
    timing : TimingTable
        Timing rules and latencies, on a device extension set (``timing.ext``): the channel
        decodes and executes that set's commands (:func:`patton.hw.isa.hw_isa`; ``aim``, the
        default, is the channel it always was). Under ``aim+wr16`` WR16 writes like WRA16 (word
        ``b`` into bank ``b``'s column of the open row, lanes by the mask) and, unlike WRA16,
        leaves every bank open.
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
        RDMAC16 and RDAF16 data (same layout, ``command`` says which), valid in the cycle it
        returns; may coincide with ``rdata``.
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
        shared = {c.name: timing.latency[c] for c in REGISTER_READS}
        if len(set(shared.values())) > 1:
            raise ValueError(f"the register reads share rdata_mac, which needs one latency; "
                             f"got {shared}")
        if mac is None:
            mac = importlib.import_module(f"{__package__}.mac")
        for name in ("MacUnit", "Bf16Readout", "BiasLoad"):
            if not hasattr(mac, name):
                raise TypeError(f"mac must provide {name}, got {mac!r}")
        self._params = params
        self._blackbox = bool(blackbox)
        self._timing = timing
        self._isa = isa = hw_isa(timing.ext, timing.slots)
        self._mac = mac
        super().__init__({
            "cmd": In(isa.command_layout(params)),
            "rdata": Out(isa.read_layout(params)),
            "rdata_mac": Out(isa.read_layout(params)),
            "violation": Out(isa.violation_layout()),
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
    def isa(self) -> HwIsa:
        """The ISA of the timing table's extension set (port enum, implemented commands)."""
        return self._isa

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
        isa = self._isa
        Opcode = isa.Opcode  # noqa: N806 - the port's enum, named as in hw.isa
        cmd = self.cmd
        nb = p.banks
        bank_bits = max(1, (nb - 1).bit_length())
        # The extension's WR16 when the set has it: it writes as WRA16 does (word b of its
        # payload into bank b's column of the open row) and keeps the row open.
        wr16 = (Command.WR16,) if Command.WR16 in isa.IMPLEMENTED else ()

        m.submodules.decoder = dec = Decoder(p, isa)
        m.submodules.checker = checker = TimingChecker(p, self._timing)
        m.submodules.gb = gb = GlobalBuffer(p)
        banks = []
        for b in range(nb):
            m.submodules[f"bank{b}"] = bank = Bank(p, blackbox=self._blackbox)
            banks.append(bank)
        macs, readouts, biases, af_operands = [], [], [], []
        mac_segments, bias_segments = [], []
        for b in range(nb):
            if self._blackbox:  # generated Verilog: one MAC module for the 16 units
                unit, m.submodules[f"mac{b}"] = shared_instance(
                    self._mac.MacUnit, MAC_MODULE, name=f"mac{b}")
            else:
                m.submodules[f"mac{b}"] = unit = self._mac.MacUnit()
            m.submodules[f"readout{b}"] = readout = self._mac.Bf16Readout()
            m.submodules[f"bias{b}"] = bias = self._mac.BiasLoad()
            m.submodules[f"af_operands{b}"] = operands = AfOperands(p)
            m.submodules[f"mac_segment{b}"] = mac_segment = AfSegment()
            m.submodules[f"bias_segment{b}"] = bias_segment = AfSegment()
            macs.append(unit)
            readouts.append(readout)
            biases.append(bias)
            af_operands.append(operands)
            mac_segments.append(mac_segment)
            bias_segments.append(bias_segment)
        # EWMUL16 in bank group g: bank per*g + 2 = bank per*g (x) bank per*g + 1. Organisations
        # with fewer than 3 banks per group (the formal harness's smallest) have no EWMUL unit.
        per = p.banks_per_group
        ewmuls = []
        if per >= 3:
            for g in range(p.bankgroups):
                m.submodules[f"ewmul{g}"] = unit = EwmulUnit()
                ewmuls.append(unit)
        # Per bank: the accumulator, what it reads out as (RDMAC16, and AF16's input), the AF
        # segment of that, and the AF result. value and segment are loaded with the
        # accumulator, from the same gated-clock logic that computes it (decision 17), so that
        # no readout or segment decoder runs in a cycle that changes no accumulator.
        acc = [Signal(32, name=f"acc{b}") for b in range(nb)]
        value = [Signal(16, name=f"value{b}") for b in range(nb)]  # readout(acc)
        segment = [Signal(SEGMENT_BITS, init=SEGMENT_OF_ZERO, name=f"segment{b}")
                   for b in range(nb)]  # AF segment of value
        af = [Signal(16, name=f"af{b}") for b in range(nb)]  # the AF result registers

        # --- stage 1 registers: the command issued one cycle earlier ------------------------
        s1_valid = Signal()
        s1_command = Signal(Opcode)
        s1_bank = Signal(bank_bits)
        s1_row = Signal(p.mat_row_bits)  # the mat row its writes go to
        s1_col = Signal(COL_BITS)
        s1_data = Signal(p.width)
        s1_mask = Signal(p.lanes)
        s1_broadcast = Signal()
        s1_ewmul_bg = Signal()

        # One signal per command in stage 1 (and in stage 0, below): Amaranth lowers an
        # expression once per use, and a simulator evaluates every copy in every cycle.
        in_stage1 = {c: Signal(name=f"was_{c.name}") for c in isa.commands}
        m.d.comb += [flag.eq(s1_valid & (s1_command == Opcode[c.name]))
                     for c, flag in in_stage1.items()]

        def was(*commands):
            result = Const(0)
            for c in commands:
                result = result | in_stage1[c]
            return result

        # Which accumulators the command in stage 1 writes: from its MAC unit (MAC, MAC16; under
        # BROADCAST = 1 MAC16 updates only the even banks, each with its odd partner's word; the
        # odd accumulators stay) or from its bias (WRMAC16, mask bit b).
        from_mac = [Signal(name=f"from_mac{b}") for b in range(nb)]
        from_bias = [Signal(name=f"from_bias{b}") for b in range(nb)]
        for b in range(nb):
            mac16 = was(Command.MAC16)
            if b % 2 or b + 1 >= nb:
                mac16 = mac16 & ~s1_broadcast
            m.d.comb += [from_mac[b].eq(mac16 | (was(Command.MAC) & (s1_bank == b))),
                         from_bias[b].eq(was(Command.WRMAC16) & s1_mask[b])]

        # --- stage 0: judge the command, update row state, address the read ports ----------
        m.d.comb += [
            dec.cmd.eq(cmd),
            checker.valid.eq(cmd.valid), checker.command.eq(cmd.command),
            checker.bank.eq(cmd.bank),
            self.reg_mode.eq(dec.reg_mode),
        ]
        for b, bank in enumerate(banks):
            m.d.comb += [dec.open[b].eq(bank.open), dec.luts[b].eq(bank.lut),
                         dec.rows[b].eq(bank.row)]
        exe = dec.execute

        in_stage0 = {c: Signal(name=f"is_{c.name}") for c in isa.commands}
        m.d.comb += [flag.eq(cmd.command == Opcode[c.name]) for c, flag in in_stage0.items()]

        def is_(*commands):
            result = Const(0)
            for c in commands:
                result = result | in_stage0[c]
            return result

        # AF16: each bank reads the LUT column of its own accumulator's segment, as the command
        # in stage 1 leaves the accumulator: a MAC result in stage 1 is forwarded (a WRMAC16
        # cannot be there: an AF16 needs a TMOD after it).
        # Reads: a bank's mat is read only for a command whose stage 1 uses the word (the read
        # enables keep the mats' and the buffer's read data unchanged otherwise, which nothing
        # observes): RD, RDCP and MAC the addressed bank and its BROADCAST partner b ^ 1,
        # MAC16, EWMUL16 and AF16 every bank; the global buffer for WRCP, MAC and MAC16.
        pair_bits = (p.lanes // 2 - 1).bit_length()  # segments per column: lanes / 2
        af_issue = is_(Command.AF16)
        sel = cmd.bank[:bank_bits]
        every_read = is_(Command.MAC16, Command.EWMUL16, Command.AF16)
        pair_read = is_(Command.RD, Command.RDCP, Command.MAC)
        # WRA16 closes every bank as it issues (its auto-precharge); WR16 leaves them open.
        for b, bank in enumerate(banks):
            here = sel == b
            af_segment = Mux(from_mac[b], mac_segments[b].segment, segment[b])
            m.d.comb += [
                bank.act.eq(exe & ((is_(Command.ACT) & here) | is_(Command.ACT16))),
                bank.act_lut.eq(cmd.lut), bank.act_row.eq(cmd.row),
                bank.pre.eq(exe & ((is_(Command.PRE) & here)
                                   | is_(Command.PREA, Command.WRA16))),
                bank.rd_en.eq(every_read | (pair_read & ((sel >> 1) == (b >> 1)))),
                bank.rd_col.eq(Mux(af_issue, af_segment[pair_bits:], cmd.col)),
            ]
        m.d.comb += [gb.rd_en.eq(is_(Command.WRCP, Command.MAC, Command.MAC16)),
                     gb.rd_col.eq(cmd.col)]

        open_row = Array(bank.mat_row for bank in banks)[sel]
        every_bank = is_(Command.MAC16, Command.WRA16, Command.EWMUL16, Command.AF16, *wr16)
        m.d.sync += [
            s1_valid.eq(exe), s1_command.eq(cmd.command), s1_bank.eq(sel),
            s1_row.eq(Mux(every_bank, banks[0].mat_row, open_row)),
            s1_col.eq(cmd.col), s1_data.eq(cmd.data), s1_mask.eq(cmd.mask),
            s1_broadcast.eq(cmd.broadcast), s1_ewmul_bg.eq(cmd.ewmul_bg),
        ]

        # --- stage 1: writes and read returns of the command issued one cycle earlier ------
        all_lanes = Const((1 << p.lanes) - 1, p.lanes)
        ewmul_into = {g * per + 2: (g, unit) for g, unit in enumerate(ewmuls)}
        for b, bank in enumerate(banks):
            here = s1_bank == b
            m.d.comb += [bank.wr_row.eq(s1_row), bank.wr_col.eq(s1_col)]
            with m.If(was(Command.WR) & here):
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(s1_data),
                             bank.wr_mask.eq(s1_mask)]
            with m.Elif(was(Command.WRCP) & here):
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(gb.rd_data),
                             bank.wr_mask.eq(all_lanes)]
            with m.Elif(was(Command.WRA16, *wr16)):
                word = s1_data[16 * b:16 * b + 16]
                m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(word.replicate(p.lanes)),
                             bank.wr_mask.eq(s1_mask)]
            if b in ewmul_into:  # EWMUL_BG = 0: bank group 0 only
                g, unit = ewmul_into[b]
                with m.Elif(was(Command.EWMUL16) & (s1_ewmul_bg if g else 1)):
                    m.d.comb += [bank.wr_en.eq(1), bank.wr_data.eq(unit.result),
                                 bank.wr_mask.eq(all_lanes)]

        bank_data = Array(bank.rd_data for bank in banks)[s1_bank]
        m.d.comb += gb.wr_col.eq(s1_col)
        with m.If(was(Command.WRGB)):
            m.d.comb += [gb.wr_en.eq(1), gb.wr_data.eq(s1_data), gb.wr_mask.eq(s1_mask)]
        with m.Elif(was(Command.RDCP)):
            m.d.comb += [gb.wr_en.eq(1), gb.wr_data.eq(bank_data), gb.wr_mask.eq(all_lanes)]

        # Operands on gated clocks, copied in the middle of a stage-1 cycle, on the rising edge
        # of ``~clk & now`` (``now`` is decoded from stage-1 registers, so it is stable while
        # clk is low). The units behind the copies only see them, so an event-driven simulator
        # (Verilator) evaluates their logic only after such an edge, not every cycle; the
        # results still reach their registers at the cycle's end. ``mac``: MAC, MAC16, AF16 (the
        # MAC units, the AF operand logic in front of them, the readouts and segment decoders
        # behind them; the vector source and the AF16 mode are copied too, so that the operand
        # multiplexers depend on these copies only). ``bias``: WRMAC16 (the bias loads, their
        # readouts and segments). ``ewmul``: EWMUL16 (its 64 lanes would otherwise run in every
        # MAC16 cycle too).
        gated = {"mac": (Command.MAC16, Command.MAC, Command.AF16),
                 "bias": (Command.WRMAC16,), "ewmul": (Command.EWMUL16,)}
        for domain, commands in gated.items():
            m.domains += ClockDomain(domain, local=True, reset_less=True)
            now = Signal(name=f"{domain}_now")
            m.d.comb += [now.eq(was(*commands)),
                         ClockSignal(domain).eq(~ClockSignal("sync") & now)]

        for g, unit in enumerate(ewmuls):
            factors = [Signal(p.width, name=f"ewmul{g}_{x}") for x in "ab"]
            m.d.ewmul += [factors[0].eq(banks[g * per].rd_data),
                          factors[1].eq(banks[g * per + 1].rd_data)]
            m.d.comb += [unit.a.eq(factors[0]), unit.b.eq(factors[1])]

        words = Signal(p.width)  # WRMAC16's payload
        m.d.bias += words.eq(s1_data)
        vector = Signal(p.width)
        neighbour = Signal()  # bank b's vector is bank b ^ 1's word
        evaluate = Signal()  # AF16: the MAC units evaluate the activation function
        m.d.mac += [vector.eq(gb.rd_data), neighbour.eq(s1_broadcast),
                    evaluate.eq(s1_command == Opcode.AF16)]
        operands = [Signal(p.width, name=f"operand{b}") for b in range(nb)]
        for b in range(nb):
            partial = Signal(32, name=f"partial{b}")
            af_value = Signal(16, name=f"af_value{b}")
            af_segment = Signal(SEGMENT_BITS, name=f"af_seg{b}")
            m.d.mac += [operands[b].eq(banks[b].rd_data), partial.eq(acc[b]),
                        af_value.eq(value[b]), af_segment.eq(segment[b])]
            partner = operands[b ^ 1] if b ^ 1 < nb else vector
            ops = af_operands[b]
            m.d.comb += [
                ops.word.eq(operands[b]), ops.vector.eq(Mux(neighbour, partner, vector)),
                ops.partial.eq(partial), ops.evaluate.eq(evaluate), ops.value.eq(af_value),
                ops.segment.eq(af_segment),
                macs[b].a.eq(ops.a), macs[b].b.eq(ops.b), macs[b].acc.eq(ops.acc),
                # One readout per bank rounds every MAC unit result: the accumulator's new
                # value (MAC, MAC16) or the activation (AF16).
                readouts[b].acc.eq(macs[b].result),
                mac_segments[b].value.eq(readouts[b].value),
                biases[b].bias.eq(words[16 * b:16 * b + 16]),
                bias_segments[b].value.eq(biases[b].value),
            ]
            with m.If(from_mac[b]):
                m.d.sync += [acc[b].eq(macs[b].result), value[b].eq(readouts[b].value),
                             segment[b].eq(mac_segments[b].segment)]
            with m.Elif(from_bias[b]):
                m.d.sync += [acc[b].eq(biases[b].acc), value[b].eq(biases[b].value),
                             segment[b].eq(bias_segments[b].segment)]
            with m.If(was(Command.AF16)):
                m.d.sync += af[b].eq(readouts[b].value)

        # --- read returns: one pipeline and port for RD, one for the register reads, so that
        # returns in the same cycle (an RD at t, an RDMAC16 or RDAF16 at t + 50) both arrive.
        # A pipeline of depth = latency - 1 cycles: a read enters it at the end of stage 1
        # (cycle t + 1) and is on the port depth cycles later. Its valid bits shift down one
        # place per cycle (entering at the top, the port's at bit 0); its command and data stay
        # put, in a ring of depth entries written at ``slot`` and read at ``slot`` depth
        # cycles later (the slot goes round once in depth cycles), so that a cycle moves one
        # small register, not depth wide ones.
        registers = Mux(was(Command.RDAF16), Cat(*af), Cat(*value))
        ports = [(self.rdata, bank_data, (Command.RD,), "rd"),
                 (self.rdata_mac, registers, REGISTER_READS, "rdmac")]
        assert {c for *_, cs, _ in ports for c in cs} == set(RETURNING)
        for port, payload, commands, name in ports:
            depth = self.latency(commands[0]) - 1
            valids = Signal(depth, name=f"{name}_valid")
            entry = Cat(s1_command, payload)  # the port's command and data fields
            m.d.sync += valids.eq(Cat(valids[1:], was(*commands)))
            if depth == 1:  # one stage: one register
                held = Signal(len(entry), name=f"{name}_entry")
                with m.If(was(*commands)):
                    m.d.sync += held.eq(entry)
            else:
                slot = Signal(range(depth), name=f"{name}_slot")
                m.submodules[f"{name}_ring"] = ring = memory.Memory(
                    shape=unsigned(len(entry)), depth=depth, init=[])
                enter, leave = ring.write_port(), ring.read_port(domain="comb")
                m.d.sync += slot.eq(Mux(slot == depth - 1, 0, slot + 1))
                m.d.comb += [enter.addr.eq(slot), enter.en.eq(was(*commands)),
                             enter.data.eq(entry), leave.addr.eq(slot)]
                held = leave.data
            with m.If(valids[0]):
                m.d.comb += [port.valid.eq(1), port.as_value()[1:].eq(held)]

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
