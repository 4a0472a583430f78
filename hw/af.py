"""The activation-function (AF16) unit: the LUT rows' contents, the segment decoder and the
operands AF16 gives a bank's MAC unit.

``docs/numerics.md`` §3 defines AF16 (``sim.datapath.af``): for the accumulator ``C`` of a bank,
``x = readout(C)`` (infinities replaced by the largest finite bfloat16), segment ``i`` from the
fields of ``x``, the segment's value ``v`` and slope ``k`` from the bank's open LUT row (words
``2i`` and ``2i + 1``, both in column ``i // 8``) and
``y = readout(mac(bias(v), [k, k], [x, -base]))``. The channel evaluates it with the parts it
has: the accumulator's readout (:class:`~patton.hw.readout.Bf16Readout`, kept with the
accumulator) gives ``x``, :class:`AfSegment` the segment (kept too, so that the bank's mat can
read the segment's column when AF16 is issued), :class:`AfOperands` turns that column into the
MAC unit's operands (two live lanes, the others zero), and the bank's
:class:`~patton.hw.mac.MacUnit` and readout do the rest.

:func:`lut_words` gives the LUT rows' power-up contents, the default tables of
:func:`patton.sim.datapath.af_lut` (the one definition of them; read when the channel is
built).
"""

from functools import cache

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from patton.hw.bf16 import EXP_SPECIAL, Bf16, normalise
from patton.hw.bias_load import BiasLoad
from patton.hw.params import ChannelParams
from patton.sim.datapath import AF_SEGMENTS, AF_STEP_LOG2, AF_WORDS, MAX16, af_lut

__all__ = ["AfSegment", "AfOperands", "lut_words", "SEGMENT_BITS", "SEGMENT_OF_ZERO"]

#: Bits of a segment number (512 segments).
SEGMENT_BITS = (AF_SEGMENTS - 1).bit_length()
#: The segment of +0 (an accumulator after reset): ``256 + j`` with ``j = 0``.
SEGMENT_OF_ZERO = AF_SEGMENTS // 2
#: Bits of ``j = min(floor(32 |x|), 255)``, the segment's distance from zero: one side's
#: segments. It is the bfloat16 significand shifted, so both are 8 bits wide.
J_BITS = SEGMENT_BITS - 1
assert J_BITS == 8, "segments per side must be 2**8: j is the 8-bit significand, shifted"
#: ``32 |x| = sig * 2**(e - J_SHIFT)``: the biased exponent at which ``j`` is the significand
#: itself (bias 127, 7 stored mantissa bits, segment width ``2**-AF_STEP_LOG2``).
J_SHIFT = 127 + 7 - AF_STEP_LOG2
#: Biased exponent of the base ``1/32`` (``j = 1``); ``j`` with bit length ``L`` has
#: exponent ``BASE_EXPONENT + L - 1``.
BASE_EXPONENT = 127 - AF_STEP_LOG2


@cache
def lut_words(params: ChannelParams) -> tuple[int, ...]:
    """Return the power-up contents of the LUT rows, one ``params.width``-bit word per (LUT row
    ``k``, column ``c``) at index ``k * params.columns + c`` (lane ``i`` in bits
    ``[16i+15:16i]``): the default table of AFM ``k`` (``sim.datapath.af_lut``), word ``w`` at
    column ``w // lanes``, lane ``w % lanes``.

    An organisation whose row cannot hold the table's 1024 words (only the formal harnesses'
    small one) gets zeros; the functional model refuses AF16 on it.
    """
    words = params.columns * params.lanes
    out: list[int] = []
    for k in range(params.lut_rows):
        row = [int(w) for w in af_lut(k)] if words == AF_WORDS else [0] * words
        for c in range(params.columns):
            lanes = row[c * params.lanes:(c + 1) * params.lanes]
            out.append(sum(w << (16 * i) for i, w in enumerate(lanes)))
    return tuple(out)


class AfSegment(wiring.Component):
    """The LUT segment of an accumulator readout (``sim.datapath.af_index`` of the input AF16
    evaluates: the readout with infinities replaced by the largest finite bfloat16, which
    changes no segment).

    Combinational. ``j = min(floor(32 |x|), 255)`` from the fields: 0 for a zero exponent, 255
    from exponent 130 up (infinities and NaNs too), else the significand shifted right by
    ``129 - e``; the segment is ``256 + j`` for a clear sign bit, ``255 - j`` for a set one.
    The segment's LUT column is its top bits (``segment // (lanes / 2)``).

    Members
    -------
    value : In(unsigned(16))
        The accumulator read out as bfloat16.
    segment : Out(unsigned(9))
        The segment ``i`` of ``value`` (0..511).
    """

    value: In(unsigned(16))
    segment: Out(unsigned(SEGMENT_BITS))

    def elaborate(self, platform):
        m = Module()
        value = Bf16(self.value)
        # 32 |x| = sig * 2**(e - J_SHIFT): j = sig >> (J_SHIFT - e) below, 255 above (sig has
        # 8 bits, so e = J_SHIFT gives at most 255 and one more binade at least 256).
        shift = Signal(8)
        j = Signal(J_BITS)
        m.d.comb += shift.eq(J_SHIFT - value.exponent)
        with m.If(value.exponent == 0):
            m.d.comb += j.eq(0)
        with m.Elif(value.exponent > J_SHIFT):
            m.d.comb += j.eq((1 << J_BITS) - 1)
        with m.Elif(shift < J_BITS):
            m.d.comb += j.eq(Cat(value.mantissa, Const(1, 1)) >> shift[:3])
        # a clear sign: 256 + j; a set one: 255 - j, which is ~j on 8 bits. (One XOR: an
        # output driven by one cell keeps its name in the Verilog.)
        m.d.comb += self.segment.eq(Cat(j, Const(1, 1)) ^ value.sign.replicate(SEGMENT_BITS))
        return m


class AfOperands(wiring.Component):
    """The operands of one bank's MAC unit: those of a MAC, MAC16 or EWMUL16 (``word``,
    ``vector``, ``partial``), or, with ``evaluate``, AF16's: ``mac(bias(v), [k, k],
    [x, -base])`` in lanes 0 and 1, every other lane zero (``sim.datapath.af``).

    Combinational. Under AF16 ``x`` is the accumulator's readout with ``+-inf`` replaced by
    ``+-0x7F7F`` (so constant tails give their constant instead of ``0 * inf``), and ``word``
    is the bank's LUT column that holds the segment (read from the open LUT row at the column
    :class:`AfSegment` gave): lanes ``2p`` and ``2p + 1`` of it are ``v`` and ``k``, ``p`` the
    segment's low bits. ``base`` is the segment's end nearer to zero, ``+-j/32`` (exact in
    bfloat16), negated here.

    Parameters
    ----------
    params : ChannelParams
        Organisation (``lanes``; the MAC operands are ``params.width`` bits).

    Members
    -------
    word, vector : In(params.width)
        The bank's word (under AF16: the LUT column of the segment) and the MAC vector.
    partial : In(unsigned(32))
        The accumulator.
    evaluate : In(1)
        AF16: the operands are the activation function's.
    value : In(unsigned(16))
        The accumulator read out as bfloat16.
    segment : In(unsigned(9))
        Its segment (:attr:`AfSegment.segment`).
    a, b : Out(params.width)
        The MAC unit's lane operands: ``word`` and ``vector``, or ``a = [k, k, 0, ...]``,
        ``b = [x, -base, 0, ...]``.
    acc : Out(unsigned(32))
        The MAC unit's accumulator operand: ``partial``, or ``bias(v)``
        (:class:`~patton.hw.bias_load.BiasLoad`).
    """

    def __init__(self, params: ChannelParams) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        pairs = params.lanes // 2
        if params.lanes < 2 or pairs & (pairs - 1):
            raise ValueError(f"AF16 needs an even power-of-two lane count, got {params.lanes}")
        self._params = params
        super().__init__({
            "word": In(params.width), "vector": In(params.width), "partial": In(32),
            "evaluate": In(1), "value": In(16), "segment": In(SEGMENT_BITS),
            "a": Out(params.width), "b": Out(params.width), "acc": Out(32),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the operands are built for."""
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        m.submodules.bias_load = bias = BiasLoad()
        value = Bf16(self.value)
        infinite = (value.exponent == EXP_SPECIAL) & (value.mantissa == 0)
        x = Signal(16)
        m.d.comb += x.eq(Mux(infinite, Cat(Const(MAX16, 15), value.sign), self.value))
        pair_bits = (p.lanes // 2 - 1).bit_length()
        pair = self.segment[:pair_bits]
        words = [self.word[32 * q:32 * q + 32] for q in range(p.lanes // 2)]
        chosen = Signal(32)
        with m.Switch(pair):
            for q, word in enumerate(words):
                with m.Case(q):
                    m.d.comb += chosen.eq(word)
        lut_value, slope = chosen[:16], chosen[16:]

        # The base +-j/32: j from the segment (its low 8 bits, inverted for a set sign), packed
        # exactly: exponent BASE_EXPONENT + bit length - 1, the bits below the leading one.
        positive = self.segment[J_BITS]  # the segment of a clear sign bit
        j = Signal(J_BITS)
        m.d.comb += j.eq(self.segment[:J_BITS] ^ (~positive).replicate(J_BITS))
        normalised, leading_zeros = normalise(m, j, name="base")
        exponent = Signal(8)
        m.d.comb += exponent.eq(BASE_EXPONENT + J_BITS - 1 - leading_zeros)
        negated = Signal(16)  # -base: the sign bit set for a positive base
        with m.If(j == 0):
            m.d.comb += negated.eq(Cat(Const(0, 15), positive))
        with m.Else():
            m.d.comb += negated.eq(Cat(normalised[:J_BITS - 1], exponent, positive))

        m.d.comb += [
            bias.bias.eq(lut_value),
            self.a.eq(Mux(self.evaluate, Cat(slope, slope), self.word)),
            self.b.eq(Mux(self.evaluate, Cat(x, negated), self.vector)),
            self.acc.eq(Mux(self.evaluate, bias.acc, self.partial)),
        ]
        return m
