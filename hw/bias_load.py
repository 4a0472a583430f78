"""The bias load (WRMAC16): a bfloat16 bias widened to the binary32 accumulator."""

from amaranth.hdl import Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import Bf16, Fp32

__all__ = ["BiasLoad"]


class BiasLoad(wiring.Component):
    """Widen a bfloat16 bias to the binary32 value it loads into an accumulator (WRMAC16).

    Combinational; ``sim.datapath.bias`` bit for bit (``docs/numerics.md`` §3): the bias bits
    move to the top half of the word (exact), except that a subnormal bias becomes zero of the
    same sign, because the accumulator is never subnormal.

    Members
    -------
    bias : In(unsigned(16))
        Bias, bfloat16.
    acc : Out(unsigned(32))
        Accumulator value, binary32.
    """

    bias: In(unsigned(16))
    acc: Out(unsigned(32))

    def elaborate(self, platform):
        m = Module()

        bias = Bf16(self.bias)
        acc = Fp32(self.acc)

        m.d.comb += acc.sign.eq(bias.sign)
        with m.If(bias.exponent != 0):
            m.d.comb += [
                acc.exponent.eq(bias.exponent),
                acc.mantissa.eq(bias.mantissa << 16),  # the 7 bits on top of 23
            ]

        return m
