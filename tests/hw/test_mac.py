"""The bank MAC unit RTL against ``sim/datapath.py``: every output bit, on random and edge cases.

Each MAC family below builds operand vectors with NumPy (some families draw a large random pool
and keep the vectors whose reference result hits the boundary they are about), computes the
expected accumulators with :func:`patton.sim.datapath.mac` and drives the same vectors through
:class:`patton.hw.mac.MacUnit` in ``amaranth.sim``. The units are combinational, so a testbench
sets the inputs and reads the settled output at once.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from patton.hw.mac import LANES, Bf16Readout, BiasLoad, MacUnit
from patton.sim import datapath

ONE16 = 0x3F80  # 1.0 in bfloat16
SIGN16 = 0x8000
SIGN32 = 0x8000_0000


# --------------------------------------------------------------------------- helpers


def _pack_lanes(lanes: np.ndarray) -> int:
    """Return the 256-bit port value of 16 bfloat16 lanes (lane ``i`` in bits 16i+15..16i)."""
    return sum(int(word) << (16 * lane) for lane, word in enumerate(lanes))


def _bf16(sign, exponent, mantissa) -> np.ndarray:
    """Return bfloat16 bit patterns from fields (array-like, broadcast)."""
    sign, exponent, mantissa = (np.asarray(x, dtype=np.int64) for x in (sign, exponent, mantissa))
    return ((sign << 15) | (exponent << 7) | mantissa).astype(np.uint16)


def _fp32(sign, exponent, mantissa) -> np.ndarray:
    """Return binary32 bit patterns from fields (array-like, broadcast)."""
    sign, exponent, mantissa = (np.asarray(x, dtype=np.int64) for x in (sign, exponent, mantissa))
    return ((sign << 31) | (exponent << 23) | mantissa).astype(np.uint32)


def _random_normal16(rng, shape, low=1, high=254) -> np.ndarray:
    """Return random normal bfloat16 values with biased exponents in ``[low, high]``."""
    return _bf16(rng.integers(0, 2, shape), rng.integers(low, high + 1, shape),
                 rng.integers(0, 128, shape))


def _random_normal32(rng, shape, low=1, high=254) -> np.ndarray:
    """Return random normal binary32 values with biased exponents in ``[low, high]``."""
    return _fp32(rng.integers(0, 2, shape), rng.integers(low, high + 1, shape),
                 rng.integers(0, 1 << 23, shape))


def _simulate(dut, drive, read, count: int) -> list[int]:
    """Run ``count`` combinational evaluations of ``dut``; return the outputs read."""
    outputs = []

    async def testbench(ctx):
        for index in range(count):
            drive(ctx, index)
            outputs.append(read(ctx))

    sim = Simulator(dut)
    sim.add_testbench(testbench)
    if os.environ.get("WAVES") == "1":
        with sim.write_vcd(f"{type(dut).__name__}.vcd"):
            sim.run()
    else:
        sim.run()
    return outputs


def _check_mac(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Drive vectors through :class:`MacUnit` and compare every result bit with the model."""
    acc = np.asarray(acc, dtype=np.uint32)
    a = np.asarray(a, dtype=np.uint16)
    b = np.asarray(b, dtype=np.uint16)
    assert a.shape == b.shape == acc.shape + (LANES,)
    expected = datapath.mac(acc, a, b)
    dut = MacUnit()

    def drive(ctx, index):
        ctx.set(dut.a, _pack_lanes(a[index]))
        ctx.set(dut.b, _pack_lanes(b[index]))
        ctx.set(dut.acc, int(acc[index]))

    got = _simulate(dut, drive, lambda ctx: ctx.get(dut.result), len(acc))
    mismatches = [(i, got[i], int(expected[i])) for i in range(len(acc)) if got[i] != expected[i]]
    assert not mismatches, "\n".join(
        f"vector {i}: acc={int(acc[i]):#010x} a=[{', '.join(f'{x:#06x}' for x in a[i])}] "
        f"b=[{', '.join(f'{x:#06x}' for x in b[i])}]: rtl {g:#010x}, model {e:#010x}"
        for i, g, e in mismatches[:5])


def _select(mask: np.ndarray, count: int, what: str) -> np.ndarray:
    """Return the indices of the first ``count`` set entries of ``mask``; fail if too few."""
    index = np.flatnonzero(mask)
    assert len(index) >= count, f"the pool holds only {len(index)} vectors with {what}"
    return index[:count]


# --------------------------------------------------------------------------- MAC families


def test_mac_random_bit_patterns():
    """Uniform random bit patterns: every class (zero, subnormal, Inf, NaN) mixed in."""
    rng = np.random.default_rng(1)
    count = 200
    _check_mac(rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32),
               rng.integers(0, 1 << 16, (count, LANES), dtype=np.uint16),
               rng.integers(0, 1 << 16, (count, LANES), dtype=np.uint16))


def test_mac_random_dot_products():
    """Normal operands in a realistic exponent band, random signs, accumulator of similar size."""
    rng = np.random.default_rng(2)
    count = 200
    a = _random_normal16(rng, (count, LANES), 118, 134)
    b = _random_normal16(rng, (count, LANES), 118, 134)
    acc = _random_normal32(rng, count, 115, 140)
    # A fifth of the vectors have all-positive terms (no cancellation, largest carries).
    a[: count // 5] &= 0x7FFF
    b[: count // 5] &= 0x7FFF
    acc[: count // 5] &= 0x7FFF_FFFF
    _check_mac(acc, a, b)


def test_mac_accumulates_like_the_model():
    """A 32-step dot product, the RTL result fed back as the next accumulator."""
    rng = np.random.default_rng(3)
    steps = 32
    a = _random_normal16(rng, (steps, LANES), 120, 132)
    b = _random_normal16(rng, (steps, LANES), 120, 132)
    expected = datapath.accumulate(np.uint32(0), a, b)
    dut = MacUnit()
    results = []

    async def testbench(ctx):
        acc = 0
        for step in range(steps):
            ctx.set(dut.a, _pack_lanes(a[step]))
            ctx.set(dut.b, _pack_lanes(b[step]))
            ctx.set(dut.acc, acc)
            acc = ctx.get(dut.result)
            results.append(acc)

    sim = Simulator(dut)
    sim.add_testbench(testbench)
    sim.run()
    assert results[-1] == int(expected)
    assert results == [int(x) for x in datapath.mac(
        np.array([0] + results[:-1], dtype=np.uint32), a, b)]


def test_mac_cancellation():
    """Exact and near-total cancellation: zero sums are +0, tiny remainders renormalise."""
    rng = np.random.default_rng(4)
    count = 60
    # Lanes 2k+1 repeat lanes 2k with the sign flipped: the products cancel exactly.
    a = _random_normal16(rng, (count, LANES), 100, 150)
    b = _random_normal16(rng, (count, LANES), 100, 150)
    a[:, 1::2] = a[:, 0::2] ^ SIGN16
    b[:, 1::2] = b[:, 0::2]
    exact_acc = np.where(rng.integers(0, 2, count) == 1, SIGN32, 0).astype(np.uint32)  # +-0
    # Accumulator minus (almost) itself: acc = -mac(0, a', b') for fresh random a', b'.
    a2 = _random_normal16(rng, (count, LANES), 120, 134)
    b2 = _random_normal16(rng, (count, LANES), 120, 134)
    near_acc = datapath.mac(np.zeros(count, np.uint32), a2, b2) ^ np.uint32(SIGN32)
    # The same with one ulp of the accumulator moved, so the remainder is a few window bits.
    moved_acc = near_acc + np.uint32(1)
    _check_mac(np.concatenate([exact_acc, near_acc, moved_acc]),
               np.concatenate([a, a2, a2]), np.concatenate([b, b2, b2]))


def test_mac_exponent_spread():
    """One dominant term, the others 25..45 binades below: shifts around the 32-bit window."""
    rng = np.random.default_rng(5)
    count = 150
    a = _random_normal16(rng, (count, LANES), 100, 110)
    b = _bf16(rng.integers(0, 2, (count, LANES)), 127, rng.integers(0, 128, (count, LANES)))
    big = rng.integers(0, LANES, count)
    a[np.arange(count), big] = _random_normal16(rng, count, 135, 145)
    # Accumulator: dominant, negligible or absent, in turns.
    acc = _random_normal32(rng, count, 100, 170)
    acc[count // 3:2 * count // 3] = 0
    _check_mac(acc, a, b)

    # Directed: accumulator 1.0 (u = 253) against one product with u = 253 - d, d = 29..34.
    distance = np.arange(29, 35)
    a = np.zeros((len(distance), LANES), np.uint16)
    b = np.zeros((len(distance), LANES), np.uint16)
    a[:, 0] = _bf16(0, 127, 0x7F)  # product significand 0xFF * 0xFF: all window bits vary
    b[:, 0] = _bf16(1, 253 - 127 - distance, 0x7F)
    _check_mac(np.full(len(distance), 0x3F80_0000, np.uint32), a, b)


def test_mac_zeros_and_subnormals():
    """Zero and subnormal operands and accumulators, of both signs, mixed with live terms."""
    rng = np.random.default_rng(6)
    count = 120

    def zeroish(shape):
        # Zero (m = 0) or subnormal (e = 0, m != 0), either sign.
        return _bf16(rng.integers(0, 2, shape), 0, rng.integers(0, 4, shape) * 0x15)

    a = _random_normal16(rng, (count, LANES), 110, 140)
    b = _random_normal16(rng, (count, LANES), 110, 140)
    knock_a = rng.random((count, LANES)) < 0.4
    knock_b = rng.random((count, LANES)) < 0.4
    a[knock_a] = zeroish(knock_a.sum())
    b[knock_b] = zeroish(knock_b.sum())
    a[: count // 4] = zeroish((count // 4, LANES))  # no live product at all
    acc = _random_normal32(rng, count, 110, 140)
    dead_acc = rng.random(count) < 0.5
    acc[dead_acc] = _fp32(rng.integers(0, 2, dead_acc.sum()), 0,
                          rng.integers(0, 3, dead_acc.sum()) * 0x2A_AAAA)
    _check_mac(acc, a, b)

    # Directed: -0 + (-0) * (+x) and friends give +0.
    a = np.full((4, LANES), SIGN16, np.uint16)
    b = np.full((4, LANES), ONE16, np.uint16)
    acc = np.array([SIGN32, 0, SIGN32 | 0x1, 0x7F_FFFF], np.uint32)
    _check_mac(acc, a, b)


def test_mac_infinities_and_nans():
    """Inf and NaN in lanes and accumulator: propagation, 0 * Inf, Inf - Inf, canonical NaN."""
    rng = np.random.default_rng(7)
    count = 160
    specials16 = np.array([0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0000, 0x8000, 0x0001,
                           ONE16], np.uint16)
    specials32 = np.array([0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFF80_0001, 0x0000_0000,
                           0x3F80_0000, 0xC2C8_0000], np.uint32)
    a = _random_normal16(rng, (count, LANES), 110, 140)
    b = _random_normal16(rng, (count, LANES), 110, 140)
    # One to three special lanes per vector.
    for _ in range(3):
        lane = rng.integers(0, LANES, count)
        rows = np.flatnonzero(rng.random(count) < 0.7)
        a[rows, lane[rows]] = rng.choice(specials16, len(rows))
        b[rows, lane[rows]] = rng.choice(specials16, len(rows))
    acc = rng.choice(specials32, count)
    expected = datapath.mac(acc, a, b)
    classes = {int(x) for x in expected} & {datapath.NAN32, datapath.INF32,
                                            SIGN32 | datapath.INF32}
    assert len(classes) == 3, "the family must reach NaN, +Inf and -Inf"
    _check_mac(acc, a, b)


def test_mac_overflow_to_infinity():
    """Finite inputs whose rounded sum leaves the binary32 range, and sums just inside it."""
    rng = np.random.default_rng(8)
    pool = 20000
    # Products of a near-largest operand and an operand in [0.5, 4), accumulator near the top.
    a = _random_normal16(rng, (pool, LANES), 250, 254)
    b = _bf16(rng.integers(0, 2, (pool, LANES)), rng.integers(126, 129, (pool, LANES)),
              rng.integers(0, 128, (pool, LANES)))
    acc = _random_normal32(rng, pool, 250, 254)
    expected = datapath.mac(acc, a, b)
    exponent = (expected >> 23) & 0xFF
    overflow = _select(exponent == 255, 80, "overflow to infinity")
    largest = _select(exponent == 254, 80, "a result in the top binade")
    keep = np.concatenate([overflow, largest])

    # Directed: the largest finite plus half an ulp (a tie that rounds to even, i.e. up, so
    # to infinity), and plus less than half an ulp (stays finite).
    directed_acc = np.full(2, 0x7F7F_FFFF, np.uint32)
    directed_a = np.zeros((2, LANES), np.uint16)
    directed_b = np.zeros((2, LANES), np.uint16)
    directed_a[:, 0] = _bf16(0, [254 - 24, 254 - 25], 0)  # 2**(127-24), 2**(127-25)
    directed_b[:, 0] = ONE16
    assert list(datapath.mac(directed_acc, directed_a, directed_b)) == [0x7F80_0000, 0x7F7F_FFFF]
    _check_mac(np.concatenate([acc[keep], directed_acc]),
               np.concatenate([a[keep], directed_a]), np.concatenate([b[keep], directed_b]))


def test_mac_underflow_to_zero():
    """Results around the smallest normal: flushed to signed zero, or kept at exponent 1."""
    rng = np.random.default_rng(9)
    pool = 20000
    # Product exponents ea + eb - 127 in -1..3 (biased), accumulator in the lowest binades.
    ea = rng.integers(1, 31, (pool, LANES))
    a = _bf16(rng.integers(0, 2, (pool, LANES)), ea, rng.integers(0, 128, (pool, LANES)))
    b = _bf16(rng.integers(0, 2, (pool, LANES)), 126 - ea + rng.integers(0, 5, (pool, LANES)),
              rng.integers(0, 128, (pool, LANES)))
    acc = _random_normal32(rng, pool, 1, 3)
    acc[: pool // 2] = 0
    expected = datapath.mac(acc, a, b)
    exponent = (expected >> 23) & 0xFF
    flushed_negative = _select(expected == SIGN32, 50, "a flush to -0")
    flushed_positive = _select((expected == 0) & (acc != 0), 50, "a +0 result")
    smallest = _select(exponent == 1, 80, "a result in the smallest normal binade")
    keep = np.concatenate([flushed_negative, flushed_positive, smallest])

    # Directed: 2**-126 - 2**-151 is 25 one bits, a tie whose even neighbour is 2**-126, so
    # the rounding carry lifts it into the smallest normal binade; 2**-126 - 2**-150 needs no
    # rounding and lies below 2**-126, so it flushes to +0.
    directed_acc = np.full(2, 0x0080_0000, np.uint32)  # 2**-126
    directed_a = np.zeros((2, LANES), np.uint16)
    directed_b = np.zeros((2, LANES), np.uint16)
    directed_a[:, 0] = _bf16(1, 1, 0)  # -2**-126
    directed_b[:, 0] = _bf16(0, [127 - 25, 127 - 24], 0)  # 2**-25, 2**-24
    assert list(datapath.mac(directed_acc, directed_a, directed_b)) == [0x0080_0000, 0]
    _check_mac(np.concatenate([acc[keep], directed_acc]),
               np.concatenate([a[keep], directed_a]), np.concatenate([b[keep], directed_b]))


def test_mac_round_to_nearest_even_ties():
    """Sums exactly halfway between two binary32 values: ties go to the even significand."""
    rng = np.random.default_rng(10)
    count = 120
    # acc +- 1/2 ulp(acc) or acc +- 3/2 ulp(acc), where ulp(acc) = 2**(ec - 150): lane 0
    # holds 2**(ec - 151) (biased bfloat16 exponent ec - 24) or 1.5 * 2**(ec - 150).
    exponent = rng.integers(30, 220, count)
    mantissa = rng.integers(2, (1 << 23) - 2, count)  # +- 3/2 ulp stays in the binade
    mantissa[count // 4: count // 2] &= ~1  # even: ties stay
    sign = rng.integers(0, 2, count)
    lane_sign = rng.integers(0, 2, count)
    three_halves = (rng.random(count) < 0.5).astype(np.int64)
    # All ones, plus half an ulp away from zero: rounding up carries into the exponent.
    carry = slice(0, count // 4)
    mantissa[carry] = (1 << 23) - 1
    lane_sign[carry] = sign[carry]
    three_halves[carry] = 0
    acc = _fp32(sign, exponent, mantissa)
    a = np.zeros((count, LANES), np.uint16)
    b = np.zeros((count, LANES), np.uint16)
    a[:, 0] = _bf16(lane_sign, exponent - 24 + three_halves, 0x40 * three_halves)
    b[:, 0] = ONE16
    # Some vectors spread the same amount over two lanes, each half of it.
    split = np.flatnonzero(rng.random(count) < 0.3)
    a[split, 0] -= np.uint16(1 << 7)  # one binade lower
    a[split, 1] = a[split, 0]
    b[split, 1] = ONE16

    # Every vector is an exact tie, and the model rounds it as IEEE binary32 RNE does (the
    # float64 sum is exact here, and NumPy's float64 -> float32 cast rounds to nearest even).
    exact = datapath.from_fp32(acc) + (datapath.from_bf16(a) * datapath.from_bf16(b)).sum(-1)
    nearest = exact.astype(np.float32)
    away = np.where(exact > nearest, np.inf, -np.inf).astype(np.float32)
    other = np.nextafter(nearest, away).astype(np.float64)
    assert np.all(np.abs(exact - nearest) == np.abs(other - exact))
    assert np.array_equal(datapath.mac(acc, a, b), nearest.view(np.uint32))
    _check_mac(acc, a, b)


# --------------------------------------------------------------------------- readout, bias


def _readout_vectors() -> np.ndarray:
    """Return binary32 patterns covering every sign and exponent around the bfloat16 ties."""
    rng = np.random.default_rng(11)
    low = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.int64)
    high = np.array([0x00, 0x01, 0x7E, 0x7F], np.int64)  # top 7 mantissa bits: even/odd/carry
    sign, exponent, top, bottom = np.meshgrid(np.arange(2), np.arange(256), high, low,
                                              indexing="ij")
    grid = _fp32(sign.ravel(), exponent.ravel(), (top.ravel() << 16) | bottom.ravel())
    random = rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([grid, random])


def test_readout_matches_model():
    """RDMAC16 rounding on every exponent, both signs, ties, carries, Inf/NaN and subnormals."""
    vectors = _readout_vectors()
    expected = datapath.readout(vectors)
    dut = Bf16Readout()

    def drive(ctx, index):
        ctx.set(dut.acc, int(vectors[index]))

    got = _simulate(dut, drive, lambda ctx: ctx.get(dut.value), len(vectors))
    mismatches = [(int(vectors[i]), g, int(e))
                  for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not mismatches, [f"{v:#010x}: rtl {g:#06x}, model {e:#06x}"
                            for v, g, e in mismatches[:5]]
    assert datapath.INF16 in set(got) and datapath.NAN16 in set(got)


def test_bias_load_matches_model_exhaustively():
    """WRMAC16 widening, and what the accumulator then reads out as, for all 65536 bfloat16
    patterns."""
    vectors = np.arange(1 << 16, dtype=np.uint16)
    expected = datapath.bias(vectors)
    readout = datapath.readout(expected)
    dut = BiasLoad()

    def drive(ctx, index):
        ctx.set(dut.bias, index)

    got = _simulate(dut, drive, lambda ctx: (ctx.get(dut.acc), ctx.get(dut.value)),
                    len(vectors))
    mismatches = [i for i, ((g, v), e, r) in enumerate(zip(got, expected, readout))
                  if g != e or v != r]
    assert not mismatches, [f"{i:#06x}: rtl {got[i]}, model {int(expected[i]):#010x} "
                            f"{int(readout[i]):#06x}" for i in mismatches[:5]]


# --------------------------------------------------------------------------- Verilog


@pytest.mark.parametrize("component, name, ports", [
    (MacUnit, "mac_unit", ["input [255:0] a", "input [255:0] b", "input [31:0] acc",
                           "output [31:0] result"]),
    (Bf16Readout, "bf16_readout", ["input [31:0] acc", "output [15:0] value"]),
    (BiasLoad, "bias_load", ["input [15:0] bias", "output [31:0] acc", "output [15:0] value"]),
])
def test_verilog_conversion(component, name, ports):
    """The units convert to Verilog with their signature as the port list, and no clock."""
    text = verilog.convert(component(), name=name, emit_src=False)
    assert f"module {name}(" in text
    for port in ports:
        assert port in text
    assert "clk" not in text and "rst" not in text
