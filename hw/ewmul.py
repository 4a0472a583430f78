"""The element-wise multiply (EWMUL16) of one bank group: 16 bfloat16 products, each rounded once.

EWMUL16 writes ``bank[4g + 2] = mul(bank[4g], bank[4g + 1])`` lane by lane
(``sim.datapath.mul``, ``docs/numerics.md`` §3: the exact 8 x 8 significand product rounded
once, to nearest even, to bfloat16). :class:`EwmulUnit` is one bank group's 16 lanes; the
channel has one per bank group and feeds it copies of the two banks' words taken on its own
gated clock (``docs/hw.md`` decisions 14 and 18), so its logic runs in EWMUL16 cycles only.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import EXP_SPECIAL, INF16, NAN16, Bf16, round_nearest_even

__all__ = ["EwmulUnit", "LANES"]

#: bfloat16 lanes per column.
LANES = 16
#: Width of an exact lane product (8 x 8 significand bits).
PRODUCT_WIDTH = 16
#: Exponent bias of bfloat16.
_BIAS = 127
#: bfloat16 significand bits, hidden bit included.
_P16 = 8

_Lanes = data.ArrayLayout(Bf16, LANES)


class EwmulUnit(wiring.Component):
    """Multiply 16 bfloat16 lanes of ``a`` and ``b`` (``sim.datapath.mul``, bit for bit).

    Combinational. Per lane: a zero or subnormal operand (exponent 0) is zero; a NaN operand or
    ``0 * inf`` gives ``0x7FC0``, otherwise an infinite operand infinity of the product's sign.
    Else the exact product ``P = sig(a) * sig(b)`` (16 bits, in ``[2**14, 2**16)``) is
    normalised by at most one bit, rounded to 8 bits to nearest, ties to even (the rounder of
    ``docs/numerics.md`` §2 step 7 with ``p = 8``), and packed with the biased exponent
    ``ea + eb - 127 + (P >= 2**15) + carry``: 255 or more gives infinity, 0 or less zero, both
    of the product's sign.

    Members
    -------
    a, b : In(unsigned(256))
        16 bfloat16 lanes each (bank ``4g`` and bank ``4g + 1``); lane ``i`` is bits
        ``[16i+15:16i]``.
    result : Out(unsigned(256))
        The 16 bfloat16 products, same order.
    """

    a: In(unsigned(16 * LANES))
    b: In(unsigned(16 * LANES))
    result: Out(unsigned(16 * LANES))

    def elaborate(self, platform):
        m = Module()
        a, b = _Lanes(self.a), _Lanes(self.b)
        out = _Lanes(self.result)
        for lane in range(LANES):
            x, y = a[lane], b[lane]
            zero = (x.exponent == 0) | (y.exponent == 0)
            x_special, y_special = x.exponent == EXP_SPECIAL, y.exponent == EXP_SPECIAL
            negative = Signal(name=f"lane{lane}_negative")
            nan = Signal(name=f"lane{lane}_nan")
            m.d.comb += [
                negative.eq(x.sign ^ y.sign),
                nan.eq((x_special & (x.mantissa != 0)) | (y_special & (y.mantissa != 0))
                       | (zero & (x_special | y_special))),
            ]
            product = Signal(PRODUCT_WIDTH, name=f"lane{lane}_product")
            m.d.comb += product.eq(Cat(x.mantissa, Const(1, 1)) * Cat(y.mantissa, Const(1, 1)))
            top = product[PRODUCT_WIDTH - 1]
            normalised = Signal(PRODUCT_WIDTH, name=f"lane{lane}_normalised")
            m.d.comb += normalised.eq(Mux(top, product, product << 1))
            significand, carry = round_nearest_even(m, normalised, keep=_P16,
                                                    name=f"lane{lane}_rounded")
            exponent = Signal(signed(11), name=f"lane{lane}_exponent")  # -125 .. 383
            m.d.comb += exponent.eq(x.exponent + y.exponent - _BIAS + top + carry)
            word = out[lane]
            with m.If(nan):
                m.d.comb += word.eq(NAN16)
            with m.Elif(x_special | y_special):
                m.d.comb += word.eq(Cat(Const(INF16, 15), negative))
            with m.Elif(zero | (exponent <= 0)):
                m.d.comb += word.sign.eq(negative)  # zero, subnormal, underflow
            with m.Elif(exponent >= EXP_SPECIAL):
                m.d.comb += [word.sign.eq(negative), word.exponent.eq(EXP_SPECIAL)]
            with m.Else():
                m.d.comb += [word.sign.eq(negative), word.exponent.eq(exponent[:8]),
                             word.mantissa.eq(significand[:_P16 - 1])]
        return m
