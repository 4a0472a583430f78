"""Timing and values together: the cycle model's schedule replayed on the functional model
gives the same device state and the same MAC/AF results as executing the program directly."""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim.cycle_model import CycleModel
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Command, Instruction, Opcode, channel_bit
from patton.sim.random_programs import random_program
from patton.sim.replay import replay

CHANNELS = 3


def _program(seed):
    """A random program whose conventional writes all issue before EOC.

    The public controller lets EOC complete while a conventional request whose ACT has issued
    still waits in the active buffer (docs/cycle-model.md); a closing all-bank MAC on every
    channel gives such requests the time to issue first.
    """
    program = random_program(np.random.default_rng(seed), 60, channels=CHANNELS, rows=3,
                             data=True, wide=seed % 2 == 1)[:-1]
    mask = sum(channel_bit(c) for c in range(CHANNELS))
    program += [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=mask, row=0),
                Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask),
                Instruction(Opcode.EOC)]
    return program


def _touched(program):
    rows = set()
    for ins in program:
        if ins.row is not None:
            for ch in ins.channels():
                banks = [ins.bank] if ins.bank is not None else range(16)
                rows.update((ch, b, ins.row) for b in banks)
    return rows


@pytest.mark.parametrize("seed", range(10))
def test_replayed_schedule_matches_direct_execution(seed):
    program = _program(seed)
    schedule = CycleModel(record=True).run(program).schedule
    writes = sum(len(i.channels()) for i in program if i.opcode in (Opcode.WR_MEM,
                                                                     Opcode.WR_SBK))
    assert sum(c.command == Command.WR for c in schedule) == writes
    direct = FunctionalModel()
    readouts = direct.run(program)
    timed = FunctionalModel()
    returned = replay(schedule, timed)
    for ch, bank, row in _touched(program):
        assert np.array_equal(direct.peek(ch, bank, row), timed.peek(ch, bank, row)), \
            (ch, bank, row)
    for ch in range(CHANNELS):
        for op, cmd in ((Opcode.RD_MAC, Command.RDMAC16), (Opcode.RD_AF, Command.RDAF16)):
            a = [r.data for r in readouts if r.channel == ch and r.opcode == op]
            b = [r.data for r in returned if r.command.channel == ch and r.command.command == cmd]
            assert len(a) == len(b)
            assert a or op == Opcode.RD_AF  # every channel ends with an RD_MAC
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
