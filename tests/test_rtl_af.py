"""EWMUL16, AF16 (its LUT rows) and RDAF16 on the Verilator build of the channel.

Programs go through the cycle model; each schedule is replayed by the schedule player and scored
(:func:`patton.tb.scoreboard.score`): every RD, RDMAC16 and RDAF16 bit-exact with the
functional model's replay (``sim.replay``), the final mats word for word (the LUT rows
included: what a write changed there is compared, the default tables on both sides are not),
and the RTL checker's flags equal to ``verify``'s (none). The sweep runs every AFM over inputs
that hit every one of its 512 segments, both tails, signed zeros, subnormals, infinities and
NaN, and accumulators that MACs left (not exact bfloat16).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.hw.params import ChannelParams
from patton.sim import datapath as dp
from patton.sim.cycle_model import CycleModel
from patton.sim.device import AF_ROW_BASE
from patton.sim.isa import Cfr, Command, Instruction, Opcode, channel_bit

pytestmark = pytest.mark.verilator

CH0 = channel_bit(0)
#: Inputs beside one point of every segment: signed zeros, subnormals, infinities, NaN, the
#: largest finite, both tails (|x| >= 8), the boundaries around zero.
SPECIAL = np.array([0x0000, 0x8000, 0x0001, 0x807F, dp.INF16, 0xFF80, dp.NAN16, dp.MAX16,
                    0xFF7F, 0x4100, 0xC100, 0x42C8, 0xC2C8, 0x3D00, 0xBD00, 0x3CFF],
                   dtype=np.uint16)


@pytest.fixture(scope="module")
def player():
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64))


def _channel0(program):
    return [c for c in CycleModel(record=True).run(program + [Instruction(Opcode.EOC)]).schedule
            if c.channel == 0]


def _bits(rng, n):
    return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def segment_points(rng: np.random.Generator) -> np.ndarray:
    """One bfloat16 point inside each of the 512 segments (``j/32 <= |x| < (j+1)/32``)."""
    j = np.arange(256)
    inside = ((j + rng.random(256)) / 32.0).astype(np.float32)  # truncated: stays in j
    return (np.concatenate([inside, -inside]).view(np.uint32) >> 16).astype(np.uint16)


def _score(player, schedule, name):
    from patton.tb.scoreboard import score

    result = player.play(schedule, name)
    return result, score(schedule, result)


def test_af16_every_afm_every_segment(player):
    rng = np.random.default_rng(17)
    program = [Instruction(Opcode.WR_GB, opsize=1, gpr0=0, channel_mask=CH0, col=0,
                           data=_bits(rng, 16)),
               Instruction(Opcode.WR_ABK, gpr0=0, channel_mask=CH0, row=0, col=0, opsize=1,
                           data=_bits(rng, 16))]
    rounds = 0
    for afm in range(8):
        x = np.concatenate([segment_points(rng)[rng.permutation(512)], SPECIAL])
        seg, _ = dp.af_index(dp.readout(dp.bias(x)))
        assert set(seg.tolist()) == set(range(512))
        program.append(Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=afm))
        for r in range(len(x) // 16):
            program += [Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=CH0,
                                    data=x[16 * r:16 * r + 16]),
                        Instruction(Opcode.AF, channel_mask=CH0),
                        Instruction(Opcode.RD_AF, gpr0=0, channel_mask=CH0)]
            rounds += 1
        # accumulators a MAC left (binary32, rounded by the readout before the segment)
        program += [Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=CH0,
                                data=dp.to_bf16(rng.uniform(-9, 9, 16))),
                    Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=CH0, row=0, col=0),
                    Instruction(Opcode.AF, channel_mask=CH0),
                    Instruction(Opcode.RD_AF, gpr0=0, channel_mask=CH0),
                    Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=CH0)]
        rounds += 1
    schedule = _channel0(program)
    rows = {c.row - AF_ROW_BASE for c in schedule if c.command is Command.AF16}
    assert rows == set(range(8))
    result, verdict = _score(player, schedule, "af-sweep")
    assert verdict.reads == rounds + 8 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0
    assert verdict.mat_mismatches == 0
    af = np.concatenate([r.data for r in result.reads if r.command is Command.RDAF16])
    assert {dp.NAN16, dp.MAX16, 0x3F80, 0} <= set(af.tolist())


def test_af16_on_lut_rows_written_by_wr_and_ewmul16(player):
    """WRs replace the column of each bank's segment in LUT row 4, an EWMUL16 rewrites one
    column of banks 4g + 2 in LUT row 2; AF16 then uses the written words (the functional
    model's), and the mats compare every written LUT word; unwritten default words count for
    neither side."""
    from patton.tb.scoreboard import score

    rng = np.random.default_rng(23)
    x = dp.to_bf16(rng.uniform(-7.9, 7.9, 16))
    seg, _ = dp.af_index(x)
    program = [Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=CH0, data=x)]
    program += [Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=CH0, bank=b,
                            row=AF_ROW_BASE + 4, col=int(seg[b]) // 8, data=_bits(rng, 16))
                for b in range(16)]
    program += [Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=4),
                Instruction(Opcode.AF, channel_mask=CH0),
                Instruction(Opcode.RD_AF, gpr0=0, channel_mask=CH0),
                Instruction(Opcode.EWMUL, opsize=2, channel_mask=CH0, row=AF_ROW_BASE + 2,
                            col=min(int(seg[2]) // 8, 62)),
                Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=2),
                Instruction(Opcode.AF, channel_mask=CH0),
                Instruction(Opcode.RD_AF, gpr0=0, channel_mask=CH0)]
    schedule = _channel0(program)
    result, verdict = _score(player, schedule, "af-lut-writes")
    assert verdict.reads == 2 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0
    # 16 WR columns and 4 banks x 2 columns of EWMUL products (unless one equals the table)
    lut = {k for k in result.mats if k[1] >= AF_ROW_BASE}
    assert len(lut) >= 16 + 6 and verdict.mat_words == len(result.mats)
    assert verdict.mat_mismatches == 0
    first = next(r.data for r in result.reads if r.command is Command.RDAF16)
    assert (first != dp.af(dp.bias(x), dp.af_lut(4))).sum() >= 12  # the written words, used
    # One corrupted LUT word is one mismatch; a default LUT word in the dump changes nothing.
    key = sorted(lut)[0]
    bad = {**result.mats, key: result.mats[key] ^ np.uint16(1)}
    other = score(schedule, dataclasses.replace(result, mats=bad))
    assert other.mat_mismatches == 1
    default = dp.af_lut(7).reshape(64, 16)[5]
    extra = {**result.mats, (0, AF_ROW_BASE + 7, 5): default}
    other = score(schedule, dataclasses.replace(result, mats=extra))
    assert other.mat_mismatches == 0


@pytest.mark.parametrize("seed", range(2))
def test_ewmul16_random_data_under_both_ewmul_bg(player, seed):
    rng = np.random.default_rng(seed)
    program = []
    for bank in range(16):
        words = _bits(rng, 64)
        words[rng.random(64) < 0.1] = SPECIAL[rng.integers(16, size=1)]
        for c in range(4):
            program.append(Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=CH0, bank=bank,
                                       row=3, col=c, data=words[16 * c:16 * c + 16]))
    for bg, cols in ((0, 2), (1, 4), (0, 3)):
        program += [Instruction(Opcode.WR_CFR, cfr=int(Cfr.EWMUL_BG), value=bg),
                    Instruction(Opcode.EWMUL, opsize=cols, channel_mask=CH0, row=3)]
        program += [Instruction(Opcode.RD_SBK, gpr0=0, channel_mask=CH0, bank=b, row=3, col=c)
                    for b in (2, 6, 10, 14) for c in range(4)]
    schedule = _channel0(program)
    assert {c.cfr[Cfr.EWMUL_BG] for c in schedule if c.command is Command.EWMUL16} == {0, 1}
    _, verdict = _score(player, schedule, f"ewmul{seed}")
    assert verdict.reads == 48 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0
    assert verdict.mat_mismatches == 0 and verdict.mat_words == 16 * 4
