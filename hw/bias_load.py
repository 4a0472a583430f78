"""The bias load (WRMAC16): a bfloat16 bias widened to the binary32 accumulator."""

from amaranth.hdl import Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import EXP_SPECIAL, NAN16, Bf16, Fp32

__all__ = ["BiasLoad"]


class BiasLoad(wiring.Component):
    """Widen a bfloat16 bias to the binary32 value it loads into an accumulator (WRMAC16).

    Combinational; ``sim.datapath.bias`` bit for bit (``docs/numerics.md`` §3): the bias bits
    move to the top half of the word (exact), except that a subnormal bias becomes zero of the
    same sign, because the accumulator is never subnormal. ``value`` is what that accumulator
    reads out as (``sim.datapath.readout``, RDMAC16): the bias again, the zero it became, or the
    canonical NaN for a NaN (no rounding: the low half is zero), so that the channel keeps it
    with the accumulator without a readout of its own.

    Members
    -------
    bias : In(unsigned(16))
        Bias, bfloat16.
    acc : Out(unsigned(32))
        Accumulator value, binary32.
    value : Out(unsigned(16))
        ``readout(acc)``, bfloat16.
    """

    bias: In(unsigned(16))
    acc: Out(unsigned(32))
    value: Out(unsigned(16))

    def elaborate(self, platform):
        m = Module()

        bias = Bf16(self.bias)
        acc = Fp32(self.acc)

        value = Bf16(self.value)
        m.d.comb += [acc.sign.eq(bias.sign), value.sign.eq(bias.sign)]
        with m.If(bias.exponent != 0):
            m.d.comb += [
                acc.exponent.eq(bias.exponent),
                acc.mantissa.eq(bias.mantissa << 16),  # the 7 bits on top of 23
            ]
        with m.If((bias.exponent == EXP_SPECIAL) & (bias.mantissa != 0)):
            m.d.comb += self.value.eq(NAN16)
        with m.Elif(bias.exponent != 0):
            m.d.comb += [value.exponent.eq(bias.exponent), value.mantissa.eq(bias.mantissa)]

        return m
