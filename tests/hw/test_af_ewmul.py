"""The AF16 and EWMUL16 units against ``sim/datapath.py`` (amaranth.sim), every output bit.

AF16 (``docs/numerics.md`` §3): :class:`~patton.hw.af.AfSegment` (the segment of an
accumulator readout), then :class:`~patton.hw.af.AfOperands` on the LUT column the segment
names, the bank's :class:`~patton.hw.mac.MacUnit` and :class:`~patton.hw.readout.Bf16Readout`:
``sim.datapath.af`` for every AFM's default table, on inputs that hit every segment, both tails,
signed zeros, subnormals, infinities and NaN, and on a random table. EWMUL16:
:class:`~patton.hw.ewmul.EwmulUnit`: ``sim.datapath.mul`` on ties, exponent boundaries and
special values.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.sim import Simulator
from patton.hw.af import AfOperands, AfSegment, lut_words
from patton.hw.ewmul import EwmulUnit
from patton.hw.mac import LANES, Bf16Readout, MacUnit
from patton.hw.params import ChannelParams
from patton.sim import datapath as dp

PARAMS = ChannelParams(rows=4)


def _simulate(top, bench) -> None:
    sim = Simulator(top)
    sim.add_testbench(bench)
    sim.run()


def _lanes(words) -> int:
    return sum(int(w) << (16 * i) for i, w in enumerate(words))


def _words(value: int, count: int = LANES) -> list[int]:
    return [(value >> (16 * i)) & 0xFFFF for i in range(count)]


def _saturated(x: np.ndarray) -> np.ndarray:
    """``x`` with infinities replaced by the largest finite bfloat16, as ``datapath.af``."""
    x = np.asarray(x, dtype=np.uint16)
    inf = (x & 0x7FFF) == dp.INF16
    return np.where(inf, (x & 0x8000) | dp.MAX16, x).astype(np.uint16)


# --------------------------------------------------------------------------- LUT contents


def test_lut_words_are_the_default_tables():
    words = lut_words(PARAMS)
    assert len(words) == PARAMS.lut_rows * PARAMS.columns
    for afm in range(PARAMS.lut_rows):
        row = [w for c in range(PARAMS.columns) for w in _words(words[afm * PARAMS.columns + c])]
        assert row == dp.af_lut(afm).tolist()
    small = ChannelParams(rows=4, device=PARAMS.device.with_(columns=4))
    assert set(lut_words(small)) == {0}  # a row that cannot hold a table starts at zero


# --------------------------------------------------------------------------- segments


def test_segment_of_every_bfloat16_pattern():
    dut = AfSegment()
    values = np.arange(1 << 16, dtype=np.uint16)
    got = []

    async def bench(ctx):
        for v in values.tolist():
            ctx.set(dut.value, v)
            got.append(ctx.get(dut.segment))

    _simulate(dut, bench)
    seg, _ = dp.af_index(_saturated(values))  # the segment of AF16's input
    assert got == seg.tolist()


# --------------------------------------------------------------------------- AF16


class _AfChain(Elaboratable):
    """AfSegment -> (LUT column) -> AfOperands -> MacUnit -> Bf16Readout, as the channel
    wires them for one bank (the column comes from the testbench: the mat read)."""

    def __init__(self) -> None:
        self.segment = AfSegment()
        self.operands = AfOperands(PARAMS)
        self.mac = MacUnit()
        self.readout = Bf16Readout()

    def elaborate(self, platform):
        m = Module()
        m.submodules.segment, m.submodules.operands = self.segment, self.operands
        m.submodules.mac, m.submodules.readout = self.mac, self.readout
        m.d.comb += [
            self.operands.evaluate.eq(1),
            self.operands.value.eq(self.segment.value),
            self.operands.segment.eq(self.segment.segment),
            self.mac.a.eq(self.operands.a), self.mac.b.eq(self.operands.b),
            self.mac.acc.eq(self.operands.acc), self.readout.acc.eq(self.mac.result),
        ]
        return m


def _af(x: np.ndarray, lut: np.ndarray) -> list[int]:
    """Evaluate AF16 of readouts ``x`` on LUT row ``lut`` (1024 words) in the RTL units."""
    chain = _AfChain()
    columns = [_lanes(lut[c * LANES:(c + 1) * LANES]) for c in range(PARAMS.columns)]
    out: list[int] = []

    async def bench(ctx):
        for v in x.tolist():
            ctx.set(chain.segment.value, v)
            ctx.set(chain.operands.word, columns[ctx.get(chain.segment.segment) >> 3])
            out.append(ctx.get(chain.readout.value))

    _simulate(chain, bench)
    return out


def _inputs(rng: np.random.Generator) -> np.ndarray:
    """Readouts that hit every segment (a random point of each), both tails, the segment
    boundaries near zero, signed zeros, subnormals, infinities and NaN."""
    j = np.arange(256)
    inside = ((j + rng.random(256)) / 32.0).astype(np.float32)  # truncated: stays in segment j
    points = (np.concatenate([inside, -inside]).view(np.uint32) >> 16).astype(np.uint16)
    seg, _ = dp.af_index(points)
    assert sorted(set(seg.tolist())) == list(range(dp.AF_SEGMENTS))
    special = np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, dp.INF16, 0xFF80,
                        dp.NAN16, dp.MAX16, 0xFF7F, 0x4100, 0xC100, 0x4101, 0xC0FF, 0x3D00,
                        0xBD00, 0x3CFF, 0x5F00, 0xDF00], dtype=np.uint16)
    return np.concatenate([points, special])


@pytest.mark.parametrize("afm", range(8))
def test_af_of_every_segment_matches_the_model(afm):
    x = _inputs(np.random.default_rng(afm))
    lut = dp.af_lut(afm)
    want = dp.af(dp.bias(x), lut)
    got = _af(dp.readout(dp.bias(x)), lut)  # x itself; subnormals read out as signed zeros
    bad = [(hex(int(v)), hex(g), hex(int(w))) for v, g, w in zip(x, got, want) if g != w]
    assert not bad, bad[:5]


def test_af_on_a_random_table_matches_the_model():
    # A LUT row any write may leave: every word random, infinities and NaNs included.
    rng = np.random.default_rng(99)
    lut = rng.integers(0, 1 << 16, dp.AF_WORDS).astype(np.uint16)
    lut[:8] = [dp.INF16, 0xFF80, dp.NAN16, 0x0001, 0x8000, dp.MAX16, 0x7F00, 0x0080]
    x = np.concatenate([_inputs(rng)[::4], dp.to_bf16(np.array([-8.0, -7.99, -7.95]))])
    got = _af(x, lut)
    want = dp.af(dp.bias(x), lut)
    assert got == want.tolist()


# --------------------------------------------------------------------------- EWMUL16


def _ewmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The EWMUL unit's products of ``a`` and ``b`` (rows of 16 lanes)."""
    dut = EwmulUnit()
    out: list[list[int]] = []

    async def bench(ctx):
        for x, y in zip(a, b):
            ctx.set(dut.a, _lanes(x))
            ctx.set(dut.b, _lanes(y))
            out.append(_words(ctx.get(dut.result)))

    _simulate(dut, bench)
    return np.array(out, dtype=np.uint16)


def _bf16(sign, exponent, mantissa) -> np.ndarray:
    sign, exponent, mantissa = (np.asarray(v, dtype=np.int64) for v in (sign, exponent, mantissa))
    return ((sign << 15) | (exponent << 7) | mantissa).astype(np.uint16)


def test_ewmul_matches_the_model():
    rng = np.random.default_rng(5)
    shape = (40, LANES)
    # Exponent sums around the underflow (127) and overflow (381) edges, and mid range.
    sums = rng.choice([125, 126, 127, 128, 129, 254, 380, 381, 382, 383], shape)
    ea = rng.integers(np.maximum(1, sums - 254), np.minimum(254, sums - 1) + 1)
    a = _bf16(rng.integers(0, 2, shape), ea, rng.integers(0, 128, shape))
    b = _bf16(rng.integers(0, 2, shape), sums - ea, rng.integers(0, 128, shape))
    # Exact ties (the dropped bits exactly half, odd and even kept bits), from a pool.
    pool_a = _bf16(rng.integers(0, 2, 20000), 127, rng.integers(0, 128, 20000))
    pool_b = _bf16(rng.integers(0, 2, 20000), 127, rng.integers(0, 128, 20000))
    product = (pool_a.astype(np.int64) & 0x7F | 0x80) * (pool_b.astype(np.int64) & 0x7F | 0x80)
    drop = np.where(product >> 15, 8, 7)
    tie = (product & ((1 << drop) - 1)) == 1 << (drop - 1)
    ties_a, ties_b = pool_a[tie][:16 * 8].reshape(8, LANES), pool_b[tie][:16 * 8].reshape(8, LANES)
    # Special values against everything.
    special = np.array([0x0000, 0x8000, 0x0001, 0x807F, dp.INF16, 0xFF80, dp.NAN16, 0xFFC1,
                        0x0080, dp.MAX16, 0x3F80, 0xBF80, 0x7F00, 0x0100, 0x4B00, 0x3F81],
                       dtype=np.uint16)
    sa, sb = np.meshgrid(special, special)
    uniform = rng.integers(0, 1 << 16, (20, LANES)).astype(np.uint16)
    normal = _bf16(rng.integers(0, 2, (20, LANES)), rng.integers(100, 155, (20, LANES)),
                   rng.integers(0, 128, (20, LANES)))
    a = np.concatenate([a, ties_a, sa, uniform, normal])
    b = np.concatenate([b, ties_b, sb, normal[::-1], uniform])
    assert len(ties_a) == 8
    want = dp.mul(a, b)
    got = _ewmul(a, b)
    bad = np.argwhere(got != want)
    assert not len(bad), [(hex(int(a[i, j])), hex(int(b[i, j])), hex(int(got[i, j])),
                           hex(int(want[i, j]))) for i, j in bad[:5]]
    seen = set(want.ravel().tolist())
    assert {dp.NAN16, dp.INF16, 0xFF80, 0, 0x8000} <= seen
