"""The bf16 MAC datapath of an AiM bank: the one numeric definition the RTL must match.

``docs/numerics.md`` states the same algorithm in prose; this module is its executable form. All
arithmetic is integer NumPy (``int64``) on IEEE bit patterns, so results are exact and
deterministic; every function works on any leading array shape.

Formats: operands and every value the host sees are bfloat16 (``uint16`` bit patterns); the per-bank
accumulator is IEEE binary32 (``uint32`` bit patterns).

The MAC (:func:`mac`) is a bank-wide mantissa shift ("BWMS"): the 16 exact lane products and the
accumulator are aligned to the largest exponent among them, each aligned magnitude is truncated to
a :data:`WINDOW`-bit window, the signed integers are summed exactly (so the adder-tree order does
not matter) and the sum is normalised and rounded once, to nearest even, to binary32.

Invariants:
    * Subnormal inputs read as zero of the same sign; results that fall below the smallest
      normal after rounding are flushed to zero of the result's sign. No function returns a
      subnormal.
    * Overflow after rounding gives infinity of the result's sign (IEEE round-to-nearest).
    * NaN results are the canonical quiet NaN (:data:`NAN32`, :data:`NAN16`). A NaN input,
      ``0 * inf`` or ``+inf + -inf`` gives NaN; otherwise an infinite input or product gives
      infinity of its sign.
    * An exact zero sum in :func:`mac` is ``+0``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "WINDOW", "NAN16", "NAN32", "INF16", "INF32", "MAX16",
    "AF_SEGMENTS", "AF_STEP_LOG2", "AF_WORDS", "AfSpec", "AF_FUNCTIONS",
    "mac", "accumulate", "mul", "add", "bias", "readout", "af", "af_lut", "af_index",
    "to_bf16", "from_bf16", "from_fp32", "to_fp32", "is_bf16",
]

#: Width in bits of the alignment window (24 significand bits of binary32 + 8 guard bits).
WINDOW = 32
#: Canonical quiet NaN, bfloat16 and binary32.
NAN16 = 0x7FC0
NAN32 = 0x7FC0_0000
#: Positive infinity, bfloat16 and binary32.
INF16 = 0x7F80
INF32 = 0x7F80_0000
#: Largest finite bfloat16 (3.3895e38).
MAX16 = 0x7F7F

#: Activation-function LUT: segments per function, log2 of the segment width (1/32), and the
#: words one LUT row holds (a value and a slope per segment; 1024 words = one 2 KB DRAM row).
AF_SEGMENTS = 512
AF_STEP_LOG2 = 5
AF_WORDS = 2 * AF_SEGMENTS

_BIAS = 127  # exponent bias of both formats
_P32 = 24  # binary32 significand bits (with the hidden one)
_P16 = 8  # bfloat16 significand bits
_ZERO_T = -(1 << 20)  # alignment exponent of a zero term (below every real one)


# --------------------------------------------------------------------------- field helpers


def is_bf16(dtype: np.dtype) -> bool:
    """True when ``dtype`` is ``ml_dtypes.bfloat16``. Asked without importing ``ml_dtypes``
    (its import takes most of a second, every command's start-up): an array of that dtype
    exists only once its caller has imported it."""
    module = sys.modules.get("ml_dtypes")
    return module is not None and dtype == module.bfloat16


def _u16(x: np.ndarray) -> np.ndarray:
    """Return bfloat16 bit patterns as ``int64`` (accepts ``uint16`` or ``bfloat16`` arrays)."""
    x = np.asarray(x)
    if is_bf16(x.dtype):
        x = x.view(np.uint16)
    if x.dtype.kind not in "ui":
        raise TypeError(f"expected bfloat16 bit patterns (uint16), got dtype {x.dtype}")
    return x.astype(np.int64) & 0xFFFF


def _u32(x: np.ndarray) -> np.ndarray:
    """Return binary32 bit patterns as ``int64``."""
    x = np.asarray(x)
    if x.dtype.kind not in "ui":
        raise TypeError(f"expected binary32 bit patterns (uint32), got dtype {x.dtype}")
    return x.astype(np.int64) & 0xFFFF_FFFF


def _split16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split bfloat16 bits into sign, biased exponent and stored mantissa."""
    return x >> 15, (x >> 7) & 0xFF, x & 0x7F


def _split32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split binary32 bits into sign, biased exponent and stored mantissa."""
    return x >> 31, (x >> 23) & 0xFF, x & 0x7F_FFFF


def _bitlen(mag: np.ndarray) -> np.ndarray:
    """Return the bit length of non-negative integers below ``2**53`` (0 for 0).

    ``frexp`` is exact here because every such integer is a float64 without rounding.
    """
    return np.frexp(mag.astype(np.float64))[1].astype(np.int64)


def _pack(neg: np.ndarray, mag: np.ndarray, lsb: np.ndarray, p: int) -> np.ndarray:
    """Round ``(-1)**neg * mag * 2**lsb`` to nearest even with ``p`` significand bits.

    This is the one normalise-round-pack step of the datapath (``p`` = 24 for binary32, 8 for
    bfloat16; both use an 8-bit exponent with bias 127).

    Args:
        neg: sign (0/1 or bool).
        mag: magnitude, integers in ``[0, 2**53)``.
        lsb: unbiased exponent of the weight of ``mag``'s bit 0.
        p: significand width of the target format, hidden bit included.

    Returns:
        Bit patterns (``int64``): zero of sign ``neg`` when ``mag`` is 0 or the rounded value is
        below the smallest normal, infinity of sign ``neg`` when it is above the largest finite.
    """
    neg = np.asarray(neg).astype(np.int64)
    mag = np.asarray(mag, dtype=np.int64)
    length = _bitlen(mag)
    shift = length - p  # > 0: drop bits; <= 0: exact, widen
    right = np.maximum(shift, 0)
    q = np.where(shift > 0, mag >> right, mag << np.maximum(-shift, 0))
    rem = mag & ((np.int64(1) << right) - 1)
    half = np.int64(1) << np.maximum(right - 1, 0)
    up = (shift > 0) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    q = q + up
    carry = q >> p  # rounding carried out to 2**p
    q = q >> carry
    exp = lsb + shift + carry + (p - 1) + _BIAS
    width = p + 8  # sign + exponent + stored mantissa bits
    sign = neg << (width - 1)
    bits = sign | (np.clip(exp, 0, 255) << (p - 1)) | (q & ((1 << (p - 1)) - 1))
    bits = np.where(exp >= 255, sign | (np.int64(255) << (p - 1)), bits)
    return np.where((mag == 0) | (exp <= 0), sign, bits)


# --------------------------------------------------------------------------- conversions


def to_bf16(x: np.ndarray | float) -> np.ndarray:
    """Round real values to bfloat16 bit patterns (host-side conversion).

    Rounds once, to nearest even, from the float64 value (ml_dtypes' own cast goes through
    float32 and can round twice). Like the device, it flushes results below the smallest normal
    to signed zero; NaN becomes :data:`NAN16`.
    """
    v = np.asarray(x, dtype=np.float64)
    frac, exp = np.frexp(np.where(np.isfinite(v), v, 0.0))
    mag = np.abs(np.ldexp(frac, 53)).astype(np.int64)
    bits = _pack(np.signbit(v), mag, exp.astype(np.int64) - 53, _P16)
    bits = np.where(np.isinf(v), np.where(v < 0, 0x8000 | INF16, INF16), bits)
    return np.where(np.isnan(v), NAN16, bits).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """Return the float64 values of bfloat16 bit patterns (IEEE meaning, subnormals included)."""
    return (_u16(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def to_fp32(x: np.ndarray | float) -> np.ndarray:
    """Return binary32 bit patterns of real values (NumPy's float32 cast, IEEE)."""
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def from_fp32(bits: np.ndarray) -> np.ndarray:
    """Return the float64 values of binary32 bit patterns."""
    return _u32(bits).astype(np.uint32).view(np.float32).astype(np.float64)


# --------------------------------------------------------------------------- MAC unit


def mac(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return ``acc + sum(a * b)`` over the last axis, as the BWMS datapath computes it.

    Args:
        acc: accumulators, binary32 bits, shape ``S``.
        a, b: operands, bfloat16 bits, shape ``S + (lanes,)`` (16 lanes in a bank; any
            count works, the AF unit uses 2).

    Returns:
        New accumulators, binary32 bits (``uint32``), shape ``S``.

    Algorithm (``docs/numerics.md`` §2): a lane product of normal operands is the exact 16-bit
    integer ``Pa * Pb`` (8-bit significands with the hidden one) with alignment exponent
    ``t = ea + eb - 126``; the accumulator contributes its 24-bit significand with ``t = ec``.
    ``T = max t`` over the non-zero terms. Each term's magnitude is left-justified in a
    :data:`WINDOW`-bit field (product ``<< 16``, accumulator ``<< 8``), shifted right by
    ``T - t`` with the shifted-out bits dropped (truncation toward zero), given its sign, and all
    are summed exactly. The sum ``S`` has weight ``2**(T - 127 - 31)`` per unit and is rounded
    once to binary32 (nearest even), flushing underflow to zero.
    """
    acc = _u32(acc)
    a = _u16(a)
    b = _u16(b)
    if a.shape != b.shape or a.shape[:-1] != acc.shape:
        raise ValueError(f"shape mismatch: acc {acc.shape}, a {a.shape}, b {b.shape}")
    sa, ea, ma = _split16(a)
    sb, eb, mb = _split16(b)
    sc, ec, mc = _split32(acc)

    # Operand classes (exponent 0 = zero or flushed subnormal; 255 = Inf/NaN).
    a_zero, b_zero = ea == 0, eb == 0
    a_inf, b_inf = (ea == 255) & (ma == 0), (eb == 255) & (mb == 0)
    a_nan, b_nan = (ea == 255) & (ma != 0), (eb == 255) & (mb != 0)
    p_nan = a_nan | b_nan | (a_inf & b_zero) | (a_zero & b_inf)
    p_inf = (a_inf | b_inf) & ~p_nan
    p_live = ~(a_zero | b_zero | (ea == 255) | (eb == 255))  # finite, non-zero product
    c_live = (ec != 0) & (ec != 255)
    c_inf = (ec == 255) & (mc == 0)
    c_nan = (ec == 255) & (mc != 0)
    p_neg = (sa ^ sb) == 1

    # Alignment: one exponent for the whole bank (BWMS).
    t_p = np.where(p_live, ea + eb - 126, _ZERO_T)
    t_c = np.where(c_live, ec, _ZERO_T)
    top = np.maximum(t_p.max(axis=-1), t_c)
    mag_p = np.where(p_live, ((ma | 0x80) * (mb | 0x80)) << (WINDOW - 16), 0)
    mag_c = np.where(c_live, (mc | 0x80_0000) << (WINDOW - _P32), 0)
    d_p = np.minimum(top[..., None] - t_p, 63)
    d_c = np.minimum(top - t_c, 63)
    aligned_p = mag_p >> d_p
    aligned_c = mag_c >> d_c
    total = (np.where(p_neg, -aligned_p, aligned_p).sum(axis=-1)
             + np.where(sc == 1, -aligned_c, aligned_c))

    neg = total < 0
    out = _pack(neg, np.abs(total), top - _BIAS - (WINDOW - 1), _P32)

    # Special values.
    pos_inf = (p_inf & ~p_neg).any(axis=-1) | (c_inf & (sc == 0))
    neg_inf = (p_inf & p_neg).any(axis=-1) | (c_inf & (sc == 1))
    nan = p_nan.any(axis=-1) | c_nan | (pos_inf & neg_inf)
    out = np.where(pos_inf, INF32, out)
    out = np.where(neg_inf, 0x8000_0000 | INF32, out)
    out = np.where(nan, NAN32, out)
    return out.astype(np.uint32)


def accumulate(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Apply :func:`mac` once per step along axis ``-2`` (one MAC per 32 B column).

    Args:
        acc: binary32 bits, shape ``S``.
        a, b: bfloat16 bits, shape ``S + (steps, lanes)``.

    Returns:
        The accumulators after ``steps`` MACs, in order.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    out = np.asarray(acc, dtype=np.uint32)
    for step in range(a.shape[-2]):
        out = mac(out, a[..., step, :], b[..., step, :])
    return out


def bias(x: np.ndarray) -> np.ndarray:
    """Return the accumulator value a bfloat16 bias loads (WRMAC16): the exact widening.

    The bits move to the top half of the binary32 word; a subnormal bias becomes zero of the
    same sign.
    """
    x = _u16(x)
    sign, exp, _ = _split16(x)
    return np.where(exp == 0, sign << 31, x << 16).astype(np.uint32)


def readout(acc: np.ndarray) -> np.ndarray:
    """Return the bfloat16 an accumulator reads out as (RDMAC16): binary32 rounded to nearest even.

    NaN gives :data:`NAN16`; a value that rounds above the largest bfloat16 gives infinity.
    """
    acc = _u32(acc)
    sign, exp, man = _split32(acc)
    out = _pack(sign, np.where(exp == 0, 0, man | 0x80_0000), exp - _BIAS - (_P32 - 1), _P16)
    out = np.where(exp == 255, np.where(man == 0, (sign << 15) | INF16, NAN16), out)
    return out.astype(np.uint16)


# --------------------------------------------------------------------------- element-wise ops


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return the element-wise bfloat16 product (EWMUL16): exact product, rounded once (RNE).

    Zero and subnormal operands give zero of sign ``sa ^ sb``; ``0 * inf`` and NaN operands give
    :data:`NAN16`; overflow gives infinity and underflow zero, both of the product's sign.
    """
    a = _u16(a)
    b = _u16(b)
    sa, ea, ma = _split16(a)
    sb, eb, mb = _split16(b)
    neg = sa ^ sb
    zero = (ea == 0) | (eb == 0)
    inf = (ea == 255) | (eb == 255)
    nan = ((ea == 255) & (ma != 0)) | ((eb == 255) & (mb != 0)) | (zero & inf)
    product = (ma | 0x80) * (mb | 0x80)
    out = _pack(neg, np.where(zero | inf, 0, product), ea + eb - 2 * _BIAS - 14, _P16)
    out = np.where(inf, (neg << 15) | INF16, out)
    return np.where(nan, NAN16, out).astype(np.uint16)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return the element-wise bfloat16 sum as the host computes it (EWADD on GPRs).

    EWADD is a host-side operation, not part of the bank datapath: IEEE bfloat16 addition,
    rounded once to nearest even, subnormals kept. (The binary32 sum of two bfloat16 values
    rounded again to bfloat16 equals the correctly rounded sum, since 24 >= 2 * 8 + 2.)
    """
    import ml_dtypes  # here, not at the top: see is_bf16

    a = _u16(a).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    b = _u16(b).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    return (a + b).astype(ml_dtypes.bfloat16).view(np.uint16)


# --------------------------------------------------------------------------- activation unit


@dataclass(frozen=True, slots=True)
class AfSpec:
    """One built-in activation function: how its default LUT row is generated.

    Segments are chords of ``fn``; ``low``/``high``, when set, replace the outermost segment
    on that side by the constant (the asymptote), which then also holds for every input beyond
    the domain. Without them the outermost chord extends linearly.
    """

    name: str  # short name
    fn: Callable[[float], float]  # the exact function (float64)
    low: float | None = None  # value for x < -8 + 1/32 (None: extend the chord)
    high: float | None = None  # value for x >= 8 - 1/32 (None: extend the chord)


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


#: Built-in activation functions by AFM id (CFR AFM, 0..7).
AF_FUNCTIONS: dict[int, AfSpec] = {
    0: AfSpec("sigmoid", _sigmoid, 0.0, 1.0),
    1: AfSpec("tanh", math.tanh, -1.0, 1.0),
    2: AfSpec("gelu", lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))), 0.0, None),
    3: AfSpec("relu", lambda x: max(x, 0.0)),
    4: AfSpec("leaky_relu", lambda x: x if x >= 0.0 else 0.01 * x),
    5: AfSpec("silu", lambda x: x * _sigmoid(x), 0.0, None),
    6: AfSpec("exp", math.exp, 0.0, None),
    7: AfSpec("identity", lambda x: x),
}


def af_index(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the LUT segment of bfloat16 inputs and the segment's base point (bfloat16 bits).

    Segments are sign-magnitude: ``j = min(floor(32 * |x|), 255)``; a non-negative sign bit
    selects segment ``256 + j`` with base ``+j/32``, a set sign bit segment ``255 - j`` with
    base ``-j/32``. The base is the segment end nearer to zero; ``|x - base| < 1/32`` inside the
    domain ``(-8, 8)``.
    """
    x = _u16(x)
    sign, exp, man = _split16(x)
    shift = np.clip(129 - exp, 0, 15)  # 32 * |x| = sig * 2**(exp - 129)
    j = np.where(exp == 0, 0, np.where(exp >= 130, 255, (man | 0x80) >> shift))
    seg = np.where(sign == 1, 255 - j, 256 + j)
    base = _pack(sign, j, np.full_like(j, -AF_STEP_LOG2), _P16)
    return seg, base.astype(np.uint16)


def af(acc: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """Return the activation of accumulators (AF16), evaluated from LUT rows.

    Args:
        acc: accumulators, binary32 bits, shape ``S``.
        lut: the LUT row of each accumulator's bank, bfloat16 bits, shape ``S + (1024,)``
            (or broadcastable to it): word ``2 i`` is the value ``v`` of segment ``i`` at its
            base, word ``2 i + 1`` its slope ``k``.

    Returns:
        bfloat16 bits, shape ``S``: ``readout(mac(bias(v), [k, k], [x, -base]))`` where
        ``x = readout(acc)`` with infinities saturated to the largest finite bfloat16, i.e.
        ``v + k * (x - base)`` computed by the MAC datapath (2 lanes) and rounded to bfloat16.
    """
    x = readout(acc).astype(np.int64)
    sign, exp, man = _split16(x)
    x = np.where((exp == 255) & (man == 0), (sign << 15) | MAX16, x)
    seg, base = af_index(x)
    lut = np.broadcast_to(_u16(lut), x.shape + (AF_WORDS,))
    value = np.take_along_axis(lut, (2 * seg)[..., None], axis=-1)[..., 0]
    slope = np.take_along_axis(lut, (2 * seg + 1)[..., None], axis=-1)[..., 0]
    a = np.stack([slope, slope], axis=-1)
    b = np.stack([x, base.astype(np.int64) ^ 0x8000], axis=-1)
    return readout(mac(bias(value), a, b))


def af_lut(afm: int) -> np.ndarray:
    """Return the default LUT row of activation function ``afm`` (1024 bfloat16 bit patterns).

    Segment ``i`` with base ``b`` and far end ``e = b +- 1/32`` stores ``v = f(b)`` and the chord
    slope ``k = (f(e) - f(b)) / (e - b)``, each rounded to bfloat16; the outermost segments take
    :attr:`AfSpec.low` / :attr:`AfSpec.high` as ``v`` with ``k = 0`` when those are set.
    """
    if afm not in AF_FUNCTIONS:
        raise ValueError(f"unknown AFM {afm!r}; known: {sorted(AF_FUNCTIONS)}")
    spec = AF_FUNCTIONS[afm]
    values = np.empty(AF_SEGMENTS, dtype=np.float64)
    slopes = np.empty(AF_SEGMENTS, dtype=np.float64)
    step = 2.0 ** -AF_STEP_LOG2
    half = AF_SEGMENTS // 2
    for seg in range(AF_SEGMENTS):
        j = seg - half if seg >= half else half - 1 - seg
        direction = 1.0 if seg >= half else -1.0
        start = direction * j * step
        end = direction * (j + 1) * step
        values[seg] = spec.fn(start)
        slopes[seg] = (spec.fn(end) - spec.fn(start)) / (end - start)
    if spec.low is not None:
        values[0], slopes[0] = spec.low, 0.0
    if spec.high is not None:
        values[-1], slopes[-1] = spec.high, 0.0
    row = np.empty(AF_WORDS, dtype=np.uint16)
    row[0::2] = to_bf16(values)
    row[1::2] = to_bf16(slopes)
    return row
