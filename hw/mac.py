"""The per-bank MAC processing unit: 16 bfloat16 products folded into a binary32 accumulator.

This is the RTL form of ``mac`` in ``sim/datapath.py`` and must match it bit for bit; the
algorithm is ``docs/numerics.md`` §2 and the step numbers in the comments below refer to it.
The other two accumulator operations, :class:`Bf16Readout` (RDMAC16) and :class:`BiasLoad`
(WRMAC16), live in their own files and are re-exported here so that one import serves the
channel.
"""

from itertools import count

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import (
    EXP_SPECIAL,
    INF32,
    NAN32,
    Bf16,
    Fp32,
    normalise,
    round_nearest_even,
)
from patton.hw.bias_load import BiasLoad
from patton.hw.readout import Bf16Readout

__all__ = ["MacUnit", "Bf16Readout", "BiasLoad", "LANES", "WINDOW", "SUM_WIDTH"]


#: bfloat16 lanes per MAC command (one 32-byte column of a bank).
LANES = 16
#: Width of an exact lane product (§2 step 2: 8 x 8 significand bits).
PRODUCT_WIDTH = 16
#: Significand width of binary32, hidden bit included.
ACC_SIGNIFICAND_WIDTH = 24
#: Width of the alignment window (§2 step 5: 24 significand bits of binary32 + 8 guard bits).
WINDOW = 32
#: Bits of a shift distance inside the window (``log2(WINDOW)``); larger distances give 0.
SHIFT_WIDTH = 5
#: Width of the exact two's-complement sum (§2 step 6: 17 terms below ``2**32`` each).
SUM_WIDTH = 38
#: Width of an alignment exponent ``u`` (§2 steps 2-3: 2..508 for products, 127..380 for C).
ALIGN_WIDTH = 9
#: Offset from the accumulator's biased exponent to its alignment exponent (§2 step 3).
ACC_ALIGN_OFFSET = 126
#: ``E = U + L - 158`` (§2 step 8), with ``L = SUM_WIDTH - 1 - leading_zeros``.
EXP_OFFSET = 158

#: The 16 operand lanes of a 256-bit bank word; lane ``i`` is bits ``[16i+15:16i]``.
Lanes = data.ArrayLayout(Bf16, LANES)


def _balanced(values, combine):
    """Combine a list of values pairwise into a balanced tree; return the root."""
    values = list(values)
    while len(values) > 1:
        paired = [combine(x, y) for x, y in zip(values[0::2], values[1::2])]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]


def _maximum(m, values, *, name):
    """Return the largest of unsigned values through a balanced tree of comparators.

    Each node is a signal: a node feeds both the comparison and the multiplexer above it, and
    Amaranth lowers an expression once per use, so inline expressions would double per level.
    """
    node = count()

    def larger(x, y):
        result = Signal(max(len(x), len(y)), name=f"{name}_node{next(node)}")
        m.d.comb += result.eq(Mux(x > y, x, y))
        return result

    return _balanced(values, larger)


class MacUnit(wiring.Component):
    """Bank MAC unit: ``result = acc + sum(a[i] * b[i])`` with one BWMS alignment and one RNE.

    Combinational. The 16 exact lane products and the accumulator are aligned to their largest
    exponent, truncated to a :data:`WINDOW`-bit window, summed exactly in :data:`SUM_WIDTH`
    bits, normalised and rounded once to binary32 with flush-to-zero, IEEE overflow to
    infinity and canonical NaN (``docs/numerics.md`` §2). The channel registers ``result``
    into the bank's accumulator on a MAC16 cycle.

    Members
    -------
    a : In(unsigned(256))
        16 bfloat16 lanes from the bank's row buffer; lane ``i`` is bits ``[16i+15:16i]``.
    b : In(unsigned(256))
        16 bfloat16 lanes of the vector operand (global buffer or partner bank), same order.
    acc : In(unsigned(32))
        Current accumulator, binary32.
    result : Out(unsigned(32))
        New accumulator, binary32: ``sim.datapath.mac(acc, a, b)``.
    """

    a: In(unsigned(16 * LANES))
    b: In(unsigned(16 * LANES))
    acc: In(unsigned(32))
    result: Out(unsigned(32))

    def elaborate(self, platform):
        m = Module()

        a = Lanes(self.a)
        b = Lanes(self.b)
        acc = Fp32(self.acc)

        # Per-term quantities: the window-aligned magnitude before the shift (step 5), the
        # alignment exponent, whether the term is live (step 1) and its sign.
        magnitudes, exponents, lives, negatives = [], [], [], []
        any_nan, any_pos_inf, any_neg_inf = [], [], []

        for lane in range(LANES):
            x, y = a[lane], b[lane]
            # Step 1: classify both operands by their exponent field. Each class is a signal:
            # Amaranth lowers an expression once per use, and each is used two or three times.
            x_zero, y_zero, x_special, y_special, x_inf, y_inf = (
                Signal(name=f"lane{lane}_{name}")
                for name in ("x_zero", "y_zero", "x_special", "y_special", "x_inf", "y_inf"))
            m.d.comb += [
                x_zero.eq(x.exponent == 0), y_zero.eq(y.exponent == 0),
                x_special.eq(x.exponent == EXP_SPECIAL), y_special.eq(y.exponent == EXP_SPECIAL),
                x_inf.eq(x_special & (x.mantissa == 0)), y_inf.eq(y_special & (y.mantissa == 0)),
            ]
            x_nan, y_nan = x_special & ~x_inf, y_special & ~y_inf

            live = Signal(name=f"lane{lane}_live")
            negative = Signal(name=f"lane{lane}_negative")
            nan = Signal(name=f"lane{lane}_nan")
            inf = Signal(name=f"lane{lane}_inf")
            m.d.comb += [
                live.eq(~(x_zero | y_zero | x_special | y_special)),
                negative.eq(x.sign ^ y.sign),
                nan.eq(x_nan | y_nan | (x_inf & y_zero) | (x_zero & y_inf)),
                inf.eq((x_inf | y_inf) & ~nan),
            ]
            any_nan.append(nan)
            any_pos_inf.append(inf & ~negative)
            any_neg_inf.append(inf & negative)

            # Step 2: exact 8 x 8 significand product, not normalised; u = ea + eb.
            product = Signal(PRODUCT_WIDTH, name=f"lane{lane}_product")
            exponent = Signal(ALIGN_WIDTH, name=f"lane{lane}_u")
            m.d.comb += [
                product.eq(Cat(x.mantissa, Const(1, 1)) * Cat(y.mantissa, Const(1, 1))),
                exponent.eq(x.exponent + y.exponent),
            ]
            # Step 5: the product left-justified in the window (P << 16); dead lanes add 0.
            magnitudes.append(Mux(live, Cat(Const(0, WINDOW - PRODUCT_WIDTH), product), 0))
            exponents.append(exponent)
            lives.append(live)
            negatives.append(negative)

        # Steps 1 and 3: the accumulator term, M = sig32(C) left-justified (M << 8),
        # u_c = ec + 126.
        acc_special = Signal()
        acc_infinite = Signal()
        m.d.comb += [acc_special.eq(acc.exponent == EXP_SPECIAL),
                     acc_infinite.eq(acc_special & (acc.mantissa == 0))]
        acc_live = Signal()
        acc_exponent = Signal(ALIGN_WIDTH)
        m.d.comb += [
            acc_live.eq((acc.exponent != 0) & ~acc_special),
            acc_exponent.eq(acc.exponent + ACC_ALIGN_OFFSET),
        ]
        acc_significand = Cat(acc.mantissa, Const(1, 1))
        magnitudes.append(
            Mux(acc_live, Cat(Const(0, WINDOW - ACC_SIGNIFICAND_WIDTH), acc_significand), 0))
        exponents.append(acc_exponent)
        lives.append(acc_live)
        negatives.append(acc.sign)
        any_nan.append(acc_special & ~acc_infinite)
        any_pos_inf.append(acc_infinite & ~acc.sign)
        any_neg_inf.append(acc_infinite & acc.sign)

        # Step 4: the bank-wide exponent U over the live terms. Every live u is at least 2,
        # so a dead term enters the max as 0; with no live term U is 0 and every term is 0.
        candidates = []
        for index, (live, u) in enumerate(zip(lives, exponents)):
            candidate = Signal(ALIGN_WIDTH, name=f"term{index}_candidate")  # two uses each
            m.d.comb += candidate.eq(Mux(live, u, 0))
            candidates.append(candidate)
        bank_exponent = _maximum(m, candidates, name="bank_exponent")

        # Step 5: shift right by d = U - u, truncating; a shift of WINDOW or more gives 0.
        # Step 6: apply the signs and add the 17 terms exactly, modulo 2**SUM_WIDTH. A negative
        # term is -x = ~x + 1 (two's complement), so it enters the adder tree inverted and the
        # +1s of all negative terms are added once, as their count: one adder input instead of
        # one negator per term.
        terms = []
        for index, (magnitude, u, negative) in enumerate(zip(magnitudes, exponents, negatives)):
            distance = Signal(ALIGN_WIDTH, name=f"term{index}_shift")
            aligned = Signal(WINDOW, name=f"term{index}_aligned")
            term = Signal(SUM_WIDTH, name=f"term{index}_signed")
            m.d.comb += [
                distance.eq(bank_exponent - u),  # >= 0 for a live term; don't care otherwise
                aligned.eq(Mux(distance >= WINDOW, 0, magnitude >> distance[:SHIFT_WIDTH])),
                term.eq(Cat(aligned, Const(0, SUM_WIDTH - WINDOW))
                        ^ negative.replicate(SUM_WIDTH)),
            ]
            terms.append(term)
        negative_count = Signal(range(len(negatives) + 1))
        m.d.comb += negative_count.eq(sum(negatives))
        total = Signal(signed(SUM_WIDTH))
        m.d.comb += total.eq(_balanced(terms + [negative_count], lambda x, y: x + y))

        # Step 7: normalise |S| (37 bits) and round to 24 bits.
        negative = total[-1]
        magnitude = Signal(SUM_WIDTH - 1)
        m.d.comb += magnitude.eq(Mux(negative, -total, total))
        normalised, leading_zeros = normalise(m, magnitude, name="sum")
        significand, carry = round_nearest_even(
            m, normalised, keep=ACC_SIGNIFICAND_WIDTH, name="rounded")

        # Step 8: E = U + L - 158 (+1 on a rounding carry), L = 37 - leading_zeros; for a
        # non-zero sum E lies in -155..388, so two bits above U's width hold it with its sign.
        exponent = Signal(signed(ALIGN_WIDTH + 2))
        m.d.comb += exponent.eq(
            bank_exponent + (SUM_WIDTH - 1) - leading_zeros + carry - EXP_OFFSET)

        nan = Signal()
        pos_inf = Signal()
        neg_inf = Signal()
        m.d.comb += [
            pos_inf.eq(Cat(*any_pos_inf).any()),
            neg_inf.eq(Cat(*any_neg_inf).any()),
            nan.eq(Cat(*any_nan).any() | (pos_inf & neg_inf)),
        ]

        result = Fp32(self.result)
        # Step 9 overrides steps 4-8.
        with m.If(nan):
            m.d.comb += self.result.eq(NAN32)
        with m.Elif(pos_inf):
            m.d.comb += self.result.eq(INF32)
        with m.Elif(neg_inf):
            m.d.comb += self.result.eq(INF32 | (1 << 31))  # with the sign bit
        with m.Elif(magnitude == 0):
            m.d.comb += self.result.eq(0)  # an exact zero sum is +0
        with m.Elif(exponent >= EXP_SPECIAL):
            m.d.comb += [result.sign.eq(negative), result.exponent.eq(EXP_SPECIAL)]
        with m.Elif(exponent <= 0):
            m.d.comb += result.sign.eq(negative)  # flush to zero of the sum's sign
        with m.Else():
            m.d.comb += [
                result.sign.eq(negative),
                result.exponent.eq(exponent[:8]),
                result.mantissa.eq(significand[:23]),  # the hidden bit is dropped
            ]

        return m
