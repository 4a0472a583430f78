"""The bf16 MAC datapath against an independent scalar reference and against float64."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from patton.sim import datapath as dp

LANES = 16
TWO = Fraction(2)
WINDOW_BITS = 32  # the documented alignment window (docs/numerics.md)

# --------------------------------------------------------------------------- scalar reference
# The documented algorithm (docs/numerics.md), written with Python integers and exact fractions:
# values are decoded to Fractions, truncation is `math.floor` of an exact quotient, rounding is
# Python's round-half-even on a Fraction. It shares no code with patton.sim.datapath.


def ref_decode(bits: int, man_bits: int) -> tuple[str, int, Fraction, int]:
    """Return (kind, sign, |value|, biased exponent) of a bfloat16 or binary32 pattern."""
    width = man_bits + 9
    sign = bits >> (width - 1) & 1
    exp = bits >> man_bits & 0xFF
    man = bits & ((1 << man_bits) - 1)
    if exp == 0xFF:
        return ("nan" if man else "inf"), sign, Fraction(0), exp
    if exp == 0:
        return "zero", sign, Fraction(0), 0
    value = Fraction((1 << man_bits) + man) * TWO ** (exp - 127 - man_bits)
    return "num", sign, value, exp


def ref_round(sign: int, value: Fraction, man_bits: int) -> int:
    """Round ``(-1)**sign * value`` (value >= 0) to nearest even; FTZ, overflow to infinity."""
    width = man_bits + 9
    sign_bit = sign << (width - 1)
    if value == 0:
        return sign_bit
    exp = value.numerator.bit_length() - value.denominator.bit_length()
    while TWO ** exp > value:
        exp -= 1
    while TWO ** (exp + 1) <= value:
        exp += 1
    q = round(value / TWO ** (exp - man_bits))  # half to even
    if q == 1 << (man_bits + 1):
        q >>= 1
        exp += 1
    biased = exp + 127
    if biased >= 255:
        return sign_bit | 0xFF << man_bits
    if biased <= 0:
        return sign_bit
    return sign_bit | biased << man_bits | (q - (1 << man_bits))


def ref_mac(acc: int, a: list[int], b: list[int]) -> int:
    """Scalar BWMS MAC: acc (binary32 bits) + sum(a * b) (bfloat16 bits)."""
    nan = pos_inf = neg_inf = False
    terms: list[tuple[int, Fraction, int]] = []  # (sign, |value|, alignment exponent)
    for x, y in zip(a, b):
        kx, sx, vx, ex = ref_decode(x, 7)
        ky, sy, vy, ey = ref_decode(y, 7)
        sign = sx ^ sy
        if "nan" in (kx, ky) or {kx, ky} == {"inf", "zero"}:
            nan = True
        elif "inf" in (kx, ky):
            pos_inf |= sign == 0
            neg_inf |= sign == 1
        elif kx == "num" and ky == "num":
            terms.append((sign, vx * vy, ex + ey - 126))
    kc, sc, vc, ec = ref_decode(acc, 23)
    if kc == "nan":
        nan = True
    elif kc == "inf":
        pos_inf |= sc == 0
        neg_inf |= sc == 1
    elif kc == "num":
        terms.append((sc, vc, ec))
    if nan or (pos_inf and neg_inf):
        return dp.NAN32
    if pos_inf or neg_inf:
        return (neg_inf << 31) | dp.INF32
    if not terms:
        return 0
    top = max(t for _, _, t in terms)
    unit = TWO ** (top - 127 - (WINDOW_BITS - 1))
    total = sum((-1) ** s * math.floor(v / unit) for s, v, _ in terms)
    return ref_round(int(total < 0), abs(total) * unit, 23)


def ref_mul(x: int, y: int) -> int:
    """Scalar EWMUL: bfloat16 product rounded once."""
    kx, sx, vx, _ = ref_decode(x, 7)
    ky, sy, vy, _ = ref_decode(y, 7)
    sign = sx ^ sy
    if "nan" in (kx, ky) or {kx, ky} == {"inf", "zero"}:
        return dp.NAN16
    if "inf" in (kx, ky):
        return sign << 15 | dp.INF16
    return ref_round(sign, vx * vy, 7)


def ref_readout(acc: int) -> int:
    """Scalar RDMAC16: binary32 to bfloat16, nearest even."""
    kind, sign, value, _ = ref_decode(acc, 23)
    if kind == "nan":
        return dp.NAN16
    if kind == "inf":
        return sign << 15 | dp.INF16
    return ref_round(sign, value, 7)


# --------------------------------------------------------------------------- generators


def bf16_bits(rng: np.random.Generator, shape: tuple[int, ...], lo: int = 1,
              hi: int = 254) -> np.ndarray:
    """Random normal bfloat16 patterns with biased exponents in [lo, hi]."""
    sign = rng.integers(0, 2, shape)
    exp = rng.integers(lo, hi + 1, shape)
    man = rng.integers(0, 128, shape)
    return (sign << 15 | exp << 7 | man).astype(np.uint16)


def fp32_bits(rng: np.random.Generator, shape: tuple[int, ...], lo: int = 1,
              hi: int = 254) -> np.ndarray:
    """Random normal binary32 patterns with biased exponents in [lo, hi]."""
    sign = rng.integers(0, 2, shape)
    exp = rng.integers(lo, hi + 1, shape)
    man = rng.integers(0, 1 << 23, shape)
    return (sign << 31 | exp << 23 | man).astype(np.uint32)


def check_mac(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Assert that the vectorised MAC equals the scalar reference on every row."""
    got = dp.mac(acc, a, b)
    for i in range(acc.shape[0]):
        want = ref_mac(int(acc[i]), [int(v) for v in a[i]], [int(v) for v in b[i]])
        assert int(got[i]) == want, (hex(int(acc[i])), a[i].tolist(), b[i].tolist(),
                                     hex(int(got[i])), hex(want))


def f32(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def b16(x: float) -> int:
    return int(np.array(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16))


def vec(*values: int) -> np.ndarray:
    """A 16-lane bfloat16 vector: the given patterns, then +0."""
    out = np.zeros(LANES, dtype=np.uint16)
    out[:len(values)] = values
    return out


def mac1(acc: int, a: np.ndarray, b: np.ndarray) -> int:
    return int(dp.mac(np.array(acc, dtype=np.uint32), a, b))


# --------------------------------------------------------------------------- bit-exactness


@pytest.mark.parametrize("regime", ["narrow", "spread", "wide", "any_bits"])
def test_mac_matches_reference_on_random_vectors(regime: str) -> None:
    rng = np.random.default_rng(["narrow", "spread", "wide", "any_bits"].index(regime))
    n = 300
    if regime == "narrow":  # close exponents: heavy cancellation, no truncation
        a, b = bf16_bits(rng, (n, LANES), 125, 129), bf16_bits(rng, (n, LANES), 125, 129)
        acc = fp32_bits(rng, (n,), 124, 132)
    elif regime == "spread":  # exponents a few window widths apart: truncation matters
        a, b = bf16_bits(rng, (n, LANES), 100, 150), bf16_bits(rng, (n, LANES), 110, 140)
        acc = fp32_bits(rng, (n,), 90, 160)
    elif regime == "wide":  # whole range: overflow and underflow
        a, b = bf16_bits(rng, (n, LANES)), bf16_bits(rng, (n, LANES))
        acc = fp32_bits(rng, (n,))
    else:  # raw patterns: subnormals, zeros, infinities, NaNs
        a = rng.integers(0, 1 << 16, (n, LANES)).astype(np.uint16)
        b = rng.integers(0, 1 << 16, (n, LANES)).astype(np.uint16)
        acc = rng.integers(0, 1 << 32, (n,)).astype(np.uint32)
        specials = np.array([0, 0x8000, 1, 0x807F, 0x7F80, 0xFF80, 0x7FC1, 0x7F7F], np.uint16)
        pick = rng.random((n, LANES)) < 0.15
        a[pick] = rng.choice(specials, pick.sum())
    check_mac(acc, a, b)


bf16_any = st.integers(0, 0xFFFF)
bf16_mid = st.builds(lambda s, e, m: s << 15 | e << 7 | m,
                     st.integers(0, 1), st.integers(118, 136), st.integers(0, 127))
fp32_any = st.integers(0, 0xFFFF_FFFF)
fp32_mid = st.builds(lambda s, e, m: s << 31 | e << 23 | m,
                     st.integers(0, 1), st.integers(110, 145), st.integers(0, (1 << 23) - 1))


@settings(max_examples=300, deadline=None)
@given(acc=st.one_of(fp32_mid, fp32_any),
       a=st.lists(st.one_of(bf16_mid, bf16_any), min_size=LANES, max_size=LANES),
       b=st.lists(st.one_of(bf16_mid, bf16_any), min_size=LANES, max_size=LANES))
def test_mac_matches_reference_property(acc: int, a: list[int], b: list[int]) -> None:
    got = mac1(acc, np.array(a, dtype=np.uint16), np.array(b, dtype=np.uint16))
    assert got == ref_mac(acc, a, b)


def test_mac_is_correctly_rounded_when_nothing_is_truncated() -> None:
    # With every alignment shift within the guard bits, the sum is exact before the one
    # rounding, so the result must be the correctly rounded exact sum.
    rng = np.random.default_rng(7)
    n = 300
    a, b = bf16_bits(rng, (n, LANES), 126, 129), bf16_bits(rng, (n, LANES), 126, 129)
    acc = fp32_bits(rng, (n,), 128, 132)
    got = dp.mac(acc, a, b)
    for i in range(n):
        exact = Fraction(float(dp.from_fp32(acc[i])))
        exact += sum(Fraction(float(x)) * Fraction(float(y))
                     for x, y in zip(dp.from_bf16(a[i]), dp.from_bf16(b[i])))
        assert int(got[i]) == ref_round(int(exact < 0), abs(exact), 23)


def test_mac_result_does_not_depend_on_lane_order() -> None:
    rng = np.random.default_rng(3)
    a, b = bf16_bits(rng, (200, LANES), 60, 190), bf16_bits(rng, (200, LANES), 60, 190)
    acc = fp32_bits(rng, (200,), 60, 190)
    perm = rng.permutation(LANES)
    assert np.array_equal(dp.mac(acc, a, b), dp.mac(acc, a[:, perm], b[:, perm]))


def test_mac_works_on_any_leading_shape() -> None:
    rng = np.random.default_rng(4)
    a, b = bf16_bits(rng, (2, 3, 5, LANES), 110, 140), bf16_bits(rng, (2, 3, 5, LANES), 110, 140)
    acc = fp32_bits(rng, (2, 3, 5), 110, 140)
    got = dp.mac(acc, a, b)
    assert got.shape == (2, 3, 5) and got.dtype == np.uint32
    assert np.array_equal(got.reshape(-1), dp.mac(acc.reshape(-1), a.reshape(-1, LANES),
                                                  b.reshape(-1, LANES)))
    with pytest.raises(ValueError):
        dp.mac(acc, a[..., :8], b)


# --------------------------------------------------------------------------- edge cases


def test_exact_cancellation_gives_positive_zero() -> None:
    x, y = b16(1.5), b16(-3.25)
    assert mac1(0, vec(x, x), vec(y, y ^ 0x8000)) == 0
    assert mac1(f32(4.875), vec(x), vec(y)) == 0  # acc = -(1.5 * -3.25)
    assert mac1(0x8000_0000, vec(), vec()) == 0  # -0 + nothing = +0 (documented)
    assert mac1(0, vec(0x8000), vec(b16(2.0))) == 0
    # Every lane -0 * 1 and a -0 accumulator: IEEE would give -0, the datapath gives +0.
    minus_zeros = np.full(LANES, 0x8000, np.uint16)
    assert mac1(0x8000_0000, minus_zeros, np.full(LANES, b16(1.0), np.uint16)) == 0


def test_cancellation_keeps_the_small_residue() -> None:
    # 1 + 2**-7 (bf16) times 1, minus 1: the residue 2**-7 survives exactly.
    got = mac1(f32(-1.0), vec(b16(1.0 + 2 ** -7)), vec(b16(1.0)))
    assert got == f32(2 ** -7)
    # Residue of a large accumulator that a product nearly cancels.
    acc = f32(1.0 + 2 ** -20)
    assert mac1(acc, vec(b16(-1.0)), vec(b16(1.0))) == f32(2 ** -20)


def test_large_exponent_spread_truncates_the_small_terms() -> None:
    big = f32(2.0 ** 100)
    assert mac1(big, vec(b16(1.0)), vec(b16(1.0))) == big
    # The truncated term is a negative one: truncation is toward zero in magnitude, so the
    # accumulator is unchanged rather than one ulp smaller.
    assert mac1(big, vec(b16(-1.0)), vec(b16(1.0))) == big
    # A tiny accumulator under a huge product vanishes into the window's low end.
    assert mac1(f32(1.0), vec(b16(2.0 ** 60)), vec(b16(1.0))) == f32(2.0 ** 60)
    # Within the guard bits the small term still rounds the result (2**24 + 2 -> ulp 2).
    assert mac1(f32(2.0 ** 24), vec(b16(2.0)), vec(b16(1.0))) == f32(2.0 ** 24 + 2)


def test_signs_of_products_and_accumulator() -> None:
    a = vec(b16(2.0), b16(-3.0), b16(0.5))
    b = vec(b16(-1.0), b16(-1.0), b16(-8.0))
    assert mac1(f32(10.0), a, b) == f32(10.0 - 2.0 + 3.0 - 4.0)
    assert mac1(f32(-10.0), a, b) == f32(-10.0 - 2.0 + 3.0 - 4.0)


def test_subnormal_operands_and_accumulator_read_as_zero() -> None:
    sub = 0x0001  # smallest positive bf16 subnormal, 2**-133
    huge = b16(2.0 ** 127)
    assert mac1(0, vec(sub), vec(huge)) == 0  # IEEE would give 2**-6
    assert mac1(0, vec(huge), vec(sub)) == 0  # either operand
    assert mac1(0, vec(huge), vec(0x0000)) == 0
    assert mac1(0x0000_0001, vec(), vec()) == 0  # binary32 subnormal accumulator
    assert mac1(0x0000_0001, vec(b16(1.0)), vec(b16(1.0))) == f32(1.0)
    assert dp.bias(np.array([sub, 0x8001], np.uint16)).tolist() == [0, 0x8000_0000]
    assert int(dp.mul(np.uint16(sub), np.uint16(huge))) == 0


def test_underflow_flushes_to_signed_zero() -> None:
    tiny = b16(2.0 ** -100)
    assert mac1(0, vec(tiny), vec(tiny)) == 0
    assert mac1(0, vec(tiny), vec(tiny ^ 0x8000)) == 0x8000_0000
    assert int(dp.mul(np.uint16(tiny), np.uint16(tiny ^ 0x8000))) == 0x8000


def test_overflow_gives_infinity() -> None:
    big = b16(2.0 ** 127)
    assert mac1(0, vec(big), vec(big)) == dp.INF32
    assert mac1(0, vec(big), vec(big ^ 0x8000)) == 0x8000_0000 | dp.INF32
    # Largest finite plus half an ulp ties to even, which carries out to infinity.
    assert mac1(0x7F7F_FFFF, vec(b16(2.0 ** 103)), vec(b16(1.0))) == dp.INF32
    # ... while a hair less than half an ulp stays finite.
    assert mac1(0x7F7F_FFFF, vec(b16(2.0 ** 102)), vec(b16(1.0))) == 0x7F7F_FFFF
    # Huge products that cancel leave a finite result.
    assert mac1(0, vec(big, big), vec(big, big ^ 0x8000)) == 0
    assert int(dp.mul(np.uint16(big), np.uint16(big))) == dp.INF16
    assert int(dp.readout(np.uint32(0x7F7F_FFFF))) == dp.INF16


def test_mac_rounds_a_one_bit_tie_to_even() -> None:
    # The products (1 + 2**-7) * 1 and -1 * 1 leave 2**-7; the accumulator 2**-7 * (1 + m * 2**-23)
    # lies 8 bits below them, inside the guard bits, so the sum 2**-6 + m * 2**-30 is exact and
    # one bit longer than binary32 (ulp 2**-29 there): an odd m is a tie.
    a, b = vec(b16(1.0 + 2 ** -7), b16(-1.0)), vec(b16(1.0), b16(1.0))
    for m, want in [(1, 2.0 ** -6), (3, 2.0 ** -6 + 2.0 ** -28), (2, 2.0 ** -6 + 2.0 ** -29)]:
        acc = 0x3C00_0000 | m  # biased exponent 120: 2**-7 * (1 + m * 2**-23)
        assert mac1(acc, a, b) == f32(want) == ref_mac(acc, a.tolist(), b.tolist())
        # The same sum negated rounds to the negated result.
        assert mac1(acc ^ 0x8000_0000, a ^ 0x8000, b) == f32(-want)


def test_readout_rounds_ties_to_even_and_carries_into_the_exponent() -> None:
    cases = {
        0x3F80_8000: 0x3F80,  # 1 + 2**-8: a tie, the even neighbour is below
        0x3F81_8000: 0x3F82,  # 1 + 3 * 2**-8: a tie, the even neighbour is above
        0x3F80_8001: 0x3F81,  # just above the tie
        0x3F80_7FFF: 0x3F80,  # just below it
        0xBF81_8000: 0xBF82,  # ties round the magnitude, whatever the sign
        0x3FFF_8000: 0x4000,  # 2 - 2**-8: the round-up carries out of the mantissa to 2.0
        0x3FFF_FFFF: 0x4000,
        0x0000_8000: 0x0000,  # subnormal accumulators read as zero of their sign
        0x8000_0001: 0x8000,
    }
    got = dp.readout(np.array(list(cases), np.uint32))
    assert [int(v) for v in got] == list(cases.values()) == [ref_readout(a) for a in cases]


def test_canonical_nan_and_infinity_bit_patterns() -> None:
    assert (dp.NAN16, dp.NAN32) == (0x7FC0, 0x7FC0_0000)
    assert (dp.INF16, dp.INF32, dp.MAX16) == (0x7F80, 0x7F80_0000, 0x7F7F)
    # Whatever a NaN's sign and payload, every unit returns the positive canonical quiet NaN.
    assert dp.to_bf16(np.array([np.nan, -np.nan])).tolist() == [0x7FC0, 0x7FC0]
    assert dp.readout(np.array([0x7F80_0001, 0xFFC1_2345], np.uint32)).tolist() == [0x7FC0] * 2
    assert int(dp.mul(np.uint16(0xFF81), np.uint16(b16(1.0)))) == 0x7FC0
    assert mac1(0x7F80_0001, vec(), vec()) == 0x7FC0_0000
    assert mac1(0, vec(0xFFC5), vec(b16(1.0))) == 0x7FC0_0000
    assert mac1(0, vec(dp.INF16), vec(0x8000)) == 0x7FC0_0000


@pytest.mark.parametrize(("acc", "a", "b", "want"), [
    (0, vec(dp.INF16), vec(b16(2.0)), dp.INF32),
    (0, vec(dp.INF16), vec(b16(-2.0)), 0x8000_0000 | dp.INF32),
    (0, vec(dp.INF16), vec(0), dp.NAN32),  # inf * 0
    (0, vec(dp.INF16), vec(1), dp.NAN32),  # inf * subnormal (= 0)
    (0, vec(dp.INF16, dp.INF16), vec(b16(1.0), b16(-1.0)), dp.NAN32),  # +inf + -inf
    (dp.INF32, vec(b16(1.0)), vec(b16(-3.0)), dp.INF32),
    (dp.INF32, vec(dp.INF16 | 0x8000), vec(b16(1.0)), dp.NAN32),
    (0x7FC0_0001, vec(b16(1.0)), vec(b16(1.0)), dp.NAN32),  # NaN accumulator
    (f32(1.0), vec(0xFFC5), vec(b16(1.0)), dp.NAN32),  # NaN operand, any payload
    (f32(1.0), vec(b16(2.0 ** 127)), vec(dp.INF16), dp.INF32),
    (0xFF80_0000, vec(b16(1.0)), vec(b16(-3.0)), 0xFF80_0000),  # -inf accumulator
    (0xFF80_0000, vec(b16(2.0 ** 127)), vec(b16(2.0 ** 127)), 0xFF80_0000),
    (0xFF80_0000, vec(dp.INF16), vec(b16(1.0)), dp.NAN32),  # -inf + +inf
    (0xFF80_0000, vec(dp.INF16), vec(b16(-1.0)), 0xFF80_0000),
])
def test_infinity_and_nan_policy(acc: int, a: np.ndarray, b: np.ndarray, want: int) -> None:
    assert mac1(acc, a, b) == want == ref_mac(acc, a.tolist(), b.tolist())


# --------------------------------------------------------------------------- other units


def test_mul_matches_reference_and_ieee() -> None:
    rng = np.random.default_rng(11)
    a = rng.integers(0, 1 << 16, 4000).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 4000).astype(np.uint16)
    got = dp.mul(a, b)
    assert [int(v) for v in got] == [ref_mul(int(x), int(y)) for x, y in zip(a, b)]
    # For normal results the product is what IEEE bfloat16 arithmetic gives.
    x, y = bf16_bits(rng, (4000,), 80, 170), bf16_bits(rng, (4000,), 80, 170)
    ieee = (x.view(ml_dtypes.bfloat16).astype(np.float32)
            * y.view(ml_dtypes.bfloat16).astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(dp.mul(x, y), ieee.view(np.uint16))


@pytest.mark.parametrize(("a", "b", "want"), [
    (dp.INF16, b16(2.0), 0x7F80),
    (dp.INF16, b16(-2.0), 0xFF80),
    (0xFF80, b16(2.0 ** -100), 0xFF80),  # infinity times a tiny number is still infinite
    (b16(2.0 ** -100), dp.INF16, 0x7F80),
    (b16(-(2.0 ** -100)), dp.INF16, 0xFF80),
    (dp.INF16, 0xFF80, 0xFF80),
    (0xFF80, 0xFF80, 0x7F80),
    (dp.INF16, 0x0000, 0x7FC0),  # inf * 0
    (0x8001, 0xFF80, 0x7FC0),  # subnormal (= 0) * inf
    (0x7F81, b16(1.0), 0x7FC0),  # NaN operands, any payload
    (b16(1.0), 0xFF81, 0x7FC0),
    (0x7FC0, dp.INF16, 0x7FC0),
])
def test_mul_infinity_and_nan_policy(a: int, b: int, want: int) -> None:
    assert int(dp.mul(np.uint16(a), np.uint16(b))) == want == ref_mul(a, b)


def test_non_integer_arrays_are_rejected_naming_their_dtype() -> None:
    with pytest.raises(TypeError) as bf16_error:
        dp.from_bf16(np.array([1.0], np.float32))
    assert str(bf16_error.value) == "expected bfloat16 bit patterns (uint16), got dtype float32"
    with pytest.raises(TypeError) as fp32_error:
        dp.from_fp32(np.array([1.0]))
    assert str(fp32_error.value) == "expected binary32 bit patterns (uint32), got dtype float64"
    with pytest.raises(TypeError, match="float64"):
        dp.mac(np.zeros(1), np.zeros((1, LANES), np.uint16), np.zeros((1, LANES), np.uint16))


def test_bfloat16_typed_arrays_are_read_as_their_bit_patterns() -> None:
    values = np.array([1.5, -2.0, 0.0, 3.0e38], dtype=ml_dtypes.bfloat16)
    bits = values.view(np.uint16)
    assert dp.from_bf16(values).tolist() == values.astype(np.float64).tolist()
    assert np.array_equal(dp.mul(values, values), dp.mul(bits, bits))
    assert np.array_equal(dp.bias(values), bits.astype(np.uint32) << 16)
    row = np.stack([values, values])
    assert np.array_equal(dp.mac(np.zeros(2, np.uint32), row, row),
                          dp.mac(np.zeros(2, np.uint32), row.view(np.uint16),
                                 row.view(np.uint16)))


def test_mac_rejects_operand_shapes_that_do_not_match() -> None:
    a = np.zeros((3, LANES), np.uint16)
    with pytest.raises(ValueError) as error:
        dp.mac(np.zeros(3, np.uint32), a, np.zeros(LANES, np.uint16))  # would broadcast
    assert str(error.value) == "shape mismatch: acc (3,), a (3, 16), b (16,)"
    with pytest.raises(ValueError, match="shape mismatch"):
        dp.mac(np.uint32(0), a, a)  # one accumulator for three rows
    with pytest.raises(ValueError, match="shape mismatch"):
        dp.mac(np.zeros(2, np.uint32), a, a)


def test_readout_and_bias() -> None:
    rng = np.random.default_rng(12)
    acc = fp32_bits(rng, (4000,), 1, 254)
    ieee = acc.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(dp.readout(acc), ieee)
    raw = rng.integers(0, 1 << 32, 2000).astype(np.uint32)
    assert [int(v) for v in dp.readout(raw)] == [ref_readout(int(v)) for v in raw]
    assert int(dp.readout(np.uint32(0x7FC0_1234))) == dp.NAN16
    x = bf16_bits(rng, (1000,))
    assert np.array_equal(dp.bias(x), x.astype(np.uint32) << 16)
    assert np.array_equal(dp.readout(dp.bias(x)), x)


def test_host_conversion_rounds_once() -> None:
    # ml_dtypes' float64 cast goes through float32 and rounds twice on this value.
    assert int(dp.to_bf16(1.0 + 2 ** -8 + 2 ** -30)) == 0x3F81
    rng = np.random.default_rng(13)
    values = rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000)
    got = dp.to_bf16(values)
    for v, g in zip(values, got):
        assert int(g) == ref_round(int(v < 0), abs(Fraction(float(v))), 7)
    special = dp.to_bf16(np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45]))
    assert special.tolist() == [dp.INF16, 0xFF80, dp.NAN16, 0x8000, 0]
    assert np.array_equal(dp.from_bf16(dp.to_bf16(values)), dp.from_bf16(got))


def test_host_add_is_ieee() -> None:
    rng = np.random.default_rng(14)
    a, b = bf16_bits(rng, (2000,), 100, 150), bf16_bits(rng, (2000,), 100, 150)
    got = dp.add(a, b)
    for x, y, g in zip(a, b, got):
        exact = Fraction(float(dp.from_bf16(x))) + Fraction(float(dp.from_bf16(y)))
        assert int(g) == ref_round(int(exact < 0), abs(exact), 7)


# --------------------------------------------------------------------------- accuracy

#: Empirical tolerance: worst |mac - exact| / sum|a*b| for K <= 4096, the lengths the tests
#: run (the worst case is all-positive data, where truncation toward zero biases every step the
#: same way); ``benchmarks/datapath_accuracy.py`` measures it, with these operands and seeds,
#: up to K = 16384 (docs/numerics.md section 4).
MEASURED = 1e-6


#: The operands of each distribution: ``benchmarks/datapath_accuracy.py``'s, which measures
#: the same errors the page quotes.
_bench = importlib.util.spec_from_file_location(
    "datapath_accuracy",
    Path(__file__).resolve().parents[1] / "benchmarks" / "datapath_accuracy.py")
assert _bench is not None and _bench.loader is not None
accuracy = importlib.util.module_from_spec(_bench)
_bench.loader.exec_module(accuracy)
operands = accuracy.operands


@pytest.mark.parametrize("dist", ["normal", "positive", "lognormal"])
@pytest.mark.parametrize("k", [16, 128, 1024, 4096])
def test_dot_products_are_within_the_stated_float64_tolerance(dist: str, k: int) -> None:
    rng = np.random.default_rng(k)
    trials, steps = 64, k // LANES
    x, y = operands(dist, rng, (trials, steps, LANES))
    a, b = dp.to_bf16(x), dp.to_bf16(y)
    acc = dp.accumulate(np.zeros(trials, np.uint32), a, b)
    prod = dp.from_bf16(a) * dp.from_bf16(b)  # exact in float64
    exact = prod.sum(axis=(1, 2))
    scale = np.abs(prod).sum(axis=(1, 2))
    err = np.abs(dp.from_fp32(acc) - exact) / scale
    # The documented bound: n MAC steps, each off by less than 2**-23 of its terms' magnitude.
    assert err.max() <= steps * 2.0 ** -23
    assert err.max() <= MEASURED
    # The bfloat16 readout adds at most half a bfloat16 ulp (2**-8 relative).
    out = dp.from_bf16(dp.readout(acc))
    assert np.all(np.abs(out - exact) <= 2.0 ** -8 * np.abs(exact) + 2 * err.max() * scale)


def test_accumulate_equals_repeated_mac() -> None:
    rng = np.random.default_rng(21)
    a, b = bf16_bits(rng, (8, 6, LANES), 110, 140), bf16_bits(rng, (8, 6, LANES), 110, 140)
    acc = fp32_bits(rng, (8,), 110, 140)
    want = acc
    for step in range(6):
        want = dp.mac(want, a[:, step], b[:, step])
    assert np.array_equal(dp.accumulate(acc, a, b), want)


# --------------------------------------------------------------------------- activation


def all_bf16_in(limit: float) -> np.ndarray:
    """Every normal bfloat16 pattern with |x| < limit."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    exp = (bits >> 7) & 0xFF
    bits = bits[(exp != 0) & (exp != 0xFF)]
    return bits[np.abs(dp.from_bf16(bits)) < limit]


def ulp16(f: np.ndarray) -> np.ndarray:
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(f), 2.0 ** -126))) - 7)


@pytest.mark.parametrize("afm", sorted(dp.AF_FUNCTIONS))
def test_activation_accuracy_inside_the_domain(afm: int) -> None:
    spec = dp.AF_FUNCTIONS[afm]
    bits = all_bf16_in(8.0 - 2.0 ** -5)  # outermost segments are tails, tested below
    x = dp.from_bf16(bits)
    y = dp.from_bf16(dp.af(dp.bias(bits), dp.af_lut(afm)))
    f = np.array([spec.fn(v) for v in x])
    # Within 1.5 bfloat16 ulps of the exact value, plus 2**-12 for the chords near zero.
    assert np.all(np.abs(y - f) <= 1.5 * ulp16(f) + 2.0 ** -12)


def test_activation_equals_its_documented_composition() -> None:
    rng = np.random.default_rng(31)
    acc = np.concatenate([fp32_bits(rng, (300,), 100, 140), fp32_bits(rng, (100,))])
    lut = rng.integers(0, 1 << 16, dp.AF_WORDS).astype(np.uint16)
    lut[(lut >> 7 & 0xFF) == 0xFF] = 0  # keep the table finite
    got = dp.af(acc, lut)
    for value, out in zip(acc, got):
        x = ref_readout(int(value))
        if x & 0x7FFF == dp.INF16:
            x = x & 0x8000 | dp.MAX16
        sign, mag = x >> 15, abs(float(dp.from_bf16(np.uint16(x))))
        j = min(math.floor(mag * 32), 255)
        seg = 255 - j if sign else 256 + j
        base = b16(-j / 32 if sign else j / 32)
        v, k = int(lut[2 * seg]), int(lut[2 * seg + 1])
        want = ref_readout(ref_mac(int(dp.bias(np.uint16(v))), [k, k], [x, base ^ 0x8000]))
        assert int(out) == want


def test_activation_tails_and_specials() -> None:
    acc = dp.to_fp32(np.array([-1e30, -100.0, -8.0, 8.0, 100.0, 1e30, np.inf, -np.inf,
                               np.nan, 0.0]))
    sigmoid = dp.from_bf16(dp.af(acc, dp.af_lut(0))).tolist()
    assert sigmoid[:8] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert math.isnan(sigmoid[8]) and sigmoid[9] == 0.5
    relu = dp.from_bf16(dp.af(acc, dp.af_lut(3)))
    assert relu[:3].tolist() == [0.0, 0.0, 0.0]
    assert relu[3:6].tolist() == [8.0, 100.0, float(dp.from_bf16(dp.to_bf16(1e30)))]
    assert int(dp.af(acc[6], dp.af_lut(3))) == dp.MAX16  # +inf saturates first
    identity = dp.af(acc, dp.af_lut(7))
    assert np.array_equal(identity[:6], dp.readout(acc[:6]))


def test_activation_segments() -> None:
    # 7.9 is 7.90625 in bfloat16: 32 * 7.90625 = 253.
    x = dp.to_bf16(np.array([0.0, -0.0, 1 / 64, -1 / 64, 1 / 32, -1 / 32, 7.9, -7.99, 9.0,
                             -1e9]))
    seg, base = dp.af_index(x)
    assert seg.tolist() == [256, 255, 256, 255, 257, 254, 256 + 253, 0, 511, 0]
    assert dp.from_bf16(base).tolist() == [0.0, 0.0, 0.0, 0.0, 1 / 32, -1 / 32,
                                           253 / 32, -255 / 32, 255 / 32, -255 / 32]
    row = dp.af_lut(0)
    assert row.shape == (dp.AF_WORDS,) and row.dtype == np.uint16
    assert float(dp.from_bf16(row[2 * 256])) == 0.5  # sigmoid(0), the value word
    assert float(dp.from_bf16(row[2 * 256 + 1])) == pytest.approx(0.25, rel=2 ** -7)  # slope
    with pytest.raises(ValueError) as error:
        dp.af_lut(8)
    assert str(error.value) == "unknown AFM 8; known: [0, 1, 2, 3, 4, 5, 6, 7]"


#: The built-in functions by AFM (docs/numerics.md, AF16), defined independently in float64.
AF_REFERENCE: dict[int, tuple[str, Callable[[float], float]]] = {
    0: ("sigmoid", lambda x: 1.0 / (1.0 + math.exp(-x))),
    1: ("tanh", lambda x: math.expm1(2.0 * x) / (math.expm1(2.0 * x) + 2.0)),
    2: ("gelu", lambda x: 0.5 * x * math.erfc(-x / math.sqrt(2.0))),
    3: ("relu", lambda x: x if x > 0.0 else 0.0),
    4: ("leaky_relu", lambda x: x if x > 0.0 else x / 100.0),
    5: ("silu", lambda x: x / (1.0 + math.exp(-x))),
    6: ("exp", lambda x: math.e ** x),
    7: ("identity", lambda x: x),
}
#: The documented constant tails: (value below -8 + 1/32, value from 8 - 1/32), None = chord.
AF_TAILS: dict[int, tuple[float | None, float | None]] = {
    0: (0.0, 1.0), 1: (-1.0, 1.0), 2: (0.0, None), 3: (None, None), 4: (None, None),
    5: (0.0, None), 6: (0.0, None), 7: (None, None),
}


def test_af_functions_are_the_documented_table() -> None:
    table = dp.AF_FUNCTIONS
    assert {afm: spec.name for afm, spec in table.items()} == {
        afm: name for afm, (name, _) in AF_REFERENCE.items()}
    assert {afm: (spec.low, spec.high) for afm, spec in table.items()} == AF_TAILS


@pytest.mark.parametrize("afm", sorted(AF_REFERENCE))
def test_af_function_definitions_are_the_named_functions(afm: int) -> None:
    fn, ref = dp.AF_FUNCTIONS[afm].fn, AF_REFERENCE[afm][1]
    for x in [-7.5, -3.0, -1.0, -0.3, -0.0, 0.0, 0.3, 1.0, 2.5, 7.5]:
        assert fn(x) == pytest.approx(ref(x), rel=1e-12, abs=1e-15), x


@pytest.mark.parametrize("afm", sorted(AF_REFERENCE))
def test_af_lut_evaluates_the_named_function_within_the_documented_error(afm: int) -> None:
    ref = AF_REFERENCE[afm][1]
    bits = all_bf16_in(8.0 - 2.0 ** -5)[::17]
    x = dp.from_bf16(bits)
    y = dp.from_bf16(dp.af(dp.bias(bits), dp.af_lut(afm)))
    f = np.array([ref(v) for v in x])
    assert np.all(np.abs(y - f) <= 1.5 * ulp16(f) + 2.0 ** -12)
    # Beyond the domain: the documented constant, else the outermost chord extended.
    low, high = AF_TAILS[afm]
    far = dp.from_bf16(dp.af(dp.to_fp32(np.array([-1e4, -100.0, 100.0, 1e4])), dp.af_lut(afm)))
    if low is not None:
        assert far[:2].tolist() == [low, low]
    if high is not None:
        assert far[2:].tolist() == [high, high]
    if afm != 6:  # exp's chord is linear, far below e**100
        assert far[1:3].tolist() == pytest.approx([ref(-100.0), ref(100.0)], rel=2e-2, abs=2e-2)


def test_af_lut_puts_a_specs_tails_in_the_outermost_segments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(dp.AF_FUNCTIONS, 7, dp.AfSpec("clamp2", lambda x: x, -2.0, 2.0))
    row = dp.af_lut(7)
    values, slopes = dp.from_bf16(row[0::2]), dp.from_bf16(row[1::2])
    assert (values[0], slopes[0], values[-1], slopes[-1]) == (-2.0, 0.0, 2.0, 0.0)
    # Every other segment is the chord of x: its value at the base, slope 1.
    bases = [-(255 - i) / 32 for i in range(1, 256)] + [(i - 256) / 32 for i in range(256, 511)]
    assert values[1:-1].tolist() == bases
    assert slopes[1:-1].tolist() == [1.0] * 510


def test_af_specs_are_immutable_records() -> None:
    spec = dp.AF_FUNCTIONS[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.low = 0.5  # type: ignore[misc]
    assert not hasattr(spec, "__dict__")  # slotted: no attributes beyond the fields
    assert [field.name for field in dataclasses.fields(dp.AfSpec)] == ["name", "fn", "low",
                                                                       "high"]


def test_is_bf16_knows_the_dtype_without_importing_ml_dtypes():
    assert dp.is_bf16(np.dtype(ml_dtypes.bfloat16))
    assert not dp.is_bf16(np.dtype(np.uint16)) and not dp.is_bf16(np.dtype(np.float16))
    # a command's start-up (ml_dtypes' import takes most of a second) does not import it
    probe = ("import sys, numpy as np; import patton.cli, patton.cli.aim, patton.sim.functional, "
             "patton.runtime.inputs as i; from patton.sim import datapath as dp; "
             "assert not dp.is_bf16(np.dtype(np.uint16)); print('ml_dtypes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out == "False\n"
