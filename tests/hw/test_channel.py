"""Channel-level tests (amaranth.sim): schedules from the cycle model replayed on the RTL.

Values are compared bit-exactly with :func:`patton.sim.replay.replay` on the functional model
(the MAC units are ``patton.hw.mac``'s), timing verdicts with :func:`patton.sim.check.verify`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from patton.hw.channel import Channel
from patton.hw.isa import IMPLEMENTED, Opcode, ProtocolCode, command_layout
from patton.hw.params import ChannelParams
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.functional import FunctionalModel
from patton.sim.isa import CFR_RESET, Cfr, Command, Instruction, channel_bit
from patton.sim.isa import Opcode as Op
from patton.sim.replay import replay
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING

PARAMS = ChannelParams.from_device(DEVICE, rows=4)
LAYOUT = command_layout(PARAMS)
CH0 = channel_bit(0)
DRAIN = max(TIMING.latency[c] for c in (Command.RD, Command.RDMAC16)) + 2


# ----------------------------------------------------------------------------- bench

def _lanes(value: int) -> np.ndarray:
    return np.array([(value >> (16 * i)) & 0xFFFF for i in range(16)], dtype=np.uint16)


def _build(params: ChannelParams = PARAMS) -> tuple[Channel, Simulator, ClockDomain]:
    dut = Channel(params)
    top = Module()
    top.submodules.dut = dut
    top.domains.sync = domain = ClockDomain("sync")
    sim = Simulator(top)
    sim.add_clock(1e-9)
    return dut, sim, domain


def encode(cmd: TimedCommand) -> dict:
    """Return the command-port value of a schedule entry (no payload: zeros, all lanes).

    ``broadcast`` and ``ewmul_bg`` are CFR BROADCAST and EWMUL_BG as the entry's instruction
    was decoded (the reset values without one); a LUT row ``AF_ROW_BASE + k`` is ``lut = 1``,
    ``row = k``.
    """
    data, mask = 0, 0xFFFF
    payload = cmd.payload
    if payload is not None:
        data = sum(int(w) << (16 * i) for i, w in enumerate(np.asarray(payload)))
        if cmd.mask is not None:
            mask = cmd.mask
    cfr = cmd.cfr or tuple(CFR_RESET[c] for c in Cfr)
    lut = cmd.row >= AF_ROW_BASE
    return {"valid": 1, "command": Opcode[cmd.command.name], "bank": max(cmd.bank, 0),
            "row": cmd.row - AF_ROW_BASE if lut else max(cmd.row, 0), "lut": int(lut),
            "col": max(cmd.col, 0), "data": data, "mask": mask,
            "broadcast": cfr[Cfr.BROADCAST], "ewmul_bg": cfr[Cfr.EWMUL_BG]}


def run_many(schedules: list[list[TimedCommand]], params: ChannelParams = PARAMS) -> list[dict]:
    """Replay each schedule on one simulated channel, resetting it in between.

    The reset clears every register (row state, mode, timing ages, accumulators, counters)
    but not the mats and the global buffer (see :func:`small_runs` for why that is safe).
    """
    dut, sim, domain = _build(params)
    results: list[dict] = []

    async def bench(ctx):
        for schedule in schedules:
            ctx.set(domain.rst, 1)
            await ctx.tick()
            ctx.set(domain.rst, 0)
            results.append(await _replay(ctx, dut, schedule))

    sim.add_testbench(bench)
    sim.run()
    return results


async def _replay(ctx, dut: Channel, schedule: list[TimedCommand]) -> dict:
    by_cycle: dict[int, TimedCommand] = {}
    for cmd in schedule:
        assert cmd.cycle not in by_cycle, "one command per cycle"
        by_cycle[cmd.cycle] = cmd
    out: dict = {"reads": [], "violations": [], "count": None}
    for t in range(max(by_cycle) + DRAIN):
        cmd = by_cycle.get(t)
        if cmd is None:  # keep the fields: fewer signal changes, faster simulation
            ctx.set(dut.cmd.valid, 0)
        else:
            ctx.set(dut.cmd, LAYOUT.const(encode(cmd)))
        assert ctx.get(dut.cycle) == t
        if cmd is not None:
            v = ctx.get(dut.violation)
            if v.valid:
                rules = {i for i in range(len(TIMING.rules)) if v.rules >> i & 1}
                out["violations"].append((t, cmd.command, rules, v.protocol))
        for port in (dut.rdata, dut.rdata_mac):  # same cycle: the RD was issued first
            r = ctx.get(port)
            if r.valid:
                out["reads"].append((t, Command(r.command.value), _lanes(r.data)))
        await ctx.tick()
    out["count"] = ctx.get(dut.violations)
    return out


def schedule_of(program: list[Instruction]) -> list[TimedCommand]:
    """Return the timed schedule the cycle model gives ``program`` (channel 0 only)."""
    result = CycleModel(record=True).run(program + [Instruction(Op.EOC)])
    return [c for c in result.schedule if c.channel == 0]


def _words(rng: np.random.Generator, columns: int) -> np.ndarray:
    values = rng.standard_normal(columns * 16).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def small_program(rng: np.random.Generator) -> list[Instruction]:
    """Return a program touching every implemented command, rows below the stand-in depth."""
    w = lambda n: _words(rng, n)  # noqa: E731
    return [
        Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=3, row=1, col=2, data=w(1)),
        Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=3, row=1, col=5, data=w(1),
                    mask=0x00F0),
        Instruction(Op.WR_GB, opsize=3, gpr0=0, channel_mask=CH0, data=w(3)),
        Instruction(Op.WR_GB, opsize=1, gpr0=0, channel_mask=CH0, col=1, data=w(1),
                    mask=0x8001),
        Instruction(Op.WR_ABK, gpr0=0, channel_mask=CH0, row=2, col=1, opsize=1, data=w(1),
                    mask=0x0005),
        Instruction(Op.WR_ABK, gpr0=0, channel_mask=CH0, row=2, col=0, opsize=1, data=w(1)),
        Instruction(Op.WR_BIAS, gpr0=0, channel_mask=CH0, data=w(1), mask=0x7FFF),
        Instruction(Op.MAC_ABK, opsize=3, channel_mask=CH0, row=2),
        Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0),
        Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=3, row=1, col=2),
        Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=3, row=1, col=5),
        Instruction(Op.COPY_BKGB, opsize=1, channel_mask=CH0, bank=3, row=1, col=5),
        Instruction(Op.COPY_GBBK, opsize=2, channel_mask=CH0, bank=5, row=3, col=1),
        Instruction(Op.MAC_SBK, opsize=2, channel_mask=CH0, bank=5, row=3, col=1),
        Instruction(Op.MAC_SBK, opsize=1, channel_mask=CH0, bank=3, row=1, col=2),
        Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=5, row=3, col=2),
        Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0),
        Instruction(Op.WR_CFR, cfr=int(Cfr.EWMUL_BG), value=0),
        Instruction(Op.EWMUL, opsize=2, channel_mask=CH0, row=2, col=0),
        Instruction(Op.WR_CFR, cfr=int(Cfr.EWMUL_BG), value=1),
        Instruction(Op.EWMUL, opsize=1, channel_mask=CH0, row=2, col=1),
        Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=2, row=2, col=0),
        Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=6, row=2, col=1),
        Instruction(Op.WR_CFR, cfr=int(Cfr.AFM), value=5),
        Instruction(Op.AF, channel_mask=CH0),
        Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0),
    ]


def random_program(rng: np.random.Generator, length: int) -> list[Instruction]:
    """Return ``length`` random instructions of the implemented kinds, then reads of the state.

    Rows 0..3 and columns 0..5 only, so that writes, copies, MACs and element-wise multiplies
    meet; the program ends with RD_MAC, RD_AF and a read of four addresses it touched.
    """
    program = []
    touched = []
    for _ in range(length):
        kind = rng.integers(12)
        bank, row = int(rng.integers(16)), int(rng.integers(PARAMS.rows))
        size = int(rng.integers(1, 4))
        col = int(rng.integers(0, 4))
        mask = int(rng.integers(1, 1 << 16)) if rng.integers(2) else None
        if kind in (0, 7, 8):
            touched.append((bank, row, col))
        if kind == 0:
            program.append(Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=bank, row=row,
                                       col=col, data=_words(rng, 1), mask=mask))
        elif kind == 1:
            program.append(Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=bank,
                                       row=row, col=col))
        elif kind == 2:
            program.append(Instruction(Op.WR_GB, opsize=size, gpr0=0, channel_mask=CH0,
                                       col=col, data=_words(rng, size), mask=mask))
        elif kind == 3:
            program.append(Instruction(Op.WR_BIAS, gpr0=0, channel_mask=CH0,
                                       data=_words(rng, 1), mask=mask))
        elif kind == 4:
            program.append(Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0))
        elif kind == 5:
            program.append(Instruction(Op.MAC_ABK, opsize=size, channel_mask=CH0, row=row,
                                       col=col))
        elif kind == 6:
            program.append(Instruction(Op.MAC_SBK, opsize=size, channel_mask=CH0, bank=bank,
                                       row=row, col=col))
        elif kind == 7:
            op = Op.COPY_BKGB if rng.integers(2) else Op.COPY_GBBK
            program.append(Instruction(op, opsize=size, channel_mask=CH0, bank=bank,
                                       row=row, col=col))
        elif kind == 8:
            program.append(Instruction(Op.WR_ABK, opsize=1, gpr0=0, channel_mask=CH0, row=row,
                                       col=col, data=_words(rng, 1), mask=mask))
        elif kind == 9:
            program.append(Instruction(Op.WR_CFR, cfr=int(Cfr.EWMUL_BG),
                                       value=int(rng.integers(2))))
            program.append(Instruction(Op.EWMUL, opsize=size, channel_mask=CH0, row=row,
                                       col=col))
            touched.append((4 * int(rng.integers(4)) + 2, row, col))
        elif kind == 10:
            program.append(Instruction(Op.WR_CFR, cfr=int(Cfr.AFM), value=int(rng.integers(8))))
            program.append(Instruction(Op.AF, channel_mask=CH0))
        else:
            program.append(Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0))
    program.append(Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0))
    program.append(Instruction(Op.RD_AF, gpr0=0, channel_mask=CH0))
    for bank, row, col in touched[-4:]:
        program.append(Instruction(Op.RD_SBK, gpr0=0, channel_mask=CH0, bank=bank, row=row,
                                   col=col))
    return program


def expected_reads(schedule: list[TimedCommand], model: FunctionalModel | None = None
                   ) -> list[tuple[int, Command, np.ndarray]]:
    """Return what the functional model returns, at the cycle the channel must return it.

    With ``model``, start from its state after the channel's reset: accumulators and AF
    registers zero, all banks closed, mats and global buffer as they are (the reset clears
    registers only).
    """
    if model is None:
        model = FunctionalModel(DEVICE)
    model.channels[0].acc[:] = 0
    model.channels[0].af[:] = 0
    model.channels[0].open_rows[:] = -1
    returned = sorted(replay(schedule, model),  # return cycle, then issue cycle
                      key=lambda r: (r.command.cycle + TIMING.latency[r.command.command],
                                     r.command.cycle))
    return [(r.command.cycle + TIMING.latency[r.command.command], r.command.command, r.data)
            for r in returned]


def assert_same_reads(got: list, want: list) -> None:
    assert [(t, c) for t, c, _ in got] == [(t, c) for t, c, _ in want]
    for (t, c, data), (_, _, ref) in zip(got, want):
        assert np.array_equal(data, ref), f"{c.name} returning at cycle {t}: {data} != {ref}"


# ----------------------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def small_schedule() -> list[TimedCommand]:
    schedule = schedule_of(small_program(np.random.default_rng(7)))
    assert verify(schedule) == []
    used = {c.command for c in schedule}
    assert used == IMPLEMENTED
    return schedule


def _moved(schedule: list[TimedCommand], index: int, earlier: int) -> list[TimedCommand] | None:
    """Return ``schedule`` with command ``index`` moved ``earlier`` cycles (None if blocked)."""
    cmd = schedule[index]
    cycle = cmd.cycle - earlier
    taken = {c.cycle for i, c in enumerate(schedule) if i != index}
    if cycle < 0 or cycle in taken:
        return None
    moved = dataclasses.replace(cmd, cycle=cycle)
    return sorted([c for i, c in enumerate(schedule) if i != index] + [moved],
                  key=lambda c: c.cycle)


def _timing_set(violations) -> set[tuple[int, int]]:
    return {(v.cycle, v.rule) for v in violations if v.kind == "timing"}


def _squeezed(schedule: list[TimedCommand], factor: float) -> list[TimedCommand]:
    """Return ``schedule`` with every cycle scaled by ``factor`` (order and payloads kept)."""
    out, last = [], -1
    for c in schedule:
        last = max(int(c.cycle * factor), last + 1)
        out.append(dataclasses.replace(c, cycle=last))
    return out


def _mutated(schedule: list[TimedCommand], count: int) -> list[list[TimedCommand]]:
    """Return ``count`` copies of ``schedule`` with one command moved 1..40 cycles earlier.

    Each copy ends 100 cycles after the moved command's old slot (later commands cannot
    change the verdicts that matter).
    """
    rng = np.random.default_rng(3)
    cases = [(i, k) for i in range(1, len(schedule)) for k in (1, 2, 5, 17, 40)]
    out = []
    for case in rng.permutation(len(cases)):
        index, earlier = cases[case]
        moved = _moved(schedule, index, earlier)
        if moved is not None:
            end = schedule[index].cycle + 100
            out.append([c for c in moved if c.cycle <= end])
        if len(out) == count:
            break
    return out


SQUEEZE = (0.1, 0.3, 0.6)
SEEDS = (1, 2)


@pytest.fixture(scope="module")
def small_runs(small_schedule) -> dict:
    """Run the schedules that share one channel, with resets in between.

    Order: the small schedule, squeezed copies of it and of the random programs, the random
    programs, then the mutated copies (timing only). One functional model follows the data
    schedules in the same order, reset as the channel is, so memory carried over from one
    schedule to the next is expected on both sides.
    """
    squeezed = [_squeezed(small_schedule, f) for f in SQUEEZE]
    randoms = [schedule_of(random_program(np.random.default_rng(seed), 14)) for seed in SEEDS]
    squeezed += [_squeezed(schedule, 0.3) for schedule in randoms]
    mutated = _mutated(small_schedule, 10)
    data = [small_schedule] + squeezed + randoms
    runs = run_many(data + mutated)
    model = FunctionalModel(DEVICE)
    expected = [expected_reads(schedule, model) for schedule in data]
    n = len(squeezed)
    return {"legal": (small_schedule, runs[0], expected[0]),
            "squeezed": list(zip(squeezed, runs[1:1 + n], expected[1:1 + n])),
            "random": list(zip(randoms, runs[1 + n:len(data)], expected[1 + n:])),
            "mutated": list(zip(mutated, runs[len(data):]))}


def test_replay_matches_functional_model(small_runs):
    schedule, got, want = small_runs["legal"]
    assert got["violations"] == []
    assert got["count"] == 0
    assert [c for _, c, _ in want].count(Command.RDAF16) == 1 and len(want) == 8
    assert_same_reads(got["reads"], want)


@pytest.mark.parametrize("which", range(len(SEEDS)))
def test_random_program_matches_functional_model(small_runs, which):
    schedule, got, want = small_runs["random"][which]
    assert verify(schedule) == []
    assert got["violations"] == []
    assert len(want) >= 3
    assert any(data.any() for *_, data in want)
    assert_same_reads(got["reads"], want)


def test_squeezed_schedules_match_verify_and_values(small_runs):
    # Compressing time keeps the order, so the row state (no protocol errors) and the values
    # stay those of the legal schedule while many rules break at once. Reads returning in the
    # same cycle (an RD and an RDMAC16) would arrive on their two ports and be compared too.
    seen: set[int] = set()
    for schedule, got, reads in small_runs["squeezed"]:
        found = verify(schedule)
        assert all(v.kind == "timing" for v in found)
        want = _timing_set(found)
        have = {(t, rule) for t, _, rules, _ in got["violations"] for rule in rules}
        assert have == want
        assert all(p == ProtocolCode.NONE for *_, p in got["violations"])
        assert got["count"] == len(got["violations"])
        seen |= {rule for _, rule in want}
        assert_same_reads(got["reads"], reads)
    # Channel, bank-group and bank rules are all exercised.
    assert len(seen) >= 25 and {61, 62, 88} <= seen


def test_mutated_schedules_match_verify(small_runs):
    flagged = 0
    for schedule, got in small_runs["mutated"]:
        want = _timing_set(verify(schedule))
        have = {(t, rule) for t, _, rules, _ in got["violations"] for rule in rules}
        assert have == want, schedule
        assert got["count"] == len(got["violations"])
        flagged += bool(want)
    assert flagged >= 5


def _cmd(cycle, command, bank=-1, row=-1, col=-1, words=None) -> TimedCommand:
    """Return a hand-written schedule entry (``words``: its write payload)."""
    payload = None if words is None else np.asarray(words, dtype=np.uint16)
    return TimedCommand(cycle, 0, command, bank, row, col, payload=payload)


_C = Command
#: A write refused for naming the wrong row, then a read of the column it would have written.
REFUSED_WRITE = [_cmd(0, _C.ACT, 4, 1), _cmd(100, _C.WR, 4, 2, 3, words=range(1, 17)),
                 _cmd(200, _C.RD, 4, 1, 3)]
#: One command per protocol error class, with the code the channel must report.
PROTOCOL = [
    (_cmd(0, _C.RD, 2, 1, 0), ProtocolCode.BANK_CLOSED),
    (_cmd(100, _C.ACT, 2, 1), None),
    (_cmd(300, _C.ACT, 2, 3), ProtocolCode.BANK_OPEN),
    (_cmd(400, _C.RD, 2, 3, 0), ProtocolCode.WRONG_ROW),  # the refused ACT did not open row 3
    (_cmd(500, _C.WRGB, col=0), ProtocolCode.MODE),
    (_cmd(600, _C.ACT16, row=2), ProtocolCode.ROW_CONFLICT),
    (_cmd(700, _C.MAC16, row=1, col=0), ProtocolCode.NOT_ALL_OPEN),
    (_cmd(800, _C.RDA, 2, 1, 0), ProtocolCode.REJECTED),
    (_cmd(900, _C.RD, 2, 1, 64), ProtocolCode.RANGE),
    (_cmd(1000, _C.ACT, 7, 4), ProtocolCode.RANGE),  # row 4 of a 4-row build
    (_cmd(1010, _C.ACT, 16, 0), ProtocolCode.RANGE),
    (_cmd(1100, _C.TMOD), None),
    (_cmd(1200, _C.RD, 2, 1, 0), ProtocolCode.MODE),
    (_cmd(1300, _C.RDMAC16), None),
]
REGISTER_READ = [_cmd(0, _C.TMOD), _cmd(40, _C.RDMAC16)]
REJECTED = (_C.RDA, _C.WRA, _C.ACT4, _C.PRE4, _C.REFab, _C.REFpb, _C.SYNC, _C.EOC)


@pytest.fixture(scope="module")
def hand_runs() -> dict:
    """Run the hand-written schedules on one channel (the refused write first: clean mats)."""
    rejected = [[_cmd(0, c, 0 if c in (_C.RDA, _C.WRA, _C.ACT4, _C.PRE4) else -1, 0, 0)]
                for c in REJECTED]
    runs = run_many([REFUSED_WRITE, [c for c, _ in PROTOCOL], REGISTER_READ] + rejected)
    return {"refused": runs[0], "protocol": runs[1], "register": runs[2], "rejected": runs[3:]}


def test_protocol_errors_are_flagged(hand_runs):
    got = [(t, p) for t, _, _, p in hand_runs["protocol"]["violations"]]
    assert got == [(c.cycle, code) for c, code in PROTOCOL if code is not None]
    assert hand_runs["protocol"]["count"] == len(got)
    # verify executes no refused command either, so it agrees on every class it checks (it
    # leaves out-of-range addresses to the schedule parser and knows no rejected commands).
    checked = [c for c, code in PROTOCOL[:7]]
    assert [v.cycle for v in verify(checked) if v.kind == "protocol"] == \
        [c.cycle for c, code in PROTOCOL[:7] if code is not None]


def test_refused_write_changes_nothing(hand_runs):
    got = hand_runs["refused"]
    assert [(t, p) for t, _, _, p in got["violations"]] == [(100, ProtocolCode.WRONG_ROW)]
    assert [(t, cmd) for t, cmd, _ in got["reads"]] == [(200 + TIMING.latency[_C.RD], _C.RD)]
    assert not got["reads"][0][2].any()


def test_rdmac16_latency_and_reset_value(hand_runs):
    got = hand_runs["register"]
    assert got["violations"] == []
    assert [(t, cmd) for t, cmd, _ in got["reads"]] == [(42, _C.RDMAC16)]
    assert not got["reads"][0][2].any()


def test_rejected_commands(hand_runs):
    for command, got in zip(REJECTED, hand_runs["rejected"]):
        codes = [(t, p) for t, _, _, p in got["violations"]]
        assert codes == [(0, ProtocolCode.REJECTED)], command
