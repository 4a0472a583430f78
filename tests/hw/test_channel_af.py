"""EWMUL16, AF16 (with its LUT rows) and RDAF16 on the channel (amaranth.sim).

Schedules from the cycle model (``TimedCommand.cfr`` packed into ``broadcast``/``ewmul_bg``, LUT
rows ``AF_ROW_BASE + k`` into ``lut``/``row``) and hand-written ones are replayed on the channel;
every read (RD, RDMAC16, RDAF16) must equal :func:`patton.sim.replay.replay` on the functional
model bit for bit, at the latency of ``TIMING``, with the violations ``verify`` lists. The full
sweep of every AFM over every segment runs under Verilator (``tests/test_rtl_af.py``); the units
alone are ``tests/hw/test_af_ewmul.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.hw.isa import ProtocolCode
from patton.sim import datapath as dp
from patton.sim.check import verify
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.functional import FunctionalModel
from patton.sim.isa import CFR_RESET, Cfr, Command, Instruction
from patton.sim.isa import Opcode as Op
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING
from test_channel import (
    CH0,
    _moved,
    _squeezed,
    _timing_set,
    assert_same_reads,
    expected_reads,
    run_many,
    schedule_of,
)

_C = Command
LUT = AF_ROW_BASE


def _words(rng: np.random.Generator, n: int = 16) -> np.ndarray:
    values = rng.standard_normal(n).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def _cfr(**values: int) -> tuple[int, ...]:
    cfr = dict(CFR_RESET)
    cfr.update({Cfr[k]: v for k, v in values.items()})
    return tuple(cfr[c] for c in Cfr)


#: AF16 inputs: signed zeros, subnormals, both tails (beyond +-8), infinities, NaN, the
#: largest finite, segment boundaries near zero and inside the domain.
SPECIAL = np.array([0x0000, 0x8000, 0x0001, 0x807F, dp.INF16, 0xFF80, dp.NAN16, dp.MAX16,
                    0xC2C8, 0x42C8, 0x4100, 0xC0FF, 0x3D00, 0xBD00, 0x3F80, 0xFFC1],
                   dtype=np.uint16)


def ewmul_program(rng: np.random.Generator) -> list[Instruction]:
    """Operands in banks 4g and 4g+1 (some special words), bank 4g+2 pre-filled, then EWMUL
    under EWMUL_BG 0 (group 0 only) and 1 (every group), each followed by reads of 4g+2."""
    program = []
    for bank in range(16):
        words = _words(rng, 32)
        if bank % 4 == 1:
            words[:16] = np.resize(SPECIAL, 16)[rng.permutation(16)]
        program.append(Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=bank, row=1,
                                   col=0, data=words[:16]))
        program.append(Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=bank, row=1,
                                   col=1, data=words[16:]))
    reads = [Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=4 * g + 2, row=1, col=c)
             for g in range(4) for c in range(2)]
    program.append(Instruction(Op.WR_CFR, cfr=int(Cfr.EWMUL_BG), value=0))
    program.append(Instruction(Op.EWMUL, opsize=1, channel_mask=CH0, row=1, col=0))
    program += reads
    program.append(Instruction(Op.WR_CFR, cfr=int(Cfr.EWMUL_BG), value=1))
    program.append(Instruction(Op.EWMUL, opsize=2, channel_mask=CH0, row=1, col=0))
    program += reads
    return program


def af_program(rng: np.random.Generator) -> list[Instruction]:
    """Accumulators from WR_BIAS (special and random values) and from MACs, through AF16 under
    several AFMs, each read back with RD_AF; RD_MAC shows the accumulators stay."""
    program = [Instruction(Op.WR_GB, opsize=1, gpr0=0, channel_mask=CH0, col=0,
                           data=_words(rng)),
               Instruction(Op.WR_ABK, gpr0=0, channel_mask=CH0, row=0, col=0, opsize=1,
                           data=_words(rng))]
    for afm, inputs in ((0, SPECIAL), (1, SPECIAL[::-1]), (2, SPECIAL[rng.permutation(16)]),
                        (6, _words(rng)), (3, _words(rng))):
        program += [Instruction(Op.WR_BIAS, gpr0=0, channel_mask=CH0, data=inputs),
                    Instruction(Op.WR_CFR, cfr=int(Cfr.AFM), value=afm),
                    Instruction(Op.AF, channel_mask=CH0),
                    Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0)]
        if afm == 0:  # what biases read out as: subnormals flushed, NaN canonical
            program.append(Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0))
    program += [Instruction(Op.MAC_ABK, opsize=1, channel_mask=CH0, row=0, col=0),
                Instruction(Op.WR_CFR, cfr=int(Cfr.AFM), value=7),
                Instruction(Op.AF, channel_mask=CH0),
                Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0),
                Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0)]
    return program


def lut_write_program(rng: np.random.Generator) -> list[Instruction]:
    """A LUT row overwritten by WRs, then used by AF16: bank b's accumulator lies in the
    segment whose column the WR replaced (value and slope of every segment of that column)."""
    afm = 4
    x = dp.to_bf16(rng.uniform(-7.9, 7.9, 16))
    seg, _ = dp.af_index(x)
    program = [Instruction(Op.WR_BIAS, gpr0=0, channel_mask=CH0, data=x)]
    for bank in range(16):
        program.append(Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=bank,
                                   row=LUT + afm, col=int(seg[bank]) // 8, data=_words(rng)))
    program += [Instruction(Op.WR_CFR, cfr=int(Cfr.AFM), value=afm),
                Instruction(Op.AF, channel_mask=CH0),
                Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0),
                Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=3, row=LUT + afm,
                            col=int(seg[3]) // 8)]
    return program


def _timed(commands: list[TimedCommand]) -> list[TimedCommand]:
    """Each command at the earliest cycle after the previous one that breaks no timing rule."""
    out: list[TimedCommand] = []
    for cmd in commands:
        cmd = dataclasses.replace(cmd, cycle=out[-1].cycle + 1 if out else 0)
        while any(v.kind == "timing" for v in verify(out + [cmd])):
            cmd = dataclasses.replace(cmd, cycle=cmd.cycle + 1)
        out.append(cmd)
    return out


def _cmd(command, bank=-1, row=-1, col=-1, words=None, cfr=()) -> TimedCommand:
    payload = None if words is None else np.asarray(words, dtype=np.uint16)
    return TimedCommand(0, 0, command, bank, row, col, payload=payload, cfr=cfr)


def hazard_schedule(rng: np.random.Generator) -> list[TimedCommand]:
    """Back-to-back commands on a LUT row, each pair's AF16 read back with RDAF16: an EWMUL16
    that writes the LUT row of banks 4g + 2 right before an AF16 that reads the column written
    (their accumulators lie in its segments; an RD reads it too), two AF16s in a row (the second
    while the first is in stage 1), a MAC right before an AF16 (AF16 must see the MAC's result),
    a MAC16 right before an AF16."""
    row = LUT + 6
    bcast = _cfr(BROADCAST=1)
    inputs = _words(rng)
    inputs[2::4] = dp.to_bf16(-rng.uniform(0.07, 0.24, 4))  # segments 248..253: column 31
    readback = [_cmd(_C.TMOD), _cmd(_C.RDAF16), _cmd(_C.TMOD)]
    cmds = [_cmd(_C.TMOD), _cmd(_C.WRMAC16, words=inputs), _cmd(_C.TMOD),
            _cmd(_C.ACT16, row=row),
            _cmd(_C.AF16, row=row),  # the first waits for the ACT16 (nRCDRDAF)
            _cmd(_C.EWMUL16, row=row, col=31), _cmd(_C.AF16, row=row), _cmd(_C.RD, 2, row, 31),
            *readback,
            _cmd(_C.AF16, row=row), _cmd(_C.AF16, row=row), *readback,
            _cmd(_C.MAC, 5, row, 32, cfr=bcast), _cmd(_C.AF16, row=row), *readback,
            _cmd(_C.MAC16, row=row, col=33, cfr=bcast), _cmd(_C.AF16, row=row),
            _cmd(_C.TMOD), _cmd(_C.RDAF16), _cmd(_C.RDMAC16)]
    schedule = _timed(cmds)
    gaps = {a.command: b.cycle - a.cycle for a, b in zip(schedule, schedule[1:])
            if b.command is _C.AF16 and a.command is not _C.TMOD}
    assert gaps == {_C.ACT16: TIMING.params["nRCDRDAF"], _C.MAC: 1, _C.AF16: 1, _C.MAC16: 1,
                    _C.EWMUL16: 1}
    return schedule


@pytest.fixture(scope="module")
def runs() -> dict:
    """Run every schedule on one channel (resets between), with one functional model."""
    rng = np.random.default_rng(11)
    data = {"ewmul": schedule_of(ewmul_program(rng)), "af": schedule_of(af_program(rng)),
            "lut": schedule_of(lut_write_program(rng)), "hazard": hazard_schedule(rng)}
    squeezed = {f"squeezed {name} {f}": _squeezed(data[name], f)
                for name in ("ewmul", "af", "lut") for f in (0.2, 0.5)}
    protocol = [_cmd(_C.ACT16, row=2), _cmd(_C.AF16, row=2),  # a normal row: LUT_ROW
                _cmd(_C.AF16, row=LUT + 2),  # another row than the open one: WRONG_ROW
                _cmd(_C.PREA), _cmd(_C.ACT16, row=LUT + 8),  # no LUT row 8: RANGE
                _cmd(_C.ACT, 3, LUT + 7), _cmd(_C.AF16, row=LUT + 7),  # NOT_ALL_OPEN
                _cmd(_C.ACT16, row=LUT + 7), _cmd(_C.EWMUL16, row=LUT + 7, col=64),  # RANGE
                _cmd(_C.RD, 3, 7, 0),  # row 7 is not LUT row 7: WRONG_ROW
                _cmd(_C.AF16, row=LUT + 7), _cmd(_C.TMOD), _cmd(_C.RDAF16)]
    data["protocol"] = [dataclasses.replace(c, cycle=200 * i) for i, c in enumerate(protocol)]
    schedules = {**data, **squeezed}
    got = dict(zip(schedules, run_many(list(schedules.values()))))
    model = FunctionalModel(DEVICE)
    want = {}
    for name, schedule in schedules.items():
        legal = [c for c in schedule if c.cycle not in
                 {v.cycle for v in verify(schedule) if v.kind == "protocol"}]
        want[name] = expected_reads(legal, model)
    return {name: (schedules[name], got[name], want[name]) for name in schedules}


def test_ewmul16_under_ewmul_bg_0_and_1(runs):
    schedule, got, want = runs["ewmul"]
    assert verify(schedule) == [] and got["violations"] == []
    cfrs = [c.cfr[Cfr.EWMUL_BG] for c in schedule if c.command is _C.EWMUL16]
    assert cfrs == [0, 1, 1]
    assert_same_reads(got["reads"], want)
    # Reads of bank 4g + 2, columns 0 and 1, after each EWMUL: under EWMUL_BG = 0 only
    # group 0's column 0 holds the product, the other groups keep the words written before.
    first, second = [w for *_, w in want[:8]], [w for *_, w in want[8:]]
    assert np.array_equal(first[0], second[0])
    assert all(not np.array_equal(first[2 * g], second[2 * g]) for g in (1, 2, 3))
    products = set(np.concatenate(second).tolist())
    assert dp.NAN16 in products and {dp.INF16, 0xFF80} & products and {0, 0x8000} & products


def test_af16_and_rdaf16(runs):
    schedule, got, want = runs["af"]
    assert verify(schedule) == [] and got["violations"] == []
    assert_same_reads(got["reads"], want)
    af_reads = [(t, data) for t, c, data in got["reads"] if c is _C.RDAF16]
    issued = [c.cycle for c in schedule if c.command is _C.RDAF16]
    assert [t for t, _ in af_reads] == [c + TIMING.latency[_C.RDAF16] for c in issued]
    assert len(af_reads) == 6
    values = np.concatenate([d for _, d in af_reads])
    assert {dp.NAN16, 0x3F80, 0, 0x3F00} <= set(values.tolist())  # NaN, sigmoid tails, 0.5


def test_an_overwritten_lut_row_is_what_af16_uses(runs):
    schedule, got, want = runs["lut"]
    assert verify(schedule) == [] and got["violations"] == []
    assert_same_reads(got["reads"], want)
    (_, _, af), (_, _, rd) = [r for r in got["reads"]]
    inputs = next(c.payload for c in schedule if c.command is _C.WRMAC16)
    default = dp.af(dp.bias(inputs), dp.af_lut(4))
    assert (af != default).sum() >= 12  # the written words were used, not the default table
    assert rd.any()


def test_back_to_back_commands_on_a_lut_row(runs):
    schedule, got, want = runs["hazard"]
    assert verify(schedule) == [] and got["violations"] == []
    assert_same_reads(got["reads"], want)
    af = [data for _, c, data in got["reads"] if c is _C.RDAF16]
    assert len(af) == 4 and len(want) == 6
    assert np.array_equal(af[0], af[1])  # the accumulators did not change in between
    assert (af[1] != af[2]).tolist() == [b == 5 for b in range(16)]  # the MAC's bank
    assert (af[2] != af[3])[0::2].all()  # the MAC16's banks (BROADCAST = 1: the even ones)
    inputs = next(c.payload for c in schedule if c.command is _C.WRMAC16)
    default = dp.af(dp.bias(inputs), dp.af_lut(6))
    assert (af[0] != default)[2::4].all()  # EWMUL16 wrote the words their AF16 used


@pytest.mark.parametrize("name", [f"squeezed {n} {f}" for n in ("ewmul", "af", "lut")
                                  for f in (0.2, 0.5)])
def test_squeezed_schedules_match_verify_and_values(runs, name):
    schedule, got, want = runs[name]
    found = verify(schedule)
    assert all(v.kind == "timing" for v in found) and found
    have = {(t, rule) for t, _, rules, _ in got["violations"] for rule in rules}
    assert have == _timing_set(found)
    assert all(p == ProtocolCode.NONE for *_, p in got["violations"])
    assert_same_reads(got["reads"], want)


def test_protocol_errors_of_the_new_commands(runs):
    schedule, got, want = runs["protocol"]
    codes = [(t, p) for t, _, _, p in got["violations"]]
    P = ProtocolCode
    assert codes == [(200, P.LUT_ROW), (400, P.WRONG_ROW), (800, P.RANGE), (1200, P.NOT_ALL_OPEN),
                     (1600, P.RANGE), (1800, P.WRONG_ROW)]
    # The models refuse the same commands.
    refused = {v.cycle for v in verify(schedule) if v.kind == "protocol"}
    assert refused == {200, 400, 800, 1200, 1600, 1800}
    assert_same_reads(got["reads"], want)


def test_mutated_schedules_match_verify():
    """Each EWMUL16, AF16, RDAF16 and the command after it moved 1..40 cycles earlier: the
    checker flags exactly ``verify``'s (cycle, rule) pairs."""
    rng = np.random.default_rng(4)
    schedule = schedule_of(ewmul_program(rng)[-12:] + af_program(rng)[:10])
    new = (_C.EWMUL16, _C.AF16, _C.RDAF16)
    index = [i for i, c in enumerate(schedule) if c.command in new]
    index = sorted({j for i in index for j in (i, i + 1) if 0 < j < len(schedule)})
    cases = []
    for i in index:
        for earlier in (1, 5, 30):
            moved = _moved(schedule, i, earlier)
            if moved is not None:
                end = schedule[i].cycle + 100
                cases.append([c for c in moved if c.cycle <= end])
    got = run_many(cases)
    flagged = 0
    for case, result in zip(cases, got):
        want = _timing_set(verify(case))
        have = {(t, rule) for t, _, rules, _ in result["violations"] for rule in rules}
        assert have == want, case
        flagged += bool(want)
    assert flagged >= len(cases) // 2
