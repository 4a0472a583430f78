"""The RTL channel under Verilator replays timed schedules from the cycle model.

Legal schedules: zero violations and every read bit-exact with the functional model, with the
MAC vector from the global buffer or (CFR BROADCAST = 1) the partner bank, and with an RD and
an RDMAC16 returning in the same cycle. Mutated schedules (a command moved earlier): the RTL
checker flags exactly the rules the model's verify mode lists. The Verilator build is cached
under build/ (a few minutes the first time).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.hw.params import ChannelParams
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Cfr, Command, Instruction, Opcode, channel_bit
from patton.sim.random_programs import KINDS, gemv_program, random_program
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING

pytestmark = pytest.mark.verilator

#: What this RTL version executes: every kind of instruction (EWMUL, AF and RD_AF included).
RTL_KINDS = KINDS


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
    # Final mat contents: the 48 x 32 weight columns (every one has a non-zero lane).
    assert verdict.mat_words == 48 * 32 and verdict.mat_mismatches == 0


def test_final_mat_contents_are_compared_word_by_word(player):
    from patton.tb.scoreboard import score

    program = random_program(np.random.default_rng(11), 60, channels=1, rows=3, data=True,
                             kinds=RTL_KINDS, broadcast=False)
    schedule = _channel0(program)
    result = player.play(schedule, "mats")
    verdict = score(schedule, result)
    assert verdict.mat_words > 0 and verdict.mat_mismatches == 0
    key = sorted(result.mats)[0]
    flipped = dict(result.mats)
    flipped[key] = result.mats[key] ^ np.uint16(1 << 3)
    missing = {k: v for k, v in result.mats.items() if k != key}
    extra = dict(result.mats)
    extra[15, 63, 63] = np.full(16, 0x3F80, np.uint16)
    for mats, words in ((flipped, verdict.mat_words), (missing, verdict.mat_words),
                        (extra, verdict.mat_words + 1)):
        other = score(schedule, dataclasses.replace(result, mats=mats))
        assert (other.mat_words, other.mat_mismatches) == (words, 1)


@pytest.mark.parametrize("seed", range(3))
def test_random_programs_are_bit_exact_and_legal(player, seed):
    from patton.tb.scoreboard import score

    program = random_program(np.random.default_rng(seed), 60, channels=1, rows=3, data=True,
                             kinds=RTL_KINDS, broadcast=False)
    schedule = _channel0(program)
    verdict = score(schedule, player.play(schedule, f"random{seed}"))
    assert verdict.reads > 0 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0


#: More MAC_ABKs (30 % of them under BROADCAST = 1) and RD_MACs than the uniform mix.
BROADCAST_KINDS = RTL_KINDS + ("mac_abk", "mac_abk", "rd_mac")


@pytest.mark.parametrize("seed", (0, 2, 3))
def test_random_broadcast_programs_are_bit_exact_and_legal(player, seed):
    from patton.tb.scoreboard import score

    program = random_program(np.random.default_rng(seed), 60, channels=1, rows=3, data=True,
                             kinds=BROADCAST_KINDS, broadcast=True)
    program.insert(-1, Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=channel_bit(0)))
    schedule = _channel0(program)
    neighbour = [c for c in schedule
                 if c.command in (Command.MAC, Command.MAC16) and c.cfr[Cfr.BROADCAST]]
    assert neighbour and schedule[-1].command == Command.RDMAC16
    verdict = score(schedule, player.play(schedule, f"broadcast{seed}"))
    assert verdict.reads > 0 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0


def _entry(cycle: int, command: Command, bank: int = -1, row: int = -1, col: int = -1,
           words: np.ndarray | None = None) -> TimedCommand:
    """Return a hand-written schedule entry (``words``: its write payload)."""
    return TimedCommand(cycle, 0, command, bank, row, col, payload=words, cfr=(0, 1, 0))


def test_rd_and_rdmac16_returning_together_are_both_bit_exact(player):
    from patton.sim.check import verify
    from patton.sim.device import DEVICE
    from patton.sim.functional import FunctionalModel
    from patton.sim.replay import replay
    from patton.tb.scoreboard import score

    rng = np.random.default_rng(4)
    apart = TIMING.latency[Command.RD] - TIMING.latency[Command.RDMAC16]  # 50
    rd = 94  # the earliest legal cycles before it, then the RDMAC16 `apart` cycles later
    schedule = [_entry(0, Command.ACT, 3, 1), _entry(28, Command.WR, 3, 1, 2, _bits(rng, 16)),
                _entry(29, Command.TMOD), _entry(61, Command.WRMAC16, words=_bits(rng, 16)),
                _entry(62, Command.TMOD), _entry(rd, Command.RD, 3, 1, 2),
                _entry(rd + 1, Command.TMOD), _entry(rd + apart, Command.RDMAC16)]
    assert verify(schedule) == []
    result = player.play(schedule, "collision")
    back = rd + TIMING.latency[Command.RD]
    assert [(r.cycle, r.command) for r in result.reads] == [(back, Command.RD),
                                                            (back, Command.RDMAC16)]
    want = replay(schedule, FunctionalModel(DEVICE))
    assert [w.command.command for w in want] == [Command.RD, Command.RDMAC16]
    for got, ref in zip(result.reads, want):
        assert ref.data.any() and np.array_equal(got.data, ref.data), got.command
    verdict = score(schedule, result)
    assert verdict.reads == 2 and verdict.mismatches == 0
    assert verdict.rtl_violations == verdict.model_violations == 0


def test_mutated_schedules_get_the_models_verdict(player):
    from patton.sim.check import verify
    from patton.tb.scoreboard import score

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

    rng = np.random.default_rng(23)  # a program whose drops of ACT, PRE, TMOD break rules
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


@pytest.mark.parametrize("line, why", [
    (b"1 ffff 0\n", "not <cycle> <mask> <data> <head> in hex"),  # a field missing
    (b"1 1ffff 0 15\n", "not <cycle> <mask> <data> <head> in hex"),  # mask wider than 16 bits
    (b"1 ffff 0 15 x\n", "not <cycle> <mask> <data> <head> in hex"),  # something after
    (b"S\n", "a segment end needs a drain (S <cycles>)"),
    (b"Mx\n", "unknown control line"),
])
def test_a_bad_stream_line_stops_the_player_naming_the_line(player, line, why):
    """The stream reader (tb/player_dpi.cpp) refuses a line it cannot read: the simulator
    stops, and the session's error carries the line's number and text from its log."""
    import os

    from patton.tb.session import Session, SimulatorError

    good = _channel0([Instruction(Opcode.MAC_ABK, opsize=8, channel_mask=channel_bit(0), row=1),
                      Instruction(Opcode.EOC)])
    with Session(player, name="bad-line") as session:
        session.run(good)  # one good segment first: the line number counts from the start
        lines = session.driver.commands + session.driver.segments
        os.write(session._schedule, line)
        with pytest.raises(SimulatorError, match="exited") as error:
            session.run(good)
    text = line.decode().strip()
    assert f"schedule line {lines + 1}: {why}: {text}" in str(error.value)


def test_the_sixteen_mac_units_run_one_function(player):
    """The simulator evaluates the 16 MAC units with one compiled function (hw/shared.py): the
    MAC module stays a module of its own, with its ports as variables, and the build has no
    dataflow pass to name its temporaries per instance. 16 copies of that code were the
    simulator's largest cost (docs/tb.md)."""
    import re

    from patton.hw.channel import MAC_MODULE

    code = "".join(path.read_text(errors="replace")  # the cycle's code, not the start-up's
                   for path in sorted(player.build_dir.glob("Vtop*.cpp"))
                   if not path.stem.endswith("__Slow"))
    defined = set(re.findall(rf"^void (Vtop_{MAC_MODULE}___nba_\w+)\(", code, re.M))
    assert len(defined) == 1, sorted(defined)
    (function,) = defined
    called = re.findall(rf"^\s+{function}\(\(&vlSymsp->(\w+)\)\);", code, re.M)
    assert len(called) == 16 and len(set(called)) == 16, called
