"""One executor interface: the functional and cycle executors run the same programs, keep the
device alive across calls, and return read-outs in one canonical order."""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim import trace
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor, Executor, FunctionalExecutor, closed
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.program import OP_ID, Program
from patton.sim.random_programs import random_program

MASK = channel_bit(0) | channel_bit(1)


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_closed_appends_eoc_once_and_refuses_one_in_the_middle():
    body = [Instruction(Opcode.WR_GPR, gpr=0)]
    prog = closed(body)
    assert [i.opcode for i in prog] == [Opcode.WR_GPR, Opcode.EOC]
    assert closed(prog) is prog
    with pytest.raises(ValueError, match="EOC at instruction 0 of 3"):
        closed([Instruction(Opcode.EOC)] + body + [Instruction(Opcode.EOC)])


def test_executors_implement_the_interface():
    for ex in (FunctionalExecutor(), CycleExecutor()):
        assert isinstance(ex, Executor)


def test_cycle_executor_from_reset_equals_the_cycle_model(traces_dir, reference):
    program = trace.read(traces_dir / "all_isr.trace")
    result = CycleExecutor().run(program)
    model = CycleModel(record=True).run(program)
    assert result.cycles == model.cycles == reference["all_isr"]["memory_system_cycles"]
    assert result.command_counts == model.command_counts
    assert result.schedule == model.schedule
    assert result.energy is not None and result.energy.total > 0


@pytest.mark.parametrize("seed", range(6))
def test_read_outs_agree_across_executors_over_a_sequence(seed):
    rng = np.random.default_rng(seed)
    functional, timed = FunctionalExecutor(), CycleExecutor()
    for part in range(3):  # three programs on one live device each
        program = Program.of(random_program(rng, 40, channels=3, rows=3, data=True)[:-1])
        a, b = functional.run(program), timed.run(program)
        assert [(r.channel, r.opcode, r.index) for r in a.readouts] == \
            [(r.channel, r.opcode, r.index) for r in b.readouts]
        assert all(np.array_equal(x.data, y.data) for x, y in zip(a.readouts, b.readouts))
        indices = [r.index for r in a.readouts]
        assert indices == sorted(indices) and all(0 <= i < len(program) for i in indices)
        assert b.cycles > 0 and b.schedule


def test_cycle_executor_keeps_rows_and_mode_across_programs():
    rng = np.random.default_rng(1)
    first = [Instruction(Opcode.WR_GB, opsize=4, gpr0=0, channel_mask=MASK, data=_words(rng, 64)),
             Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=MASK, row=3),
             Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=MASK)]
    second = [Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=MASK, row=3),
              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=MASK)]
    live = CycleExecutor()
    live.run(first)
    assert live.state.open_rows[0] == (3,) * DEVICE.banks and live.state.reg_mode[0]
    assert live.state.open_rows[2] == (-1,) * DEVICE.banks and not live.state.reg_mode[2]
    again = live.run(second)
    fresh = CycleExecutor().run(second)
    assert "ACT16" not in again.command_counts[0]  # row 3 is still open
    assert fresh.command_counts[0]["ACT16"] == 1
    assert again.command_counts[0]["TMOD"] == 2  # back to normal mode, then register mode
    assert again.cycles < fresh.cycles
    # the accumulators were not cleared: the second read-out is the sum of two MAC passes
    values = FunctionalExecutor()
    values.run(first)
    assert all(np.array_equal(x.data, y.data)
               for x, y in zip(values.run(second).readouts, again.readouts))


def test_device_state_must_fit_the_device():
    small = DEVICE.with_(channels=4)
    with pytest.raises(ValueError, match="a state of 32 channels for a device of 4"):
        CycleModel(small).run(closed([]), DeviceState.reset(DEVICE))


def test_readout_index_points_at_the_reading_instruction():
    rng = np.random.default_rng(2)
    program = closed([Instruction(Opcode.WR_MEM, channel=1, bank=2, row=5, col=3,
                                  data=_words(rng, 16)),
                      Instruction(Opcode.RD_MEM, channel=1, bank=2, row=5, col=3),
                      Instruction(Opcode.RD_SBK, gpr0=0, channel_mask=MASK, bank=2, row=5)])
    out = CycleExecutor().run(program).readouts
    assert [(r.index, r.channel) for r in out] == [(1, 1), (2, 1), (2, 0)]  # ch 31 first
    assert program.op[out[0].index] == OP_ID[Opcode.RD_MEM]
    assert np.array_equal(out[0].data, program[0].data)


def test_a_program_ends_when_its_writes_are_done():
    """The public simulator ends at EOC with a lone W MEM still buffered (never issued); an
    executor waits for it, so the schedule and the next program see the write."""
    rng = np.random.default_rng(3)
    words = _words(rng, 16)
    write = closed([Instruction(Opcode.WR_MEM, channel=2, bank=4, row=7, col=9, data=words)])
    public = CycleModel(record=True).run(write)
    assert not any(c.command.name == "WR" for c in public.schedule)  # as the public simulator
    live = CycleExecutor()
    done = live.run(write)
    assert [c.command.name for c in done.schedule] == ["ACT", "WR"]
    assert done.cycles > public.cycles
    read = live.run([Instruction(Opcode.RD_MEM, channel=2, bank=4, row=7, col=9)])
    assert "ACT" not in read.command_counts[2]  # the row the write opened is still open
    assert np.array_equal(read.readouts[0].data, words)
