"""The device extension ``aim+wr16`` on the RTL under Verilator: open-row writes, end to end.

Under ``aim+wr16`` the channel is built with WR16 (an all-bank write that leaves the row open)
and its timing rules (slot 104: WR16 -> PRE/PRE4/PREA, 41 cycles). Programs that mix WR_ABK_OPEN
(many to one row, row changes) with WR_ABK and W MEM, then read what they wrote back with
MAC_ABK and RD_MAC, replay on it at the cycle model's cycles with no flag and every read and mat
word bit-exact with the functional model. On the default device WR16 does not exist: the player
refuses to send it and ``patton rtl`` names the set that has it. The extension's Verilator
build is its own (a minute the first time, cached under build/); the default's is unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from patton.hw.params import ChannelParams
from patton.sim import schedule as schedule_format
from patton.sim import trace
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.extensions import NotOnDeviceError
from patton.sim.isa import Command, Instruction, Opcode, channel_bit
from patton.sim.random_programs import KINDS, random_program
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING, timing_table

from patton.cli import main

EXT = "aim+wr16"
TABLE = timing_table(None, EXT)
#: Rule WR16 -> PRE/PRE4/PREA of the extension (nCWL + nBL + nWR = 41).
WR16_PRE = 104
CH0 = channel_bit(0)


@pytest.fixture(scope="module")
def player():
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64), timing=TABLE)


def _words(rng: np.random.Generator, columns: int = 1) -> np.ndarray:
    values = rng.standard_normal(columns * 16).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def open_row_program(seed: int) -> list[Instruction]:
    """A random program of every kind, half its WR_ABKs WR_ABK_OPEN, with bursts of
    WR_ABK_OPEN to one row followed by a MAC_ABK and an RD_MAC of that row."""
    rng = np.random.default_rng(seed)
    program = random_program(rng, 50, channels=1, rows=3, data=True, kinds=KINDS + (
        "wr_abk", "wr_abk"), broadcast=False)[:-1]
    out: list[Instruction] = []
    for ins in program:
        if ins.opcode is Opcode.WR_ABK and rng.random() < 0.5:
            ins = Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=ins.channel_mask,
                              row=ins.row, col=ins.col, data=ins.data)
        out.append(ins)
        if rng.random() < 0.1:  # a burst to one row, then a read of what it wrote
            row, start = int(rng.integers(3)), int(rng.integers(56))
            out += [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=row,
                                col=(start + c) or None, data=_words(rng)) for c in range(8)]
            out += [Instruction(Opcode.MAC_ABK, opsize=8, channel_mask=CH0, row=row,
                                col=start or None),
                    Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=CH0)]
    return out + [Instruction(Opcode.EOC)]


def _schedule(program: list[Instruction], native: bool = True) -> list[TimedCommand]:
    result = CycleModel(timing=TABLE, record=True, native=native).run(program)
    return [c for c in result.schedule if c.channel == 0]


@pytest.mark.verilator
@pytest.mark.parametrize("seed", range(3))
def test_open_row_write_programs_are_bit_exact_and_legal(player, seed):
    from patton.tb.driver import DRAIN
    from patton.tb.scoreboard import score

    program = open_row_program(seed)
    schedule = _schedule(program)
    assert _schedule(program, native=False) == schedule  # both cycle models agree
    counts = {c: sum(x.command is c for x in schedule) for c in Command}
    assert counts[Command.WR16] >= 8 and counts[Command.RDMAC16] > 0
    # open-row writes to one row share their activation: fewer ACT16 than WR16
    assert counts[Command.ACT16] < counts[Command.WR16]
    result = player.play(schedule, f"wr16-{seed}")
    verdict = score(schedule, result, timing=TABLE)
    assert verdict.reads > 0 and verdict.mismatches == 0  # at the model's cycles, bit-exact
    assert verdict.mat_words > 0 and verdict.mat_mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0 and result.counter == 0
    assert result.cycles == schedule[-1].cycle + DRAIN


@pytest.mark.verilator
def test_a_precharge_40_cycles_after_wr16_is_flagged_as_rule_104(player):
    from patton.tb.scoreboard import score

    rng = np.random.default_rng(1)
    program = [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=1, col=c or None,
                           data=_words(rng)) for c in range(3)]
    program += [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=2, col=4,
                            data=_words(rng)), Instruction(Opcode.EOC)]
    schedule = _schedule(program)
    last = max(c.cycle for c in schedule if c.command is Command.WR16 and c.row == 1)
    (prea,) = [c for c in schedule if c.command is Command.PREA]
    assert prea.cycle - last == 41  # the cycle model waits exactly the new rule's gap
    early = [c if c is not prea else TimedCommand(prea.cycle - 1, 0, Command.PREA)
             for c in schedule]
    result = player.play(early, "wr16-early")
    flagged = [(v.cycle, v.command, set(v.rules), v.protocol) for v in result.violations]
    assert flagged == [(prea.cycle - 1, Command.PREA, {WR16_PRE}, 0)]
    verdict = score(early, result, values=False, timing=TABLE)
    assert verdict.agree and verdict.model_timing == {(prea.cycle - 1, WR16_PRE)}


@pytest.mark.verilator
def test_an_rtl_executor_on_the_extension_keeps_rows_open_across_programs():
    """The runtime's RTL executor on ``aim+wr16``: the open row a program's WR_ABK_OPENs leave
    is the next program's (no activation), and every readout, schedule and cycle count is the
    cycle model's."""
    from patton.sim.device import DEVICE
    from patton.sim.executor import CycleExecutor
    from patton.tb.executor import RtlExecutor

    rng = np.random.default_rng(4)
    first = [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=2, col=c or None,
                         data=_words(rng)) for c in range(4)]
    second = [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=2, col=4,
                          data=_words(rng)),
              Instruction(Opcode.WR_GB, opsize=5, gpr0=0, channel_mask=CH0, data=_words(rng, 5)),
              Instruction(Opcode.MAC_ABK, opsize=5, channel_mask=CH0, row=2),
              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=CH0)]
    timed = CycleExecutor(DEVICE, TABLE)
    with RtlExecutor(DEVICE, channels=[0], rows=64, timing=TABLE) as rtl:
        assert rtl.player.isa.ext == EXT
        for program in (first, second):
            got, ref = rtl.run(program), timed.run(program)
            assert got.discrepancies == [] and got.cycles == ref.cycles
            assert got.schedule == ref.schedule
            assert [(r.opcode, r.index) for r in got.readouts] == [
                (r.opcode, r.index) for r in ref.readouts]
            assert all(np.array_equal(a.data, b.data)
                       for a, b in zip(got.readouts, ref.readouts))
        assert Command.ACT16 not in {c.command for c in got.schedule}  # row 2 still open
        assert len(got.readouts) == 1 and rtl.scoreboard.ok


def test_wr16_is_not_a_command_of_the_default_device():
    from patton.tb.player import SchedulePlayer

    cmd = TimedCommand(5, 0, Command.WR16, -1, 1, 0, payload=np.zeros(16, np.uint16))
    aim = SchedulePlayer(ChannelParams(rows=64), build=False)
    with pytest.raises(NotOnDeviceError, match=r"needs the device extension 'aim\+wr16'"):
        aim.pack(cmd)
    on = SchedulePlayer(ChannelParams(rows=64), build=False, timing=TABLE)
    assert on.pack(cmd) >> 1 & 0x1F == int(Command.WR16)
    # the same stream format: every other command packs to the same word on both
    other = TimedCommand(5, 0, Command.WRA16, -1, 1, 0, payload=np.arange(16, dtype=np.uint16))
    assert aim.pack(other) == on.pack(other)
    assert on._parameters() == {"parameters": {"VIOLATION_BITS": 123}}
    assert aim._parameters() == {}  # the default build is made as it always was
    # and the model flags it too
    assert [v.kind for v in verify([cmd])] == ["protocol"]
    assert verify([cmd], timing=TIMING)[0].detail == "WR16 is not a command of device 'aim'"


def test_a_monitor_reads_the_extension_violation_word():
    from patton.tb.monitor import Monitor

    params = ChannelParams(rows=64)
    word = 1 | 1 << 1 | int(Command.PREA) << 6 | WR16_PRE << 11 | 1 << (18 + WR16_PRE)
    on = Monitor(params, TABLE)
    on.line(f"V 10 {word:x}")
    (v,) = on._current.violations
    assert (v.cycle, v.command, v.rules, v.protocol) == (16, Command.PREA, {WR16_PRE}, 0)


# -- the command line --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_row_trace(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wr16")
    path = folder / "open_row.trace"
    rng = np.random.default_rng(2)
    program = [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=CH0, row=1, col=c or None,
                           data=_words(rng)) for c in range(4)]
    program += [Instruction(Opcode.WR_GB, opsize=4, gpr0=0, channel_mask=CH0,
                            data=_words(rng, 4)),
                Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=CH0, row=1),
                Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=CH0), Instruction(Opcode.EOC)]
    trace.write(path, program)
    sched = folder / "open_row.schedule"
    schedule_format.write(sched, CycleModel(timing=TABLE, record=True).run(
        trace.read(path)).schedule)
    return path, sched


@pytest.mark.verilator
def test_rtl_run_and_check_take_the_device_extension(capsys, open_row_trace):
    path, sched = open_row_trace
    for verb, file in (("run", path), ("check", sched)):
        status = main(["rtl", verb, str(file), "--device-ext", EXT, "--json"])
        report = json.loads(capsys.readouterr().out)
        assert status == 0 and report["ok"], report
        keys = list(report)
        assert report["device_ext"] == EXT and keys.index("device_ext") == \
            keys.index("timing") + 1
    assert report["rtl_violations"] == report["model_violations"] == 0
    assert report["values"] and report["read_mismatches"] == report["mat_mismatches"] == 0


def test_rtl_run_and_check_refuse_the_extension_on_the_default_device(capsys, open_row_trace):
    path, sched = open_row_trace
    for verb, file in (("run", path), ("check", sched)):
        status = main(["rtl", verb, str(file), "--json"])
        captured = capsys.readouterr()
        assert status == 2
        assert "needs the device extension 'aim+wr16'" in captured.err
        assert json.loads(captured.out)["error"].startswith(
            f"{sched}:" if verb == "check" else "WR_ABK_OPEN")
