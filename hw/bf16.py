"""Floating-point formats and the shared normalise/round steps of the bank MAC datapath.

The datapath itself is defined in ``docs/numerics.md``; this module holds the pieces that more
than one component needs: the bit layouts of bfloat16 and binary32, their special encodings, a
leading-zero normaliser and the round-to-nearest-even step (§2 step 7, reused with ``p = 8`` by
the bfloat16 readout in §3).

The helpers add combinational statements to the module they are given and return the signals
that carry their results. Every intermediate value that is used more than once gets its own
signal: Amaranth lowers an expression once per use, so a reused expression tree would be
duplicated in the netlist (in the normaliser, once per stage: 2**6 times).
"""

from amaranth.hdl import Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data

__all__ = [
    "Bf16", "Fp32",
    "EXP_SPECIAL", "NAN16", "NAN32", "INF16", "INF32",
    "normalise", "round_nearest_even",
]


#: A bfloat16 bit pattern, ``s | e[8] | m[7]``, mantissa in the low bits.
Bf16 = data.StructLayout({
    "mantissa": unsigned(7),
    "exponent": unsigned(8),
    "sign": unsigned(1),
})

#: An IEEE binary32 bit pattern, ``s | e[8] | m[23]``, mantissa in the low bits.
Fp32 = data.StructLayout({
    "mantissa": unsigned(23),
    "exponent": unsigned(8),
    "sign": unsigned(1),
})

#: Biased exponent of infinities and NaNs (both formats use an 8-bit exponent, bias 127).
EXP_SPECIAL = 255

# Special encodings; these equal the constants of the same name in ``sim/datapath.py``
# (``docs/numerics.md`` §1: canonical quiet NaN, IEEE infinity). They are repeated here because
# ``hw/`` must not import NumPy.
#: Canonical quiet NaN, bfloat16.
NAN16 = 0x7FC0
#: Canonical quiet NaN, binary32.
NAN32 = 0x7FC0_0000
#: Positive infinity, bfloat16 (the sign bit is or-ed in for negative infinity).
INF16 = 0x7F80
#: Positive infinity, binary32 (the sign bit is or-ed in for negative infinity).
INF32 = 0x7F80_0000


def normalise(m: Module, value: Value, *, name: str) -> tuple[Signal, Signal]:
    """Shift an unsigned value left until its top bit is set; count the shift.

    A logarithmic normaliser: each stage shifts by a power of two when that many top bits are
    zero, largest stage first, so after the stage for ``2**k`` fewer than ``2**k`` leading zeros
    remain. The stage decisions are the bits of the leading-zero count.

    Parameters
    ----------
    m : Module
        Module that receives the combinational statements.
    value : Value
        Unsigned magnitude, ``n`` bits wide.
    name : str
        Prefix of the signals created (``{name}_stage{amount}``, ``{name}_leading_zeros``).

    Returns
    -------
    tuple[Signal, Signal]
        ``(normalised, leading_zeros)``: ``value << leading_zeros`` truncated to ``n`` bits,
        whose top bit is set, and the number of leading zeros of ``value`` (``n - bit_length``).
        For ``value == 0`` the normalised value is 0 and the count meaningless; callers test
        zero separately.
    """
    value = Value.cast(value)
    width = len(value)
    stages = []
    amount = 1
    while amount < width:
        stages.append(amount)
        amount *= 2
    leading_zeros = Signal(len(stages), name=f"{name}_leading_zeros")
    for amount in reversed(stages):
        top_zero = Signal(name=f"{name}_zero{amount}")  # a signal: used twice
        m.d.comb += top_zero.eq(value[width - amount:] == 0)
        shifted = Signal(width, name=f"{name}_stage{amount}")
        m.d.comb += [
            shifted.eq(Mux(top_zero, value << amount, value)),
            leading_zeros[amount.bit_length() - 1].eq(top_zero),
        ]
        value = shifted
    return value, leading_zeros


def round_nearest_even(m: Module, normalised: Value, keep: int, *,
                       name: str) -> tuple[Value, Value]:
    """Round a normalised significand to ``keep`` bits, to nearest, ties to even.

    ``docs/numerics.md`` §2 step 7: guard = the highest dropped bit, sticky = the OR of the
    rest; round up when the guard is set and either the sticky bit or the kept LSB is set.

    Parameters
    ----------
    m : Module
        Module that receives the combinational statements.
    normalised : Value
        Unsigned significand wider than ``keep``, top bit set (or the whole value zero).
    keep : int
        Significand bits of the target format, hidden bit included (24 for binary32, 8 for
        bfloat16).
    name : str
        Name of the signal created for the rounded significand (``keep + 1`` bits).

    Returns
    -------
    tuple[Value, Value]
        ``(significand, carry)``: the low ``keep`` bits of the rounded significand and the
        rounding carry out of them. On a carry the rounded value is exactly ``2**keep``, so the
        significand bits are all zero and the caller only adds one to the exponent.
    """
    normalised = Value.cast(normalised)
    dropped = len(normalised) - keep
    if dropped < 1:
        raise ValueError(f"cannot round a {len(normalised)}-bit value to {keep!r} bits")
    kept = normalised[dropped:]
    guard = normalised[dropped - 1]
    sticky = normalised[:dropped - 1].any() if dropped > 1 else Const(0, 1)
    round_up = guard & (sticky | kept[0])
    rounded = Signal(keep + 1, name=name)
    m.d.comb += rounded.eq(kept + round_up)
    return rounded[:keep], rounded[keep]
