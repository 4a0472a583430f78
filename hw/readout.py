"""The accumulator readout (RDMAC16): binary32 rounded to bfloat16."""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import EXP_SPECIAL, INF16, NAN16, Bf16, Fp32, round_nearest_even

__all__ = ["Bf16Readout"]


class Bf16Readout(wiring.Component):
    """Round a binary32 accumulator to the bfloat16 the host reads (RDMAC16).

    Combinational; ``sim.datapath.readout`` bit for bit (``docs/numerics.md`` §3): the 24-bit
    significand is rounded to 8 bits, to nearest, ties to even, by the same rounder as the MAC
    (§2 step 7 with ``p = 8``). A rounding carry out of the largest binade gives infinity, a
    NaN gives the canonical ``0x7FC0``, infinities keep their sign, and a zero or subnormal
    accumulator reads as zero of its sign.

    Members
    -------
    acc : In(unsigned(32))
        Accumulator, binary32.
    value : Out(unsigned(16))
        The accumulator rounded to bfloat16.
    """

    acc: In(unsigned(32))
    value: Out(unsigned(16))

    def elaborate(self, platform):
        m = Module()

        acc = Fp32(self.acc)
        value = Bf16(self.value)

        significand, carry = round_nearest_even(
            m, Cat(acc.mantissa, Const(1, 1)), keep=8, name="rounded")
        exponent = Signal(9)  # 255 only by a rounding carry out of exponent 254
        m.d.comb += exponent.eq(acc.exponent + carry)

        with m.If(acc.exponent == EXP_SPECIAL):
            with m.If(acc.mantissa == 0):
                m.d.comb += self.value.eq(INF16 | (acc.sign << 15))
            with m.Else():
                m.d.comb += self.value.eq(NAN16)
        with m.Elif(acc.exponent == 0):
            m.d.comb += value.sign.eq(acc.sign)  # zero, subnormals flushed: signed zero
        with m.Elif(exponent == EXP_SPECIAL):
            m.d.comb += [value.sign.eq(acc.sign), value.exponent.eq(EXP_SPECIAL)]
        with m.Else():
            m.d.comb += [
                value.sign.eq(acc.sign),
                value.exponent.eq(exponent[:8]),
                value.mantissa.eq(significand[:7]),  # the hidden bit is dropped
            ]

        return m
