"""The RTL channel under Verilator replays timed schedules from the cycle model.

Legal schedules: zero violations and every read bit-exact with the functional model. Mutated
schedules (a command moved earlier): the RTL checker flags exactly the rules the model's
verify mode lists. The Verilator build is cached under build/ (a few minutes the first time).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from patton.hw.params import ChannelParams
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Instruction, Opcode
from patton.sim.programs import KINDS, gemv_program, random_program

pytestmark = pytest.mark.verilator

#: What this RTL version executes (EWMUL16, AF16 and RDAF16 are rejected by design).
RTL_KINDS = tuple(k for k in KINDS if k not in ("ewmul", "af", "rd_af"))


@pytest.fixture(scope="module")
def player():
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64))


def _channel0(program):
    return [c for c in CycleModel(record=True).run(program).schedule if c.channel == 0]


def _bits(rng, shape):
    return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16)


def test_gemv_with_reads_is_bit_exact(player):
    from patton.tb.scoreboard import score

    rng = np.random.default_rng(7)
    weights, vector = _bits(rng, (16 * 3, 512)), _bits(rng, 512)
    program = gemv_program(vector, 3, [0], weights=weights)
    # Conventional reads after the first RD_MAC (the writes have retired by then) and before
    # more AiM work: EOC would not wait for reads still in the active buffer.
    first = next(i for i, ins in enumerate(program) if ins.opcode == Opcode.RD_MAC)
    program[first + 1:first + 1] = [Instruction(Opcode.RD_MEM, channel=0, bank=b, row=1, col=c)
                                    for b, c in ((0, 0), (5, 31), (15, 7))]
    schedule = _channel0(program)
    verdict = score(schedule, player.play(schedule, "gemv"))
    assert verdict.reads == 3 + 3  # three RDMAC16, three RD
    assert verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0


@pytest.mark.parametrize("seed", range(3))
def test_random_programs_are_bit_exact_and_legal(player, seed):
    from patton.tb.scoreboard import score

    program = random_program(np.random.default_rng(seed), 60, channels=1, rows=3, data=True,
                             kinds=RTL_KINDS, broadcast=False)
    schedule = _channel0(program)
    verdict = score(schedule, player.play(schedule, f"random{seed}"))
    assert verdict.reads > 0 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0


def test_mutated_schedules_get_the_models_verdict(player):
    from patton.tb.scoreboard import score
    from patton.sim.check import verify

    rng = np.random.default_rng(11)
    program = random_program(rng, 40, channels=1, rows=3, data=True, kinds=RTL_KINDS,
                             broadcast=False)
    legal = _channel0(program)
    taken = flagged = 0
    while taken < 6:
        i = int(rng.integers(1, len(legal)))
        moved = legal[i].cycle - int(rng.integers(1, 9))
        mutated = sorted(legal[:i] + [dataclasses.replace(legal[i], cycle=moved)] + legal[i + 1:],
                         key=lambda c: c.cycle)
        cycles = [c.cycle for c in mutated]
        if len(set(cycles)) != len(cycles) or moved < 1:
            continue  # one command per cycle on the player's port
        if any(v.kind == "protocol" for v in verify(mutated)):
            continue  # the RTL refuses such commands; their state then differs by design
        taken += 1
        verdict = score(mutated, player.play(mutated, f"mutant{taken}"), values=False)
        assert verdict.agree, (legal[i], verdict.rtl_timing ^ verdict.model_timing)
        flagged += bool(verdict.model_timing)
    assert flagged >= 3  # most moves break a rule; the test must see some


def test_dropped_commands_get_the_models_verdict(player):
    from patton.tb.scoreboard import score

    rng = np.random.default_rng(21)
    legal = _channel0(random_program(rng, 40, channels=1, rows=3, data=True, kinds=RTL_KINDS,
                                     broadcast=False))
    flagged = 0
    for k in range(10):
        i = int(rng.integers(len(legal)))
        dropped = legal[:i] + legal[i + 1:]
        verdict = score(dropped, player.play(dropped, f"drop{k}"), values=False)
        assert verdict.agree, (legal[i], verdict.rtl_timing ^ verdict.model_timing,
                               verdict.rtl_protocol ^ verdict.model_protocol)
        flagged += verdict.model_violations > 0
    assert flagged >= 2  # dropping an ACT, PRE or TMOD breaks what follows
